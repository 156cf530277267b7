"""Markers from layouts: reasoning start/end, content wrapper, end of turn, start states.

The probe's turn layouts say exactly what a template writes around each slot; this module
names the pieces. Every result carries its evidence (which layouts, which text), so the
probe report can show why it believes a marker is one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..spec import Piece, PromptMode, Reasoning, Start, ToolCallFormat, slot
from .spans import Boundaries, common_prefix_length

_MARKER_END = frozenset(">]\n")


def _text(pieces: list[Piece]) -> str:
    return "".join(p for p in pieces if isinstance(p, str))


def _slot_positions(layout: list[Piece]) -> list[tuple[int, str]]:
    return [(i, p["slot"]) for i, p in enumerate(layout) if isinstance(p, dict)]


def _before_first_slot(layout: list[Piece]) -> str:
    positions = _slot_positions(layout)
    return _text(layout[: positions[0][0]]) if positions else _text(layout)


def first_marker(text: str, boundaries: Boundaries) -> str:
    """The first marker of `text` (after whitespace): a special token, or text up to a marker
    end."""
    text = text.lstrip()
    for token in sorted(boundaries.special_tokens, key=len, reverse=True):
        if token.strip() and text.startswith(token):
            return token
    for i, ch in enumerate(text):
        if ch in _MARKER_END and i > 0:
            return text[: i + 1].strip() if ch != "\n" else text[:i].strip()
    return text.strip()


# A channel's name after an opening marker: a word, then the end of its line.
_CHANNEL_NAME = re.compile(r"[A-Za-z_]\w*(?=[ \t]*\n)")


def split_empty_block(text: str, boundaries: Boundaries) -> tuple[str, str] | None:
    """An empty reasoning block "<start>   <end>" split into its two markers. A word written
    right after the first marker, alone on its line, is the block's channel name and part of
    the opener (`<|channel>thought\n<channel|>`: the model writes `<|channel>thought`)."""
    text = text.strip()
    if not text:
        return None
    start = first_marker(text, boundaries)
    channel = _CHANNEL_NAME.match(text, len(start))
    if channel is not None and start.endswith((">", "]", "|")):
        start += channel.group()
    rest = text[len(start):].strip()
    if not rest or not start:
        return None
    # The end marker is the last marker of what remains.
    for token in sorted(boundaries.special_tokens, key=len, reverse=True):
        if token.strip() and rest.endswith(token):
            return start, token
    cut = max(rest.rfind(ch, 0, len(rest) - 1) for ch in _MARKER_END)
    end = rest[cut + 1:].strip() if cut != -1 else rest
    return start, end


@dataclass
class Markers:
    reasoning: Reasoning | None = None
    content_start: str = ""
    content_end: str = ""
    end_of_turn: list[str] = field(default_factory=list)
    evidence: dict[str, str] = field(default_factory=dict)


def reasoning_from_layouts(turns: dict[str, list[Piece]], evidence: dict[str, str],
                           note: str = "") -> Reasoning | None:
    """Reasoning markers from a turn that renders reasoning next to content or calls."""
    for kind, partner in (("reasoning+content", "content"), ("reasoning+calls", "calls")):
        layout = turns.get(kind)
        if not layout or slot("reasoning") not in layout:
            continue
        i = layout.index(slot("reasoning"))
        after = [(j, name) for j, name in _slot_positions(layout) if j > i]
        if not after:
            continue
        before = _text(layout[:i])
        between = _text(layout[i + 1: after[0][0]])
        partner_layout = turns.get(partner) or []
        partner_prefix = _before_first_slot(partner_layout) if partner_layout else ""
        if partner_prefix and partner_prefix == before + between:
            # The template writes the block even with no reasoning: start + end + (nothing).
            start, end = before, between
            how = f"{kind}: around the reasoning; {partner}: the same block, empty"
        else:
            # Leading whitespace both turns write is not part of the marker.
            common = common_prefix_length(before, partner_prefix)
            common = common if not before[:common].strip() else 0
            start = before[common:]
            end = between
            how = (f"{kind}: text before and after the reasoning, less what a "
                   f"{partner} turn has anyway")
            if partner_prefix and between.endswith(partner_prefix[common:]) \
                    and partner_prefix[common:]:
                end = between[: len(between) - len(partner_prefix[common:])]
                if not end.strip() and between.strip():
                    # What the partner turn has anyway is the end marker itself: the template
                    # closes the block even when there is no reasoning (</think>{content}).
                    end = between
                    how = (f"{kind}: text before and after the reasoning; a {partner} "
                           "turn writes the end alone")
        if not end.strip():
            continue
        how += f", {note}" if note else ""
        evidence["reasoning.start"] = f"{start.strip()!r} ({how})" if start.strip() \
            else "written by the generation prompt"
        evidence["reasoning.end"] = f"{end.strip()!r} ({how})"
        return Reasoning(start=start.strip(), end=end.strip(), in_history=True)
    return None


def reasoning_from_modes(modes: dict[str, PromptMode], boundaries: Boundaries,
                         evidence: dict[str, str]) -> Reasoning | None:
    """Reasoning markers from two modes of a switch: one opens the block, the other also closes
    it, or writes an empty block (thinking on / off; or any two values of one variable)."""
    for on_name, off_name in _mode_pairs(modes):
        found = _block_between(modes[on_name], modes[off_name], boundaries)
        if found is None:
            continue
        start, end, how = found
        names = "" if (on_name, off_name) == ("thinking", "no_thinking") \
            else f" ({on_name} and {off_name})"
        evidence["reasoning.start"] = f"{start!r} ({how}{names})"
        evidence["reasoning.end"] = f"{end!r} ({how}{names})"
        return Reasoning(start=start, end=end, in_history=False)
    return None


def _mode_pairs(modes: dict[str, PromptMode]):
    """(on, off) pairs of mode names to read an empty block from: thinking / no_thinking first,
    then any two modes of one variable, and the default beside each other mode."""
    if "thinking" in modes and "no_thinking" in modes:
        yield "thinking", "no_thinking"
    names = list(modes)
    for a in names:
        for b in names:
            if a != b and (a == "default" or b == "default"
                           or modes[a].variables.keys() == modes[b].variables.keys()):
                yield a, b


def _block_between(on: PromptMode, off: PromptMode,
                   boundaries: Boundaries) -> tuple[str, str, str] | None:
    """(start, end, how) when `off`'s tail is `on`'s and an end marker after it, or an empty
    block where `on` writes nothing."""
    if on.tail.strip() and off.tail.strip().startswith(on.tail.strip()):
        end = off.tail.strip()[len(on.tail.strip()):].strip()
        return (on.tail.strip(), end, "thinking on opens it; thinking off also closes it") \
            if end else None
    if on.tail.strip():
        return None
    split = split_empty_block(off.tail, boundaries)
    if split is not None:
        return (*split, "thinking off writes an empty block")
    # The header every turn shares opens the block (`…<think>`), and thinking off closes it
    # right away: the end marker is what it adds, the opener that end's pair (`</think>`).
    end = off.tail.strip()
    opener = end.replace("/", "", 1)
    if "/" in end and opener != end and on.header == off.header \
            and on.header.rstrip().endswith(opener):
        return opener, end, "the assistant header opens it; thinking off closes it at once"
    return None


_OPENING_TAG = re.compile(r"<([A-Za-z][\w:.-]*)>")


def reasoning_from_prompt(modes: dict[str, PromptMode],
                          evidence: dict[str, str]) -> Reasoning | None:
    """Reasoning that a generation prompt opens with a tag (<think>) when no render shows the
    block (history turns strip it): the end is that tag's own closing tag."""
    for name in ["default", "thinking"] + [n for n in modes
                                           if n not in ("default", "thinking", "no_thinking")]:
        mode = modes.get(name)
        if mode is None:
            continue
        found = _OPENING_TAG.fullmatch(mode.tail.strip().rsplit("\n", 1)[-1].strip())
        if found:
            start, end = found.group(0), f"</{found.group(1)}>"
            how = (f"the {name} generation prompt ends with {start!r} and no render closes it: "
                   "the tag's own closing tag")
            evidence["reasoning.start"] = f"{start!r} ({how})"
            evidence["reasoning.end"] = f"{end!r} ({how})"
            return Reasoning(start=start, end=end, in_history=False)
    return None


# A template's code that cuts an assistant message's content at a closing tag and keeps what
# follows it (`content.split('</think>')[-1]`): the tag ends reasoning the model wrote.
_SPLIT_AT_A_CLOSING_TAG = re.compile(
    r"""\.split\(\s*(['"])</([A-Za-z][\w:.-]*)>\1\s*\)\s*\[\s*-1\s*\]""")


def reasoning_from_source(source: str, evidence: dict[str, str]) -> Reasoning | None:
    """Reasoning that history strips and no prompt opens, named by the template's code: it
    keeps only what follows one closing tag of an assistant message's content (DeepSeek R1's
    `content.split('</think>')[-1]`), so the model writes its reasoning before that tag, and
    the tag's own opening tag opens it. None when no such cut is written, or cuts at two
    different tags (not guessed)."""
    names = {found.group(2) for found in _SPLIT_AT_A_CLOSING_TAG.finditer(source)}
    if len(names) != 1:
        return None
    name = names.pop()
    start, end = f"<{name}>", f"</{name}>"
    how = (f"no render shows the block and no prompt opens it; the template's code keeps only "
           f"what follows {end!r} of an assistant message (`.split({end!r})[-1]`): the tag's "
           "own opening tag opens it")
    evidence["reasoning.start"] = f"{start!r} ({how})"
    evidence["reasoning.end"] = f"{end!r} ({how})"
    return Reasoning(start=start, end=end, in_history=False)


def opener_in_header(header: str, reasoning: Reasoning | None, evidence: dict[str, str]) -> None:
    """A reasoning block whose opener no render shows apart from the assistant header: every
    assistant turn (and the generation prompt) starts with it, so it is part of the header
    the renders share (`<|im_start|>assistant\n<think>\n`). Named when the header ends with
    the end marker's pair (the end without its `/`: `</think>` -> `<think>`), so a model that
    writes it again can be read (the spec's start marker); otherwise left unnamed."""
    if reasoning is None or reasoning.start or "/" not in reasoning.end:
        return
    opener = reasoning.end.replace("/", "", 1)
    if opener.strip() and opener != reasoning.end and header.rstrip().endswith(opener):
        reasoning.start = opener
        evidence["reasoning.start"] = (f"{opener!r} (the assistant header every turn shares ends "
                                       f"with it, the pair of {reasoning.end!r}: the generation "
                                       "prompt opens the block)")


def content_wrapper(turns: dict[str, list[Piece]], reasoning: Reasoning | None,
                    boundaries: Boundaries, end_of_turn: list[str],
                    evidence: dict[str, str]) -> tuple[str, str]:
    """Text a content-only turn writes right around its content that is not reasoning or end of
    turn."""
    layout = turns.get("content")
    if not layout or slot("content") not in layout:
        return "", ""
    i = layout.index(slot("content"))
    before, after = _text(layout[:i]), _text(layout[i + 1:])
    if reasoning is not None and reasoning.end and reasoning.end in before:
        before = before[before.index(reasoning.end) + len(reasoning.end):]
    start = before.strip()
    end = after.strip()
    for marker in end_of_turn:
        if marker and marker in end:
            end = end[: end.index(marker)].strip()
    if start:
        evidence["content.start"] = f"{start!r} (content turn: before the content)"
    if end:
        evidence["content.end"] = (f"{end!r} (content turn: after the content, "
                                   "before the end of turn)")
    return start, end


def _markers_in(text: str, boundaries: Boundaries) -> list[str]:
    """The markers of `text`, in order."""
    found = []
    rest = text.strip()
    while rest:
        marker = first_marker(rest, boundaries)
        if not marker:
            break
        found.append(marker)
        rest = rest[rest.index(marker) + len(marker):].strip()
    return found


def _inner_literals(turns: dict[str, list[Piece]], tool_calls: ToolCallFormat | None) -> list[str]:
    """Text the template writes inside a turn: before the value of a content turn and of a
    calls turn, and inside the calls (an end-of-turn marker found there would end those turns
    early). (Turns with reasoning are left out: some templates render the reasoning as a turn
    of its own, ended by the same marker.)"""
    inner = []
    for kind in ("content", "calls"):
        layout = turns.get(kind) or []
        positions = _slot_positions(layout)
        if positions:
            inner += [p for p in layout[: positions[-1][0]] if isinstance(p, str)]
    if tool_calls is not None:
        inner += [tool_calls.section_start, tool_calls.separator] \
            + [p for p in tool_calls.call if isinstance(p, str)]
        for layout in tool_calls.arguments.argument.values():
            inner += [p for p in layout if isinstance(p, str)]
    return [text for text in inner if text.strip()]


def _unambiguous(marker: str, tails: dict[str, str], inner: list[str],
                 boundaries: Boundaries) -> str:
    """`marker` with as few of the markers that follow it as make it a text every turn's tail
    writes and no turn writes inside ("" when there is none)."""
    first = next(iter(tails.values()))
    at = first.find(marker)
    while at != -1:
        rest = first[at:]
        for count in range(2, len(_markers_in(rest, boundaries)) + 1):
            pieces = _markers_in(rest, boundaries)[:count]
            end = 0
            for piece in pieces:
                end = rest.index(piece, end) + len(piece)
            candidate = rest[:end]
            if all(candidate in tail for tail in tails.values()) \
                    and not any(candidate in text for text in inner):
                return candidate
        at = first.find(marker, at + 1)
    return ""


def end_of_turn_markers(turns: dict[str, list[Piece]], tool_calls: ToolCallFormat | None,
                        next_turn: str, eos: str | None, declared: tuple[str, ...],
                        boundaries: Boundaries,
                        evidence: dict[str, str]) -> list[str]:
    """The markers that end an assistant turn.

    The first marker that every turn writes after its last slot (a content wrapper's end
    is written by content turns only); the end of a calls section when it closes the turn
    and is a special token; when no turn writes one, the first marker before the next user
    turn; the model's eos and end-of-turn tokens.
    """
    tails: dict[str, list[str]] = {}
    tail_texts: dict[str, str] = {}
    section_closers = []
    for kind, layout in turns.items():
        positions = _slot_positions(layout)
        if not positions:
            continue
        last_index, last_name = positions[-1]
        tail = _text(layout[last_index + 1:])
        if last_name in ("calls", "call_list") and tool_calls is not None and not tail.strip():
            closers = _markers_in(tool_calls.section_end, boundaries)
            if closers:
                section_closers.append(closers[-1])
            continue
        if tail.strip():
            tails[kind] = _markers_in(tail, boundaries)
            tail_texts[kind] = tail
    markers: list[str] = []

    def add(marker: str | None, why: str) -> None:
        if marker and marker not in markers:
            markers.append(marker)
            evidence[f"end_of_turn {marker!r}"] = why

    if tails:
        first_kind = next(iter(tails))
        common = [m for m in tails[first_kind] if all(m in other for other in tails.values())]
        inner = _inner_literals(turns, tool_calls)
        marker = common[0] if common else ""
        if marker and any(marker in text for text in inner):
            # The template writes this marker inside turns too (a generic close tag): it ends
            # a turn only with what follows it there (<|close|> + message<|sep|>).
            marker = _unambiguous(marker, tail_texts, inner, boundaries)
        if marker:
            add(marker, "the first marker every turn writes after its last slot ("
                + ", ".join(sorted(tails)) + ")"
                + ("" if marker in common else ", with the markers that follow it: alone, the "
                                               "template writes it inside turns too"))
        else:
            for kind, found in tails.items():
                add(found[0], f"the first marker after the last slot of a {kind} turn")
    for closer in section_closers:
        # Only a special token is a safe stop string (text like "]" can occur in arguments).
        if closer in boundaries.special_tokens:
            add(closer, "the calls section's end (a special token) closes the turn")
    next_markers = _markers_in(next_turn, boundaries)
    if not markers and next_markers:
        add(next_markers[0], "no turn writes an end marker; the first marker "
                             "before the next user turn")
    for token in (eos, *declared):
        add(token, "the model's eos / end-of-turn token")
    return markers


def _leaves_open(prompt: str, reasoning: Reasoning) -> bool:
    """Whether `prompt` ends inside a reasoning block: its last opener comes after its last
    end marker (whatever the prompt wrote into the block after it, a budget note's opening
    tag, the model goes on inside the block)."""
    opened = prompt.rfind(reasoning.start)
    return opened != -1 and opened > prompt.rfind(reasoning.end)


def _opener_written(tail: str, end: str) -> str:
    """What a generation prompt that opens reasoning wrote to open it, when no render shows
    the opener: the end marker's pair (`</think>` -> `<think>`) when the prompt ends with it
    (a prompt that writes more before it: DeepSeek V3.2's `<｜User｜>\n<｜Assistant｜><think>`),
    else the whole tail."""
    pair = end.replace("/", "", 1)
    return pair if "/" in end and pair != end and tail.endswith(pair) else tail


def start_states(modes: dict[str, PromptMode], reasoning: Reasoning | None,
                 turns: dict[str, list[Piece]], thinking_turns: dict[str, list[Piece]],
                 header: str = "") -> None:
    """Whether each mode's generation prompt leaves the model inside reasoning.

    What the generation prompt writes is the assistant header every turn shares and the
    mode's tail after it. Inside reasoning when that text opens a block it does not close
    (the opener may end the header, whatever the tail adds after it: `<think>` then a
    newline), or when the mode's rendered turns begin with the reasoning itself (the prompt
    opened it). Not when the tail holds the end marker (the prompt opened and closed an
    empty block).
    """
    if reasoning is None or not reasoning.end:
        return

    def opened_by_prompt(layouts):
        return any(layout and layout[0] == slot("reasoning") for kind, layout in layouts.items()
                   if kind.startswith("reasoning"))

    for name, mode in modes.items():
        tail = mode.tail.strip()
        layouts = thinking_turns if (name == "thinking" and thinking_turns) else turns
        if reasoning.end in tail:
            mode.start = Start.CONTENT
        elif reasoning.start and _leaves_open(header + mode.tail, reasoning):
            mode.start = Start.REASONING
        elif opened_by_prompt(layouts):
            mode.start = Start.REASONING
            if tail and not reasoning.start:
                reasoning.start = _opener_written(tail, reasoning.end)
        else:
            mode.start = Start.CONTENT
