"""Model outputs taken from the template's own renders, for round-trip tests.

For a template and its spec, render each standard turn (fresh values) and cut out what a
model would have written: the span after the assistant header, without what the generation
prompt already wrote, up to the end-of-turn marker after the turn's last value. Each output
comes with the start state to read it from and the message it should read back as (what the
render shows of the turn: templates drop reasoning, content or extra calls).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tplparse.conversations import FRESH, SHAPES, ShapedRenderer, tool_definition
from tplparse.probe import PLACEHOLDER_TOKENS, assistant_spans
from tplparse.render import fixed_clock
from tplparse.spec import ProtocolSpec
from tplparse.template import ChatTemplate
from tplparse.verify import standard_turns

# The tools the fresh standard turns call, with schemas that type every argument.
FRESH_PROPERTIES = {
    "amount": {"type": "string"},
    "target": {"type": "string"},
    "count": {"type": "integer"},
    "rate": {"type": "number"},
    "exact": {"type": "boolean"},
    "note": {"type": "null"},
    "options": {"type": "object"},
    "tags": {"type": "array", "items": {"type": "string"}},
}
FRESH_TOOLS = [
    {"type": "function", "function": {"name": name, "description": f"The {name} tool",
                                      "parameters": {"type": "object", "properties": FRESH_PROPERTIES}}}
    for name in FRESH.names
]


@dataclass
class Output:
    turn: str  # the standard turn's name
    text: str  # what the model writes
    start: str  # "reasoning" or "content"
    expected: dict  # content, reasoning_content, tool_calls [(name, arguments dict)]


def with_placeholders(template: ChatTemplate) -> ChatTemplate:
    return template.with_tokens(**{k: v for k, v in PLACEHOLDER_TOKENS.items() if k not in template.named_tokens})


def outputs(template: ChatTemplate, spec: ProtocolSpec, turns: dict | None = None) -> list[Output]:
    """The model outputs of `turns` (default: the standard turns, fresh values)."""
    template = with_placeholders(template)
    label = spec.shape.partition(", reasoning as thinking blocks")[0]
    renderer = ShapedRenderer(template, [tool_definition(n, [FRESH.key1, FRESH.key2]) for n in FRESH.names],
                              shape=next((s for s in SHAPES if s.label == label), None),
                              reasoning_blocks=spec.shape.endswith("thinking blocks"))
    turns = turns or standard_turns()
    with fixed_clock():  # the renders of one turn must agree on what time it is
        rendered = assistant_spans(renderer, FRESH.user, turns)
    if rendered is None:
        return []
    _, tail, spans = rendered
    found = []
    for name, turn in turns.items():
        if name not in spans:
            continue
        span = spans[name]
        if tail and span.startswith(tail):
            span = span[len(tail):]
        # Read from where the generation prompt leaves the model; a render that has no
        # reasoning end (the template dropped the block) reads from content.
        start = spec.modes["default"].start
        end = spec.reasoning.end if spec.reasoning else ""
        if start == "reasoning" and end not in span:
            start = "content"
        if start == "content" and end and span.lstrip().startswith(end):
            start = "reasoning"
        # The model stops at the first end-of-turn marker after the turn's last value.
        values = [v for v in [turn.content, turn.reasoning] + [c.name for c in turn.calls] if v and v in span]
        last = max((span.rindex(v) + len(v) for v in values), default=0)
        cuts = [span.index(m, last) + len(m) for m in spec.end_of_turn if m in span[last:]]
        if cuts:
            span = span[: min(cuts)]
        shown = spans[name]
        calls = [(c.name, c.arguments) for c in turn.calls if c.name in shown]
        if spec.tool_calls is not None and spec.tool_calls.parallel == "first":
            calls = calls[:1]
        expected = {
            "content": turn.content if turn.content and turn.content in shown else None,
            "reasoning_content": turn.reasoning if turn.reasoning and turn.reasoning in shown else None,
            "tool_calls": calls,
        }
        found.append(Output(name, span, start, expected))
    return found


def readable(message: dict) -> dict:
    """A parsed message in the shape of Output.expected."""
    return {
        "content": message["content"],
        "reasoning_content": message["reasoning_content"],
        "tool_calls": [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]],
    }
