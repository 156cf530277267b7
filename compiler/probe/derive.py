"""The probe: derive a `ProtocolSpec` from a chat template by rendering it.

Nothing here reads the template's source. The probe renders sentinel conversations and
compares the renders (`renders.assistant_spans`):

1. the generation prompt against each rendered assistant turn gives the assistant header
   and each turn's *span* (what follows the header);
2. calls with zero, one and two arguments, and arguments of every JSON type, give the
   argument format (`arguments`); two calls give the call layout, the separator and the
   section around the calls (`calls`);
3. each kind of turn (content, reasoning + content, calls, content + calls,
   reasoning + calls) gives a turn layout: the span with the sentinel values as slots;
4. the generation prompt under each value of a thinking switch gives the modes and the
   state the model starts in (`modes`);
5. the layouts give the markers: reasoning start and end, content wrapper, end of turn
   (`markers`).

Two independent sentinel sets run the whole probe; a field is kept only when both agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import TemplateError
from ..source.render import default_time_budget, fixed_clock, time_budget
from ..source.template import ChatTemplate
from ..spec import (
    Piece,
    PromptMode,
    ProtocolSpec,
    Reasoning,
    SpecError,
    Start,
    ToolCallFormat,
    slot,
)
from . import markers
from .arguments import argument_format
from .calls import call_format
from .conversations import (
    ID_FORMS,
    SENTINEL_SETS,
    Call,
    Sentinels,
    ShapedRenderer,
    Turn,
    tool_definition,
)
from .instructions import instructed_calls
from .modes import INPUTS, find_modes, name_thinking_modes
from .overrides import Override, apply_overrides, check_template, settle_override
from .reads import tool_reads
from .renders import assistant_spans, layout_of
from .spans import Boundaries
from .wrappers import call_wrappers


@dataclass
class _Findings:
    """What one sentinel set found."""

    tail: str = ""
    header: str = ""  # the assistant header the renders share (what precedes each span)
    turns: dict = field(default_factory=dict)
    thinking_turns: dict = field(default_factory=dict)  # layouts with thinking on, when they differ
    tool_calls: ToolCallFormat | None = None
    reasoning: Reasoning | None = None
    content_start: str = ""
    content_end: str = ""
    end_of_turn: list = field(default_factory=list)
    modes: dict = field(default_factory=dict)
    thinking_switch: dict | None = None
    next_turn: str = ""  # text between a content turn and the next user turn's text
    shape: str = "openai"
    warnings: list = field(default_factory=list)


def probe_turns(s: Sentinels) -> dict[str, Turn]:
    """The standard probe turns, filled with sentinel set `s`."""
    call_a = Call(s.names[0], {s.key1: s.value1}, s.ids[0])
    call_b = Call(s.names[1], {s.key2: s.value2}, s.ids[1])
    return {
        "calls": Turn(calls=(call_a,)),
        "content": Turn(content=s.content),
        "reasoning+content": Turn(reasoning=s.reasoning, content=s.content),
        "calls2": Turn(calls=(call_a, call_b)),
        "content+calls": Turn(content=s.content2, calls=(call_a,)),
        "reasoning+calls": Turn(reasoning=s.reasoning, calls=(call_a,)),
    }



def _turn_layout(findings: _Findings, kind: str, turn: Turn, span: str) -> list[Piece] | None:
    """A turn's layout: its span with the reasoning, content and calls as slots."""
    values = {"reasoning": turn.reasoning or "", "content": turn.content or ""}
    if not (turn.calls and findings.tool_calls is not None):
        return layout_of(span, values)
    calls = [{"name": c.name, "arguments": c.arguments, "id": c.id} for c in turn.calls]
    try:
        call_list = findings.tool_calls.format_list(calls)
    except SpecError as e:
        findings.warnings.append(f"{kind}: {e}")
        return None
    section = findings.tool_calls.section_start + call_list + findings.tool_calls.section_end
    return layout_of(span, {**values, "calls": section}) \
        or layout_of(span, {**values, "call_list": call_list})


def _read_the_instructions(template: ChatTemplate, spec: ProtocolSpec,
                           evidence: dict[str, str]) -> None:
    """The call format the template's tool instructions tell the model to write, where its
    history renders another (probe/instructions.py): recorded in the spec, with its evidence."""
    s = SENTINEL_SETS[0]
    tools = [tool_definition(name, [s.key1, s.key2]) for name in s.names]
    renderer = ShapedRenderer.for_label(template, tools, spec.shape)
    rendered = renderer.render_turn(s.user, Turn(content=s.content))
    if rendered is None:
        return
    instructed = instructed_calls(rendered.prompt, spec, s.names)
    assert spec.tool_calls is not None  # (only a template that renders calls is asked)
    spec.tool_calls.instructed_bare = instructed.bare
    spec.tool_calls.instructed_separators = list(instructed.separators)
    if instructed.bare or instructed.separators:
        evidence["tool_calls.instructed"] = ("the template's tool instructions say: "
                                             f"{instructed.evidence!r}")


def _probe_with(template: ChatTemplate, s: Sentinels) -> _Findings:
    findings = _Findings()
    boundaries = Boundaries(template.special_tokens)
    tools = [tool_definition(name, [s.key1, s.key2]) for name in s.names]
    renderer = ShapedRenderer(template, tools)
    turns = probe_turns(s)
    rendered = assistant_spans(renderer, s.user, turns)
    if rendered is None:
        findings.warnings.append("no probe turn renders: " + "; ".join(renderer.errors[-3:]))
        return findings
    header, tail, spans = rendered
    if "calls" in spans and s.names[0] not in spans["calls"] and s.ids[0] in spans["calls"]:
        # The template writes a call's id where its name goes: render ids that carry the name.
        for form in ID_FORMS:
            renderer.id_form = form
            retried = assistant_spans(renderer, s.user, turns)
            if retried is not None and s.names[0] in retried[2].get("calls", ""):
                header, tail, spans = retried
                findings.warnings.append("the template writes a call's id where its "
                                         f"name goes: call ids are written {form!r} "
                                         "(the form the model writes)")
                break
            renderer.id_form = ""
    findings.tail, findings.header = tail, header
    findings.shape = renderer.shape_label

    # Tool calls: only when a call's name shows in its render.
    if "calls" in spans and s.names[0] in spans["calls"]:
        arg_format = argument_format(renderer, s.user, s, boundaries, findings.warnings)
        if arg_format is not None:
            findings.tool_calls = call_format(renderer, s.user, s, arg_format, boundaries,
                                              findings.warnings,
                                               spans.get("content"), s.content)
    else:
        declared = renderer.render_turn(s.user, Turn(content=s.content))
        if declared is not None and s.names[0] in declared.prompt:
            findings.warnings.append(
                "the template does not render tool calls: it declares the tools (their names "
                "appear in the prompt) but renders no call in history, so no render shows how a "
                "model writes one (a declarative override can carry the format, with its source)")
        else:
            findings.warnings.append("the template does not render tool calls"
                                     + _what_it_reads_instead(template))

    # Turn layouts.
    for kind, turn in turns.items():
        if kind == "calls2" or kind not in spans:
            continue
        layout = _turn_layout(findings, kind, turn, spans[kind])
        if layout is None:
            findings.warnings.append(f"could not lay out a {kind} turn")
            continue
        findings.turns[kind] = layout

    findings.modes, findings.thinking_switch = find_modes(renderer, s.user, findings.tail, header)
    # What separates a turn from the next user turn (templates without an end-of-turn marker
    # end a turn where the next begins).
    followed = renderer.render_followed(s.user, turns["content"], s.content2)
    if followed is not None and s.content in followed and s.content2 in followed:
        after = followed[followed.rindex(s.content) + len(s.content):]
        findings.next_turn = after[: after.find(s.content2)] if s.content2 in after else ""
    if "thinking" in findings.modes and not any(slot("reasoning") in layout
                                                for layout in findings.turns.values()):
        # Some templates render reasoning only with thinking on: lay those turns out too.
        mode = findings.modes["thinking"]
        reasoning_kinds = {k: turns[k] for k in ("content", "reasoning+content", "calls",
                                                 "reasoning+calls")}
        thinking = assistant_spans(renderer, s.user, reasoning_kinds, mode.variables,
                                   system=mode.system_flag or None)
        if thinking is not None:
            for kind, span in thinking[2].items():
                layout = _turn_layout(findings, kind, turns[kind], span)
                if layout is not None:
                    findings.thinking_turns[kind] = layout
    return findings


# Stand-ins for the bos / eos tokens when the source does not name them (a bare .jinja):
# templates concatenate them, so they must be strings; the spec says they are stand-ins.
PLACEHOLDER_TOKENS = {"bos_token": "<|bos_token|>", "eos_token": "<|eos_token|>"}


# The wall clock one template's whole probe may take (each render also has its own limits).
PROBE_SECONDS = 15.0


def probe(template: ChatTemplate, budget: float | None = None,
          override: Override | None = None) -> ProtocolSpec:
    """Derive the template's ProtocolSpec (both sentinel sets must agree on each field), and
    apply the shipped overrides for it and `override`, a user's (tplparse.probe.overrides).

    The probe renders dozens of times; all of them together get `budget` seconds (by default
    PROBE_SECONDS, or what is left of the budget the probe runs in: a command's, see
    tplparse.source.isolation), and the first render that hits a limit (time, memory, output
    size) ends the probe: a `TemplateError` saying so."""
    if override is not None:
        check_template(override, template.sha256)
    within = time_budget(budget) if budget is not None else default_time_budget(PROBE_SECONDS)
    try:
        with fixed_clock(), within:  # (templates that print the time print the same one)
            return _probe(template, override)
    except TemplateError as e:
        if not e.limit:
            raise
        error = TemplateError(f"probing stopped: {e.reason}", template=e.template, line=e.line)
        error.limit = True
        raise error from None


def _probe(template: ChatTemplate, override: Override | None = None) -> ProtocolSpec:
    notes = []
    missing = {k: v for k, v in PLACEHOLDER_TOKENS.items() if k not in template.named_tokens}
    if missing:
        template = template.with_tokens(**missing)
        notes.append(
            "the source does not name " + " and ".join(missing) + "; probed with the stand-ins "
            + ", ".join(f"{k}={v!r}" for k, v in missing.items())
        )
    runs = [_probe_with(template, s) for s in SENTINEL_SETS]
    first, second = runs
    warnings = notes + list(dict.fromkeys(first.warnings + second.warnings))
    if template.compat_notes:
        warnings.append("transformers' sandbox refuses this template ("
                        + "; ".join(sorted(template.compat_notes))
                        + "); rendered as llama.cpp renders it, in a sandbox that lets a template "
                          "change only the containers it builds itself")

    def agreed(name):
        a, b = getattr(first, name), getattr(second, name)
        if _as_data(a) == _as_data(b):
            return a
        warnings.append(f"the two sentinel sets disagree on {name}; left out")
        return None

    turns = {}
    for kind in first.turns:
        if first.turns[kind] == second.turns.get(kind):
            turns[kind] = first.turns[kind]
        else:
            warnings.append(f"the two sentinel sets disagree on the {kind} layout; left out")
    header = first.header if first.header == second.header else ""
    modes = agreed("modes") or {"default": PromptMode(variables={}, tail=first.tail,
                                                      start=Start.CONTENT, header=header)}
    tool_calls = agreed("tool_calls")

    # Name the markers.
    boundaries = Boundaries(template.special_tokens)
    evidence: dict[str, str] = {}
    thinking_turns = first.thinking_turns if first.thinking_turns == second.thinking_turns else {}
    reasoning = (
        markers.reasoning_from_layouts(turns, evidence)
        or markers.reasoning_from_layouts(thinking_turns, evidence, note="with thinking on")
        or markers.reasoning_from_modes(modes, boundaries, evidence)
        or markers.reasoning_from_prompt(modes, evidence)
        or markers.reasoning_from_source(template.source, evidence)
    )
    if first.header == second.header:
        markers.opener_in_header(first.header, reasoning, evidence)
    end_of_turn = markers.end_of_turn_markers(
        turns, tool_calls, first.next_turn if first.next_turn == second.next_turn else "",
        template.eos_token if "eos_token" not in missing else None, template.end_of_turn,
        boundaries, evidence,
    )
    content_start, content_end = markers.content_wrapper(turns, reasoning, boundaries, end_of_turn,
                                                         evidence)
    if tool_calls is not None:
        _close_the_section(turns, tool_calls, end_of_turn, evidence)

    spec = ProtocolSpec(
        template_name=template.name,
        template_sha256=template.sha256,
        family=template.family,
        modes=modes,
        turns=turns,
        reasoning=reasoning,
        tool_calls=tool_calls,
        content_start=content_start,
        content_end=content_end,
        end_of_turn=end_of_turn,
        thinking_switch=agreed("thinking_switch"),
        shape=first.shape,
        evidence=evidence,
        warnings=warnings,
    )
    if spec.tool_calls is not None:
        spec.tool_calls.wrappers = call_wrappers(template.source, spec, boundaries)
        if spec.tool_calls.wrappers:
            evidence["tool_calls.wrappers"] = (f"{spec.tool_calls.wrappers!r}: the template writes "
                                               "it right before a call's data for some calls only "
                                               "(its code; no standard turn renders it)")
        _read_the_instructions(template, spec, evidence)
    spec = apply_overrides(spec, override)
    markers.start_states(spec.modes, spec.reasoning, turns, thinking_turns,
                         first.header if first.header == second.header else "")
    spec.thinking_switch = name_thinking_modes(spec.modes, spec.thinking_switch,
                                               spec.reasoning.end if spec.reasoning else "")
    if spec.reasoning is None:
        spec.warnings.append("no reasoning markers: no render shows a reasoning block, "
                             "and no prompt opens one")
    spec.warnings += _readings_the_renders_cannot_tell(spec)
    return settle_override(spec, override)


def _readings_the_renders_cannot_tell(spec: ProtocolSpec) -> list[str]:
    """Where a turn's layout writes content inside the reasoning markers (gpt-oss renders the
    content before a call on its analysis channel): which reading the parser takes, and why."""
    r = spec.reasoning
    if r is None or not r.start.strip():
        return []
    found = []
    for kind, layout in sorted(spec.turns.items()):
        if slot("content") not in layout or slot("reasoning") in layout:
            continue
        at = layout.index(slot("content"))
        before = "".join(p for p in layout[:at] if isinstance(p, str))
        after = "".join(p for p in layout[at + 1:] if isinstance(p, str))
        if before.rstrip().endswith(r.start.strip()) and after.lstrip().startswith(r.end.strip()):
            found.append(f"the {kind} turn writes its content inside the reasoning markers "
                         f"({r.start.strip()!r} … {r.end.strip()!r}), where reasoning goes: the "
                         "render cannot tell the two apart, and the parser reads such text as "
                         "reasoning (as the template renders it back); written in content's own "
                         "markers, it is content")
    return found


def _what_it_reads_instead(template: ChatTemplate) -> str:
    """Where a template renders no call: the names it reads tools or calls through that
    OpenAI's input does not have, and the way forward ("" where it reads none)."""
    said = tool_reads(template, INPUTS).said()
    if not said:
        return ""
    return (f"; it reads tools or calls through {said}, which OpenAI's chat input does not carry: "
            "render it with them to see its format, and state that format in an override "
            "(docs/overrides.md)")


def _close_the_section(turns: dict, tool_calls: ToolCallFormat, end_of_turn: list[str],
                       evidence: dict) -> None:
    """Text every turn that ends with its calls writes between the calls section and the end
    of turn belongs to the section (a diff may split `tools<|sep|>` before `<|sep|>`): move
    it into the section's end, in the calls' format and in every layout (which still
    renders the same text)."""
    extras = set()
    for layout in turns.values():
        positions = [i for i, p in enumerate(layout) if p == slot("calls")]
        if positions and positions[-1] == len(layout) - 2 and isinstance(layout[-1], str):
            tail = layout[-1]
            cut = min([tail.find(m) for m in end_of_turn if m.strip() and m in tail] or [-1])
            extras.add(tail[:cut] if cut > 0 else "")
        elif positions and positions[-1] == len(layout) - 1:
            extras.add("")
    if len(extras) != 1:
        return
    extra = extras.pop()
    if not extra.strip() or extra != extra.strip():
        return
    tool_calls.section_end += extra
    for layout in turns.values():
        for i, piece in enumerate(layout[:-1]):
            if piece == slot("calls") and isinstance(layout[i + 1], str) \
                    and layout[i + 1].startswith(extra):
                layout[i + 1] = layout[i + 1][len(extra):]
        layout[:] = [p for p in layout if p != ""]
    evidence["tool_calls.section_end"] = (f"{tool_calls.section_end!r}: with {extra!r}, "
                                          "which every turn that ends with calls writes "
                                          "between them and the end of turn")


def _as_data(value):
    from dataclasses import asdict, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, dict):
        return {k: _as_data(v) for k, v in value.items()}
    return value
