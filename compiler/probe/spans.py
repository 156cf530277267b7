"""Text diffing for the probe: common prefixes and suffixes that respect marker boundaries.

Two renders that differ only in one assistant turn share a prefix (the history and the
assistant header). Where they diverge inside a marker (`<|START_THINKING|>` in one,
`<|START_TEXT|>` in the other share `<|START_T`), the split must move back to where the
marker starts: to the start of a special token of the model when the split falls inside
one, else to just after the last character that ends a marker or a line.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import Piece, slot

# Characters after which a new marker may begin (the end of a marker, a line, a word), and
# characters that may begin one (an opener, or a closing bracket: what follows a value a
# template prints bare, `f(a=text)`).
_BOUNDARY_AFTER = frozenset(">]})([{:,=\"'\n \t")
_OPENERS = frozenset("<[{()]}")


def common_prefix_length(a: str, b: str) -> int:
    """How many characters a and b share at their start (slices compared in C: renders can be
    megabytes long)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def common_suffix_length(a: str, b: str) -> int:
    """How many characters a and b share at their end."""
    n = min(len(a), len(b))
    if n == 0 or a[len(a) - n:] == b[len(b) - n:]:
        return n
    lo, hi = 0, n  # the last lo characters agree, the last hi do not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[len(a) - mid:len(a) - lo] == b[len(b) - mid:len(b) - lo]:
            lo = mid
        else:
            hi = mid
    return lo


def _inside_a_compound_delimiter(text: str, p: int) -> bool:
    """Whether `p` falls inside a marker's delimiter of two characters: its `<` and a bracket
    after it (`<[`), a bracket and the `>` after it (`]>`), or a doubled bracket (`[[`, `]]`):
    a bracketed tag, `<[role_user]>` or `[[call]]`, is one marker, not a bracket and a marker
    of its own (0 < p < len(text))."""
    before, after = text[p - 1], text[p]
    if before == "<" and after not in " \t\n":
        return True  # (`<` then anything that is no space: `<[`, `<|`, `<tool`)
    return ((p >= 2 and (text[p - 2] == "<" and before in "[{(" or text[p - 2:p] == "[["))
            or (before in "]})" and after == ">") or (before == after and before in "[]"))


@dataclass(frozen=True)
class Boundaries:
    """Where markers may start and end in a text, from the model's special tokens."""

    special_tokens: tuple[str, ...] = ()

    def is_split_point(self, text: str, p: int) -> bool:
        """Whether `text` may be cut at `p` without cutting a marker in two."""
        for token in self.special_tokens:
            start = text.rfind(token, max(0, p - len(token) + 1), p)
            if start != -1 and start < p < start + len(token):
                return False
        if p <= 0 or p >= len(text):
            return True
        if _inside_a_compound_delimiter(text, p):
            return False
        if text[p - 1] in _BOUNDARY_AFTER or text[p] in _OPENERS:
            return True
        return any(text.startswith(token, p) for token in self.special_tokens)

    def split_common_prefix(self, a: str, b: str) -> int:
        """Length of the common prefix of a and b, backed off when a and b diverge mid-marker."""
        i = common_prefix_length(a, b)
        if i == len(a) or i == len(b):
            return i  # one is a prefix of the other: nothing was cut
        while i > 0 and not (self.is_split_point(a, i) and self.is_split_point(b, i)):
            i -= 1
        return i

    def split_common_suffix(self, a: str, b: str) -> int:
        """Length of the common suffix of a and b, shrunk until it starts where a marker may
        start."""
        n = common_suffix_length(a, b)
        if n == len(a) or n == len(b):
            return n
        while n > 0 and not (self.is_split_point(a, len(a) - n)
                             and self.is_split_point(b, len(b) - n)):
            n -= 1
        return n


def word_at(text: str, word: str) -> int:
    """Where `word` occurs in `text` as a whole word (-1: nowhere)."""
    at = text.find(word)
    while at != -1:
        before = text[at - 1] if at else ""
        after = text[at + len(word):at + len(word) + 1]
        if not (before.isalnum() or before in "_.-") and not (after.isalnum() or after in "_.-"):
            return at
        at = text.find(word, at + 1)
    return -1


def word_slots(text: str, word: str, name: str) -> list[Piece]:
    """`text` as layout pieces, each whole-word occurrence of `word` a slot called `name`
    (a call's name written again in a literal, an argument's key in its closing tag)."""
    pieces: list[Piece] = []
    at = word_at(text, word)
    while at != -1:
        if text[:at]:
            pieces.append(text[:at])
        pieces.append(slot(name))
        text = text[at + len(word):]
        at = word_at(text, word)
    if text:
        pieces.append(text)
    return pieces
