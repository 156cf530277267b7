"""Whether a grammar accepts a text, read straight from the grammar IR: the proof's check
where llama.cpp is not installed.

The proof asks one question of a grammar: does it accept the whole of a render? The IR the
GBNF was emitted from answers it without a parser generator: `IrMatcher(grammar).accepts(text)`
computes, for each node and start position, the set of positions where a match of the node
can end (a context-free grammar's matches, not PEG's first one), memoized per rule and
position, so a render is read about once per rule that can start at each position.

It reads the IR as the GBNF emitter writes it, so it accepts what llama.cpp accepts:
- `Not` (lookahead) is written as nothing in GBNF, so it matches the empty text here too;
- `TextUntil(stops)` is any text in which no stop occurs (GBNF's automaton), and
  `StringUntil` a run of its plain characters and escapes whose raw text holds no stop;
- `End` is written as nothing too (GBNF is complete only at the end of the text anyway, and
  the builder puts `End` only there).

tests/test_ir_match.py feeds the same texts, accepted and refused, to this matcher, to the
lark reading of the GBNF (gbnf_lark) and to llama.cpp, and they agree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

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
)

Ends = frozenset  # of positions in the text where a match ends


class IrMatcher:
    """`accepts(text)`: whether the grammar's root matches the whole text."""

    def __init__(self, grammar: Grammar):
        self.grammar = grammar

    def accepts(self, text: str) -> bool:
        return len(text) in _Match(self.grammar, text).rule(self.grammar.root, 0)


class _Match:
    """The matches of one text: each node's end positions from a start position."""

    def __init__(self, grammar: Grammar, text: str):
        self.grammar = grammar
        self.text = text
        self.rules: dict[tuple[str, int], Ends] = {}  # (rule, start) -> ends; being computed: empty
        self.visits: dict[type, Callable[[Any, int], Ends]] = {
            Lit: self.lit, Chars: self.chars, AnyChar: self.any_char, Seq: self.seq, Alt: self.alt,
            Rep: self.rep, Ref: self.ref, TextUntil: self.text_until,
            StringUntil: self.string_until, Not: self.empty, End: self.empty}

    def ends(self, node, start: int) -> Ends:
        """Where a match of `node` from `start` may end."""
        return self.visits[type(node)](node, start)

    def rule(self, name: str, start: int) -> Ends:
        """A rule's ends, computed once per start (a rule reached again from itself at the same
        start, left recursion, which GBNF does not allow either, has none)."""
        key = (name, start)
        if key not in self.rules:
            self.rules[key] = Ends()
            self.rules[key] = self.ends(self.grammar.rules[name].body, start)
        return self.rules[key]

    def ref(self, node: Ref, start: int) -> Ends:
        return self.rule(node.name, start)

    def lit(self, node: Lit, start: int) -> Ends:
        return Ends((start + len(node.text),)) if self.text.startswith(node.text, start) else Ends()

    def chars(self, node: Chars, start: int) -> Ends:
        if start >= len(self.text):
            return Ends()
        return Ends((start + 1,)) if node.holds(self.text[start]) else Ends()

    def any_char(self, node: AnyChar, start: int) -> Ends:
        return Ends((start + 1,)) if start < len(self.text) else Ends()

    def empty(self, node, start: int) -> Ends:
        return Ends((start,))

    def seq(self, node: Seq, start: int) -> Ends:
        positions = Ends((start,))
        for item in node.items:
            positions = Ends(end for position in positions for end in self.ends(item, position))
            if not positions:
                break
        return positions

    def alt(self, node: Alt, start: int) -> Ends:
        return Ends(end for item in node.items for end in self.ends(item, start))

    def rep(self, node: Rep, start: int) -> Ends:
        """The ends after min to max matches of the item: breadth first, each position once
        (an item that matches the empty text adds nothing new, so the loop ends)."""
        found = {start} if node.min == 0 else set()
        frontier, seen, count = {start}, {start}, 0
        while frontier and (node.max is None or count < node.max):
            count += 1
            following = {end for position in frontier for end in self.ends(node.item, position)}
            if count >= node.min:
                found |= following
            frontier = following - seen if count >= node.min else following
            seen |= following
        return Ends(found)

    def text_until(self, node: TextUntil, start: int) -> Ends:
        """Every end up to the one that would complete the first stop."""
        return Ends(range(start, self._stop_limit(node.stops, start) + 1))

    def string_until(self, node: StringUntil, start: int) -> Ends:
        """A run of plain characters and escapes, as far as its text holds no stop."""
        limit = self._stop_limit(node.stops, start)
        found, frontier = {start}, [start]
        while frontier:
            position = frontier.pop()
            following = self.ends(node.plain, position) | Ends(
                end for escape in node.escapes for end in self.ends(escape, position))
            for end in following:
                if end <= limit and end not in found:
                    found.add(end)
                    frontier.append(end)
        return Ends(found)

    def _stop_limit(self, stops: tuple[str, ...], start: int) -> int:
        """The last end at which the text from `start` holds no stop."""
        limit = len(self.text)
        for stop in stops:
            if stop:
                at = self.text.find(stop, start)
                if at >= 0:
                    limit = min(limit, at + len(stop) - 1)
        return limit


def accepts(grammar: Grammar, text: str) -> bool:
    """Whether `grammar` matches the whole of `text`."""
    limit = sys.getrecursionlimit()
    # (a long render nests rules as deep as it repeats them)
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        return IrMatcher(grammar).accepts(text)
    finally:
        sys.setrecursionlimit(limit)


__all__ = ["IrMatcher", "accepts"]
