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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..grammar.reading import segment_format
from ..probe import PLACEHOLDER_TOKENS, PROBE_SECONDS, standard_turns
from ..probe.conversations import FRESH, ShapedRenderer, Turn, tool_definition
from ..probe.renders import assistant_spans
from ..probe.spans import Boundaries
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
                                      "parameters": {"type": "object",
                                                     "properties": STANDARD_PROPERTIES}}}
    for name in FRESH.names
]


@dataclass
class ModelOutput:
    """One standard turn as a model would write it, and the message it must read back as."""

    turn: str  # the standard turn's name
    text: str  # what the model writes (after the generation prompt, to the end of its turn)
    start: Start  # where the output starts: the generation prompt's state, as the spec says
    expected: dict  # content, reasoning_content, tool_calls [(name, arguments dict)]
    lossy: list[str] = field(default_factory=list)  # what the template loses in this turn
    mode: str = "default"  # the generation-prompt mode (spec.modes) the turn follows
    # the real generation prompt it follows: the conversation rendered up to the output
    prompt: str = ""

    @property
    def label(self) -> str:
        """The turn's name, and its mode when it is not the default one."""
        return self.turn if self.mode == "default" else f"{self.turn} ({self.mode})"


def _with_placeholders(template: ChatTemplate) -> ChatTemplate:
    return template.with_tokens(**{k: v for k, v in PLACEHOLDER_TOKENS.items()
                                   if k not in template.named_tokens})


def _renderer(template: ChatTemplate, spec: ProtocolSpec) -> ShapedRenderer:
    tools = [tool_definition(n, [FRESH.key1, FRESH.key2]) for n in FRESH.names]
    return ShapedRenderer.for_label(template, tools, spec.shape)


def model_outputs(template: ChatTemplate, spec: ProtocolSpec, turns: dict[str, Turn] | None = None,
                  mode: str = "default") -> list[ModelOutput]:
    """The model outputs of `turns` (default: the standard turns) after the generation prompt
    of `mode` (one of spec.modes), from the template's renders (all of them within the probe's
    time budget). A turn that cannot follow that prompt (a reasoning turn after a prompt that
    closed the reasoning block) is left out."""
    template = _with_placeholders(template)
    renderer = _renderer(template, spec)
    turns = turns or standard_turns()
    prompt_mode = spec.modes[mode]
    variables, system = prompt_mode.variables, prompt_mode.system_flag or None
    counterparts = {}
    if prompt_mode.start == Start.REASONING:
        # (each turn without reasoning with reasoning added: see _after_an_empty_block)
        counterparts = {f"{name} with reasoning": Turn(reasoning=FRESH.reasoning, content=t.content,
                                                       calls=t.calls)
                        for name, t in turns.items() if not t.reasoning}
    with fixed_clock(), default_time_budget(PROBE_SECONDS):
        # (the renders of one turn must agree on the time)
        rendered = assistant_spans(renderer, FRESH.user, {**turns, **counterparts}, variables,
                                   system=system)
        asked = renderer.render_turn(FRESH.user, Turn(content=FRESH.content), variables,
                                     system=system)
    if rendered is None or asked is None:
        return []
    _, tail, spans = rendered
    reasoning = spec.reasoning
    end_markers = [m for m in spec.end_of_turn if m.strip()]
    segments = segment_format(spec, Boundaries(template.special_tokens))
    found = []
    for name, turn in turns.items():
        if name not in spans:
            continue
        following = _after_the_prompt(spans[name], tail, prompt_mode.start, reasoning,
                                      turn.reasoning)
        if following is None:
            continue
        span, start, lossy = following
        if start == Start.REASONING and reasoning is not None \
                and not _closes_reasoning(span, turn, reasoning):
            span, lossy = _after_an_empty_block(span, spans.get(f"{name} with reasoning"), tail,
                                                reasoning)
        # A model's turn ends at its first end-of-turn marker; a template that writes more
        # of the same message after one renders it as two turns.
        values = [v for v in [turn.content, turn.reasoning] + [c.name for c in turn.calls]
                  if v and v in span]
        last = max((span.index(v) + len(v) for v in values), default=0)
        ends = (_end_marker_at(span, m, turn.reasoning, reasoning, start, segments)
                for m in end_markers)
        first_end = min((at for at in ends if at != -1), default=-1)
        if first_end != -1 and first_end < last:
            lossy.append("the template renders this message as two turns; a model's turn ends at "
                         f"the first end-of-turn marker ({span[first_end:first_end + 20]!r})")
            last = first_end
        cuts = [at + len(m) for m in end_markers
                if (at := _end_marker_at(span, m, None, reasoning, start, segments, last)) != -1]
        shown = span[: min(cuts)] if cuts else span
        if cuts:
            span = shown
        calls = [(c.name, c.arguments) for c in turn.calls if c.name in shown]
        if spec.tool_calls is not None and spec.tool_calls.parallel == Parallel.FIRST:
            calls = calls[:1]
        if len(calls) < len(turn.calls):
            lossy.append(f"the template renders {len(calls)} of this turn's "
                         f"{len(turn.calls)} calls")
        kept = []
        for call_name, arguments in calls:
            written = {k: v for k, v in arguments.items()
                       if re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", shown)}
            for key in arguments.keys() - written.keys():
                lossy.append(f"the template drops the argument {key!r} "
                             f"({json.dumps(arguments[key])})")
            kept.append((call_name, written))
        calls = kept
        content = turn.content if turn.content and turn.content in shown else None
        thought = turn.reasoning if turn.reasoning and turn.reasoning in shown else None
        if turn.reasoning and thought is None:
            lossy.append("the template drops the reasoning")
        if content is not None and reasoning is not None and reasoning.start \
                and _inside(shown, content, reasoning):
            lossy.append("the template writes the content where reasoning goes (inside "
                         "the reasoning markers): read as reasoning, which the render cannot "
                         "tell it from")
            thought = thought + "\n\n" + content if thought else content
            content = None
        elif turn.content and content is None:
            lossy.append("the template drops the content")
        expected = {"content": content, "reasoning_content": thought, "tool_calls": calls}
        found.append(ModelOutput(name, span, start, expected, lossy, mode, asked.prompt))
    return found


def mode_outputs(template: ChatTemplate, spec: ProtocolSpec,
                 turns: dict[str, Turn] | None = None) -> list[ModelOutput]:
    """The model outputs of `turns` after the generation prompt of every mode the template has
    (spec.modes: the default one, thinking on and off, ...). A mode whose outputs are the
    default mode's (the same prompt state and the same texts) adds nothing and is left out."""
    found = model_outputs(template, spec, turns)
    seen = {(o.start, o.text) for o in found}
    for mode in spec.modes:
        if mode == "default":
            continue
        more = [o for o in model_outputs(template, spec, turns, mode)
                if (o.start, o.text) not in seen]
        seen.update((o.start, o.text) for o in more)
        found.extend(more)
    return found


def _after_the_prompt(span: str, tail: str, start: Start, reasoning, thought: str | None = None
                      ) -> tuple[str, Start, list[str]] | None:
    """What a model writes after a generation prompt whose text past the assistant header is
    `tail`, for a turn the template renders as `span` past that header: (the output, the state
    the prompt leaves it in, what the template loses), or None when the turn cannot follow the
    prompt.

    - The span starts with the tail: the rest (whitespace at the header's edge may differ).
    - The prompt ends with the reasoning's end marker and the span starts with it (history
      writes `</think>` alone where the prompt wrote `<think></think>`): the rest.
    - The prompt leaves reasoning open and the span starts with the block's opener (the
      prompt wrote more after the opener than history does): the rest after the opener.
    - The prompt closed the reasoning block and the render writes a block of its own (its
      opener, or the turn's reasoning `thought`): the turn cannot follow this prompt.
    - A turn without reasoning after a prompt that leaves reasoning open: see
      `_after_an_empty_block`.
    """
    end = reasoning.end if reasoning else ""
    if span.startswith(tail):
        return span[len(tail):], start, []
    if tail.strip() and span.lstrip().startswith(tail.strip()):
        text = span.lstrip()[len(tail.strip()):]
        if tail != tail.rstrip():  # (the prompt ends with whitespace: the model writes after it)
            text = text.lstrip()
        return text, start, []
    if end and tail.rstrip().endswith(end) and span.lstrip().startswith(end):
        return span.lstrip()[len(end):], start, []
    opener = reasoning.start if reasoning else ""
    if start == Start.REASONING and opener and opener in tail and span.lstrip().startswith(opener):
        # (the prompt opened the block and wrote more into it than history does, a budget
        # note's opening tag: the model goes on inside the block the prompt opened)
        return span.lstrip()[len(opener):], start, []
    if start == Start.CONTENT and end and end in tail and (
            (reasoning.start and reasoning.start in span) or (thought and thought in span)):
        return None  # (the prompt wrote an empty reasoning block: no reasoning block follows it)
    return span, start, []


def _closes_reasoning(span: str, turn: Turn, reasoning) -> bool:
    """Whether the render closes a reasoning block before the turn's content and calls."""
    at = span.find(reasoning.end)
    values = [v for v in [turn.content] + [c.name for c in turn.calls] if v and v in span]
    return at != -1 and all(at < span.index(v) for v in values)


def _after_an_empty_block(span: str, with_reasoning: str | None, tail: str,
                          reasoning) -> tuple[str, list[str]]:
    """A turn after a prompt that leaves reasoning open, whose render (`span`) has no end
    marker: what the template writes for the same turn with reasoning added (`with_reasoning`),
    less the reasoning (an empty block, closed as the template closes one); or, when the
    template drops reasoning from history altogether, the end marker before the render."""
    found = _after_the_prompt(with_reasoning, tail, Start.REASONING, reasoning) \
        if with_reasoning else None
    if found is not None and found[0].count(FRESH.reasoning) == 1 and reasoning.end in found[0]:
        return found[0].replace(FRESH.reasoning, ""), []
    return reasoning.end + span, ["the template drops the reasoning block from history: read after "
                                  "an empty block closed by its end marker"]


def _end_marker_at(text: str, marker: str, thought: str | None, reasoning,
                   start: Start = Start.CONTENT, segments: Mapping[str, Any] | None = None,
                   after: int = 0) -> int:
    """Where `marker` first ends a turn in `text` (from `after` on): not where, right after the
    reasoning (or at the start of an output that starts inside reasoning), the reasoning's end
    marker starts with it (a reasoning end that closes a turn and opens the next: the parser,
    inside reasoning, reads the longer marker); nor where it ends a segment the turn goes on
    after, the next segment's header after it (`segments`: see grammar.reading.segment_format)."""
    at = text.find(marker, after)
    while at != -1 and ((reasoning is not None and len(reasoning.end) > len(marker)
                         and text.startswith(reasoning.end.strip(), at)
                         and ((thought and text[:at].rstrip().endswith(thought))
                              or (start == Start.REASONING and not text[:at].strip())))
                        or _goes_on(text, at, marker, segments)):
        at = text.find(marker, at + 1)
    return at


def _goes_on(text: str, at: int, marker: str, segments: Mapping[str, Any] | None) -> bool:
    """Whether `marker` at `at` ends a segment of a turn that goes on: the segments' end
    marker, then (after whitespace) the next segment's header."""
    if not segments:
        return False
    return marker.strip() == segments["end"] \
        and text[at + len(marker):].lstrip().startswith(segments["header"])


def _inside(text: str, value: str, reasoning) -> bool:
    """Whether `value` sits right inside the reasoning markers in `text`."""
    at = text.index(value)
    return text[:at].rstrip().endswith(reasoning.start) \
        and text[at + len(value):].lstrip().startswith(reasoning.end)


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
    return {"content": message["content"], "reasoning_content": message["reasoning_content"],
            "tool_calls": calls}


__all__ = ["ModelOutput", "STANDARD_PROPERTIES", "STANDARD_TOOLS", "mode_outputs", "model_outputs",
           "readable"]
