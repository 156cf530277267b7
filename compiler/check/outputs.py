"""Model outputs from a template's renders: what a model would have written.

The template renders each standard turn (content; reasoning + content; a call with
arguments of every JSON type; two calls; content + call; reasoning + call) with values the
probe never used. What a model would have written is the span after the generation
prompt, up to the end of its turn; the message it must read back as is what that render
preserves. Where the template itself loses information in a turn, the expected message is
what the render keeps, and the turn is "lossy", with the reason read from the render: it
drops the reasoning, the content or a second call; it writes the content where reasoning
goes (inside the reasoning markers); or it renders the turn as two turns (a model's turn
ends at its first end-of-turn marker). The proof (proof.py) reads them back; the
deviations (deviations.py) are made from them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..probe import PLACEHOLDER_TOKENS, PROBE_SECONDS, standard_turns
from ..probe.conversations import FRESH, SHAPES, ShapedRenderer, Turn, tool_definition
from ..probe.renders import assistant_spans
from ..source.render import default_time_budget, fixed_clock
from ..source.template import ChatTemplate
from ..spec import Parallel, ProtocolSpec, Start

# The tools the standard turns call, with schemas that type every argument.
STANDARD_PROPERTIES = {
    "amount": {"type": "string"},
    "target": {"type": "string"},
    "count": {"type": "integer"},
    "rate": {"type": "number"},
    "exact": {"type": "boolean"},
    "note": {"type": "null"},
    "options": {"type": "object"},
    "tags": {"type": "array", "items": {"type": "string"}},
}
STANDARD_TOOLS = [
    {"type": "function", "function": {"name": name, "description": f"The {name} tool",
                                      "parameters": {"type": "object", "properties": STANDARD_PROPERTIES}}}
    for name in FRESH.names
]


@dataclass
class ModelOutput:
    """One standard turn as a model would write it, and the message it must read back as."""

    turn: str  # the standard turn's name
    text: str  # what the model writes (after the generation prompt, to the end of its turn)
    start: Start  # where the output starts: the generation prompt's state
    expected: dict  # content, reasoning_content, tool_calls [(name, arguments dict)]
    lossy: list[str] = field(default_factory=list)  # what the template loses in this turn


def _with_placeholders(template: ChatTemplate) -> ChatTemplate:
    return template.with_tokens(**{k: v for k, v in PLACEHOLDER_TOKENS.items() if k not in template.named_tokens})


def model_outputs(template: ChatTemplate, spec: ProtocolSpec, turns: dict[str, Turn] | None = None) -> list[ModelOutput]:
    """The model outputs of `turns` (default: the standard turns), from the template's renders
    (all of them within the probe's time budget)."""
    template = _with_placeholders(template)
    label = spec.shape.partition(", reasoning as thinking blocks")[0]
    renderer = ShapedRenderer(template, [tool_definition(n, [FRESH.key1, FRESH.key2]) for n in FRESH.names],
                              shape=next((s for s in SHAPES if s.label == label), None),
                              reasoning_blocks=spec.shape.endswith("thinking blocks"))
    turns = turns or standard_turns()
    with fixed_clock(), default_time_budget(PROBE_SECONDS):  # (the renders of one turn must agree on the time)
        rendered = assistant_spans(renderer, FRESH.user, turns)
    if rendered is None:
        return []
    _, tail, spans = rendered
    reasoning = spec.reasoning
    end_markers = [m for m in spec.end_of_turn if m.strip()]
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
        end = reasoning.end if reasoning else ""
        if start == Start.REASONING and end not in span:
            start = Start.CONTENT
        if start == Start.CONTENT and end and span.lstrip().startswith(end):
            start = Start.REASONING
        lossy = []
        # A model's turn ends at its first end-of-turn marker; a template that writes more
        # of the same message after one renders it as two turns.
        values = [v for v in [turn.content, turn.reasoning] + [c.name for c in turn.calls] if v and v in span]
        last = max((span.index(v) + len(v) for v in values), default=0)
        first_end = min((at for at in (_end_marker_at(span, m, turn.reasoning, reasoning) for m in end_markers)
                         if at != -1), default=-1)
        if first_end != -1 and first_end < last:
            lossy.append("the template renders this message as two turns; a model's turn ends at the first "
                         f"end-of-turn marker ({span[first_end:first_end + 20]!r})")
            last = first_end
        cuts = [span.index(m, last) + len(m) for m in end_markers if m in span[last:]]
        shown = span[: min(cuts)] if cuts else span
        if cuts:
            span = shown
        calls = [(c.name, c.arguments) for c in turn.calls if c.name in shown]
        if spec.tool_calls is not None and spec.tool_calls.parallel == Parallel.FIRST:
            calls = calls[:1]
        if len(calls) < len(turn.calls):
            lossy.append(f"the template renders {len(calls)} of this turn's {len(turn.calls)} calls")
        kept = []
        for call_name, arguments in calls:
            written = {k: v for k, v in arguments.items() if re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", shown)}
            for key in arguments.keys() - written.keys():
                lossy.append(f"the template drops the argument {key!r} ({json.dumps(arguments[key])})")
            kept.append((call_name, written))
        calls = kept
        content = turn.content if turn.content and turn.content in shown else None
        thought = turn.reasoning if turn.reasoning and turn.reasoning in shown else None
        if turn.reasoning and thought is None:
            lossy.append("the template drops the reasoning")
        if content is not None and reasoning is not None and reasoning.start and _inside(shown, content, reasoning):
            lossy.append("the template writes the content where reasoning goes (inside the reasoning markers)")
            content, thought = None, (thought + "\n\n" + content if thought else content)
        elif turn.content and content is None:
            lossy.append("the template drops the content")
        expected = {"content": content, "reasoning_content": thought, "tool_calls": calls}
        found.append(ModelOutput(name, span, start, expected, lossy))
    return found


def _end_marker_at(text: str, marker: str, thought: str | None, reasoning) -> int:
    """Where `marker` first ends a turn in `text`: not where, right after the reasoning, the
    reasoning's end marker starts with it (a reasoning end that closes a turn and opens the
    next: the parser, inside reasoning, reads the longer marker)."""
    at = text.find(marker)
    while at != -1 and reasoning is not None and thought and text[:at].rstrip().endswith(thought) \
            and len(reasoning.end) > len(marker) and text.startswith(reasoning.end.strip(), at):
        at = text.find(marker, at + 1)
    return at


def _inside(text: str, value: str, reasoning) -> bool:
    """Whether `value` sits right inside the reasoning markers in `text`."""
    at = text.index(value)
    return text[:at].rstrip().endswith(reasoning.start) and text[at + len(value):].lstrip().startswith(reasoning.end)


def difference(expected: dict, got: dict) -> str:
    """Where a message read back (readable form) differs from the one expected."""
    keys = [k for k in expected if expected[k] != got.get(k)]
    return "; ".join(f"{k}: expected {expected[k]!r}, got {got.get(k)!r}" for k in keys)


def readable(message: dict) -> dict:
    """A parsed message in the shape of ModelOutput.expected."""
    calls = []
    for c in message["tool_calls"]:
        try:
            calls.append((c["function"]["name"], json.loads(c["function"]["arguments"])))
        except ValueError:
            calls.append((c["function"]["name"], c["function"]["arguments"]))
    return {"content": message["content"], "reasoning_content": message["reasoning_content"], "tool_calls": calls}


__all__ = ["ModelOutput", "STANDARD_PROPERTIES", "STANDARD_TOOLS", "model_outputs", "readable"]
