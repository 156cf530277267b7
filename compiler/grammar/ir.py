"""The grammar IR: one small model of a grammar that every emitter (PEG, GBNF) reads.

A `Grammar` is an ordered set of named rules; a rule's body is a tree of nodes:

    Lit(text)              the exact text
    Chars(ranges, negate)  one character of a class ([a-z0-9_], [^"\\])
    AnyChar()              any one character
    Seq(items), Alt(items) sequence, ordered alternatives
    Rep(item, min, max)    repetition (max None: unbounded)
    Ref(name)              another rule
    TextUntil(stops)       any text (maybe empty) in which none of `stops` occurs
    StringUntil(plain, escapes, stops)
                           a run of a string literal's characters (each a `plain` character
                           or an escape) in whose raw text none of `stops` occurs
    Not(item)              what follows is not `item` (consumes nothing; PEG only: GBNF has
                           no lookahead and accepts what it would refuse)
    End()                  the end of the text

`TextUntil` and `StringUntil` are the constructs the emitters write differently: PEG with
negative lookahead, GBNF (which has no lookahead) as an automaton of the stops' prefixes.
Emitters and analyses walk the tree as a `Visitor` (pegen's GrammarVisitor): a method
`visit_<NodeClass>` per kind of node, `generic_visit` for the ones a visitor leaves alone.
Rule names are lower-case words joined by "-" (the GBNF spelling); the PEG emitter turns
"-" into "_".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Chars:
    ranges: tuple[tuple[str, str], ...]  # inclusive (first, last) pairs
    negate: bool = False

    def holds(self, ch: str) -> bool:
        """Whether the class takes the character `ch`."""
        return any(a <= ch <= b for a, b in self.ranges) != self.negate


@dataclass(frozen=True)
class AnyChar:
    pass


@dataclass(frozen=True)
class Seq:
    items: tuple


@dataclass(frozen=True)
class Alt:
    items: tuple


@dataclass(frozen=True)
class Rep:
    item: Node
    min: int = 0
    max: int | None = None


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class TextUntil:
    stops: tuple[str, ...]


@dataclass(frozen=True)
class StringUntil:
    """A run of a string literal's characters, each one `plain` character or one of
    `escapes` (each a backslash, then what it writes), in whose raw text (what an engine's
    stop strings match) none of `stops` occurs. Only a generation grammar has one: a stop
    string written inside a value would end the output in the middle of a call.

    `Rep(Alt(plain, *escapes))` is the same run with the stops left out (`as_rep`)."""

    plain: Chars | AnyChar
    escapes: tuple  # of Seq(Lit("\\"), tail)
    stops: tuple[str, ...]

    def as_rep(self) -> Rep:
        return Rep(alt(self.plain, *self.escapes))


@dataclass(frozen=True)
class Not:
    item: Node


@dataclass(frozen=True)
class End:
    """The end of the text (PEG checks it; GBNF is complete at the end of its root anyway)."""


def quantifier(rep: Rep) -> str:
    """The repetition suffix both PEG and GBNF spell the same way: *, +, ?, {m}, {m,}, {m,n}."""
    if (rep.min, rep.max) == (0, None):
        return "*"
    if (rep.min, rep.max) == (1, None):
        return "+"
    if (rep.min, rep.max) == (0, 1):
        return "?"
    if rep.max is None:
        return f"{{{rep.min},}}"
    if rep.min == rep.max:
        return f"{{{rep.min}}}"
    return f"{{{rep.min},{rep.max}}}"


Node = Lit | Chars | AnyChar | Seq | Alt | Rep | Ref | TextUntil | StringUntil | Not | End


def seq(*items) -> Node:
    flat: list[Node] = []
    for item in items:
        if item is None or item == Lit(""):
            continue
        if isinstance(item, Seq):
            flat.extend(item.items)
        else:
            flat.append(item)
    if not flat:
        return Lit("")
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(*items) -> Node:
    """The alternatives, each once, in first-seen order. (Nodes are frozen and hash by value:
    one pass over a dict, not a scan of the list per item, which made a 16,000-value enum
    take 40 s.)"""
    try:
        unique = list(dict.fromkeys(items))
    except TypeError:  # a node built with a list inside (not hashable): compare by value
        unique = []
        for item in items:
            if item not in unique:
                unique.append(item)
    return unique[0] if len(unique) == 1 else Alt(tuple(unique))


def opt(item) -> Node:
    return Rep(item, 0, 1)


def chars(spec: str, negate: bool = False) -> Chars:
    """A class from a compact spec: "a-z0-9_" -> ranges."""
    ranges = []
    i = 0
    while i < len(spec):
        if i + 2 < len(spec) and spec[i + 1] == "-":
            ranges.append((spec[i], spec[i + 2]))
            i += 3
        else:
            ranges.append((spec[i], spec[i]))
            i += 1
    return Chars(tuple(ranges), negate)


def children(node: Node) -> tuple:
    """The nodes directly inside `node`."""
    if isinstance(node, (Seq, Alt)):
        return node.items
    if isinstance(node, (Rep, Not)):
        return (node.item,)
    if isinstance(node, StringUntil):
        return (node.plain, *node.escapes)
    return ()


class Visitor:
    """Walk a grammar's nodes: `visit(node)` calls `visit_<NodeClass>(node, ...)`, or
    `generic_visit`, which visits the children (and returns None)."""

    def visit(self, node: Node, *args):
        method = getattr(self, "visit_" + node.__class__.__name__, None)
        return method(node, *args) if method is not None else self.generic_visit(node, *args)

    def generic_visit(self, node: Node, *args):
        for child in children(node):
            self.visit(child, *args)


@dataclass
class Rule:
    name: str
    body: Node
    comment: str = ""
    # the rule's text is JSON of this schema (an emitter may write it instead)
    json_schema: dict | bool | None = None
    schema_warnings: tuple[str, ...] = ()  # what the body does not enforce of json_schema


@dataclass
class Grammar:
    root: str
    rules: dict[str, Rule] = field(default_factory=dict)
    header: list[str] = field(default_factory=list)

    def add(self, name: str, body: Node, comment: str = "", json_schema: dict | None = None) -> Ref:
        """Add (or replace) a rule; returns a reference to it. `json_schema`: the body is JSON
        of that schema, which an emitter with a JSON Schema construct of its own may write
        instead."""
        self.rules[name] = Rule(name, body, comment, json_schema)
        return Ref(name)

    def has(self, name: str) -> bool:
        return name in self.rules

    def reachable_from(self, name: str) -> list[str]:
        """Rule names reachable from the rule `name`, itself first (as `reachable`)."""
        return Grammar(name, self.rules).reachable()

    def reachable(self, into: Callable[[Rule], bool] = lambda rule: True) -> list[str]:
        """Rule names reachable from the root, root first, in first-use order (depth first:
        a rule's own references right after it), not looking into the rules `into` refuses.
        Walked with a stack of its own, not Python's: a schema of hundreds of properties
        chains a rule per property."""
        order: list[str] = []
        seen: set[str] = set()
        stack: list[Iterator[Node]] = [iter((Ref(self.root),))]
        while stack:
            node = next(stack[-1], None)
            if node is None:
                stack.pop()
            elif isinstance(node, Ref):
                if node.name not in seen:
                    seen.add(node.name)
                    order.append(node.name)
                    rule = self.rules[node.name]
                    stack.append(iter((rule.body,) if into(rule) else ()))
            else:
                stack.append(iter(children(node)))
        return order


# --- language inclusion, where it shows in the shape ----------------------------------------

_WHITESPACE = frozenset(" \t\n\r")


def covers(grammar: Grammar, general: Node, specific: Node, depth: int = 8) -> bool:
    """Whether every text `specific` matches, `general` matches too, as far as their shapes
    show it (False when they do not: never a guess that they do). `general` covers a node
    equal to it, a node one of its alternatives covers, and a sequence that is its own with
    some of its optional whitespace left out; a reference is read as its rule's body, to
    `depth` rules deep. (A PEG's greedy repetition is stricter: there the left-out
    whitespace must not be what the next item needs for itself. The compile's proof reads
    every render with the PEG, which catches a layout where it is.)"""
    if general == specific:
        return True
    if depth == 0:
        return False
    if isinstance(specific, Ref) and grammar.has(specific.name) \
            and covers(grammar, general, grammar.rules[specific.name].body, depth - 1):
        return True
    if isinstance(general, Ref) and grammar.has(general.name):
        return covers(grammar, grammar.rules[general.name].body, specific, depth - 1)
    if isinstance(general, Alt):
        return any(covers(grammar, item, specific, depth) for item in general.items)
    if isinstance(general, Seq):
        wanted = specific.items if isinstance(specific, Seq) else (specific,)
        return _covers_items(grammar, general.items, wanted, depth)
    return False


def _covers_items(grammar: Grammar, general: tuple, specific: tuple, depth: int) -> bool:
    """Whether the sequence `general` covers the sequence `specific`, item by item, an
    optional-whitespace item of `general` matched to nothing where `specific` has none."""
    inner = _sequence_rule(grammar, specific[0]) if specific and depth > 0 else None
    if inner is not None and _covers_items(grammar, general, inner.items + specific[1:], depth - 1):
        return True  # (a rule that is a sequence, read in place)
    if not general:
        return not specific
    first, rest = general[0], general[1:]
    if _optional_whitespace(grammar, first, depth) \
            and _covers_items(grammar, rest, specific, depth):
        return True
    return bool(specific) and covers(grammar, first, specific[0], depth) \
        and _covers_items(grammar, rest, specific[1:], depth)


def _sequence_rule(grammar: Grammar, node: Node) -> Seq | None:
    """The body of the rule `node` refers to, when it is a sequence."""
    if not (isinstance(node, Ref) and grammar.has(node.name)):
        return None
    body = grammar.rules[node.name].body
    return body if isinstance(body, Seq) else None


def _optional_whitespace(grammar: Grammar, node: Node, depth: int) -> bool:
    """Whether `node` matches the empty text and nothing but whitespace."""
    if isinstance(node, Ref) and grammar.has(node.name) and depth > 0:
        return _optional_whitespace(grammar, grammar.rules[node.name].body, depth - 1)
    if isinstance(node, Lit):
        return node.text == ""
    return isinstance(node, Rep) and node.min == 0 and isinstance(node.item, Chars) \
        and not node.item.negate and all(first == last and first in _WHITESPACE
                                         for first, last in node.item.ranges)
