"""The lexical layer: character classes, cached searches, literals with whitespace tolerance,
the hold-back rule for a possible marker start, and the resumable scan of a JSON / Python
literal. Pure functions of the text; no parser state."""

from __future__ import annotations

###{standalone
import re
import typing
from collections.abc import Iterable, Sequence


class Search(typing.Protocol):
    """A compiled regex's bound `search` (or `match`, `fullmatch`): where it finds its pattern
    in `string` (from `pos` on, before `endpos`), or None."""

    def __call__(
        self, string: str, pos: int = ..., endpos: int = ..., /
    ) -> re.Match[str] | None: ...


# (SPACES and the other patterns of `*` runs always match: their `.match(...).end()` is
# marked `type: ignore[union-attr]`, where the type of `match` says it may be None.)

# A set of characters: a string of them, or a frozenset (NAME_CHARS).
CharSet = str | frozenset[str]

NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
DIGITS = "0123456789"

SPACES = re.compile(r"\s*")
NOT_SPACE = re.compile(r"\S").search
CLOSERS = re.compile(r"[}\])]").search
STRING_BODY = {'"': re.compile(r'[^"\\]+'), "'": re.compile(r"[^'\\]+")}
PLAIN = re.compile(r"[^\"'{}\[\]()]+")
SCALAR = re.compile(r"[^\s,}\])]+")

_WAKERS: dict[CharSet, Search] = {}


def waker(chars: CharSet) -> Search:
    """A search for any of `chars` (cached)."""
    found = _WAKERS.get(chars)
    if found is None:
        found = _WAKERS[chars] = re.compile("[" + class_body(chars) + "]").search
    return found


_STARTS: dict[tuple[str, ...], Search] = {}

# A trie of the stops' heads: character -> the trie of what may follow it ("" -> {}: a head
# ends here).
_Trie = dict[str, "_Trie"]


def marker_starts(stops: Iterable[str]) -> Search:
    """A search for where one of `stops` may begin in a chunk of text that nothing before it
    is held back for: a stop's first three characters, or a shorter start of one at the
    chunk's end (cached). A `<` of code or math (`a < b`, `<div>`, `</span>`) does not wake
    the parse for <tool_call> or </think>."""
    key = tuple(stops)
    found = _STARTS.get(key)
    if found is None:
        trie: _Trie = {}
        for stop in key:
            node = trie
            for ch in stop[:MARKER_HEAD]:
                node = node.setdefault(ch, {})
            node[""] = {}  # (a stop or its head ends here)
        found = _STARTS[key] = re.compile("|".join(
            re.escape(ch) + _trie_pattern(child) for ch, child in sorted(trie.items()))
            if key else _NO_STOP).search
    return found


# A pattern that matches nowhere: the search for a set of no stops (a template that writes no
# markers at all: its text runs to the output's end), where an empty pattern would match at once.
_NO_STOP = "(?!)"

MARKER_HEAD = 3  # how many of a stop's first characters tell a chunk that may hold it


_PARTIALS: dict[tuple[str, ...], frozenset[str]] = {}


def marker_partials(stops: Iterable[str]) -> frozenset[str]:
    """The starts of `stops` shorter than their heads that are not stops themselves: what
    marker_starts finds at a chunk's end that only the next chunk can tell (cached)."""
    key = tuple(stops)
    found = _PARTIALS.get(key)
    if found is None:
        starts = frozenset(stop[:n] for stop in key for n in range(1, min(len(stop), MARKER_HEAD)))
        found = _PARTIALS[key] = starts - set(key)
    return found


class TextStops:
    """The searches a text scan (Rules._text_until) runs for its stops, made once per set of
    stops (text_stops): the first whole stop, where one may begin in a chunk (marker_starts)
    and the starts held at a chunk's end (marker_partials), and the longest stop's length."""

    __slots__ = ("stops", "first_stop", "quiet", "partials", "longest")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.first_stop = first_of(stops)  # (one scan: never past the first stop)
        self.quiet = marker_starts(stops)
        self.partials = marker_partials(stops)
        self.longest = max((len(s) for s in stops), default=0)


_TEXT_STOPS: dict[tuple[str, ...], TextStops] = {}


def text_stops(stops: Sequence[str]) -> TextStops:
    """The TextStops of `stops`, the empty ones left out (cached)."""
    key = tuple(stops)
    found = _TEXT_STOPS.get(key)
    if found is None:
        found = _TEXT_STOPS[key] = TextStops(tuple(s for s in key if s))
    return found


def _trie_pattern(node: _Trie) -> str:
    """A regex for the heads in a trie: each head, or a start of one at the end of the text."""
    if "" in node:
        return ""  # a head (or a whole stop) ends here: matched
    branches = [re.escape(ch) + _trie_pattern(child) for ch, child in sorted(node.items())]
    return "(?:" + "|".join(branches) + "|\\Z)"


_OUTSIDES: dict[CharSet, Search] = {}


def outside(chars: CharSet) -> Search:
    """A search for any character not in `chars` (cached)."""
    found = _OUTSIDES.get(chars)
    if found is None:
        found = _OUTSIDES[chars] = re.compile("[^" + class_body(chars) + "]").search
    return found


_FIRSTS: dict[tuple[str, ...], Search] = {}


def first_of(stops: Iterable[str]) -> Search:
    """A search for the first of `stops` (the longest of those that start at the same place;
    cached)."""
    key = tuple(stops)
    found = _FIRSTS.get(key)
    if found is None:
        ordered = sorted(set(key), key=len, reverse=True)
        found = _FIRSTS[key] = re.compile("|".join(re.escape(s) for s in ordered)
                                          if ordered else _NO_STOP).search
    return found


_RUNS: dict[CharSet, re.Pattern[str]] = {}


def run_of(chars: CharSet) -> re.Pattern[str]:
    """A compiled match of a run of `chars` (cached)."""
    found = _RUNS.get(chars)
    if found is None:
        found = _RUNS[chars] = re.compile("[" + class_body(chars) + "]*")
    return found


def class_body(chars: CharSet) -> str:
    """`chars` as the body of a regex character class (`[...]`)."""
    return "".join(re.escape(ch) if ch in "\\]^-[" else ch for ch in sorted(set(chars)))


_WORDS: dict[str, list[str]] = {}


def words(literal: str) -> list[str]:
    """A literal cut into words and whitespace runs (cached: the same few literals recur)."""
    found = _WORDS.get(literal)
    if found is None:
        found = _WORDS[literal] = [w for w in re.split(r"(\s+)", literal) if w]
    return found


# A piece of a literal as the waiting match reads it (see marker_pieces): (the piece: a
# whitespace run, or a word or the part of one between markers; `loose`: whether whitespace
# the literal does not write may come before it; the rest of its word from it on; the words
# after its word). A plain tuple, unpacked where it is read (a NamedTuple unpacks slower).
MarkerPiece = tuple[str, bool, str, list[str]]

_PIECES: dict[str, list[MarkerPiece]] = {}
# Where a marker ends or begins inside a word of a literal (`<|tool_call_begin|>functions.`):
# models write whitespace there that the template does not. (Not inside a bracketed tag's
# `<[`, `]>`, `[[` or `]]`: `<[call]>` and `[[call]]` are one marker each.)
MARKER_BOUNDARY = re.compile(r"(?<=>)(?=[^\s>])|(?<=\])(?=[^\s>\]])|(?<=[^\s<\[])(?=[<\[])")


def marker_pieces(literal: str) -> list[MarkerPiece]:
    """A literal cut into whitespace runs and words, each word also cut where a marker in it
    ends or begins: a MarkerPiece each; the first word takes whitespace the literal does not
    write when it starts with a marker (cached)."""
    found = _PIECES.get(literal)
    if found is None:
        found = []
        all_words = words(literal)
        for w, word in enumerate(all_words):
            after = all_words[w + 1:]
            if word.isspace():
                found.append((word, False, word, after))
                continue
            pieces = MARKER_BOUNDARY.split(word)
            for i, piece in enumerate(pieces):
                loose = i > 0 or (not found and piece[:1] in "<[")
                found.append((piece, loose, "".join(pieces[i:]), after))
        _PIECES[literal] = found
    return found


# What literal_prefix_here finds: the literal is here whole, is not, or the text ended inside it.
WHOLE, ABSENT, CUT = "whole", "absent", "cut"


def literal_prefix_here(text: str, pos: int, literal: str) -> str:
    """Whether `literal` (its end whitespace aside) comes at `pos` as the waiting match reads
    it (`Input.match`: whitespace before it, its whitespace runs matching any whitespace or none,
    whitespace it does not write where a marker in it ends or begins): WHOLE, ABSENT, or CUT
    (the text so far is its start: only more text tells)."""
    pos = SPACES.match(text, pos).end()  # type: ignore[union-attr]
    for word, loose, _, _ in marker_pieces(literal.strip()):
        if word.isspace() or loose:
            pos = SPACES.match(text, pos).end()  # type: ignore[union-attr]
            if word.isspace():
                continue
        if text.startswith(word, pos):
            pos += len(word)
        elif len(text) - pos < len(word) and word.startswith(text[pos:]):
            return CUT
        else:
            return ABSENT
    return WHOLE


# A literal as literal_here reads it: (its core: the literal without its end whitespace;
# `lead`: whether it starts with whitespace; `trail`: whether it ends so). A plain tuple,
# unpacked where it is read (literal_here: the common case of every literal).
LiteralParts = tuple[str, bool, bool]

LITERALS: dict[str, LiteralParts] = {}


def literal_parts(literal: str) -> LiteralParts:
    """(the literal without its end whitespace, whether it starts with whitespace, whether it
    ends so): its LiteralParts; cached."""
    parts = LITERALS.get(literal)
    if parts is None:
        core = literal.strip()
        lead, trail = literal[:1].isspace(), literal[-1:].isspace()
        parts = LITERALS[literal] = (core, lead, trail)
    return parts


def literal_here(text: str, pos: int, literal: str, end_known: bool = False) -> int:
    """Where `literal` ends if it is here as the waiting match reads it, without waiting (-1:
    it is not, or not yet known: whitespace it ends with runs to the end of what has arrived
    and `end_known` (the stream ended, or the next reader skips whitespace) is False).

    A literal's whitespace runs match any whitespace or none (the grammar's tolerance); a
    run at either end takes all the whitespace there."""
    parts = LITERALS.get(literal)
    core, lead, trail = parts if parts is not None else literal_parts(literal)
    if text.startswith(literal, pos):  # as rendered (its leading whitespace then is all there is)
        pos += len(literal)
    else:
        if lead:
            pos = SPACES.match(text, pos).end()  # type: ignore[union-attr]
        if not text.startswith(core, pos):
            return -1
        pos += len(core)
    if trail:
        if pos < len(text) and not text[pos].isspace():
            return pos
        pos = SPACES.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= len(text) and not end_known:
            return -1
    return pos


def held_back(window: str, stops: Sequence[str]) -> int:
    """How much of the end of `window` could be the start of a stop (kept until it is known)."""
    longest = max((len(stop) for stop in stops), default=0) - 1
    tail = window[-longest:] if longest > 0 else ""
    firsts = {stop[0] for stop in stops}
    for p, ch in enumerate(tail):
        if ch in firsts and any(stop.startswith(tail[p:]) for stop in stops):
            return len(tail) - p
    return 0


class BalancedScan:
    """The resumable scan of a JSON / Python literal at `start` (after whitespace): brackets
    balanced, strings (in `quotes`) respected. `scan(text)` reads on from where it stopped and
    says True once the literal's `end` is known (or `unbalanced`, a stray closing bracket)."""

    __slots__ = ("quotes", "start", "i", "depth", "quote", "end", "unbalanced")

    quotes: str  # the characters that open (and close) a string
    start: int | None  # where the literal starts (None: only whitespace yet)
    i: int  # where the scan goes on
    depth: int  # how many brackets are open
    quote: str | None  # the quote of the string the scan is in
    end: int | None  # where the literal ends, once known
    unbalanced: str | None  # or: the stray closing bracket found

    def __init__(self, quotes: str, start: int) -> None:
        self.quotes, self.start, self.i = quotes, None, start
        self.depth, self.quote, self.end, self.unbalanced = 0, None, None, None

    def quiet(self, n: int) -> Search | None:
        """A search for the characters that can move the scan on, once it has read `n`
        characters."""
        if self.start is None:  # nothing but whitespace yet
            return NOT_SPACE
        # Only a closing bracket can end a nested value; a closing quote a string alone.
        # (Waking on quotes inside a nested value would cost more: strings escape them.)
        if self.depth > 0 and self.i >= n:
            return CLOSERS
        if self.depth == 0 and self.quote and self.i >= n - 1:
            return waker(self.quote)
        return None

    def scan(self, text: str, eof: bool = False) -> bool:
        """Read on in `text` (what has arrived); whether the literal's end (or a stray closing
        bracket) is known. `eof`: nothing follows `text` (a scalar at its end ends there)."""
        if self.end is not None or self.unbalanced is not None:
            return True
        n = len(text)
        if self.start is None:  # the literal starts at its first non-space character
            self.i = SPACES.match(text, self.i).end()  # type: ignore[union-attr]
            if self.i >= n:
                return False
            self.start = self.i
        start, i, depth, quote, quotes = self.start, self.i, self.depth, self.quote, self.quotes
        while i < n:
            # Skip runs of ordinary characters at C speed.
            run = (STRING_BODY[quote] if quote else PLAIN).match(text, i)
            if run and i > start and (quote or depth > 0):
                i = run.end()
                if i >= n:
                    break
            ch = text[i]
            if quote:
                if ch == "\\":
                    if i + 1 >= n:
                        break
                    i += 2
                    continue
                if ch == quote:
                    quote = None
                    if depth == 0:  # a string on its own
                        self.end = i + 1
                        return True
            elif ch in quotes:
                quote = ch
            elif ch in "{[(":
                depth += 1
            elif ch in "}])":
                depth -= 1
                if depth == 0:
                    self.end = i + 1
                    return True
                if depth < 0:
                    self.unbalanced = ch
                    return True
            elif depth == 0 and not ch.isspace() and i == start:
                # a scalar: read to the next delimiter (none: an empty value, which will not read)
                scalar = SCALAR.match(text, i)
                end = scalar.end() if scalar else i
                if end < n or eof:
                    self.end = end
                    return True
                break
            i += 1
        self.i, self.depth, self.quote = i, depth, quote
        return False


###}
