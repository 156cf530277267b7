"""Read GBNF with lark: a syntax check with line numbers, and a pure-Python acceptance check.

`parse_gbnf(text)` parses the GBNF language (as tplparse emits it: one rule a line) and
reports a syntax error with its line before llama.cpp ever sees the grammar.
`GbnfAcceptor(text).accepts(s)` converts the grammar to a Lark Earley grammar and says
whether it matches the whole of `s`: the fallback when llama.cpp is not installed (llama.cpp
remains the authority; this check follows the same reading of the dialect).
"""

from __future__ import annotations

import re
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import LarkError, UnexpectedInput

from ..errors import TplparseError

GBNF_LANGUAGE = r"""
start: _line*
_line: rule _NL | _NL
rule: NAME "::=" alternation
alternation: sequence ("|" sequence)*
sequence: item*
item: atom QUANT?
?atom: STRING -> string
     | CLASS -> charclass
     | "." -> anychar
     | NAME -> ref
     | "(" alternation ")" -> group
QUANT: "*" | "+" | "?" | /\{[0-9]+(,[0-9]*)?\}/
NAME: /[a-zA-Z0-9-]+/
STRING: /"(\\.|[^"\\\n])*"/
CLASS: /\[(\\.|[^\]\\\n])*\]/
COMMENT: /#[^\n]*/
_NL: /(\r?\n)+/
%ignore COMMENT
%ignore /[ \t]+/
"""

_READER = Lark(GBNF_LANGUAGE, parser="lalr", propagate_positions=True)


class GbnfSyntaxError(TplparseError):
    pass


def parse_gbnf(text: str):
    """The parse tree of a GBNF grammar; a syntax error names the line."""
    try:
        tree = _READER.parse(text if text.endswith("\n") else text + "\n")
    except UnexpectedInput as e:
        raise GbnfSyntaxError(f"GBNF syntax error at line {e.line}, column {e.column}") from None
    rules: list[Any] = tree.children  # (each a rule: its name's token, then its body)
    names = {rule.children[0].value for rule in rules}
    for rule in rules:
        for ref in rule.find_data("ref"):
            if ref.children[0].value not in names:
                raise GbnfSyntaxError(f"GBNF rule {rule.children[0].value!r} (line "
                                      f"{rule.meta.line}) refers to undefined rule "
                                      f"{ref.children[0].value!r}")
    if "root" not in names:
        raise GbnfSyntaxError("GBNF grammar has no root rule")
    return tree


def _lark_name(name: str) -> str:
    return "r_" + name.replace("-", "_").lower()


def _gbnf_string_value(token: str) -> str:
    """The text a GBNF literal stands for."""
    body = token[1:-1]
    return re.sub(r"\\(x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|.)", lambda m: _unescape(m.group(1)), body)


def _unescape(esc: str) -> str:
    if esc[0] in "xu":
        return chr(int(esc[1:], 16))
    return {"n": "\n", "r": "\r", "t": "\t"}.get(esc, esc)


def _regex_class_body(body: str) -> str:
    """A GBNF class body as a regex class body that survives Lark's own escape evaluation.

    Lark turns `\\x5B` into a bare `[` before the regex sees it, so a class's special characters
    (an escaped `]`, `[`, `\\`, `^`, `-`) are written as backslash escapes instead, which it keeps.
    """
    negated = body.startswith("^")
    out = ["^"] if negated else []
    for m in re.finditer(r"\\(x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|.)|(.)",
                         body[1:] if negated else body, re.S):
        if m.group(2) is not None:  # unescaped: "-" is the range operator, the rest literal
            char = m.group(2)
            out.append(char if char == "-" else _regex_class_char(char))
        else:
            out.append(_regex_class_char(_unescape(m.group(1))))
    return "".join(out)


def _regex_class_char(char: str) -> str:
    if char in "[]\\^-/":
        return "\\" + char
    if not char.isprintable() or char.isspace():
        return f"\\x{ord(char):02x}" if ord(char) < 256 else f"\\u{ord(char):04x}"
    return char


class _ToLark(Transformer):
    """GBNF tree -> Lark grammar text (each GBNF item becomes a Lark expansion)."""

    def rule(self, children):
        name, body = children
        return f"{_lark_name(name.value)}: {body}"

    def alternation(self, children):
        empty = [c for c in children if c == ""]
        options = [c for c in children if c != ""]
        if not options:
            return "_EMPTY?"
        text = " | ".join(options)
        return f"({text})?" if empty else text

    def sequence(self, children):
        return " ".join(c for c in children if c)

    def item(self, children):
        atom = children[0]
        if len(children) == 1 or not atom:
            return atom
        quant = children[1].value
        if quant in "*+?":
            return f"({atom}){quant}"
        low, _, high = quant[1:-1].partition(",")
        if "," not in quant:
            return f"({atom}) ~ {low}"
        if high:
            return f"({atom}) ~ {low}..{high}" if int(high) > 0 else ""
        return f"({atom}) ~ {low} ({atom})*" if int(low) > 0 else f"({atom})*"

    def string(self, children):
        value = _gbnf_string_value(children[0].value)
        if not value:
            return ""
        return _lark_literal(value)

    def charclass(self, children):
        return f"/[{_regex_class_body(children[0].value[1:-1])}]/s"

    def anychar(self, children):
        return "/./s"

    def ref(self, children):
        return _lark_name(children[0].value)

    def group(self, children):
        return f"({children[0]})" if children[0] else ""


def _lark_literal(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") \
        .replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


def gbnf_to_lark(text: str) -> str:
    tree = parse_gbnf(text)
    rules = [_ToLark().transform(rule) for rule in tree.children]
    return "\n".join(rules) + '\n_EMPTY: "\\x00\\x00never"\n'


class GbnfAcceptor:
    """Whether a GBNF grammar matches a whole text (Lark Earley, character-level terminals)."""

    def __init__(self, gbnf: str):
        self.lark_text = gbnf_to_lark(gbnf)
        try:
            self.parser = Lark(self.lark_text, start=_lark_name("root"), parser="earley",
                               lexer="dynamic")
        except LarkError as e:
            raise GbnfSyntaxError(f"the GBNF grammar does not convert to Lark: {e}") from None

    def accepts(self, text: str) -> bool:
        try:
            self.parser.parse(text)
            return True
        except UnexpectedInput:
            return False


__all__ = ["parse_gbnf", "gbnf_to_lark", "GbnfAcceptor", "GbnfSyntaxError", "Token"]
