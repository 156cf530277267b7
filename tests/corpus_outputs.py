"""Model outputs taken from the template's own renders, for round-trip tests; and a family's
streaming parser in process, for the tests that read them.

For a template and its spec, render each standard turn (fresh values) and cut out what a
model would have written: the span after the assistant header, without what the generation
prompt already wrote, up to the end-of-turn marker after the turn's last value. Each output
comes with the start state to read it from and the message it should read back as (what the
render shows of the turn: templates drop reasoning, content or extra calls).
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass

from tplparse import runtime
from tplparse.grammar.reading import reading_tables
from tplparse.probe import PLACEHOLDER_TOKENS, standard_turns
from tplparse.probe.conversations import FRESH, SHAPES, ShapedRenderer, tool_definition
from tplparse.probe.renders import assistant_spans
from tplparse.source.render import fixed_clock
from tplparse.source.template import ChatTemplate
from tplparse.spec import ProtocolSpec

# Turns whose render reads back differently, and why (the template maps them lossily).
KNOWN_READBACK_DIFFERENCES = {
    ("OpenAI-gpt-oss-120b", "content+call"):
        "the template writes a tool-calling turn's content into the analysis (reasoning) channel",
    ("NVIDIA-Nemotron-Nano-9B-v2", "content+call"):
        "the template renders content and calls as two assistant turns; a turn ends at its end marker",
    ("Naver-HyperCLOVAX-SEED-Think-14B-vllm-tool", "content+call"):
        "the template renders content and calls as two assistant turns; a turn ends at its end marker",
}


def parser_module(spec: ProtocolSpec, special_tokens: tuple[str, ...] = ()) -> types.SimpleNamespace:
    """The family's parser in process, with a generated module's face: `.StreamParser(tools=...,
    generation_prompt=..., start=...)` and `.parse(text, ...)`, bound to the spec's reading
    tables (the runtime and tables a generated module carries; nothing is generated or run)."""
    protocol = runtime.Protocol(reading_tables(spec, special_tokens))

    def stream_parser(tools=None, generation_prompt=None, start=None):
        return runtime.StreamParser(protocol, tools=tools, generation_prompt=generation_prompt, start=start)

    def parse(text, tools=None, generation_prompt=None, start=None, finish_reason="stop"):
        return runtime.parse(protocol, text, tools=tools, generation_prompt=generation_prompt, start=start,
                             finish_reason=finish_reason)

    return types.SimpleNamespace(StreamParser=stream_parser, parse=parse, protocol=protocol, family=spec.family)

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
