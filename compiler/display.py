"""Text from a user's files shown on a terminal or written into a comment, made harmless.

A model's name, a template's variant names, a token or a template's own words reach the
terminal (errors, `info`, `probe`, the proof table) and the comments of the grammar files.
What they hold must not act there: a control character (ESC starts a terminal escape
sequence, BEL rings, NUL ends a string where llama.cpp reads a grammar as C), a line or
paragraph separator (a new line in a one-line error, or a comment line read as grammar), a
lone surrogate (no UTF-8 writes it), or an invisible format character (U+202E and U+2067
reorder what follows them on the screen: a name can make the line around it read otherwise).
Each of those is written as the escape Python writes for it; the rest is kept.
"""

from __future__ import annotations

import json
import re
import unicodedata

# Control (Cc), format (Cf: the bidirectional overrides and isolates among them), surrogate
# (Cs), line and paragraph separators (Zl, Zp).
_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def printable(text: str) -> str:
    """`text` with every character that could act on a terminal or end a line escaped (as
    `repr` writes it: `\\x1b`, `\\u202e`, `\\n`), on one line."""
    if text.isprintable() and text.isascii():
        return text
    return "".join(_escape(ch) if unicodedata.category(ch) in _ESCAPED else ch for ch in text)


def printable_lines(text: str) -> str:
    """`text`, each of its lines made printable (the line breaks kept)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\x{code:02x}")
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def comment_text(text: str) -> str:
    """The text of one comment line of a grammar file: printable, so that nothing in it starts
    a line the grammar's reader reads as grammar, or ends the file where it is read as C."""
    return printable(text)


def json_text(value, indent: int | None = None) -> str:
    """`value` as JSON (non-ASCII text kept as it is, `ensure_ascii=False`), but with the
    characters that act on a terminal written as `\\u` escapes where JSON leaves them raw: the
    C1 controls, the format characters (the bidirectional overrides) and the line and paragraph
    separators. The same value to any JSON reader; harmless on a terminal or in a file that is
    read with `cat`."""
    return _UNSAFE_IN_JSON.sub(_json_escape, json.dumps(value, ensure_ascii=False, indent=indent))


def _json_escape(found: re.Match) -> str:
    ch = found.group()
    if unicodedata.category(ch) not in _ESCAPED:
        return ch
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


# (each non-ASCII character is looked at: JSON's own text is ASCII, and so is most of a value)
_UNSAFE_IN_JSON = re.compile("[^\x00-\x7f]")
