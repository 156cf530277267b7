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

from ..grammar.ir import AnyChar, Alt, Chars, End, Grammar, Lit, Not, Ref, Rep, Seq, TextUntil, Visitor, quantifier


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
        _escape_char(a, True) if a == b else f"{_escape_char(a, True)}-{_escape_char(b, True)}" for a, b in ranges
    )
    return f"[{'^' if negate else ''}{body}]"


class _Emitter(Visitor):
    """Each node as a GBNF expression; TextUntil rules collected as automata."""

    def __init__(self, grammar: Grammar):
        self.grammar = grammar
        self.until_rules: dict[tuple[str, ...], str] = {}
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
        return self.visit(node.item) + quantifier(node)

    def visit_Not(self, node: Not, top: bool = False) -> str:
        return '""'  # (no lookahead in GBNF: the grammar accepts what the lookahead would refuse)

    def generic_visit(self, node, top: bool = False) -> str:
        raise TypeError(f"unknown IR node {node!r}")

    def until(self, stops: tuple[str, ...]) -> str:
        stops = tuple(s for s in stops if s)
        if not stops:
            return ".*"
        if stops in self.until_rules:
            return self.until_rules[stops]
        name = f"until-{len(self.until_rules) + 1}"
        self.until_rules[stops] = name
        self._automaton(name, stops)
        return name

    def _automaton(self, name: str, stops: tuple[str, ...]) -> None:
        prefixes = sorted({s[:i] for s in stops for i in range(len(s))}, key=lambda p: (len(p), p))
        alphabet = sorted({c for s in stops for c in s})
        accept = object()

        def step(state: str, ch: str):
            text = state + ch
            if any(text.endswith(s) for s in stops):
                return accept
            for i in range(len(text) + 1):
                if text[i:] in prefixes:
                    return text[i:]
            return ""

        ids = {p: i for i, p in enumerate(prefixes)}
        other = _class([(c, c) for c in alphabet], negate=True)  # characters no stop contains

        def grouped(state: str):
            """(target, class text) for each next state reachable from `state`."""
            targets: dict[object, list[str]] = {}
            for ch in alphabet:
                target = step(state, ch)
                if target is not accept:
                    targets.setdefault(target, []).append(ch)
            return [(t, _class([(c, c) for c in chs], False)) for t, chs in targets.items()]

        comment = "text without " + ", ".join(repr(s) for s in stops)
        # back-k: from partial stop k back to "nothing pending", never completing a stop
        for prefix in prefixes[1:]:
            options = [other]
            for target, cls in grouped(prefix):
                options.append(cls if target == "" else f"{cls} {name}-back-{ids[target]}")
            self.extra.append((f"{name}-back-{ids[prefix]}", " | ".join(options), ""))
        # open-k: from partial stop k, ending while a stop may still be completed after the text
        for prefix in prefixes[1:]:
            options = ['""']
            for target, cls in grouped(prefix):
                if target != "":
                    options.append(f"{cls} {name}-open-{ids[target]}")
            self.extra.append((f"{name}-open-{ids[prefix]}", " | ".join(options), ""))
        chunk = [other]
        tail = []
        for target, cls in grouped(""):
            if target == "":
                chunk.append(cls)
            else:
                chunk.append(f"{cls} {name}-back-{ids[target]}")
                tail.append(f"{cls} {name}-open-{ids[target]}")
        body = f"({' | '.join(chunk)})*" + (f" ({' | '.join(tail)})?" if tail else "")
        self.extra.append((name, body, comment))


def _comment(text: str) -> str:
    """A comment line, whatever a template's or a tool's name holds: a control character is
    written as an escape (a newline would start a line the parser reads as grammar, a NUL
    would end the grammar where llama.cpp reads it as a C string)."""
    return "# " + "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7F else
                          f"\\u{ord(c):04x}" if c in "\x85\u2028\u2029" else c for c in text)


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
