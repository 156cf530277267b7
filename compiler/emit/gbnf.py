"""The GBNF emitter: the grammar IR in llama.cpp's grammar language.

llama.cpp's dialect, as observed: rule names of letters, digits and "-"; double-quoted
literals; "." is any character; `x{m,n}` repetition; no lookahead. Each rule is written on
one line, so no line starts with "|". Characters that are special inside a class are
written as \\xHH escapes.

`TextUntil(stops)` (text in which no stop occurs) has no lookahead to lean on, so it is
written as an automaton over the stops' prefixes: the text is a sequence of chunks, each a
path from "no partial stop seen" back to it that never completes a stop, optionally
followed by a path that ends inside a partial stop (the stop itself may follow the text).
"""

from __future__ import annotations

from ..display import comment_text
from ..grammar.ir import (
    Alt,
    AnyChar,
    Chars,
    End,
    Grammar,
    Lit,
    Not,
    Ref,
    Rep,
    Seq,
    StringUntil,
    TextUntil,
    Visitor,
    quantifier,
)


def _escape_char(ch: str, in_class: bool) -> str:
    code = ord(ch)
    if ch == "\n":
        return "\\n"
    if ch == "\r":
        return "\\r"
    if ch == "\t":
        return "\\t"
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02X}"
    if ch == "\\":
        return "\\\\"
    if ch == '"':
        return '\\"'
    if in_class and ch in "[]^-":
        return f"\\x{code:02X}"
    return ch


def _literal(text: str) -> str:
    return '"' + "".join(_escape_char(c, False) for c in text) + '"'


def _class(ranges, negate: bool) -> str:
    body = "".join(
        _escape_char(a, True) if a == b else f"{_escape_char(a, True)}-{_escape_char(b, True)}"
        for a, b in ranges
    )
    return f"[{'^' if negate else ''}{body}]"


class _Emitter(Visitor):
    """Each node as a GBNF expression; TextUntil rules collected as automata."""

    def __init__(self, grammar: Grammar):
        self.grammar = grammar
        self.until_rules: dict[tuple, str] = {}  # (stops, plain, escapes) -> the automaton's rule
        self.extra: list[tuple[str, str, str]] = []  # (name, body, comment) for automaton rules

    def visit_Lit(self, node: Lit, top: bool = False) -> str:
        return _literal(node.text)

    def visit_Chars(self, node: Chars, top: bool = False) -> str:
        return _class(node.ranges, node.negate)

    def visit_AnyChar(self, node: AnyChar, top: bool = False) -> str:
        return "."

    def visit_Ref(self, node: Ref, top: bool = False) -> str:
        return node.name

    def visit_End(self, node: End, top: bool = False) -> str:
        return '""'

    def visit_TextUntil(self, node: TextUntil, top: bool = False) -> str:
        return self.until(node.stops)

    def visit_Seq(self, node: Seq, top: bool = False) -> str:
        text = " ".join(self.visit(i) for i in node.items)
        return text if top else f"({text})"

    def visit_Alt(self, node: Alt, top: bool = False) -> str:
        text = " | ".join(self.visit(i) for i in node.items)
        return text if top else f"({text})"

    def visit_Rep(self, node: Rep, top: bool = False) -> str:
        item = self.visit(node.item)
        # (no `x?*` in GBNF)
        return (f"({item})" if isinstance(node.item, Rep) else item) + quantifier(node)

    def visit_Not(self, node: Not, top: bool = False) -> str:
        return '""'  # (no lookahead in GBNF: the grammar accepts what the lookahead would refuse)

    def generic_visit(self, node, top: bool = False) -> str:
        raise TypeError(f"unknown IR node {node!r}")

    def until(self, stops: tuple[str, ...]) -> str:
        stops = tuple(s for s in stops if s)
        if not stops:
            return ".*"
        return self._automaton_rule(stops, None, (),
                                    "text without " + ", ".join(repr(s) for s in stops))

    def visit_StringUntil(self, node: StringUntil, top: bool = False) -> str:
        comment = "a string's characters without " + ", ".join(repr(s) for s in node.stops)
        return self._automaton_rule(node.stops, node.plain, node.escapes, comment)

    def _automaton_rule(self, stops: tuple[str, ...], plain, escapes: tuple, comment: str) -> str:
        key = (stops, plain, escapes)
        if key not in self.until_rules:
            name = self.until_rules[key] = f"until-{len(self.until_rules) + 1}"
            self._automaton(name, _Moves(stops, plain, escapes, self.visit), comment)
        return self.until_rules[key]

    def _automaton(self, name: str, moves: _Moves, comment: str) -> None:
        """Text that never completes a stop: a sequence of chunks, each a path from "no partial
        stop seen" back to it, then maybe a path that ends inside a partial stop."""
        ids = {p: i for i, p in enumerate(moves.prefixes)}
        # back-k: from partial stop k back to "nothing pending", never completing a stop
        for prefix in moves.prefixes[1:]:
            options = [label if target == "" else f"{label} {name}-back-{ids[target]}"
                       for target, label in moves.from_state(prefix)]
            self.extra.append((f"{name}-back-{ids[prefix]}", " | ".join(options), ""))
        # open-k: from partial stop k, ending while a stop may still be completed after the text
        for prefix in moves.prefixes[1:]:
            options = ['""'] + [f"{label} {name}-open-{ids[target]}"
                                for target, label in moves.from_state(prefix) if target != ""]
            self.extra.append((f"{name}-open-{ids[prefix]}", " | ".join(options), ""))
        chunk, tail = [], []
        for target, label in moves.from_state(""):
            if target == "":
                chunk.append(label)
            else:
                chunk.append(f"{label} {name}-back-{ids[target]}")
                tail.append(f"{label} {name}-open-{ids[target]}")
        body = f"({' | '.join(chunk)})*" + (f" ({' | '.join(tail)})?" if tail else "")
        self.extra.append((name, body, comment))


class _Moves:
    """The automaton of a text in which no stop occurs: its states are the stops' proper
    prefixes (the partial stop the text ends in, "" for none); `from_state` gives each way
    on, as (next state, the GBNF of what is read), never one that completes a stop.

    What is read: a `plain` character (any one when `plain` is None) or an escape. An
    escape's backslash is in no stop (build.py keeps such stops out), so it leaves no partial
    stop behind; a one-character tail (`\\` then any character) is read on like a plain
    character, a longer tail (JSON's `u0041`) starts no stop, so the text is back at ""."""

    def __init__(self, stops: tuple[str, ...], plain, escapes: tuple, visit):
        self.stops = stops
        self.prefixes = sorted({s[:i] for s in stops for i in range(len(s))},
                               key=lambda p: (len(p), p))
        self.alphabet = sorted({c for s in stops for c in s})
        self.plain = plain if plain is not None else AnyChar()
        self.escapes = escapes
        self.visit = visit

    def step(self, state: str, ch: str):
        """The partial stop after `ch`, or None where `ch` completes a stop."""
        text = state + ch
        if any(text.endswith(s) for s in self.stops):
            return None
        for i in range(len(text) + 1):
            if text[i:] in self.prefixes:
                return text[i:]
        return ""

    def from_state(self, state: str) -> list[tuple[str, str]]:
        moves = self._characters(state, self.plain, "")
        for escape in self.escapes:
            tail = escape.items[1] if len(escape.items) == 2 else Seq(escape.items[1:])
            if isinstance(tail, (AnyChar, Chars)):
                moves += self._characters("", tail, '"\\\\" ')
            else:
                moves.append(("", self.visit(escape)))
        return moves

    def _characters(self, state: str, plain, before: str) -> list[tuple[str, str]]:
        """The moves on one character of `plain` (after `before`, an escape's backslash): those
        no stop holds back to "", the stops' characters grouped by where they lead."""
        excluded = plain.ranges if isinstance(plain, Chars) else ()
        other = _class(tuple(excluded) + tuple((c, c) for c in self.alphabet), negate=True)
        targets: dict[str, list[str]] = {}
        for ch in self.alphabet:
            if not any(a <= ch <= b for a, b in excluded):
                target = self.step(state, ch)
                if target is not None:
                    targets.setdefault(target, []).append(ch)
        return [("", before + other)] + [(t, before + _class([(c, c) for c in chs], False))
                                         for t, chs in targets.items()]


def _comment(text: str) -> str:
    """A comment line, whatever a template's or a tool's name holds (tplparse.display: a
    newline would start a line read as grammar, a NUL would end the grammar where llama.cpp
    reads it as a C string, an escape sequence would act on a terminal that shows the file)."""
    return "# " + comment_text(text)


def emit_gbnf(grammar: Grammar) -> str:
    emitter = _Emitter(grammar)
    lines = [_comment(line) for line in grammar.header]
    lines.append("# @generated by tplparse: GBNF for llama.cpp — do not edit")
    lines.append("")
    for name in grammar.reachable():
        rule = grammar.rules[name]
        body = emitter.visit(rule.body, True)
        if rule.comment:
            lines.append(_comment(rule.comment))
        lines.append(f"{name} ::= {body}")
    if emitter.extra:
        lines.append("")
        for name, body, comment in emitter.extra:
            if comment:
                lines.append(_comment(comment))
            lines.append(f"{name} ::= {body}")
    return "\n".join(lines) + "\n"
