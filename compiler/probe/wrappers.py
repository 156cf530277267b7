"""Wrapper tokens the template writes in front of some kinds of call only.

Some templates write a call of one kind with a token in front (Llama 3.1 writes
`<|python_tag|>` before a built-in tool's call, Functionary before a call of its `python`
tool) and the other calls without it; models write it in front of the other calls too. No
standard turn renders that branch, so it is found in the template's code: a constant that is
one marker, concatenated right before the data of a call (a variable bound from the
message's `tool_calls`), that none of the format's own literals holds. Parsing the template
runs none of it.
"""

from __future__ import annotations

import jinja2
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..spec import ProtocolSpec
from .markers import first_marker
from .spans import Boundaries


def _call_variables(tree: nodes.Template) -> set[str]:
    """The names bound to one of the message's calls: loop targets over `tool_calls`, and
    what `set` makes of them (`set tool_call = tool_call.function`; not the loops over a
    call's arguments: an argument is not a call)."""
    names: set[str] = set()
    for _ in range(3):
        for loop in tree.find_all(nodes.For):
            iterated: nodes.Node | None = loop.iter
            while isinstance(iterated, nodes.Filter):
                iterated = iterated.node
            if isinstance(loop.target, nodes.Name) and (_is_tool_calls(iterated) or (
                    isinstance(iterated, nodes.Name) and iterated.name in names)):
                names.add(loop.target.name)
        names |= _assigned_calls(tree, names)
    return names


def _assigned_calls(tree: nodes.Template, names: set[str]) -> set[str]:
    """`set` targets whose value is a call, a field of one, or the calls themselves."""
    found = set()
    for assign in tree.find_all(nodes.Assign):
        value: nodes.Node | None = assign.node
        while isinstance(value, nodes.Filter):
            value = value.node
        if isinstance(assign.target, nodes.Name) and (_a_calls_data(value, names)
                                                      or _is_tool_calls(value)):
            found.add(assign.target.name)
    return found


def _is_tool_calls(node: nodes.Node | None) -> bool:
    return (isinstance(node, nodes.Getattr) and node.attr == "tool_calls") or (
        isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const)
        and node.arg.value == "tool_calls") or (
        isinstance(node, nodes.Name) and node.name == "tool_calls")


def _a_calls_data(node: nodes.Node | None, names: set[str]) -> bool:
    """Whether `node` is one of the message's calls or a field of one (`tool_call.name`,
    `tool_call['function']['arguments'] | tojson`, `message.tool_calls[0].function`)."""
    while isinstance(node, (nodes.Filter, nodes.Getattr, nodes.Getitem)):
        if isinstance(node, nodes.Getitem) and _is_tool_calls(node.node):
            return True  # (an element of the calls)
        node = node.node
    return isinstance(node, nodes.Name) and node.name in names


def _leftmost_data(node: nodes.Node) -> nodes.Node:
    while isinstance(node, (nodes.Add, nodes.Concat)):
        node = node.left if isinstance(node, nodes.Add) else node.nodes[0]
    return node


def call_wrappers(source: str, spec: ProtocolSpec, boundaries: Boundaries) -> list[str]:
    """The markers the template writes right before a call's data in some branch and that
    the format's own literals do not hold (sorted; [] for most templates)."""
    if spec.tool_calls is None:
        return []
    try:
        tree = ImmutableSandboxedEnvironment().parse(source)
    except (jinja2.TemplateError, RecursionError, MemoryError):
        return []
    names = _call_variables(tree)
    pairs = []  # (a constant, the node written right after it)
    for add in tree.find_all(nodes.Add):
        pairs.append((add.left, _leftmost_data(add.right)))
    for output in tree.find_all((nodes.Output, nodes.Concat)):
        assert isinstance(output, (nodes.Output, nodes.Concat))  # (what find_all finds)
        pieces = output.nodes
        pairs += [(a, _leftmost_data(b)) for a, b in zip(pieces, pieces[1:], strict=False)]
    own = [*spec.end_of_turn, spec.content_start, spec.content_end, spec.tool_calls.section_start,
           spec.tool_calls.section_end, spec.tool_calls.separator,
           *[p for layout in spec.turns.values() for p in layout if isinstance(p, str)],
           *[p for p in spec.tool_calls.call if isinstance(p, str)]]
    if spec.reasoning is not None:
        own += [spec.reasoning.start, spec.reasoning.end]
    found = set()
    for left, right in pairs:
        # (a constant that is the tail of a concatenation: its last piece is the constant)
        while isinstance(left, nodes.Add):
            left = left.right
        if not isinstance(left, nodes.Const) or not isinstance(left.value, str) \
                or not _a_calls_data(right, names):
            continue
        marker = left.value.strip()
        if not marker or first_marker(marker, boundaries) != marker or marker[:1] not in "<[" \
                or not any(c.isalnum() for c in marker) \
                or any(marker in text for text in own if text):
            continue
        found.add(marker)
    return sorted(found)


__all__ = ["call_wrappers"]
