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
from ..runtime import TABLES_VERSION
from ..spec import ArgumentStyle, ProtocolSpec, ToolCallFormat, slot


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
    head = tool_calls.section_start if tool_calls.section_start.strip() else ""
    head = (head or next((p for p in tool_calls.call if isinstance(p, str)), "")).lstrip()
    others = [m.strip() for m in [spec.content_start, spec.content_end, *end_of_turn_markers(spec)] if m.strip()]
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
        for a, b in zip(mixed, mixed[1:] + [None]):
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
        if (isinstance(piece, str) and mixed[i + 1] == slot("content") and isinstance(mixed[i + 2], str)
                and mixed[i + 3] == slot("call_list")
                and "".join((piece + mixed[i + 2]).split()) == "".join(spec.tool_calls.section_start.split())):
            found = (piece.strip(), mixed[i + 2].strip())
    return found


_CHANNEL_NAME = re.compile(r"\s*([A-Za-z0-9_.-]+)")


def _before_slot(layout: list | None, name: str) -> str:
    """The literal right before slot `name` in a turn layout ("" where there is none)."""
    layout = layout or []
    at = layout.index(slot(name)) if slot(name) in layout else 0
    return layout[at - 1] if at and isinstance(layout[at - 1], str) else ""


def message_format(spec: ProtocolSpec, boundaries: Boundaries) -> dict | None:
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
    if tc is None or r is None or len(tc.call) != 3 or tc.call[0] != slot("name") or tc.call[2] != slot("arguments") \
            or not isinstance(tc.call[1], str):
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
    if not body or not channel or first_marker(body, boundaries) != body or first_marker(channel, boundaries) != channel:
        return None
    names = {}
    for kind, head in heads.items():
        inner = head.strip()[len(channel):len(head.strip()) - len(body)]
        found = _CHANNEL_NAME.match(inner)
        if not head.strip().startswith(channel) or not head.strip().endswith(body) or found is None:
            return None
        names.setdefault(found.group(1), kind)
    if len(set(names.values())) < 2 or "reasoning" not in names.values() or "content" not in names.values():
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
        "namespace": recipient[len(key):],  # the offered tools' names are in it; others are built-ins
    }


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


def reading_tables(spec: ProtocolSpec, special_tokens: tuple[str, ...] = ()) -> dict:
    """The runtime's tables for `spec`: plain data (str, bool, list, dict, None) only."""
    boundaries = Boundaries(special_tokens)
    end_markers = end_of_turn_markers(spec)
    r = spec.reasoning
    tables: dict = {
        "version": TABLES_VERSION,
        "modes": {name: {"tail": mode.tail, "start": mode.start.value} for name, mode in spec.modes.items()},
        "reasoning": None if r is None else {"start": r.start, "end": r.end,
                                             "call_ends_reasoning": r.tool_call_ends_reasoning},
        "content": {"start": spec.content_start, "end": spec.content_end,
                    "space_before": content_space_before(
                        spec, call_opener(spec, boundaries) if spec.tool_calls is not None else "")},
        "end_of_turn": end_markers,
        "tool_calls": None,
    }
    tc = spec.tool_calls
    if tc is not None:
        opener = call_opener(spec, boundaries)
        prefix, inline = content_prefix_and_inline_opener(spec, opener)
        inner = section_with_content(spec)
        args = tc.arguments
        if args.style == ArgumentStyle.OBJECT:
            arguments = {"style": args.style.value, "encoder": args.encoder}
        else:
            arguments = {"style": args.style.value, "argument": args.argument, "value_encoders": args.value_encoders,
                         "separator": args.separator, "quotes": list(args.quotes), "brackets": args.brackets}
        tables["tool_calls"] = {
            "opener": opener,
            "call_head": call_head(tc, boundaries),
            "section_start": tc.section_start,
            "section_end": cut_at_end(tc.section_end, end_markers),
            "section_inner": list(inner) if inner else None,
            "content_prefix": prefix,
            "inline_opener": inline,
            "call": list(tc.call),
            "separator": tc.separator,
            "parallel": tc.parallel.value,
            "arguments": arguments,
        }
        tables["messages"] = message_format(spec, boundaries)
    return json.loads(json.dumps(tables))  # a copy that is plain data, or a TypeError here


__all__ = ["call_head", "call_opener", "content_space_before", "content_may_follow_calls", "cut_at_end", "end_of_turn_markers",
           "message_format", "reading_tables"]
