"""The probe: derive a `ProtocolSpec` from a chat template by rendering it.

Nothing here reads the template's source. The probe renders sentinel conversations and
compares the renders:

1. the generation prompt against each rendered assistant turn gives the assistant header
   and each turn's *span* (what follows the header);
2. calls with zero, one and two arguments, and arguments of every JSON type, give the
   argument format; two calls give the call layout, the separator and the section
   around the calls;
3. each kind of turn (content, reasoning + content, calls, content + calls,
   reasoning + calls) gives a turn layout: the span with the sentinel values as slots;
4. the generation prompt under each value of a thinking switch gives the modes and the
   state the model starts in (inside reasoning or not);
5. the layouts give the markers: reasoning start and end, content wrapper, end of turn.

Two independent sentinel sets run the whole probe; a field is kept only when both agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jinja2 import meta as jinja_meta

from .conversations import SENTINEL_SETS, Call, Rendered, Sentinels, ShapedRenderer, Turn, tool_definition
from .encodings import ENCODERS, encode
from .render import DEFAULT_LIMITS, _environment, fixed_clock
from . import markers
from .overrides import apply_overrides
from .spans import Boundaries, common_prefix_length, common_suffix_length
from .spec import ArgumentFormat, Piece, PromptMode, ProtocolSpec, Reasoning, SpecError, ToolCallFormat, fill, kv_parts, slot
from .template import ChatTemplate

# A string argument that shows how values are escaped: quotes, backslash, newline.
TRICKY = 'say "hi"\\now\nthen'

# A value of each JSON type, recognisable in a render.
TYPED_VALUES = {
    "integer": 7301,
    "number": 2.75,
    "boolean": True,
    "null": None,
    "object": {"unit": "km", "scale": 7301},
    "array": [7301, "km", False],
}

# Variables that commonly switch thinking on and off, with their (on, off) values, tried
# when the template reads them. The template's own variables are found by parsing it.
# System-message flags some templates read to switch thinking ("/think", "/no_think").
SYSTEM_FLAGS = (("/think", "/no_think"),)

THINKING_SWITCHES = (
    ("enable_thinking", True, False),
    ("thinking", True, False),
    ("reasoning", True, False),
    ("reasoning_effort", "high", "none"),
    ("thinking_budget", -1, 0),
)


@dataclass
class _Findings:
    """What one sentinel set found."""

    tail: str = ""
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


# ---------------------------------------------------------------------------
# Spans


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


def _turn_text(history: str, full: str, header_hint: str, boundaries: Boundaries) -> str:
    """What rendering one more turn added to `history`.

    Usually `full` extends `history`. Some templates append a trailer after the last turn
    (a closing system instruction) and the new turn goes in before it; where the inserted
    text could be read at several offsets (it repeats what surrounds it), the reading that
    starts most like the generation prompt's addition (`header_hint`) is the turn.
    """
    p = boundaries.split_common_prefix(history, full)
    q = boundaries.split_common_suffix(history[p:], full[p:])
    end = len(full) - q
    best, best_score = full[p:end], common_prefix_length(full[p:end], header_hint)
    k = 1
    while q and k <= p and full[p - k] == full[end - k]:
        candidate = full[p - k:end - k]
        score = common_prefix_length(candidate, header_hint)
        if score > best_score:
            best, best_score = candidate, score
        k += 1
    return best


def _prompt_addition(history: str, prompt: str, boundaries: Boundaries) -> str:
    """What the generation prompt added to `history` (some templates end history differently)."""
    return prompt[boundaries.split_common_prefix(history, prompt):]


def assistant_spans(renderer: ShapedRenderer, user: str, turns: dict[str, Turn], variables: dict | None = None,
                    system: str | None = None):
    """Render each turn after the same history; return (header, tail, {kind: span}).

    The assistant header is where every rendered turn and the generation prompt stop
    agreeing (backed off to a marker boundary); the tail is what the generation prompt
    writes past the header; a span is what a turn writes past it. Turns the template
    cannot render are left out.
    """
    boundaries = Boundaries(renderer.template.special_tokens)
    renders: dict[str, Rendered] = {}
    for kind, turn in turns.items():
        rendered = renderer.render_turn(user, turn, variables, system=system)
        if rendered is not None:
            renders[kind] = rendered
    if not renders:
        return None
    first = next(iter(renders.values()))
    added = _prompt_addition(first.history, first.prompt, boundaries)
    texts = {kind: _turn_text(r.history, r.full, added, boundaries) for kind, r in renders.items()}
    split = min(boundaries.split_common_prefix(added, text) for text in texts.values())
    return added[:split], added[split:], {kind: text[split:] for kind, text in texts.items()}


# ---------------------------------------------------------------------------
# Layouts


def layout_of(span: str, values: dict[str, str], droppable=("reasoning", "content")) -> list[Piece] | None:
    """The span with each (non-empty) slot value replaced by its slot.

    A reasoning or content value missing from the span is one the template drops (some
    drop reasoning from history, some drop content beside calls): its slot is left out.
    Any other missing value means the span is not understood: None.
    """
    found = []
    for name, value in values.items():
        if not value:
            continue
        at = span.find(value)
        if at == -1:
            if name in droppable:
                continue
            return None
        found.append((at, name, value))
    found.sort()
    pieces: list[Piece] = []
    cursor = 0
    for at, name, value in found:
        if at < cursor:
            return None  # overlapping values
        if span[cursor:at]:
            pieces.append(span[cursor:at])
        pieces.append(slot(name))
        cursor = at + len(value)
    if span[cursor:]:
        pieces.append(span[cursor:])
    return pieces


# ---------------------------------------------------------------------------
# Arguments


def _call_turn(s: Sentinels, arguments: dict, name_index: int = 0) -> Turn:
    return Turn(calls=(Call(s.names[name_index], arguments, s.ids[0]),))


def _object_format(spans: dict[str, str], args: dict[str, dict]) -> ArgumentFormat | None:
    """Arguments written as one encoded object (JSON, Python repr, ...), if they are.

    An indented JSON object inside an indented layout has its line breaks followed by the
    indentation of the line it starts on; that indentation is tried too.
    """
    base = spans["one"]
    for order in ("given", "sorted"):
        for encoder in ENCODERS:
            candidate = ArgumentFormat(style="object", encoder=encoder, order=order)
            first_line = candidate.format(args["one"]).split("\n", 1)[0]
            indents = {""}
            at = base.find(first_line)
            while at != -1:
                line_start = base.rfind("\n", 0, at) + 1
                line = base[line_start:]
                indents.add(line[: len(line) - len(line.lstrip(" \t"))])
                at = base.find(first_line, at + 1)
            for line_indent in sorted(indents, key=len):
                candidate.line_indent = line_indent
                one = candidate.format(args["one"])
                at = base.find(one)
                if at == -1:
                    continue
                before, after = base[:at], base[at + len(one):]
                if all(spans[k] == before + candidate.format(args[k]) + after for k in spans):
                    return candidate
    return None


def _argument_regions(spans: dict[str, str], boundaries: Boundaries) -> tuple[int, int] | None:
    """(prefix, suffix) lengths shared by the zero-, one- and two-argument spans."""
    zero, one, two = spans["zero"], spans["one"], spans["two"]
    a = min(boundaries.split_common_prefix(zero, one), boundaries.split_common_prefix(one, two))
    b = min(boundaries.split_common_suffix(zero[a:], one[a:]), boundaries.split_common_suffix(one[a:], two[a:]))
    return a, b


def _kv_argument(region: str, key: str, value, encoders: dict) -> tuple[list[Piece], str] | None:
    """One argument's layout (key and value slots) and the encoder that wrote its value.

    `encoders` maps names to functions; when several match, the one that accounts for the
    most text wins (quotes inside the value rather than in the layout).
    """
    at = region.find(key)
    if at == -1:
        return None
    prefix, rest = region[:at], region[at + len(key):]
    best = None
    for name, fn in encoders.items():
        try:
            text = fn(value)
        except Exception:  # noqa: BLE001 - an encoder that cannot write this value does not match
            continue
        where = rest.find(text)
        if where == -1:
            continue
        if best is None or len(text) > len(best[2]):
            best = (name, where, text)
    if best is None:
        return None
    name, where, text = best
    middle, suffix = rest[:where], rest[where + len(text):]
    layout = [p for p in (prefix, slot("key"), middle, slot("value"), suffix) if p != ""]
    return layout, name


def _standard_encoders(value) -> dict:
    """The encoders to try for `value` (for a string, "raw" stands for Jinja's plain print)."""
    encoders = {name: (lambda v, n=name: encode(n, v)) for name in ENCODERS}
    if isinstance(value, str):
        del encoders["jinja"]
        encoders = {"raw": lambda v: v, **encoders}
    return encoders


def _split_quotes(string_layout: list[Piece], plain_layout: list[Piece]):
    """If the string layout is the plain one with quotes around the value, those quotes."""
    p_s, m_s, s_s = kv_parts(string_layout)
    p_p, m_p, s_p = kv_parts(plain_layout)
    if p_s != p_p or not m_s.startswith(m_p) or not s_s.endswith(s_p):
        return None
    opening, closing = m_s[len(m_p):], s_s[: len(s_s) - len(s_p)]
    return (opening, closing) if opening and closing else None


def _kv_format(renderer, user, s: Sentinels, spans: dict[str, str], boundaries: Boundaries, warnings) -> ArgumentFormat | None:
    regions = _argument_regions(spans, boundaries)
    a, b = regions
    one = spans["one"][a:len(spans["one"]) - b]
    two = spans["two"][a:len(spans["two"]) - b]
    if spans["zero"][a:len(spans["zero"]) - b]:
        warnings.append("a call without arguments writes something in the argument region; not modelled")
        return None
    found = _kv_argument(one, s.key1, TRICKY, _standard_encoders(TRICKY))
    if found is None:
        return None
    string_layout, string_encoder = found
    arg_format = ArgumentFormat(style="kv", argument={"string": string_layout}, value_encoders={"string": string_encoder})
    # Order and separator, from the two-argument render.
    first = fill(string_layout, {"key": s.key1, "value": arg_format.encode_value(string_encoder, TRICKY)})
    second = fill(string_layout, {"key": s.key2, "value": arg_format.encode_value(string_encoder, s.value2)})
    if two.startswith(first) and two.endswith(second) and len(two) >= len(first) + len(second):
        arg_format.order, arg_format.separator = "given", two[len(first):len(two) - len(second)]
    elif two.startswith(second) and two.endswith(first) and len(two) >= len(first) + len(second):
        arg_format.order, arg_format.separator = "sorted", two[len(second):len(two) - len(first)]
    else:
        warnings.append("could not find how two arguments are joined")
        return None
    # Every other JSON type: its own layout and encoder (scalars first: containers may be
    # written in the format's own notation, which uses the scalars' encoders).
    pre, post = spans["zero"][:a], spans["zero"][len(spans["zero"]) - b:]
    for kind, value in TYPED_VALUES.items():
        rendered = assistant_spans(renderer, user, {"typed": _call_turn(s, {s.key1: value})})
        if rendered is None or "typed" not in rendered[2]:
            warnings.append(f"a {kind} argument did not render")
            continue
        typed = rendered[2]["typed"]
        if not (typed.startswith(pre) and typed.endswith(post)):
            warnings.append(f"a {kind} argument changes the call around it; not modelled")
            continue
        encoders = _standard_encoders(value)
        if kind in ("object", "array"):
            for opening, closing in (("{", "}"), ("[", "]")):
                def native(v, o=opening, c=closing, k=kind):
                    trial = ArgumentFormat(**{**arg_format.__dict__, "brackets": {**arg_format.brackets, k: [o, c]}})
                    return trial.encode_value("native", v)
                encoders[f"native{opening}{closing}"] = native
        found = _kv_argument(typed[len(pre):len(typed) - len(post)], s.key1, value, encoders)
        if found is None:
            warnings.append(f"could not find how a {kind} argument is written")
            continue
        layout, encoder = found
        if encoder.startswith("native"):
            arg_format.brackets[kind] = [encoder[6], encoder[7]]
            encoder = "native"
        arg_format.argument[kind] = layout
        arg_format.value_encoders[kind] = encoder
        if kind == "integer":
            # Strings quoted by the layout ("<|"|>" around the value) use those quotes as
            # their encoding, so strings inside arrays and objects get them too.
            quotes = _split_quotes(string_layout, layout)
            if quotes is not None and string_encoder == "raw":
                arg_format.quotes = list(quotes)
                arg_format.argument["string"] = string_layout = layout
                arg_format.value_encoders["string"] = "quoted"
    # Collapse per-type layouts equal to the string layout.
    for kind in list(arg_format.argument):
        if kind != "string" and arg_format.argument[kind] == string_layout:
            del arg_format.argument[kind]
    return arg_format


def _argument_format(renderer, user, s: Sentinels, boundaries: Boundaries, warnings) -> ArgumentFormat | None:
    args = {
        "zero": {},
        "one": {s.key1: TRICKY},
        "two": {s.key1: TRICKY, s.key2: s.value2},
    }
    rendered = assistant_spans(renderer, user, {k: _call_turn(s, v) for k, v in args.items()})
    if rendered is None or len(rendered[2]) < 3:
        warnings.append("calls with zero, one and two arguments did not all render")
        return None
    spans = rendered[2]
    found = _object_format(spans, args)
    if found is not None:
        # An encoded object must also carry every other type the same way.
        return found
    return _kv_format(renderer, user, s, spans, boundaries, warnings)


# ---------------------------------------------------------------------------
# Calls


def _slots_in(span: str, values: list[tuple[str, str]], start: int = 0) -> list[tuple[int, int, str]] | None:
    """Positions (start, end, slot) of each value, searched left to right from `start`."""
    out = []
    for name, value in values:
        if not value:
            continue
        at = span.find(value, start)
        if at == -1:
            return None
        out.append((at, at + len(value), name))
    out.sort()
    return out


def _between_slots(text: str, found: list[tuple[int, int, str]]) -> list[str]:
    """The literal text between consecutive slots of one call."""
    return [text[end:next_start] for (_, end, _), (next_start, _, _) in zip(found, found[1:])]


def _index_aware_layout(a: str, b: str, index_a: int, index_b: int) -> list[Piece] | None:
    """A layout for two renders of the same literal that may differ only by the call index."""
    if a == b:
        return [a] if a else []
    i = common_prefix_length(a, b)
    for base, name in ((0, "index"), (1, "index1")):
        ta, tb = str(index_a + base), str(index_b + base)
        if a[i:i + len(ta)] == ta and b[i:i + len(tb)] == tb and a[i + len(ta):] == b[i + len(tb):]:
            return [p for p in (a[:i], slot(name), a[i + len(ta):]) if p != ""]
    return None


def _call_format(renderer, user, s: Sentinels, arg_format: ArgumentFormat, boundaries: Boundaries, warnings,
                 content_span: str | None, content_value: str):
    calls = (
        Call(s.names[0], {s.key1: s.value1}, s.ids[0]),
        Call(s.names[1], {s.key2: s.value2}, s.ids[1]),
    )
    rendered = assistant_spans(renderer, user, {"two": Turn(calls=calls), "one": Turn(calls=calls[:1])})
    if rendered is None or "one" not in rendered[2]:
        return None
    spans = rendered[2]
    if "two" not in spans:
        parallel_mode = "refused"
    elif all(c.name in spans["two"] for c in calls):
        parallel_mode = "all"
    else:
        parallel_mode = "first"
    parallel = parallel_mode == "all"
    text = spans["two"] if parallel else spans["one"]
    used = calls if parallel else calls[:1]
    # Each call's slots, in order.
    slots_per_call = []
    cursor = 0
    for call in used:
        found = _slots_in(text, [("name", call.name), ("arguments", arg_format.format(call.arguments)), ("id", call.id)], cursor)
        if found is None:
            # the id is optional: try without it
            found = _slots_in(text, [("name", call.name), ("arguments", arg_format.format(call.arguments))], cursor)
        if found is None:
            warnings.append(f"could not find the parts of call {call.name!r} in its render")
            return None
        slots_per_call.append(found)
        cursor = found[-1][1]
    first = slots_per_call[0]
    pre = text[:first[0][0]]
    if parallel:
        second = slots_per_call[1]
        mid = text[first[-1][1]:second[0][0]]
        post = text[second[-1][1]:]
        if [n for _, _, n in first] != [n for _, _, n in second]:
            warnings.append("the two calls are laid out differently")
            return None
        inner_layouts = []
        for la, lb in zip(_between_slots(text, first), _between_slots(text, second), strict=True):
            between = _index_aware_layout(la, lb, 0, 1)
            if between is None:
                warnings.append("the two calls differ in more than their values")
                return None
            inner_layouts.append(between)
        end_len = boundaries.split_common_prefix(mid, post)
        call_end = mid[:end_len]
        rest_mid = mid[end_len:]
        start_layout, (in_pre, in_mid) = _call_start(pre, rest_mid, boundaries)
        separator = rest_mid[: len(rest_mid) - in_mid]
        section_start = pre[: len(pre) - in_pre]
        section_end = post[end_len:]
    else:
        inner_layouts = [[p] if p else [] for p in _between_slots(text, first)]
        post = text[first[-1][1]:]
        call_end, separator = "", ""
        start_layout, section_start, section_end = [], pre, post
    layout: list[Piece] = list(start_layout)
    for (_, _, name), between in zip(first, inner_layouts + [[]], strict=True):
        layout.append(slot(name))
        layout.extend(between)
    if call_end:
        layout.append(call_end)
    # What the content-only turn also has before / after its content belongs to the turn,
    # not to the calls section (an empty reasoning block, the end of turn).
    if content_span is not None and content_value in content_span:
        before_content, after_content = content_span.split(content_value, 1)
        section_start = section_start[boundaries.split_common_prefix(section_start, before_content):]
        m = boundaries.split_common_suffix(section_end, after_content)
        section_end = section_end[: len(section_end) - m]
    return ToolCallFormat(
        section_start=section_start,
        section_end=section_end,
        call=_merge_literals(layout),
        separator=separator,
        arguments=arg_format,
        parallel=parallel_mode,
    )


def _call_start(pre: str, rest_mid: str, boundaries: Boundaries):
    """The call start: the common end of the text before call 1 and before call 2.

    It may hold the call's index ("tool_call_id": "0" / "1"): then it extends back over
    it, with an index slot. Returns the layout and its length in `pre` and in `rest_mid`.
    """
    n = common_suffix_length(pre, rest_mid)
    i, j = len(pre) - n, len(rest_mid) - n
    for base in (0, 1):
        ta, tb = str(base), str(base + 1)
        if pre[:i].endswith(ta) and rest_mid[:j].endswith(tb):
            head_a, head_b = pre[: i - len(ta)], rest_mid[: j - len(tb)]
            m = boundaries.split_common_suffix(head_a, head_b)
            layout = [p for p in (head_a[len(head_a) - m:], slot("index" if base == 0 else "index1"), pre[i:]) if p != ""]
            return layout, (m + len(ta) + n, m + len(tb) + n)
    m = boundaries.split_common_suffix(pre, rest_mid)
    return ([pre[len(pre) - m:]] if m else []), (m, m)


def _merge_literals(layout: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for piece in layout:
        if isinstance(piece, str):
            if not piece:
                continue
            if out and isinstance(out[-1], str):
                out[-1] += piece
                continue
        out.append(piece)
    return out


# ---------------------------------------------------------------------------
# Modes


def _template_variables(template: ChatTemplate) -> set[str]:
    ast = _environment(DEFAULT_LIMITS.max_output_chars).parse(template.source)
    return set(jinja_meta.find_undeclared_variables(ast))


def _modes(renderer: ShapedRenderer, user: str, findings: _Findings, header: str) -> None:
    """The default mode, and thinking on / off when a variable or a system flag switches it.

    Variables are tried only when the template reads them (found by parsing it, not by
    reading it as text); a switch is one whose two values change the prompt.
    """
    findings.modes["default"] = PromptMode(variables={}, tail=findings.tail, start="content")
    boundaries = Boundaries(renderer.template.special_tokens)
    read = _template_variables(renderer.template)
    candidates = [
        ({"variable": name, "on": on, "off": off}, ({name: on}, ""), ({name: off}, ""))
        for name, on, off in THINKING_SWITCHES if name in read
    ] + [
        ({"system_flag": True, "on": on, "off": off}, ({}, on), ({}, off))
        for on, off in SYSTEM_FLAGS
    ]
    # Some templates ignore the switch when tools are declared: try without tools too.
    toolless = ShapedRenderer(renderer.template, [], shape=renderer.shape, reasoning_blocks=renderer.reasoning_blocks)
    for (switch, (on_vars, on_flag), (off_vars, off_flag)), current in (
        [(c, renderer) for c in candidates] + [(c, toolless) for c in candidates]
    ):
        rendered = {
            label: current.render_turn(user, Turn(content="x"), variables, system=flag or None)
            for label, (variables, flag) in (("thinking", (on_vars, on_flag)), ("no_thinking", (off_vars, off_flag)))
        }
        if None in rendered.values() or rendered["thinking"].prompt == rendered["no_thinking"].prompt:
            continue
        tails = {}
        for label, r in rendered.items():
            added = _prompt_addition(r.history, r.prompt, boundaries)
            tails[label] = added[len(header):] if added.startswith(header) else None
        if None in tails.values():
            continue
        if "system_flag" in switch and tails["thinking"] == tails["no_thinking"]:
            continue  # the flag only shows up as text in the system message
        findings.thinking_switch = switch
        findings.modes["thinking"] = PromptMode(variables=on_vars, tail=tails["thinking"], start="content", system_flag=on_flag)
        findings.modes["no_thinking"] = PromptMode(variables=off_vars, tail=tails["no_thinking"], start="content", system_flag=off_flag)
        return


# ---------------------------------------------------------------------------
# One sentinel set


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
    return layout_of(span, {**values, "calls": section}) or layout_of(span, {**values, "call_list": call_list})


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
    findings.tail = tail
    findings.shape = renderer.shape_label

    # Tool calls: only when a call's name shows in its render.
    if "calls" in spans and s.names[0] in spans["calls"]:
        arg_format = _argument_format(renderer, s.user, s, boundaries, findings.warnings)
        if arg_format is not None:
            findings.tool_calls = _call_format(renderer, s.user, s, arg_format, boundaries, findings.warnings,
                                               spans.get("content"), s.content)
    else:
        findings.warnings.append("the template does not render tool calls")

    # Turn layouts.
    for kind, turn in turns.items():
        if kind == "calls2" or kind not in spans:
            continue
        layout = _turn_layout(findings, kind, turn, spans[kind])
        if layout is None:
            findings.warnings.append(f"could not lay out a {kind} turn")
            continue
        findings.turns[kind] = layout

    _modes(renderer, s.user, findings, header)
    # What separates a turn from the next user turn (templates without an end-of-turn marker
    # end a turn where the next begins).
    followed = renderer.render_followed(s.user, turns["content"], s.content2)
    if followed is not None and s.content in followed and s.content2 in followed:
        after = followed[followed.rindex(s.content) + len(s.content):]
        findings.next_turn = after[: after.find(s.content2)] if s.content2 in after else ""
    if "thinking" in findings.modes and not any(slot("reasoning") in layout for layout in findings.turns.values()):
        # Some templates render reasoning only with thinking on: lay those turns out too.
        mode = findings.modes["thinking"]
        reasoning_kinds = {k: turns[k] for k in ("content", "reasoning+content", "calls", "reasoning+calls")}
        thinking = assistant_spans(renderer, s.user, reasoning_kinds, mode.variables, system=mode.system_flag or None)
        if thinking is not None:
            for kind, span in thinking[2].items():
                layout = _turn_layout(findings, kind, turns[kind], span)
                if layout is not None:
                    findings.thinking_turns[kind] = layout
    return findings


# Stand-ins for the bos / eos tokens when the source does not name them (a bare .jinja):
# templates concatenate them, so they must be strings; the spec says they are stand-ins.
PLACEHOLDER_TOKENS = {"bos_token": "<|bos_token|>", "eos_token": "<|eos_token|>"}


def probe(template: ChatTemplate) -> ProtocolSpec:
    """Derive the template's ProtocolSpec (both sentinel sets must agree on each field)."""
    with fixed_clock():  # templates that print the time must print the same one in every render
        return _probe(template)


def _probe(template: ChatTemplate) -> ProtocolSpec:
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
    modes = agreed("modes") or {"default": PromptMode(variables={}, tail=first.tail, start="content")}
    tool_calls = agreed("tool_calls")

    # Name the markers.
    boundaries = Boundaries(template.special_tokens)
    evidence: dict[str, str] = {}
    thinking_turns = first.thinking_turns if first.thinking_turns == second.thinking_turns else {}
    reasoning = (
        markers.reasoning_from_layouts(turns, evidence)
        or markers.reasoning_from_layouts(thinking_turns, evidence, note="with thinking on")
        or markers.reasoning_from_modes(modes, boundaries, evidence)
    )
    end_of_turn = markers.end_of_turn_markers(
        turns, tool_calls, first.next_turn if first.next_turn == second.next_turn else "",
        template.eos_token if "eos_token" not in missing else None, template.end_of_turn,
        boundaries, evidence,
    )
    content_start, content_end = markers.content_wrapper(turns, reasoning, boundaries, end_of_turn, evidence)

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
    spec = apply_overrides(spec)
    markers.start_states(spec.modes, spec.reasoning, turns, thinking_turns)
    if spec.reasoning is None:
        spec.warnings.append("no reasoning markers: no render shows a reasoning block, and no prompt opens one")
    return spec


def _as_data(value):
    from dataclasses import asdict, is_dataclass

    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, dict):
        return {k: _as_data(v) for k, v in value.items()}
    return value
