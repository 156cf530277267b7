"""What a template reads its tools and calls through, where that is not OpenAI's fields: a
template that renders no call from `tool_calls` may read them through variables no probe
conversation passes (`xml_tools`, `python_tools`, `functions`) or through message fields
OpenAI's messages do not have (a `tools` string on the system message, `function_call`).
Read from the template's code (its syntax tree), so that the probe's "the template does not
render tool calls" can say what the template reads instead.
"""

from __future__ import annotations

from typing import NamedTuple

from jinja2 import meta as jinja_meta
from jinja2 import nodes

from ..source.render import parse_template
from ..source.template import ChatTemplate

# The fields of OpenAI's messages that carry calls (read as given).
_OPENAI_MESSAGE = frozenset({"tool_calls", "tool_call_id"})
# Words in a name that say it carries tools or calls.
_WORDS = ("tool", "function", "call")


class ToolReads(NamedTuple):
    variables: tuple[str, ...]  # top-level variables (no probe conversation passes them)
    fields: tuple[str, ...]  # fields read of a message that OpenAI's messages do not carry

    def said(self) -> str:
        """The reads, in words ("" where there are none)."""
        parts = []
        if self.variables:
            parts.append("the variable" + ("s " if len(self.variables) > 1 else " ")
                         + ", ".join(self.variables) + " (render --var or --var-str gives them)")
        if self.fields:
            parts.append("a message's " + ", ".join(repr(f) for f in self.fields)
                         + (" fields" if len(self.fields) > 1 else " field"))
        return " and ".join(parts)


def tool_reads(template: ChatTemplate, inputs: frozenset[str] = frozenset()) -> ToolReads:
    """The names the template reads tools or calls through, other than OpenAI's: variables
    whose names say so (less `inputs`, those a probe conversation passes), and fields of a
    message (a loop variable over `messages`, or an item of it) that OpenAI's messages lack."""
    ast = parse_template(template.source, template.limits)
    variables = sorted(name for name in jinja_meta.find_undeclared_variables(ast)
                       if name not in inputs and _carries_tools(name))
    messages = {"messages"} | {loop.target.name for loop in ast.find_all(nodes.For)
                               if isinstance(loop.target, nodes.Name) and _over_messages(loop.iter)}
    fields: set[str] = set()
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        key = _key_read(node)
        if key is not None and key not in _OPENAI_MESSAGE and _carries_tools(key) \
                and _a_message(node.node, messages):  # type: ignore[attr-defined]
            fields.add(key)
    return ToolReads(tuple(variables), tuple(sorted(fields)))


def _key_read(node: nodes.Node) -> str | None:
    """The attribute or constant key a Getattr or Getitem reads (None: a computed key)."""
    if isinstance(node, nodes.Getattr):
        return str(node.attr)
    arg = getattr(node, "arg", None)
    return arg.value if isinstance(arg, nodes.Const) and isinstance(arg.value, str) else None


def _over_messages(node: nodes.Node) -> bool:
    """Whether a loop's iterable is the messages (or a slice or filter of them)."""
    names = [node, *node.find_all(nodes.Name)]
    return any(isinstance(n, nodes.Name) and n.name == "messages" for n in names)


def _a_message(node: nodes.Node, messages: set[str]) -> bool:
    """Whether `node` is a message: a name bound to one, or an item of the messages."""
    if isinstance(node, nodes.Name):
        return node.name in messages and node.name != "messages"
    return isinstance(node, nodes.Getitem) and isinstance(node.node, nodes.Name) \
        and node.node.name == "messages"


def _carries_tools(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _WORDS)
