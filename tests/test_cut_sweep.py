"""A call whose string value holds the format's own closing words and markers, cut at every
position, at the length limit and at a natural stop: nothing incomplete reaches a tool.

For every corpus family with tool calls, the family's own writer (`spec.tool_calls.format`)
writes a turn of two calls whose first value holds every marker of the format the writer can
carry (`Close it with </tool_call> then <|im_end|> then … stop.`); the turn is read cut at
each position, one-shot and streamed, under both finish reasons:

- `"length"`: the output was cut. A call is in the message only once its own layout is read
  to its end, and then as written; the calls of a shorter cut are in every longer one (a
  closing word inside a value may be the start of more of it: until the value closes, the
  call is not complete).
- `"stop"`: the output ended by itself, and each cut is a whole output of its own. A call is
  as written, or (docs/tolerance.md's "a value's closing tag missing") its value was never
  closed and the call's closing word inside it settles it: the value is what comes before that
  word. So at a stop a call may be in the message at a shorter cut (the value left open,
  closed by the word) and not at a longer one (the value closed, holding the word, and the
  call's own closing word not written yet): two different outputs, two messages.

CI reads every cut one-shot and streams a deterministic sample of them (the cuts at and
around each marker, and every 7th); `TPLPARSE_HYPOTHESIS=explore` streams every cut.
"""

from __future__ import annotations

import json

import pytest

from tplparse import runtime
from tplparse.spec import ArgumentStyle, SpecError

from conftest import HYPOTHESIS_PROFILE, corpus_ids, corpus_templates, needs_corpus
from test_stream import check_deltas_add_up
from test_tolerance import compiled

TEMPLATES = corpus_templates()
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {
    "a": {"type": "string"}, "b": {"type": "string"}}}}} for name in ("f", "g")]
EVERY_CUT = HYPOTHESIS_PROFILE == "explore"


def _parse(protocol, text, finish_reason):
    return runtime.parse(protocol, text, tools=TOOLS, start="content", finish_reason=finish_reason)


def _streamed(protocol, chunks, finish_reason):
    parser = runtime.StreamParser(protocol, tools=TOOLS, start="content")
    deltas = [d for chunk in chunks for d in parser.feed(chunk)] + parser.end(finish_reason)
    return deltas, parser.message


def _calls(message):
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]


def _carried(spec, protocol, value):
    """The written calls and their text, f(a=value, b) then g(b) (or f alone where the format
    writes one call a turn), if the writer carries `value`: the whole turn reads back as the
    calls written (the turn's end a writer appends after them aside)."""
    calls = [{"name": "f", "id": "a1b2c3d4e", "arguments": {"a": value, "b": "x"}},
             {"name": "g", "id": "f5g6h7i8j", "arguments": {"b": "y"}}]
    for n in (2, 1):
        try:
            text = spec.tool_calls.format(calls[:n])
        except SpecError:
            continue
        message = _parse(protocol, text, "stop")
        if text.count(value) == 1 and _calls(message) == [(c["name"], c["arguments"]) for c in calls[:n]] and all(
                e["kind"] == "text_after_end_of_turn" for e in message["errors"]):
            return calls[:n], text
    return None, None


def _marked_turn(spec, protocol):
    """(calls, text, markers): a turn whose first value holds every marker of the format that
    the writer carries in it (each alone first, then all together)."""
    words = {w for literal in protocol.literals for w in (literal, *literal.split())}
    markers = sorted(w for w in words if not w.isalnum() and _carried(spec, protocol, f"Close it with {w} then stop.")[0])
    while markers:
        value = "Close it with " + " then ".join(markers) + " then stop."
        calls, text = _carried(spec, protocol, value)
        if calls is not None:
            return calls, text, markers
        markers.pop()  # (two markers may meet badly: fewer)
    return None, None, []


def _closing_word(spec):
    """The first word the call layout writes after key/value arguments ("" for an object)."""
    call = spec.tool_calls.call
    if spec.tool_calls.arguments.style == ArgumentStyle.OBJECT or {"slot": "arguments"} not in call:
        return ""
    return next((w for p in call[call.index({"slot": "arguments"}) + 1:] if isinstance(p, str) for w in p.split()), "")


def _check_calls(spec, calls, text, cut, finish, message):
    """No partial call: each call of the message is a written call whose own text is all
    there (at a stop, its closing markers may be eaten), or, at a stop, f's value left open
    and settled by the call's closing word inside it."""
    written = {c["name"]: (i, c["arguments"]) for i, c in enumerate(calls)}
    tc = spec.tool_calls
    ends = [len((tc.section_start + tc.format_list(calls[:i + 1])).rstrip()) for i in range(len(calls))]
    value = calls[0]["arguments"]["a"]
    at = text.index(value)
    word = _closing_word(spec)
    for name, arguments in _calls(message):
        assert name in written, (cut, finish, name)
        i, expected = written[name]
        if arguments == expected:
            if finish == "length":
                assert cut >= ends[i], (cut, finish, name, text[:cut])
            continue
        # (only at a stop: f's value settled by the closing word, as docs/tolerance.md's rule
        # reads it)
        assert finish == "stop" and name == "f" and word, (cut, finish, arguments, text[:cut])
        assert list(arguments) == ["a"], (cut, arguments)
        kept = arguments["a"]
        rest = value[len(kept):]
        assert value.startswith(kept) and rest.lstrip().startswith(word), (cut, arguments)
        assert at + len(kept) + (len(rest) - len(rest.lstrip())) + len(word) <= cut, (cut, arguments)
        assert value[:len(kept) + len(rest) - len(rest.lstrip())] in text[:cut]


def _chunkings(text):
    data = text.encode("utf-8")
    yield "characters", list(text)
    yield "bytes", [data[i:i + 1] for i in range(len(data))]
    yield "5 characters", [text[i:i + 5] for i in range(0, len(text), 5)]


def _streamed_cuts(text, value, markers):
    """The cuts streamed in CI: at and around each marker inside the value and the turn's
    other marker edges, and every 7th (all of them when exploring)."""
    if EVERY_CUT:
        return set(range(len(text) + 1))
    cuts = set(range(0, len(text) + 1, 7)) | {len(text)}
    at = text.index(value)
    for marker in markers:
        start = value.find(marker)
        while start != -1:
            for edge in (at + start, at + start + len(marker)):
                cuts.update(range(edge - 1, edge + 2))
            start = value.find(marker, start + 1)
    return {c for c in cuts if 0 <= c <= len(text)}


@needs_corpus
@pytest.mark.parametrize("stem", [p.stem for p in TEMPLATES], ids=corpus_ids(TEMPLATES))
def test_a_value_holding_the_formats_markers_cut_anywhere_is_never_a_partial_call(stem):
    spec, protocol, _ = compiled(stem)
    if spec.tool_calls is None:
        pytest.skip(f"{stem}: no tool calls")
    calls, text, markers = _marked_turn(spec, protocol)
    if calls is None:
        pytest.skip(f"{stem}: its writer carries no marker of the format inside a value")
    value = calls[0]["arguments"]["a"]
    streamed = _streamed_cuts(text, value, markers)
    for finish in ("length", "stop"):
        before = set()
        for cut in range(len(text) + 1):
            message = _parse(protocol, text[:cut], finish)
            _check_calls(spec, calls, text, cut, finish, message)
            present = {name for name, _ in _calls(message)}
            if finish == "length":
                assert before <= present, (cut, before, present, text[:cut])  # (monotone)
                before = present
            if cut in streamed:
                for label, chunks in _chunkings(text[:cut]):
                    deltas, message_streamed = _streamed(protocol, chunks, finish)
                    assert message_streamed == message, (cut, finish, label)
                    check_deltas_add_up(deltas, message_streamed)
        # The whole turn: its calls, as written, whatever the finish.
        assert _calls(message) == [(c["name"], c["arguments"]) for c in calls], (finish, message["errors"])
