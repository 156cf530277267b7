"""The call layout: the section around the calls, one call's layout, the separator.

One call and two calls are rendered; the slots (name, arguments, id) are found in each,
the literals between them compared (they may differ by the call's index), and the text
before the first call and after the last split into the section's start and end.
"""

from __future__ import annotations

from ..spec import ArgumentFormat, Parallel, Piece, ToolCallFormat, slot
from .conversations import Call, Sentinels, Turn
from .renders import assistant_spans
from .spans import Boundaries, common_prefix_length, common_suffix_length, word_slots


def _slots_in(span: str, values: list[tuple[str, str]],
              start: int = 0) -> list[tuple[int, int, str]] | None:
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
    return [text[end:next_start]
            for (_, end, _), (next_start, _, _) in zip(found, found[1:], strict=False)]


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


def _name_slots(literal: str, name: str) -> list[Piece]:
    """A literal between a call's slots, with the call's name (written again: a recipient in
    a header, a closing tag) as a name slot. The name counts only as a whole word."""
    return word_slots(literal, name, "name")


def _repeated_name_layout(a: str, b: str, name_a: str, name_b: str) -> list[Piece] | None:
    """The layout of the same literal of two calls, which may differ by the call index, or
    by each call's name written in it again."""
    found = _index_aware_layout(a, b, 0, 1)
    if found is not None:
        return found
    pa, pb = _name_slots(a, name_a), _name_slots(b, name_b)
    if len(pa) == len(pb) and len(pa) > 1 and all(
            x == y if not isinstance(x, str) or not isinstance(y, str)
            else _index_aware_layout(x, y, 0, 1) == [x]
            for x, y in zip(pa, pb, strict=True)):
        return pa
    return None


def call_format(renderer, user, s: Sentinels, arg_format: ArgumentFormat, boundaries: Boundaries,
                warnings,
                 content_span: str | None, content_value: str):
    calls = (
        Call(s.names[0], {s.key1: s.value1}, s.ids[0]),
        Call(s.names[1], {s.key2: s.value2}, s.ids[1]),
    )
    rendered = assistant_spans(renderer, user, {"two": Turn(calls=calls),
                                                "one": Turn(calls=calls[:1])})
    if rendered is None or "one" not in rendered[2]:
        return None
    spans = rendered[2]
    if "two" not in spans:
        parallel_mode = Parallel.REFUSED
    elif all(c.name in spans["two"] for c in calls):
        parallel_mode = Parallel.ALL
    else:
        parallel_mode = Parallel.FIRST
    parallel = parallel_mode == Parallel.ALL
    text = spans["two"] if parallel else spans["one"]
    used: tuple[Call, ...] = calls if parallel else calls[:1]
    # Each call's slots, in order.
    slots_per_call = []
    cursor = 0
    for call in used:
        found = _slots_in(text, [("name", call.name),
                                 ("arguments", arg_format.format(call.arguments)), ("id", call.id)],
                          cursor)
        if found is None:
            # the id is optional: try without it
            found = _slots_in(text, [("name", call.name),
                                     ("arguments", arg_format.format(call.arguments))], cursor)
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
            between = _repeated_name_layout(la, lb, used[0].name, used[1].name)
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
        inner_layouts = [_name_slots(p, used[0].name) for p in _between_slots(text, first)]
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
        common = boundaries.split_common_prefix(section_start, before_content)
        section_start = section_start[common:]
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
            layout = [p for p in (head_a[len(head_a) - m:],
                                  slot("index" if base == 0 else "index1"), pre[i:]) if p != ""]
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
