"""How a spec is read: the answers the grammar builder and the streaming runtime share.

What opens a call, where a calls section ends, which markers end a turn, whether content
may follow the calls, which turn layouts need a form of their own: each question has one
answer here. `reading_tables(spec)` writes them as the runtime's tables, plain data that a
generated module embeds (through repr) and `tplparse.runtime.Protocol` prepares; the
grammar builder (`grammar.build`) and the llama.cpp request fields ask the same functions.
"""

from __future__ import annotations

import json
import re

from ..probe.markers import first_marker
from ..probe.spans import Boundaries
from ..runtime import (
    TABLES_VERSION,
    ArgumentsTable,
    BareCallsTable,
    BareListTable,
    MessagesTable,
    ReadingTables,
    SegmentsTable,
    SelfClosingTable,
    json_call_object,
)
from ..spec import ArgumentFormat, ArgumentStyle, Parallel, ProtocolSpec, ToolCallFormat, slot


def end_of_turn_markers(spec: ProtocolSpec) -> list[str]:
    """The markers that end a turn (blank ones name nothing to look for)."""
    return [m for m in spec.end_of_turn if m.strip()]


def call_opener(spec: ProtocolSpec, boundaries: Boundaries) -> str:
    """The marker that opens a calls section (what content stops at, and a lazy grammar
    triggers on): the first marker of the section's start, or (a section start that is only
    whitespace, or none) of the call's first literal; with the markers after it as long as
    it would also start another marker of the turn (a content wrapper's end, a reasoning
    marker, an end of turn: a generic tag such as <|close|> opens nothing by itself)."""
    tool_calls = spec.tool_calls
    assert tool_calls is not None  # (asked for a family with calls only)
    head = tool_calls.section_start if tool_calls.section_start.strip() else ""
    head = (head or next((p for p in tool_calls.call if isinstance(p, str)), "")).lstrip()
    others = [m.strip() for m in [spec.content_start, spec.content_end, *end_of_turn_markers(spec)]
              if m.strip()]
    if spec.reasoning is not None:
        others += [m.strip() for m in (spec.reasoning.start, spec.reasoning.end) if m.strip()]
    opener = first_marker(head, boundaries)
    while opener and len(opener) < len(head) and any(other.startswith(opener) for other in others):
        longer = opener + first_marker(head[len(opener):], boundaries)
        if len(longer) <= len(opener) or not head.startswith(longer):
            break
        opener = longer
    return opener


def call_head(tool_calls: ToolCallFormat, boundaries: Boundaries) -> str:
    """The first marker of one call (another call after a whitespace-only separator starts so)."""
    return first_marker(next((p for p in tool_calls.call if isinstance(p, str)), ""), boundaries)


def cut_at_end(text: str, end_markers: list[str]) -> str:
    """`text` up to its first end-of-turn marker (a model stops there)."""
    cut = min([text.find(m) for m in end_markers if m and m in text] or [len(text)])
    return text[:cut]


def content_may_follow_calls(spec: ProtocolSpec) -> bool:
    """Whether the template writes content after the calls (some put the answer last)."""
    for layout in spec.turns.values():
        slots = [p["slot"] for p in layout if isinstance(p, dict)]
        if "content" in slots and any(s in slots for s in ("calls", "call_list")):
            calls_at = min(slots.index(s) for s in ("calls", "call_list") if s in slots)
            if slots.index("content") > calls_at:
                return True
    return False


def content_prefix_and_inline_opener(spec: ProtocolSpec, opener: str) -> tuple[str, str]:
    """Without a call opener: the text a content turn starts with ("all\\n"), and the text
    between content and calls that opens the calls (">>>"). Empty when there is an opener."""
    content_layout = spec.turns.get("content") or []
    mixed = spec.turns.get("content+calls") or []
    prefix = inline = ""
    if spec.tool_calls and not opener and content_layout and isinstance(content_layout[0], str):
        prefix = content_layout[0].strip()
        for a, b in zip(mixed, mixed[1:] + [None], strict=True):
            if a == slot("content") and isinstance(b, str) and b.strip():
                inline = b.strip()
    return prefix, inline


def section_with_content(spec: ProtocolSpec) -> tuple[str, str] | None:
    """A section whose start is two markers that content may sit between
    (<|python_start|>content<|python_end|>calls): the two markers, else None."""
    mixed = spec.turns.get("content+calls") or []
    if not spec.tool_calls:
        return None
    found = None
    for i, piece in enumerate(mixed[:-3]):
        after = mixed[i + 2]
        if isinstance(piece, str) and mixed[i + 1] == slot("content") \
                and isinstance(after, str) and mixed[i + 3] == slot("call_list") \
                and "".join((piece + after).split()) \
                == "".join(spec.tool_calls.section_start.split()):
            found = (piece.strip(), after.strip())
    return found


_CHANNEL_NAME = re.compile(r"\s*([A-Za-z0-9_.-]+)")


def _before_slot(layout: list | None, name: str) -> str:
    """The literal right before slot `name` in a turn layout ("" where there is none)."""
    layout = layout or []
    at = layout.index(slot(name)) if slot(name) in layout else 0
    return layout[at - 1] if at and isinstance(layout[at - 1], str) else ""


def message_format(spec: ProtocolSpec, boundaries: Boundaries) -> MessagesTable | None:
    """A turn written as a sequence of messages, each with a header (harmony's
    `<|channel|>final<|message|>…`): the markers and names the runtime reads such a turn by,
    or None for other formats. Found in the renders' layouts, not by name: the text right
    before every body (the content, the reasoning, a call's arguments) starts with one
    marker and ends with another (the channel marker, the body marker); the word after the
    channel marker (the channel) differs between content and reasoning; the reasoning turn
    goes on to its content through a message end and a message start; and the call's name
    sits in a header field of its own before the channel marker (the recipient,
    `to=functions.NAME`: its key up to `=`, then a namespace the tools' names are in)."""
    tc, r = spec.tool_calls, spec.reasoning
    if tc is None or r is None or len(tc.call) != 3 or tc.call[0] != slot("name") \
            or tc.call[2] != slot("arguments") or not isinstance(tc.call[1], str):
        return None
    mixed = spec.turns.get("reasoning+content") or []
    heads = {"content": _before_slot(spec.turns.get("content"), "content"),
             "reasoning": _before_slot(mixed, "reasoning"), "calls": tc.call[1]}
    if not all(heads.values()):
        return None
    first, *others = heads.values()
    suffix = min(boundaries.split_common_suffix(first, h) for h in others)
    prefix = min(boundaries.split_common_prefix(first, h) for h in others)
    body, channel = first[len(first) - suffix:].strip(), first[:prefix].strip()
    if not body or not channel or first_marker(body, boundaries) != body \
            or first_marker(channel, boundaries) != channel:
        return None
    names: dict[str, str] = {}
    for kind, head in heads.items():
        inner = head.strip()[len(channel):len(head.strip()) - len(body)]
        found = _CHANNEL_NAME.match(inner)
        if not head.strip().startswith(channel) or not head.strip().endswith(body) or found is None:
            return None
        names.setdefault(found.group(1), kind)
    if len(set(names.values())) < 2 or "reasoning" not in names.values() \
            or "content" not in names.values():
        return None  # (content and reasoning on one channel: the channel cannot tell them)
    # The reasoning turn: reasoning, then a message end and a message start, then content's header.
    between = mixed[mixed.index(slot("reasoning")) + 1] if slot("reasoning") in mixed else None
    if not isinstance(between, str) or not between.endswith(heads["content"]):
        return None
    separator = between[: len(between) - len(heads["content"])].strip()
    end = first_marker(separator, boundaries)
    start = separator[len(end):].strip()
    recipient = tc.section_start.strip()
    call_end = tc.section_end.strip()
    if not end or not start or not recipient or any(c.isspace() for c in recipient) or not call_end:
        return None
    key = recipient[: recipient.index("=") + 1] if "=" in recipient else recipient
    return {
        "start": start,  # opens each message after the first (the prompt wrote the first one's)
        "channel": channel,
        "body": body,
        "end": end,  # ends a message the turn goes on after
        "call_end": call_end,  # ends a call's message
        "channels": names,  # channel -> what its messages hold: reasoning, content, calls
        "recipient": key,  # the header field that addresses a message to a tool
        # the offered tools' names are in it; others are built-ins
        "namespace": recipient[len(key):],
    }


def end_opens_content(spec: ProtocolSpec, boundaries: Boundaries) -> str:
    """The part of a compound reasoning end marker that opens the content block (Kimi K3's
    `<|open|>response<|sep|>` of `<|close|>think<|sep|><|open|>response<|sep|>`): the suffix,
    at a marker's start, that pairs with the content's end marker (`<|close|>response<|sep|>`:
    the same text after a first token of its own). A model whose prompt opened reasoning that
    begins its output with it wrote an empty block. "" where the end marker has no such part."""
    end, closer = (spec.reasoning.end if spec.reasoning else ""), spec.content_end.strip()
    closer_token = first_marker(closer, boundaries) if closer else ""
    if not end or not closer_token or closer_token == closer:
        return ""
    for at in range(1, len(end)):
        tail = end[at:]
        token = first_marker(tail, boundaries)
        if tail.startswith(token) and token != closer_token \
                and tail[len(token):] == closer[len(closer_token):] \
                and boundaries.is_split_point(end, at):
            return tail
    return ""


def _assistant_headers(spec: ProtocolSpec) -> list[str]:
    """The assistant headers the generation prompts write (stripped, longest first)."""
    return sorted({m.header.strip() for m in spec.modes.values() if m.header.strip()}, key=len,
                  reverse=True)


def segment_format(spec: ProtocolSpec, boundaries: Boundaries) -> SegmentsTable | None:
    """A turn written as segments, each with a header of its own (`…<|eom|><|start|>assistant
    to=user<|message|>…`, `…<|im_end|>\n<|im_start|>assistant -> tool/function_call\n[…`): the
    marker that ends a segment the turn goes on after, and the header that opens the next one.
    {"end": that marker, "header": that header, "calls": whether the header is the calls
    section's own (the section start begins with the end marker: the next segment is calls,
    read from the end marker on)}; None for other formats. Found in the spec, not by name:

    - the reasoning's end marker is a marker, then an assistant header the generation prompt
      writes (the reasoning segment ends, the next segment's header follows); or
    - what the template writes between content and the calls (the content+calls layout's
      literal, then the section start) begins with an end-of-turn marker: the content turn
      ends, and the calls follow in a turn of their own (an assistant header, or the calls'
      own role header)."""
    headers = _assistant_headers(spec)
    r = spec.reasoning
    if r is not None and r.end.strip():
        end = r.end.strip()
        for header in headers:
            before = end[: len(end) - len(header)].strip() if end.endswith(header) else ""
            if before and first_marker(before, boundaries) == before:
                return {"end": before, "header": header, "calls": False}
    tc = spec.tool_calls
    mixed = spec.turns.get("content+calls") or []
    if tc is None or slot("content") not in mixed:
        return None
    between = ""
    for piece in mixed[mixed.index(slot("content")) + 1:]:
        if piece in (slot("calls"), slot("call_list")):
            break
        if not isinstance(piece, str):
            return None
        between += piece
    text = (between + tc.section_start).lstrip()
    end_marker = next((m.strip() for m in end_of_turn_markers(spec)
                       if m.strip() and text.startswith(m.strip())), None)
    if end_marker is None:
        return None
    rest = text[len(end_marker):].strip()
    prompt_header = next((h for h in headers if rest.startswith(h)), None)
    if prompt_header is not None:
        return {"end": end_marker, "header": prompt_header, "calls": False}
    own_header = first_marker(rest, boundaries) \
        if not between.strip() and tc.section_start.lstrip().startswith(end_marker) else ""
    if not own_header or not any(c.isalnum() for c in own_header):
        return None
    return {"end": end_marker, "header": own_header, "calls": True}


def repeated_headers(spec: ProtocolSpec, boundaries: Boundaries) -> list[str]:
    """What a model may write again at the output's start that the generation prompt already
    wrote: the assistant header, and each end of it from one of its markers on (a role token,
    `<|CHATBOT_TOKEN|>`), longest first. An end that is a plain word (`assistant`: a model's
    answer may start with it) or holds a reasoning or content marker (the model opening a
    block is not a repetition) is not one."""
    markers = [m.strip() for m in (spec.content_start, spec.content_end) if m.strip()]
    if spec.reasoning is not None:
        markers += [m.strip() for m in (spec.reasoning.start, spec.reasoning.end) if m.strip()]
    found = set()
    for header in _assistant_headers(spec):
        at = 0
        while at < len(header):
            end = header[at:]
            if end[:1] in "<[" and any(c.isalnum() for c in end) \
                    and not any(m in end for m in markers):
                found.add(end)
            step = len(first_marker(end, boundaries))
            at += max(step, 1)
            while at < len(header) and header[at].isspace():
                at += 1
    return sorted(found, key=lambda h: (-len(h), h))


def content_space_before(spec: ProtocolSpec, opener: str) -> dict[str, str]:
    """marker -> the whitespace the template writes between the content and that marker
    ("" where it writes none; "" as a key: the end of the output, as for the turn's end
    markers). Content keeps the whitespace it ends with, less its last run of the characters
    the template writes there: `…weather. <|tool_calls_section_begin|>` keeps its space (Kimi
    writes none), and so does `…weather. <tool_call>` where GLM writes "\n" (the space is the
    model's); in `…weather.\n<tool_call>` the newline is the template's, however many there
    are. A marker the layouts do not show right after content is not in it."""
    found = {}

    def written_before(layout, marker):
        if slot("content") not in layout or not marker:
            return None
        after = ""
        for piece in layout[layout.index(slot("content")) + 1:]:
            if isinstance(piece, str):
                after += piece
            elif piece in (slot("calls"), slot("call_list")) and spec.tool_calls is not None:
                first = next((p for p in spec.tool_calls.call if isinstance(p, str)), "")
                after += spec.tool_calls.section_start + first
            else:
                break
            if marker in after:
                written = after[: after.index(marker)]
                return written if not written.strip() else None
        return None

    ends = [m.strip() for m in end_of_turn_markers(spec)]
    candidates = [(m, spec.turns.get("content")) for m in ends]
    if opener:
        candidates.append((opener, spec.turns.get("content+calls")))
    if spec.content_end.strip():
        candidates.append((spec.content_end.strip(), spec.turns.get("content")))
    for marker, layout in candidates:
        written = written_before(layout or [], marker)
        if written is not None:
            found[marker] = written
    at_the_end = {found.get(m) for m in ends}
    if ends and len(at_the_end) == 1 and None not in at_the_end:
        found[""] = at_the_end.pop()
    return found


def calls_without_opener(spec: ProtocolSpec, boundaries: Boundaries,
                         opener: str) -> BareCallsTable | None:
    """A call written without the marker that opens the calls, where the call's own marker
    is unambiguous (`<function=NAME>…</function>` for
    `<tool_call>\n<function=NAME>…</function>\n</tool_call>`, `<invoke name="f">…</invoke>`
    without `<minimax:tool_call>`): {"opener": that marker, "call":
    the call layout from it, "closer": the pair of the opener left out (`</tool_call>`), read
    if it comes}; None where the call has no marker of its own after the opener, the call is
    a JSON object (its keys tell it, not a marker), or the marker is written anywhere else."""
    tc = spec.tool_calls
    assert tc is not None  # (asked for a family with calls only)
    call = list(tc.call)
    if not call or not isinstance(call[0], str) or not isinstance(call[-1], str) or len(call) < 3 \
            or json_call_object(call) is not None:
        return None
    head = call[0].lstrip()
    closer = ""
    if tc.section_start.strip():
        # (the section's marker opens the calls; the call has its own)
        inner = first_marker(head, boundaries)
        layout = [head] + call[1:]
    else:
        outer = first_marker(head, boundaries)
        rest = head[len(outer):].lstrip()
        inner = first_marker(rest, boundaries) if rest.strip() else ""
        # (the pair of the opener: `<tool_call>` -> `</tool_call>`)
        closer = outer[:1] + "/" + outer[1:]
        last = call[-1].rstrip()
        if not inner or not rest.startswith(inner) or len(outer) < 3 or not last.endswith(closer):
            return None
        layout = [rest] + call[1:-1] + [last[: len(last) - len(closer)]]
    if not inner or inner == opener or not any(c.isalnum() for c in inner) or inner[:1] not in "<[":
        return None
    others = [*spec.end_of_turn, spec.content_start, spec.content_end, tc.section_end, tc.separator,
              *[p for p in call[1:] if isinstance(p, str)]]
    if spec.reasoning is not None:
        others += [spec.reasoning.start, spec.reasoning.end]
    for argument in tc.arguments.argument.values():
        others += [p for p in argument if isinstance(p, str)]
    if any(inner in text for text in others if text):
        return None  # (written elsewhere too: it would not tell a call)
    return {"opener": inner, "call": layout, "closer": closer,
            "self_closing": self_closing_call(layout)}


def self_closing_call(layout: list) -> SelfClosingTable | None:
    """A call element written self-closing, with no arguments (`<invoke name="f"/>` for
    `<invoke name="f">…</invoke>`): where the literal after the name ends the element's
    opening tag (`">`) and a later literal, after the arguments, starts with that element's
    closing tag. {"at": the step of that literal, "written": it self-closed (`" />`: its
    whitespace run matches any or none), "resume": the step of the closing literal, "rest":
    what that literal writes after the closing tag}; None for other layouts."""
    call = list(layout)
    if slot("name") not in call or slot("arguments") not in call:
        return None
    at = call.index(slot("name")) + 1
    arguments = call.index(slot("arguments"))
    before = "".join(p for p in call[: at - 1] if isinstance(p, str))
    if at >= len(call) or not isinstance(call[at], str) or arguments < at or "<" not in before:
        return None
    tag = re.match(r"[A-Za-z0-9_:.\-｜]+", before[before.rindex("<") + 1:])
    opened = call[at].strip()
    if tag is None or not opened.endswith(">") or "<" in opened:
        return None
    closing = "</" + tag.group() + ">"
    for resume in range(arguments + 1, len(call)):
        piece = call[resume]
        if isinstance(piece, str) and piece.strip():
            if not piece.lstrip().startswith(closing):
                return None
            return {"at": at, "written": opened[:-1] + " />", "resume": resume,
                    "rest": piece.lstrip()[len(closing):]}
    return None


def list_without_wrapper(spec: ProtocolSpec, boundaries: Boundaries) -> BareListTable | None:
    """A pythonic list of calls written without the marker tokens that wrap it (`[f(a=1)]`
    for `<|tool_call_start|>[f(a=1)]<|tool_call_end|>`): {"open": "[", "close": "]", "call":
    "(" (what follows a call's name)}, where the section is markers around a bracket pair and
    a call is its name, then a bracket; None for other formats. (The runtime reads such a
    list only when tools are offered and the whole list reads as calls of them.)"""
    tc = spec.tool_calls
    assert tc is not None  # (asked for a family with calls only)
    call = list(tc.call)
    start, end = tc.section_start.strip(), tc.section_end.strip()
    if len(call) < 3 or call[0] != slot("name") or not isinstance(call[1], str) or not start \
            or not end:
        return None
    opener = first_marker(start, boundaries)
    inside = start[len(opener):].strip()
    closer_at = max(end.rfind("<"), end.rfind("["))
    inside_end = end[:closer_at].strip() if closer_at > 0 else ""
    pairs = {"[": "]", "(": ")", "{": "}"}
    if not opener or len(inside) != 1 or pairs.get(inside) != inside_end \
            or call[1].strip() not in ("(", "{"):
        return None
    return {"open": inside, "close": inside_end, "call": call[1].strip()}


def one_call_object(tc: ToolCallFormat, end_markers: list[str]) -> tuple[str, list, str]:
    """(section start, call layout, section end) as the runtime reads them: a section that
    holds one call (parallel calls refused or cut to the first) and opens and closes that
    call's JSON object (Llama 3.1: `{"name": "` … `}`) is read as the call's own text, so the
    call is a JSON object read by its keys (see json_call_object); otherwise as the spec has
    them."""
    call = list(tc.call)
    if tc.parallel == Parallel.ALL or not tc.section_start.strip() \
            or json_call_object(call) is not None:
        return tc.section_start, call, tc.section_end
    folded = [tc.section_start, *call, cut_at_end(tc.section_end, end_markers)]
    merged: list = []
    for piece in folded:  # (adjacent literals as one)
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        elif piece != "":
            merged.append(piece)
    found = json_call_object(merged)
    if found is None or found.first != 0 or found.before.strip():
        return tc.section_start, call, tc.section_end
    return "", merged, ""


def arguments_table(args: ArgumentFormat) -> ArgumentsTable:
    """How the runtime reads a call's arguments: one object in an encoder, or key/value
    arguments by their layouts (plain data, as in the reading tables)."""
    if args.style == ArgumentStyle.OBJECT:
        return {"style": args.style.value, "encoder": args.encoder}
    return json.loads(json.dumps({
        "style": args.style.value, "argument": args.argument, "value_encoders": args.value_encoders,
        "separator": args.separator, "quotes": list(args.quotes), "brackets": args.brackets}))


def reading_tables(spec: ProtocolSpec, special_tokens: tuple[str, ...] = ()) -> ReadingTables:
    """The runtime's tables for `spec`: plain data (str, bool, list, dict, None) only."""
    boundaries = Boundaries(special_tokens)
    end_markers = end_of_turn_markers(spec)
    r = spec.reasoning
    tables: dict = {
        "version": TABLES_VERSION,
        "modes": {name: {"tail": mode.tail, "start": mode.start.value, "header": mode.header}
                  for name, mode in spec.modes.items()},
        "reasoning": None if r is None else {
            "start": r.start, "end": r.end, "call_ends_reasoning": r.tool_call_ends_reasoning,
            "end_opens_content": end_opens_content(spec, boundaries)},
        "content": {"start": spec.content_start, "end": spec.content_end,
                    "space_before": content_space_before(
                        spec, call_opener(spec, boundaries) if spec.tool_calls is not None
                        else "")},
        "end_of_turn": end_markers,
        "tool_calls": None,
        "segments": segment_format(spec, boundaries),
        "repeated_headers": repeated_headers(spec, boundaries),
    }
    tc = spec.tool_calls
    if tc is not None:
        opener = call_opener(spec, boundaries)
        prefix, inline = content_prefix_and_inline_opener(spec, opener)
        inner = section_with_content(spec)
        section_start, call, section_end = one_call_object(tc, end_markers)
        tables["tool_calls"] = {
            "opener": opener,
            "call_head": call_head(tc, boundaries),
            "section_start": section_start,
            "section_end": cut_at_end(section_end, end_markers),
            "section_inner": list(inner) if inner else None,
            "content_prefix": prefix,
            "inline_opener": inline,
            "call": call,
            "separator": tc.separator,
            "parallel": tc.parallel.value,
            "arguments": arguments_table(tc.arguments),
        }
        tables["tool_calls"]["bare"] = calls_without_opener(spec, boundaries, opener)
        tables["tool_calls"]["self_closing"] = self_closing_call(call)
        tables["tool_calls"]["bare_list"] = list_without_wrapper(spec, boundaries)
        tables["tool_calls"]["wrappers"] = list(tc.wrappers)
        # The variant the template's tool instructions tell the model to write
        # (probe/instructions.py).
        tables["tool_calls"]["instructed_bare"] = tc.instructed_bare \
            and bool(tc.section_start.strip())
        tables["tool_calls"]["instructed_separators"] = list(tc.instructed_separators)
        tables["messages"] = message_format(spec, boundaries)
    return json.loads(json.dumps(tables))  # a copy that is plain data, or a TypeError here


__all__ = ["arguments_table", "call_head", "call_opener", "calls_without_opener",
           "list_without_wrapper", "self_closing_call", "content_space_before",
           "content_may_follow_calls", "cut_at_end", "end_of_turn_markers", "message_format",
           "reading_tables", "repeated_headers", "segment_format"]
