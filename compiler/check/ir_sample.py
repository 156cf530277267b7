"""Texts a grammar accepts, drawn at random from its IR: what a model under the grammar may
write, for a check that the family's parser reads each of them back (tests/test_strict.py).

`sample(grammar, rule, draw)` walks the IR from `rule`, `draw(n)` choosing among n options
(a seeded random's, or hypothesis' `data.draw`): an alternative, a repetition's count, a
character of a class from a pool of characters that matter to parsers (quotes, backslashes,
angle brackets, line breaks, the first characters of the grammar's own literals, letters,
digits and a few beyond ASCII), free text as such characters and the literals' own words. A
drawn text is one the IR matches only where no `Not` or stop refused it; the caller keeps the
texts `ir_match.accepts` takes. Past `depth` rules deep, each choice takes the way out that
nests least (a literal, no repetition), so that recursive rules (JSON values) end.
"""

from __future__ import annotations

from collections.abc import Callable

from ..grammar.ir import (
    Alt,
    AnyChar,
    Chars,
    End,
    Grammar,
    Lit,
    Node,
    Not,
    Ref,
    Rep,
    Seq,
    StringUntil,
    TextUntil,
    children,
)

Draw = Callable[[int], int]  # n -> a choice in range(n)

# Characters that matter to a reader of values and markers, and some that do not.
_POOL = 'a Z 7 _ - . " \' \\ < > / | = : , { } [ ] ( ) \n \t é 😀'.split(" ") + [" ", "\n"]
_MAX_REPEAT = 4


class Sampler:
    def __init__(self, grammar: Grammar, draw: Draw, depth: int = 12):
        self.grammar = grammar
        self.draw = draw
        self.depth = depth
        words = {node.text for rule in grammar.rules.values() for node in _walk(rule.body)
                 if isinstance(node, Lit) and node.text.strip()}
        self.words = sorted(words)
        self.pool = _POOL + sorted({w[0] for w in words})

    def text(self, node: Node, depth: int = 0) -> str:
        if isinstance(node, Lit):
            return node.text
        if isinstance(node, Ref):
            return self.text(self.grammar.rules[node.name].body, depth + 1)
        if isinstance(node, Seq):
            return "".join(self.text(item, depth) for item in node.items)
        if isinstance(node, Alt):
            items = node.items if depth < self.depth else sorted(node.items, key=_nesting)[:1]
            return self.text(items[self.draw(len(items))], depth)
        if isinstance(node, Rep):
            high = node.min if depth >= self.depth else \
                min(node.max if node.max is not None else node.min + _MAX_REPEAT,
                    node.min + _MAX_REPEAT)
            count = node.min + self.draw(high - node.min + 1)
            return "".join(self.text(node.item, depth) for _ in range(count))
        if isinstance(node, (Chars, AnyChar)):
            return self.character(node)
        if isinstance(node, TextUntil):
            return self.free_text(node.stops)
        if isinstance(node, StringUntil):
            run = "".join(self.text(self.draw_item(node), depth + 1)
                          for _ in range(self.draw(_MAX_REPEAT + 1)))
            return _cut_at_stops(run, node.stops)
        if isinstance(node, (Not, End)):
            return ""
        raise TypeError(f"unknown IR node {node!r}")

    def draw_item(self, node: StringUntil) -> Node:
        options = (node.plain, *node.escapes)
        return options[self.draw(len(options))]

    def character(self, node: Chars | AnyChar) -> str:
        fits = [c for c in self.pool if _in(node, c)]
        if not fits and isinstance(node, Chars) and not node.negate:
            a, b = node.ranges[self.draw(len(node.ranges))]
            return chr(ord(a) + self.draw(ord(b) - ord(a) + 1))
        return fits[self.draw(len(fits))] if fits else "a"

    def free_text(self, stops: tuple[str, ...]) -> str:
        pieces = [self.pool[self.draw(len(self.pool))] if self.draw(3) else
                  self.words[self.draw(len(self.words))] if self.words else "w"
                  for _ in range(self.draw(_MAX_REPEAT * 2 + 1))]
        return _cut_at_stops("".join(pieces), stops)


def sample(grammar: Grammar, rule: str, draw: Draw) -> str:
    """One text drawn from `rule` of `grammar` (see the module docstring)."""
    return Sampler(grammar, draw).text(Ref(rule))


def _in(node: Chars | AnyChar, ch: str) -> bool:
    return isinstance(node, AnyChar) or node.holds(ch)


def _cut_at_stops(text: str, stops: tuple[str, ...]) -> str:
    """`text` up to where a stop would begin in it (a stop's start at its end too)."""
    cut = len(text)
    for stop in stops:
        if not stop:
            continue
        at = text.find(stop)
        if at != -1:
            cut = min(cut, at)
        for n in range(len(stop) - 1, 0, -1):
            if text.endswith(stop[:n]):
                cut = min(cut, len(text) - n)
                break
    return text[:cut]


def _nesting(node: Node) -> int:
    """How much a node nests (rules it refers to, counted through its children): the way out
    a deep sample takes is the least."""
    if isinstance(node, Ref):
        return 1
    return sum(_nesting(child) for child in children(node))


def _walk(node: Node):
    stack = [node]
    while stack:
        item = stack.pop()
        yield item
        stack.extend(children(item))


__all__ = ["Sampler", "sample"]
