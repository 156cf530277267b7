"""Check a spec against its template: re-render the standard probe turns with fresh values.

For each standard turn (content; reasoning + content; one call with typed arguments; two
parallel calls; content + call; reasoning + call), filled with values the probe never
used, `spec.format(turn)` must equal the assistant span the template itself renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..source.render import fixed_clock
from ..source.template import ChatTemplate
from ..spec import ProtocolSpec, SpecError
from .conversations import FRESH, Call, ShapedRenderer, Turn, tool_definition
from .renders import assistant_spans

TYPED_ARGUMENTS = {"amount": "EUR 12", "count": 3, "rate": 1.08, "exact": False, "note": None,
                   "options": {"round": True, "places": 2}, "tags": ["fx", "daily"]}


# The detail of every check when no standard turn renders (the template raises on each).
RENDERS_NONE = "the template renders none of the standard turns"


def standard_turns() -> dict[str, Turn]:
    s = FRESH
    call_a = Call(s.names[0], {s.key1: s.value1, s.key2: s.value2}, s.ids[0])
    call_b = Call(s.names[1], {s.key2: s.value2}, s.ids[1])
    return {
        "content": Turn(content=s.content),
        "reasoning+content": Turn(reasoning=s.reasoning, content=s.content),
        "typed call": Turn(calls=(Call(s.names[0], TYPED_ARGUMENTS, s.ids[0]),)),
        "two calls": Turn(calls=(call_a, call_b)),
        "content+call": Turn(content=s.content2, calls=(call_a,)),
        "reasoning+call": Turn(reasoning=s.reasoning, calls=(call_a,)),
    }


def _message(turn: Turn) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.reasoning:
        message["reasoning_content"] = turn.reasoning
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.calls
        ]
    return message


@dataclass
class Check:
    turn: str
    passed: bool
    detail: str = ""


def verify(template: ChatTemplate, spec: ProtocolSpec) -> list[Check]:
    """Format each standard turn with the spec and compare with the template's own render."""
    from .derive import PLACEHOLDER_TOKENS

    template = template.with_tokens(**{k: v for k, v in PLACEHOLDER_TOKENS.items()
                                       if k not in template.named_tokens})
    tools = [tool_definition(n, [FRESH.key1, FRESH.key2]) for n in FRESH.names]
    renderer = ShapedRenderer.for_label(template, tools, spec.shape)
    turns = standard_turns()
    with fixed_clock():
        rendered = assistant_spans(renderer, FRESH.user, turns)
    if rendered is None:
        return [Check(name, False, RENDERS_NONE) for name in turns]
    spans = rendered[2]
    checks = []
    for name, turn in turns.items():
        expected = spans.get(name)
        got: str | SpecError
        try:
            got = spec.format(_message(turn))
        except SpecError as e:
            got = e
        if expected is None:
            ok = isinstance(got, SpecError)
            checks.append(Check(name, ok, "the template cannot render it"
                                + ("" if ok else "; the spec can")))
        elif isinstance(got, SpecError):
            checks.append(Check(name, False, f"spec: {got}"))
        else:
            differs = "" if got == expected else f"template {expected!r}\n spec   {got!r}"
            checks.append(Check(name, got == expected, differs))
    return checks
