"""The Lark emitter: the grammar IR in llguidance's Lark dialect.

llguidance (the engine behind llama.cpp's `%llguidance` grammars, vLLM's `guidance` backend,
SGLang and Guidance) reads a Lark variant: rules of lexemes, `x{m,n}` repetition, `-` in
names, `%json {...}` for a JSON Schema, `<token>` for a special token, and lexeme options.
Its lexer is greedy (a lexeme runs as long as the next byte extends it, and never backs up),
which decides three things here:

- A run of one character class (`Rep(Chars)`) is one regex lexeme, never a repetition of
  one-character lexemes (which is slow, and which the docs warn against).
- `TextUntil(stops)` cannot be one lexeme: text that may hold a stop's first character
  would run on into the stop and fail there. Text is a repetition of lexemes that all text
  rules share the boundaries of: a run of plain characters (none of the split characters:
  the stops' first characters, and the punctuation a turn's first literal starts with), and
  a piece that starts with a split character and runs up to the next one. A piece does not
  start with a stop nor with another marker word of the grammar: where a stop begins, the
  piece dies and the stop's own literal (the rule that follows) takes the bytes. A piece
  that is a stop but for its last character may end there only where that character does
  not follow; a stop written in several lexemes (`]<]x[>[` `</`) may have its first
  lexeme in the text where the second does not follow.
- Literals are split around every marker word of the grammar they hold, so that a marker
  is one lexeme wherever it is written.

  What is read less exactly than the GBNF automaton reads it (found by a differential run
  against llama.cpp on the corpus; content models write is checked in tests/test_lark.py):
  where a marker's literal may follow text and the text
  holds that marker (reasoning that mentions `<tool_call>`), the lexer takes the literal
  and the reading as text is lost; a one-lexeme marker that holds a split character
  (`<|channel|>final<|message|>`) is refused when text starts the same way and then
  differs; a stop of several words is cut at its first word, which text may then not
  hold (`[BEGIN` for `[BEGIN FINAL RESPONSE]`); and a stop that holds a split character
  after its first (`>>`, `]<]x[>[`) spans pieces, so it is kept out of the text only where
  its own literal may follow.
- A string's characters (`StringUntil`) are written as the run they are, its stops not kept
  out: llguidance's own JSON lexer (`%json`) reads most strings, and has no way to keep a
  stop string out of one; GBNF's automaton does (the end of turn inside a value, where the
  engine would stop in the middle of a call).
- A marker the source names as a control token (`ChatTemplate.control_tokens`: GGUF token
  type CONTROL, tokenizer_config's tokens marked special), in the `<...>` form llguidance
  can name, is written `<token>`: the model writes it as that token, which no text lexeme
  can contain, so such markers need no stop. Other added tokens (user-defined ones, such
  as `<tool_call>` in many GGUFs) are text to the tokenizer llama.cpp gives llguidance, so
  they are written as strings.

A rule whose IR says it is JSON of a schema (`Rule.json_schema`) is written `%json {...}`
when every keyword of the schema is one llguidance enforces (`LLGUIDANCE_KEYWORDS`), so
llguidance's own JSON lexer does the work; otherwise from the IR, which reports what it
does not enforce. The schema a rule records is the one its IR follows: llguidance (1.9.1)
reads a missing `additionalProperties` as JSON Schema does (any other key, even one that
spells a declared name with an escape), so a schema that lists `properties` is recorded
with `"additionalProperties": false` added where it says nothing (`json_schema.closed_objects`),
unless `GrammarOptions.open_objects` asked for JSON Schema's rule; a bare `{"type": "object"}`
stays open. (llguidance's JSON refuses a `\\uXXXX` escape of a printable character
unless told otherwise; the option that tells it, `json_allow_general_unicode_escapes`, is
not set: llguidance before 1.8, which vLLM pins, refuses the grammar that names it.) `Not`
(lookahead) has no counterpart: like GBNF, the grammar then accepts what the lookahead would
refuse.
"""

from __future__ import annotations

import json
import re

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
    Rule,
    Seq,
    StringUntil,
    TextUntil,
    Visitor,
    children,
    quantifier,
)

# JSON Schema keywords llguidance's converter enforces (its docs/json_schema.md), and those
# that only describe. A schema using any other keyword is written from the IR instead.
# (Not oneOf and allOf: llguidance refuses the grammar for the ones it cannot prove or intersect.)
LLGUIDANCE_KEYWORDS = frozenset({
    "anyOf", "$ref", "const", "enum", "type", "items", "prefixItems", "minItems", "maxItems",
    "properties", "additionalProperties", "required", "minLength", "maxLength", "pattern",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
})
DESCRIPTIVE = frozenset({
    "description", "title", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions",
})
# Keywords whose value is a schema, or a list or map of schemas (walked for their keywords).
_SUBSCHEMAS = {"items": "one", "additionalProperties": "one", "anyOf": "list", "oneOf": "list",
               "allOf": "list", "prefixItems": "list", "properties": "map", "$defs": "map",
               "definitions": "map"}


def llguidance_enforces(schema) -> bool:
    """Whether every keyword in `schema` (and its subschemas) is one llguidance enforces."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for keyword, value in schema.items():
        if keyword not in LLGUIDANCE_KEYWORDS and keyword not in DESCRIPTIVE:
            return False
        if keyword == "pattern" and isinstance(value, str) and "(?" in value:
            return False  # (lookarounds and inline flags: not in llguidance's regex syntax)
        if keyword == "$ref" and not (isinstance(value, str) and value.startswith("#/")):
            return False
        kind = _SUBSCHEMAS.get(keyword)
        if kind == "one" and not llguidance_enforces(value):
            return False
        if kind == "list" and not (isinstance(value, list)
                                   and all(llguidance_enforces(v) for v in value)):
            return False
        if kind == "map" and not (isinstance(value, dict)
                                  and all(llguidance_enforces(v) for v in value.values())):
            return False
    return True


def _string(text: str) -> str:
    """A Lark string: JSON's escapes (control characters included), and DEL escaped too
    (llguidance's string lexeme refuses it raw)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _regex_char(ch: str) -> str:
    """One character inside a regex: letters and digits as they are, the rest as \\x{HH}
    (Rust's regex syntax: safe inside and outside a class, and never `/`)."""
    return ch if ch.isascii() and ch.isalnum() else f"\\x{{{ord(ch):X}}}"


def _class(node: Chars) -> str:
    body = "".join(_regex_char(a) if a == b else f"{_regex_char(a)}-{_regex_char(b)}"
                   for a, b in node.ranges)
    return f"[{'^' if node.negate else ''}{body}]"


def _walk(node):
    """The node and every node inside it."""
    yield node
    for child in children(node):
        yield from _walk(child)


def _lead_byte_ranges(chars) -> list[tuple[str, str]]:
    """The split characters as ranges of characters: an ASCII one alone, a non-ASCII one with
    every character whose UTF-8 encoding starts with the same byte. llguidance's lexer reads
    bytes and never backs up: a run of plain text must stop before the lead byte, not after
    it, or `é` before `ê` (both C3 ..) would be half read when the run has to end."""
    ranges = set()
    for ch in chars:
        code = ord(ch)
        if code < 0x80:
            ranges.add((code, code))
            continue
        lead = ch.encode("utf-8")[0]
        if lead < 0xE0:
            low = (lead & 0x1F) << 6
            ranges.add((low, low + 0x3F))
        elif lead < 0xF0:
            low = max((lead & 0x0F) << 12, 0x800)
            high = ((lead & 0x0F) << 12) + 0xFFF
            ranges.add((low, 0xD7FF if lead == 0xED else high))
        else:
            low = max((lead & 0x07) << 18, 0x10000)
            ranges.add((low, min(low + 0x3FFFF if lead != 0xF0 else 0x3FFFF, 0x10FFFF)))
    return [(chr(a), chr(b)) for a, b in sorted(ranges)]


def _first_characters(grammar: Grammar) -> set[str]:
    """The first characters of the literals the grammar's text can start with (through
    what may be empty: whitespace, optional parts, text)."""
    memo: dict[str, tuple[frozenset, bool]] = {}

    def first(node) -> tuple[frozenset, bool]:
        """(first characters of literals, whether the node can match nothing)"""
        if isinstance(node, Lit):
            return (frozenset(node.text[:1]), not node.text)
        if isinstance(node, StringUntil):
            return first(node.as_rep())
        if isinstance(node, (TextUntil, End, Not)):
            return frozenset(), True
        if isinstance(node, (Chars, AnyChar)):
            return frozenset(), False
        if isinstance(node, Rep):
            found, empty = first(node.item)
            return found, empty or node.min == 0
        if isinstance(node, Alt):
            parts = [first(item) for item in node.items]
            return frozenset().union(*(p[0] for p in parts)), any(p[1] for p in parts)
        if isinstance(node, Seq):
            found = frozenset()
            for item in node.items:
                more, empty = first(item)
                found |= more
                if not empty:
                    return found, False
            return found, True
        if isinstance(node, Ref):
            if node.name not in memo:
                memo[node.name] = (frozenset(), False)  # (a rule in progress: a cycle adds nothing)
                memo[node.name] = first(grammar.rules[node.name].body)
            return memo[node.name]
        return frozenset(), False

    return set(first(Ref(grammar.root))[0])


def _first_word(text: str) -> str:
    """The text's first run of non-whitespace (a literal's first lexeme: the grammar writes
    whitespace as a rule of its own)."""
    words = text.split()
    return words[0] if words else ""


def token_split(text: str, tokens: list[str]) -> list[str]:
    """The text as its special tokens and the strings between them."""
    parts = []
    i = start = 0
    while i < len(text):
        token = next((t for t in tokens if text.startswith(t, i)), None)
        if token is None:
            i += 1
            continue
        if i > start:
            parts.append(text[start:i])
        parts.append(token)
        i = start = i + len(token)
    if start < len(text):
        parts.append(text[start:])
    return parts


def _marker_words(grammar: Grammar, tokens: list[str]) -> list[str]:
    """The words of the grammar's literals (between special tokens) that look like markers:
    three characters or more (shorter ones such as `</` or `{"` are punctuation that text
    holds too); longest first."""
    found: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, Lit):
            for part in token_split(node.text, tokens):
                if len(part) >= 3 and part not in tokens:
                    found.add(part)
        for child in children(node):
            walk(child)

    for rule in grammar.rules.values():
        walk(rule.body)
    return sorted(found, key=lambda w: (-len(w), w))


def _atomic(words: list[str]) -> list[str]:
    """The marker words that hold no other marker word: the lexemes every literal is split
    into, so that a text is split the same way whichever literal it is part of. (Each word's
    own pieces are looked up, not every other word: a schema of thousands of properties
    gives thousands of words.)"""
    present = set(words)
    shortest = min((len(w) for w in words), default=0)

    def holds_another(word: str) -> bool:
        n = len(word)
        return any(word[i:j] in present for i in range(n) for j in range(i + shortest, n + 1)
                   if (i, j) != (0, n))

    return [w for w in words if not holds_another(w)]


class _WordSearch:
    """The search for the first atomic marker word in a text, the longest one there."""

    def __init__(self, words: list[str]):
        atomic = _atomic(words)  # (longest first, as `words` are)
        self.search = re.compile("|".join(map(re.escape, atomic))).search if atomic else None


def _lexemes(text: str, tokens: list[str], words: _WordSearch) -> list[str]:
    """A literal as the lexemes it is written in: its special tokens, and its strings split
    around every marker word of the grammar they hold. A marker is then one lexeme wherever
    it is written (`<|end|>` alone and in `<|end|><|start|>`, `]<]x[>[` alone and after a
    `>`): the lexer, which takes the longest match and never backs up, would otherwise
    follow the longer literal and fail where only the shorter one fits."""
    out = []
    for part in token_split(text, tokens):
        if part in tokens:
            out.append(part)
            continue
        while part:
            # the first atomic word in the part, the longest there (words longest first)
            found = words.search(part) if words.search is not None else None
            if found is None:
                out.append(part)
                break
            if found.start():
                out.append(part[:found.start()])
            out.append(found.group())
            part = part[found.end():]
    return out


def _regex_literal(text: str) -> str:
    return "".join(_regex_char(c) for c in text)


_NAMEABLE = re.compile(r"<[^<>\s]+>")


def nameable_token(token: str) -> bool:
    """A special token llguidance's `<...>` syntax can name (`<` and `>` around a name that
    holds neither, nor whitespace)."""
    return bool(_NAMEABLE.fullmatch(token))


class _Emitter(Visitor):
    """Each node as a Lark expression; TextUntil rules collected on the side."""

    def __init__(self, grammar: Grammar, special_tokens: tuple[str, ...]):
        self.grammar = grammar
        # Longest first, so that a token that contains another is split off whole.
        self.tokens = sorted({t for t in special_tokens if nameable_token(t)},
                             key=lambda t: (-len(t), t))
        self.until_rules: dict[tuple, str] = {}
        self.words = _marker_words(grammar, self.tokens)
        self.word_search = _WordSearch(self.words)
        # The characters any text rule's stop starts with: every text rule splits its text at
        # them, so that all of them end a run of plain text at the same place (the lexer
        # follows the longest match across all the rules the parser may be in).
        every_stop = [s for rule in grammar.rules.values() for node in _walk(rule.body)
                      if isinstance(node, TextUntil)
                      for s in node.stops]
        # So do the first characters (punctuation) of the literals a turn can start with
        # (`/think`, `<|START_RESPONSE|>`): there the parser is where such a literal or text can
        # start, and the literal must not be read as the start of a longer run of text.
        self.firsts = sorted({w[0] for w in self.stop_words(self.stop_lexemes(tuple(every_stop)))}
                             | {c for c in _first_characters(grammar)
                                if not (c.isalnum() or c.isspace())}
                             if every_stop else ())
        self.split_ranges = _lead_byte_ranges(self.firsts)
        self.first_class = "".join(_regex_char(a) if a == b
                                   else f"{_regex_char(a)}-{_regex_char(b)}"
                                   for a, b in self.split_ranges)
        self.extra: list[tuple[str, str, str]] = []  # (name, body, comment)

    def visit_Lit(self, node: Lit, top: bool = False) -> str:
        parts = self._split(node.text)
        if not parts:
            return '""'
        text = " ".join(parts)
        return text if top or len(parts) == 1 else f"({text})"

    def _split(self, text: str) -> list[str]:
        """A literal as string lexemes and the special tokens inside it."""
        return [p if p in self.tokens else _string(p)
                for p in _lexemes(text, self.tokens, self.word_search)]

    def visit_Chars(self, node: Chars, top: bool = False) -> str:
        return f"/{_class(node)}/"

    def visit_AnyChar(self, node: AnyChar, top: bool = False) -> str:
        return "/(?s:.)/"

    def visit_Ref(self, node: Ref, top: bool = False) -> str:
        return node.name

    def visit_End(self, node: End, top: bool = False) -> str:
        return ""

    def visit_Not(self, node: Not, top: bool = False) -> str:
        return ""  # (no lookahead: the grammar accepts what the lookahead would refuse)

    def visit_TextUntil(self, node: TextUntil, top: bool = False) -> str:
        return self.until(node.stops)

    def visit_StringUntil(self, node: StringUntil, top: bool = False) -> str:
        # (the stops are not kept out: see the module docstring)
        return self.visit(node.as_rep(), top)

    def visit_Seq(self, node: Seq, top: bool = False) -> str:
        items = [text for text in (self.visit(i) for i in node.items) if text]
        text = " ".join(items) or '""'
        return text if top or len(items) <= 1 else f"({text})"

    def visit_Alt(self, node: Alt, top: bool = False) -> str:
        text = " | ".join(self.visit(i) for i in node.items)
        return text if top else f"({text})"

    def visit_Rep(self, node: Rep, top: bool = False) -> str:
        if isinstance(node.item, (Chars, AnyChar)):
            # One lexeme for the whole run (llguidance: a repetition of one-character lexemes is
            # slow).
            inner = _class(node.item) if isinstance(node.item, Chars) else "(?s:.)"
            return f"/{inner}{quantifier(node)}/"
        inner = self.visit(node.item)
        if not inner:
            return ""
        if not (inner.startswith("(") and inner.endswith(")")) and " " in inner:
            inner = f"({inner})"
        return inner + quantifier(node)

    def generic_visit(self, node, top: bool = False) -> str:
        raise TypeError(f"unknown IR node {node!r}")

    def splits_at(self, ch: str) -> bool:
        """Whether text is split before `ch` (a piece starts there)."""
        return any(a <= ch <= b for a, b in self.split_ranges)

    def stop_lexemes(self, stops: tuple[str, ...]) -> list[list[str]]:
        """Each stop's first word as the lexemes the grammar's literal writes it in."""
        return [_lexemes(_first_word(s), self.tokens, self.word_search) for s in stops]

    def stop_words(self, lexed: list[list[str]]) -> tuple[str, ...]:
        """Each stop as the lexeme its literal starts with; none for a stop that starts with
        a special token (text cannot hold one)."""
        return tuple(dict.fromkeys(f[0] for f in lexed if f and f[0] not in self.tokens))

    def until(self, stops: tuple[str, ...]) -> str:
        """Text in which no stop occurs, as the rules and lexemes llguidance's greedy lexer
        reads it (see the module docstring)."""
        lexed = self.stop_lexemes(stops)
        stops = self.stop_words(lexed)
        if not stops:
            return "/(?s:.*)/"
        # A stop written in two lexemes or more (`]<]x[>[` `</`): text may hold its first
        # lexeme where the second does not follow, unless that lexeme is a whole stop too.
        whole = {lexemes[0] for lexemes in lexed if len(lexemes) == 1}
        heads: dict[str, set[str]] = {}
        for lexemes in lexed:
            if len(lexemes) > 1 and lexemes[0] not in self.tokens and lexemes[0] not in whole:
                heads.setdefault(lexemes[0], set()).add(lexemes[1])
        # A piece that is a stop but for its last character: text may hold it where that
        # character does not follow (it would make the stop), and at the end.
        almost = {w[:-1]: w[-1] for w in sorted(stops) if len(w) > 1 and not self.splits_at(w[-1])}
        key = (stops, tuple(sorted((h, tuple(sorted(n))) for h, n in heads.items())))
        if key in self.until_rules:
            return self.until_rules[key]
        name = f"until-{len(self.until_rules) + 1}"
        self.until_rules[key] = name
        if not self.extra:
            self.extra.append(("TEXT-PLAIN", f"/[^{self.first_class}]+/",
                               "a run of text in which no stop of any text rule can start"))
        # A piece never starts with a stop, nor with another marker word of the grammar: where
        # such a literal may start in place of the text, the lexer, which takes the longest
        # match, would otherwise read it as text.
        words = sorted(set(stops) | {w for w in self.words if self.splits_at(w[0])},
                       key=lambda w: (-len(w), w))
        starts = "|".join(_regex_literal(w) for w in words)
        upper = name.upper()
        comment = "text without " + ", ".join(repr(s) for s in stops)
        items = ["TEXT-PLAIN", f"{upper}-PIECE"]
        for number, (head, nexts) in enumerate(sorted(heads.items()), 1):
            unless = "|".join(_regex_literal(n) for n in sorted(nexts))
            after = f"{upper}-AFTER-{number}"
            items.append(f"({_string(head)} ({after}-PLAIN | {after}-PIECE))")
            self.extra.append((f"{after}-PLAIN", f"TEXT-PLAIN & ~/({unless})(?s:.*)/", ""))
            self.extra.append((f"{after}-PIECE", f"{upper}-PIECE & ~/({unless})(?s:.*)/", ""))
        tail = ""
        if almost:
            items.append(f"{name}-almost")
            options = []
            for number, (prefix, last) in enumerate(almost.items(), 1):
                lexeme = f"{upper}-ALMOST-{number}"
                self.extra.append((lexeme, f"/{_regex_literal(prefix)}/", ""))
                self.extra.append((f"{upper}-NOT-{number}-PLAIN",
                                   f"TEXT-PLAIN & ~/{_regex_literal(last)}(?s:.*)/", ""))
                options.append(f"({lexeme} ({upper}-NOT-{number}-PLAIN | "
                               f"{upper}-PIECE | {name}-almost))")
            self.extra.append((f"{name}-almost", " | ".join(options),
                               "all of a stop but its last character, not "
                               "followed by that character"))
            tail = " (" + " | ".join(f"{upper}-ALMOST-{n}"
                                     for n in range(1, len(almost) + 1)) + ")*"
        self.extra.append((name, f"({' | '.join(items)})*{tail}", comment))
        piece = f"/[{self.first_class}][^{self.first_class}]*/ & ~/({starts})(?s:.*)/"
        if almost:
            piece += " & ~/(" + "|".join(_regex_literal(p) for p in almost) + ")/"
        self.extra.append((f"{upper}-PIECE", piece, ""))
        return name


def _as_json(rule: Rule) -> bool:
    """Whether the rule is written as llguidance's own `%json {...}`."""
    return rule.json_schema is not None and llguidance_enforces(rule.json_schema)


def _reachable(grammar: Grammar) -> list[str]:
    """Rule names reachable from the root, root first, in first-use order; the rules below
    a rule written as `%json` are not written."""
    return grammar.reachable(into=lambda rule: not _as_json(rule))


def _comment(text: str) -> str:
    """A comment line, whatever a template's or a tool's name holds (tplparse.display: a
    newline would start a line read as grammar, a NUL would end the grammar where llama.cpp
    reads it as a C string, an escape sequence would act on a terminal that shows the file)."""
    return "// " + comment_text(text)


def emit_lark(grammar: Grammar, special_tokens: tuple[str, ...] = ()) -> str:
    """The grammar in llguidance's Lark dialect; `special_tokens` (the model's control tokens)
    are written `<token>`."""
    emitter = _Emitter(grammar, tuple(special_tokens))
    lines = ["%llguidance {}", ""]
    lines += [_comment(line) for line in grammar.header]
    lines.append("// @generated by tplparse: Lark (llguidance) — do not edit")
    lines.append("")
    lines.append(f"start: {grammar.root}")
    for name in _reachable(grammar):
        rule = grammar.rules[name]
        if _as_json(rule):
            body = "%json " + json.dumps(rule.json_schema, ensure_ascii=False)
        else:
            body = emitter.visit(rule.body, True) or '""'
        if rule.comment:
            lines.append(_comment(rule.comment))
        lines.append(f"{name}: {body}")
    if emitter.extra:
        lines.append("")
        for name, body, comment in emitter.extra:
            if comment:
                lines.append(_comment(comment))
            lines.append(f"{name}: {body}")
    return "\n".join(lines) + "\n"


def lark_warnings(grammar: Grammar, warnings: list[str]) -> list[str]:
    """Of the IR's warnings (schema keywords its rules do not enforce), those that hold for
    the Lark grammar: the ones of a schema written as `%json` do not (llguidance enforces
    every keyword it was given), unless another rule written from the IR has them too."""
    written = _reachable(grammar)
    dropped = {w for n in written if _as_json(grammar.rules[n])
               for w in grammar.rules[n].schema_warnings}
    kept = {w for n in written if not _as_json(grammar.rules[n])
            for w in grammar.rules[n].schema_warnings}
    return [w for w in warnings if w not in dropped or w in kept]


__all__ = ["LLGUIDANCE_KEYWORDS", "emit_lark", "lark_warnings", "llguidance_enforces",
           "nameable_token", "token_split"]
