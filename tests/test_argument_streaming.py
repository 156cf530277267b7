"""Tool-call arguments stream as they are generated: argument deltas that concatenate to the
final arguments (canonical JSON), only what no later character can change, and a dropped
call announced by a `tool_call_error` delta, never by taking text back."""

from __future__ import annotations

import json
import os
import warnings

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tplparse import runtime
from tplparse.check.outputs import STANDARD_TOOLS
from tplparse.spec import ArgumentStyle

from conftest import ARGUMENTS, CORPUS, KV_FOLLOWS, EXAMPLES, compiled, corpus_compiled, corpus_ids, corpus_stems, corpus_templates, examples, needs_corpus
from test_stream import check_deltas_add_up, joined

CHATML = EXAMPLES / "chatml-think-tools.gguf"
TEMPLATES = corpus_templates()


@pytest.fixture(scope="module")
def chatml():
    return compiled(CHATML).protocol


def family(stem):
    """(template, spec, protocol): the session's compile of a corpus template (tests/conftest.py)."""
    entry = corpus_compiled(stem)
    return entry.template, entry.spec, entry.protocol


def fed(protocol, chunks, finish_reason="stop", **kwargs):
    """Feed `chunks`; the deltas each one returned (the last entry: end()'s), and the message."""
    parser = runtime.StreamParser(protocol, **kwargs)
    out = [parser.feed(chunk) for chunk in chunks]
    out.append(parser.end(finish_reason))
    return out, parser.message


def argument_pieces(deltas_per_chunk):
    """(chunk number, index, argument text) of every argument delta."""
    return [(n, c["index"], c["function"]["arguments"]) for n, deltas in enumerate(deltas_per_chunk) for d in deltas
            for c in d.get("tool_calls", []) if "id" not in c and c["function"]["arguments"]]


# --- every corpus call turn, every chunking ------------------------------------------------


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(ARGUMENTS))
def test_arguments_stream_before_the_call_is_complete(stem):
    template, spec, protocol = family(stem)
    turns = [o for o in corpus_compiled(stem).outputs if o.expected["tool_calls"]]
    if not turns:
        pytest.skip(f"{stem}: its template renders no tool calls")
    slots = [p["slot"] for p in spec.tool_calls.call if isinstance(p, dict)]
    # A layout that writes the call's id after its arguments: the header waits for the id (a
    # client needs it first), so the arguments cannot go out before the call is read.
    id_last = "id" in slots and slots.index("id") > slots.index("arguments")
    for turn in turns:
        kwargs = {"tools": STANDARD_TOOLS, "start": turn.start}
        one_shot = runtime.parse(protocol, turn.text, **kwargs)
        for label, chunks in (("characters", list(turn.text)), ("bytes", [bytes([b]) for b in turn.text.encode()]),
                              ("4 characters", [turn.text[i:i + 4] for i in range(0, len(turn.text), 4)])):
            per_chunk, message = fed(protocol, chunks, **kwargs)
            assert message == one_shot, (turn.turn, label)
            deltas = [d for chunk in per_chunk for d in chunk]
            check_deltas_add_up(deltas, message)
            if label == "4 characters":
                continue
            pieces = argument_pieces(per_chunk)
            for index, call in enumerate(message["tool_calls"]):
                if call["function"]["arguments"] == "{}":
                    continue
                at = [n for n, i, _ in pieces if i == index]
                if id_last:
                    assert len(at) == 1, (turn.turn, label, at)
                    continue
                # The first piece goes out while the call is still arriving, well before the last.
                assert len(at) >= 2 and at[0] < at[-1], (turn.turn, label, call["function"]["name"], at)


# --- random values through every argument encoding ----------------------------------------

SCALARS = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
    st.sampled_from(['say "hi"', "back\\slash", "</tool_call>", "</parameter>", "<|\"|>", "a\nb", "😀 é", "\\u00e9",
                     "'quoted'", "{\"k\": 1}", "", "</function>", "</｜DSML｜invoke>"]),  # (the last: calls' closing words)
    st.integers(-10**12, 10**12), st.floats(allow_nan=False, allow_infinity=False, width=32), st.booleans(), st.none())
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text("abcxyz_", min_size=1, max_size=4), inner, max_size=3), max_leaves=6)
KEYS = st.text("abcdefghij_", min_size=1, max_size=6)
ENCODINGS = {  # one family per argument encoding the corpus has
    "json object": None,  # the shipped example (no corpus needed)
    "key/value, raw strings": "Qwen-Qwen3-Coder",
    "key/value, raw or CDATA": "OpenBMB-MiniCPM5-1B",
    "key/value, DSML": "DeepSeek-V3.2",
    "pythonic": "LiquidAI-LFM2.5-8B-A1B",
    "native values": "Google-Gemma-4-31B-it",
    "python object": "InternLM-InternLM2.5-chat-vllm-tool",
    "harmony": "OpenAI-gpt-oss-120b",
}


def schema_of(value):
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null", list: "array",
            dict: "object"}[type(value)]
    return {"type": kind}


CUTS = st.lists(st.integers(1, 10**4), max_size=12)  # (positions, folded into the text: _cut_positions)


@settings(max_examples=examples(160), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(encoding=st.sampled_from(sorted(ENCODINGS)), arguments=st.dictionaries(KEYS, VALUES, max_size=4),
       name=st.sampled_from(["get_weather", "write_file"]), cuts=CUTS)
# Draws that once failed (explore mode), kept:
# - a list whose strings hold the format's own quote, which its writer cannot escape, read as
#   ["", ",", ""]: the separator between elements was optional (issue #28);
@example(encoding="native values", arguments={"_": ['<|"|>', '<|"|>']}, name="get_weather", cuts=[])
# - a value holding the call's own closing word, the output cut by the length limit right after
#   it (position 127 of this text): the call came back with its value cut there, {"a": "Close it
#   with "}, beside a truncated_tool_call error (issue #28).
@example(encoding="key/value, DSML", arguments={"a": "Close it with </｜DSML｜invoke> then stop."},
         name="write_file", cuts=[127])
def test_random_arguments_stream_and_add_up(encoding, arguments, name, cuts):
    check_arguments_stream(encoding, arguments, name, cuts)


def _cut_positions(text, drawn):
    """The drawn positions folded into 1 .. len(text) - 1 (a position already there stays)."""
    return sorted({1 + (c - 1) % max(1, len(text) - 1) for c in drawn})


def check_arguments_stream(encoding, arguments, name, drawn_cuts):
    """The call written by the encoding's family, read one-shot and in the chunks the cuts
    make: the same message, deltas that add up to it, canonical JSON, and the call as written
    or no call at all. And the output cut at each of those positions by the length limit:
    the call as written or none (never its arguments cut short), once there at every longer
    cut, the same streamed."""
    stem = ENCODINGS[encoding]
    if stem is None:
        spec, protocol = compiled(CHATML).spec, compiled(CHATML).protocol
    else:
        if not (CORPUS / f"{stem}.jinja").is_file():
            return  # (the corpus is not here: the JSON example still runs)
        _, spec, protocol = family(stem)
    tools = [{"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {k: schema_of(v) for k, v in arguments.items()}}}}]
    text = spec.tool_calls.format([{"name": name, "arguments": arguments}])
    one_shot = runtime.parse(protocol, text, tools=tools, start="content")
    cuts = _cut_positions(text, drawn_cuts)
    chunks = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)]) if b > a]
    per_chunk, message = fed(protocol, chunks, tools=tools, start="content")
    assert message == one_shot, text
    check_deltas_add_up([d for chunk in per_chunk for d in chunk], message)
    # (a call whose streamed text was not a prefix of its arguments is dropped with this message)
    assert not any("tplparse bug" in e["message"] for e in message["errors"]), message["errors"]
    for call in message["tool_calls"]:
        final = call["function"]["arguments"]
        assert runtime.arguments_json(json.loads(final)) == final  # canonical JSON
    # A call that reads, reads as the value written (some writers cannot write every value, e.g.
    # a quote inside a pythonic string: then the call does not read, the same streamed and not).
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] in ([], [arguments]), text
    if encoding == "json object":  # a lossless writer: the call always reads
        assert message["tool_calls"], text
    check_cut_by_the_length_limit(protocol, tools, text, cuts, message["tool_calls"])


def check_cut_by_the_length_limit(protocol, tools, text, cuts, whole):
    """`text` cut at each of `cuts` with finish_reason "length": nothing incomplete reaches a
    tool (a closing word inside a value may be the start of more of it), so the calls are the
    whole text's (`whole`) or none, and a call there at a cut is there at every longer one.
    Streamed in the pieces the shorter cuts make, the same message."""
    present = False
    for cut in cuts:
        cut_short = runtime.parse(protocol, text[:cut], tools=tools, start="content", finish_reason="length")
        assert cut_short["tool_calls"] in ([], whole), (cut, text[:cut], cut_short["tool_calls"])
        assert not present or cut_short["tool_calls"], (cut, text[:cut])  # (monotone)
        present = bool(cut_short["tool_calls"])
        pieces = [text[a:b] for a, b in zip([0] + cuts, [c for c in cuts if c < cut] + [cut]) if b > a]
        per_chunk, streamed = fed(protocol, pieces, tools=tools, start="content", finish_reason="length")
        assert streamed == cut_short, (cut, text[:cut])
        check_deltas_add_up([d for chunk in per_chunk for d in chunk], streamed)


# --- hold-back: each case a character cannot settle alone ---------------------------------

CALL = '<tool_call>\n{"name": "get_weather", "arguments": '


def pieces_after(protocol, chunks, **kwargs):
    per_chunk, message = fed(protocol, [CALL, *chunks], start="content", **kwargs)
    return ["".join(c["function"]["arguments"] for d in deltas for c in d.get("tool_calls", []) if "id" not in c)
            for deltas in per_chunk[1:]], message


@pytest.mark.parametrize("chunks, expected", [
    (['{"a": "x\\', 'ny"}}\n</tool_call>'], ['{"a": "x', '\\ny"}']),  # a backslash at the end of a chunk
    (['{"a": "\\u00', 'e9"}}\n</tool_call>'], ['{"a": "', 'é"}']),  # half of a \\uXXXX
    (['{"a": "\\ud83d', '\\ude00"}}\n</tool_call>'], ['{"a": "', '😀"}']),  # a surrogate pair cut between its halves
    (['{"a": 12', '34, "b": 5}}\n</tool_call>'], ['{"a": ', '1234, "b": 5}']),  # a number cut in two
    (['{"a": tru', 'e}}\n</tool_call>'], ['{"a": ', 'true}']),  # tru(e)
    (['{"a": 1', '.5e3}}\n</tool_call>'], ['{"a": ', '1500.0}']),  # 1 could still be 1.5e3
    (['{"a": 1,', ' "b": 2}}\n</tool_call>'], ['{"a": 1', ', "b": 2}']),  # a comma goes out with what follows it
    (['{ "a" :', ' [ ] }}\n</tool_call>'], ['{"a": ', '[]}']),  # whitespace is not the arguments'
])
def test_hold_back_in_json(chatml, chunks, expected):
    pieces, message = pieces_after(chatml, chunks)
    assert pieces[:len(expected)] == expected
    assert "".join(pieces) == message["tool_calls"][0]["function"]["arguments"]


@pytest.mark.parametrize("escaped", [
    "\\ud83d\\ude00",  # a pair: one character
    "\\ud800\\ud83d\\ude00",  # a high surrogate alone, then a pair
    "\\ud800x", "\\udc00", "\\ud800\\u0041", "\\ud800\\ud800",  # alone, before other text
])
def test_surrogate_escapes_stream_as_json_reads_them(chatml, escaped):
    # (found by a differential fuzz: a high surrogate was paired with any escape that followed)
    text = CALL + '{"s": "' + escaped + '"}}\n</tool_call>'
    one_shot = runtime.parse(chatml, text, start="content")
    for chunks in (list(text), [text[:len(CALL) + 9], text[len(CALL) + 9:]]):
        per_chunk, message = fed(chatml, chunks, start="content")
        assert message == one_shot and message["errors"] == [], escaped
        final = message["tool_calls"][0]["function"]["arguments"]
        assert json.loads(final) == json.loads('{"s": "' + escaped + '"}')
        assert "".join(p for _, _, p in argument_pieces(per_chunk)) == final


def test_hold_back_of_a_split_utf8_character(chatml):
    data = '{"a": "é"}}\n</tool_call>'.encode()
    cut = data.index("é".encode()) + 1  # between the two bytes of é
    pieces, message = pieces_after(chatml, [data[:cut], data[cut:]])
    assert pieces[0] == '{"a": "' and pieces[1].startswith("é")
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"a": "é"}


@needs_corpus
def test_hold_back_of_a_closing_tag_inside_a_key_value_string():
    _, spec, protocol = family("Qwen-Qwen3-Coder")
    head = "<tool_call>\n<function=write_file>\n<parameter=content>\nif a </para"
    per_chunk, message = fed(protocol, [head, "meters> b:", "\n</parameter>\n</function>\n</tool_call>"], start="content")
    pieces = ["".join(c["function"]["arguments"] for d in deltas for c in d.get("tool_calls", []) if "id" not in c)
              for deltas in per_chunk]
    assert pieces[0] == '{"content": "if a '  # "</para" may be the closing tag: held
    assert pieces[1] == '</parameters> b:'  # it was not
    assert "".join(pieces) == '{"content": "if a </parameters> b:"}'
    assert message["tool_calls"][0]["function"]["arguments"] == '{"content": "if a </parameters> b:"}'


@needs_corpus
def test_a_typed_key_value_argument_goes_out_whole():
    _, spec, protocol = family("Qwen-Qwen3-Coder")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}, "s": {"type": "string"}}}}}]
    chunks = ["<tool_call>\n<function=f>\n<parameter=n>\n12", "34\n</parameter>\n<parameter=s>\nab",
              "cd\n</parameter>\n</function>\n</tool_call>"]
    per_chunk, message = fed(protocol, chunks, tools=tools, start="content")
    pieces = ["".join(c["function"]["arguments"] for d in deltas for c in d.get("tool_calls", []) if "id" not in c)
              for deltas in per_chunk]
    assert pieces[0] == ""  # 12 may be 1234: nothing yet
    assert pieces[1] == '{"n": 1234, "s": "ab'
    assert "".join(pieces) == '{"n": 1234, "s": "abcd"}' == message["tool_calls"][0]["function"]["arguments"]


# --- errors after part of the arguments went out -------------------------------------------


def dropped(per_chunk):
    return [d["tool_call_error"] for deltas in per_chunk for d in deltas if "tool_call_error" in d]


def test_invalid_arguments_after_streaming_drop_the_call(chatml):
    per_chunk, message = fed(chatml, [CALL, '{"a": 1, "b": ', '}}\n</tool_call>'], start="content")
    assert "".join(p for n, _, p in argument_pieces(per_chunk) if n == 1) == '{"a": 1, "b": '
    assert message["tool_calls"] == []
    assert [e["kind"] for e in message["errors"]] == ["invalid_arguments"]
    assert [(e["index"], e["kind"]) for e in dropped(per_chunk)] == [(0, "invalid_arguments")]
    check_deltas_add_up([d for chunk in per_chunk for d in chunk], message)


def test_a_duplicate_key_is_invalid(chatml):
    for chunks in (['{"a": 1, "a": 2}}\n</tool_call>'], ['{"a": 1, ', '"a": 2}}\n</tool_call>']):
        per_chunk, message = fed(chatml, [CALL, *chunks], start="content")
        assert message["tool_calls"] == []
        assert [e["kind"] for e in message["errors"]] == ["invalid_arguments"]
        assert "'a' appears twice" in message["errors"][0]["message"]
        assert dropped(per_chunk), "the header went out: the drop must be said"


@needs_corpus
def test_a_duplicate_key_value_key_is_invalid():
    _, spec, protocol = family("Qwen-Qwen3-Coder")
    text = ("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n"
            "</function>\n</tool_call>")
    for chunks in ([text], list(text)):
        per_chunk, message = fed(protocol, chunks, start="content")
        assert message["tool_calls"] == [] and [e["kind"] for e in message["errors"]] == ["invalid_arguments"]
        assert dropped(per_chunk)


@needs_corpus
def test_a_duplicate_key_is_the_error_whatever_its_value():
    # (found by a differential fuzz: the waiting path reported the second value's type first)
    _, spec, protocol = family("Qwen-Qwen3-Coder")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}}}}}]
    text = ("<tool_call>\n<function=f>\n<parameter=a>\n4\n</parameter>\n<parameter=a>\nx\n</parameter>\n"
            "</function>\n</tool_call>")
    one_shot = runtime.parse(protocol, text, tools=tools, start="content")
    assert "'a' appears twice" in one_shot["errors"][0]["message"]
    for chunks in (list(text), [text[:-20], text[-20:]]):
        per_chunk, message = fed(protocol, chunks, tools=tools, start="content")
        assert message == one_shot


@needs_corpus
@pytest.mark.parametrize("value, arguments", [
    # (found by a differential fuzz: the stream gave out JSON's reading of an escape, and the
    # value turned out to be a Python literal, which reads it otherwise; the call was dropped
    # as "a tplparse bug")
    ('"\\/\\x41"', {"a": "\\/A"}),  # \/ is / in JSON, \/ in Python; \x41 only Python has
    ('["\\/", \'\\x41\']', {"a": ["\\/", "A"]}),
    ('{"k": 1, \'\\/\': 2}', {"a": {"k": 1, "\\/": 2}}),
    # a one-element tuple, written with its comma (a list in JSON)
    ("('x',)", {"a": ["x"]}),
])
def test_a_value_json_and_python_read_otherwise_goes_out_as_it_is_read(value, arguments):
    """A pythonic call's value is read as JSON, else as a Python literal: which reading it gets
    is known only at its end, so what the two read differently (\\/, a surrogate escape, a
    key's escapes, a string another follows) is not given out before then."""
    _, _, protocol = family("LiquidAI-LFM2.5-8B-A1B")
    text = f"<|tool_call_start|>[f(a={value})]<|tool_call_end|>"
    one_shot = runtime.parse(protocol, text, start="content")
    assert one_shot["errors"] == [] and json.loads(one_shot["tool_calls"][0]["function"]["arguments"]) == arguments
    for chunks in (list(text), [text[i:i + 4] for i in range(0, len(text), 4)]):
        per_chunk, message = fed(protocol, chunks, start="content")
        assert message == one_shot
        check_deltas_add_up([d for chunk in per_chunk for d in chunk], message)


@needs_corpus
@pytest.mark.parametrize("value", [
    # (found by a differential fuzz: the stream gave out the comma before it saw "]", and the
    # first string's closing quote before the second string; both then read, as Python reads
    # them. Issue #28: a separator is read as the notation's writer writes it, never a guess)
    '{"a": [1,]}', "[1, 2,]",  # a separator after the last element
    '["x" "y"]', '{"k": "x"\n\'y\'}',  # strings side by side: Python would join them ("xy")
])
def test_a_python_value_separated_otherwise_than_written_is_invalid_streamed_too(value):
    """A pythonic call's value with a separator left out or after its last element: the call
    is `invalid_arguments`, whole and fed in pieces, and what went out of it before is void."""
    _, _, protocol = family("LiquidAI-LFM2.5-8B-A1B")
    text = f"<|tool_call_start|>[f(a={value})]<|tool_call_end|>"
    one_shot = runtime.parse(protocol, text, start="content")
    assert one_shot["tool_calls"] == [] and [e["kind"] for e in one_shot["errors"]] == ["invalid_arguments"]
    for chunks in (list(text), [text[i:i + 4] for i in range(0, len(text), 4)]):
        per_chunk, message = fed(protocol, chunks, start="content")
        assert message == one_shot
        check_deltas_add_up([d for chunk in per_chunk for d in chunk], message)


@needs_corpus
def test_escapes_python_warns_about_are_read_without_a_warning():
    """A model's 'C:\\dir' in a Python literal is its text, not a warning of this program's."""
    _, _, protocol = family("LiquidAI-LFM2.5-8B-A1B")
    text = "<|tool_call_start|>[f(a='C:\\dir', b=[\"C:\\dir\", 'x'])]<|tool_call_end|>"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        message = runtime.parse(protocol, text, start="content")
        streamed = fed(protocol, list(text), start="content")[1]
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"a": "C:\\dir", "b": ["C:\\dir", "x"]}
    assert streamed == message


@needs_corpus
@pytest.mark.parametrize("stem, text, tools", [
    # (found by a differential fuzz: a JSON value of a pythonic call kept the last of two
    # equal keys, after its stream had given out the first: "a tplparse bug")
    ("LiquidAI-LFM2.5-8B-A1B", '<|tool_call_start|>[f(a={"x": 1, "y": {"z": 1, "z": 3}})]<|tool_call_end|>', None),
    # a key/value argument typed as an object, written as JSON
    ("Qwen-Qwen3-Coder", '<tool_call>\n<function=f>\n<parameter=o>\n{"z": 1, "z": 3}\n</parameter>\n</function>\n'
     "</tool_call>", [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
         "o": {"type": "object"}}}}}]),
])
def test_a_duplicate_key_inside_an_argument_value_is_invalid(stem, text, tools):
    _, _, protocol = family(stem)
    one_shot = runtime.parse(protocol, text, tools=tools, start="content")
    assert one_shot["tool_calls"] == [] and [e["kind"] for e in one_shot["errors"]] == ["invalid_arguments"]
    assert "'z' appears twice" in one_shot["errors"][0]["message"]
    for chunks in (list(text), [text]):
        assert fed(protocol, chunks, tools=tools, start="content")[1] == one_shot


def test_a_call_cut_after_its_header_is_dropped(chatml):
    per_chunk, message = fed(chatml, [CALL, '{"city": "Par'], start="content")
    assert [(e["index"], e["kind"]) for e in dropped(per_chunk)] == [(0, "truncated_tool_call")]
    assert message["tool_calls"] == [] and [e["kind"] for e in message["errors"]] == ["truncated_tool_call"]
    calls = joined([d for chunk in per_chunk for d in chunk])["calls"]
    assert calls[0]["dropped"] and calls[0]["arguments"] == '{"city": "Par'


def test_a_complete_call_that_is_all_here_goes_out_at_once(chatml):
    """One chunk with the whole call: the arguments are one delta (nothing ran ahead)."""
    per_chunk, message = fed(chatml, [CALL + '{"city": "Paris"}}\n</tool_call>'], start="content")
    assert [p[2] for p in argument_pieces(per_chunk)] == ['{"city": "Paris"}']


# --- values that stream inside a key/value call (pythonic calls) ---------------------------


def _pieces_fed_by_four(stem, arguments, schema):
    template, spec, protocol = family(stem)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": schema}}}]
    text = spec.format({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}]})
    per_chunk, message = fed(protocol, [text[i:i + 4] for i in range(0, len(text), 4)], tools=tools, start="content")
    assert message["errors"] == [] and len(message["tool_calls"]) == 1, message
    final = message["tool_calls"][0]["function"]["arguments"]
    pieces = argument_pieces(per_chunk)
    assert "".join(p for _, _, p in pieces) == final and json.loads(final) == arguments
    return text, pieces


@needs_corpus
def test_a_pythonic_string_argument_streams_as_it_arrives():
    value = "lorem ipsum, dolor sit amet; " * 8
    text, pieces = _pieces_fed_by_four("LiquidAI-LFM2.5-8B-A1B", {"s": value}, {"s": {"type": "string"}})
    assert len(pieces) > len(value) // 4 // 2  # piece by piece, not once at the end
    assert pieces[0][2] == '{"s": "' or pieces[0][2].startswith('{"s": "')


@needs_corpus
def test_a_json_value_in_a_pythonic_call_streams_inside():
    value = {"text": "x" * 80, "n": [1, 2.5, True, None]}
    text, pieces = _pieces_fed_by_four("LiquidAI-LFM2.5-8B-A1B", {"o": value}, {"o": {"type": "object"}})
    assert len(pieces) > 10  # the object's string went out as it came, not the value at once
    closing = text.rindex(")")
    assert pieces[0][0] * 4 < closing - 80  # the first piece long before the call's closing bracket


@needs_corpus
def test_a_double_quote_in_a_python_string_goes_out_escaped_as_it_comes():
    """In a Python string in single quotes, a double quote is a character: it goes out with its
    chunk as the canonical text writes it (\\"), an escaped one and a backslash as they are
    (a backslash at a chunk's end held for the next)."""
    _, _, protocol = family("InternLM-InternLM2.5-chat-vllm-tool")
    chunks = ['<|action_start|><|plugin|>\n{"name": "f", "arguments": {\'s\': \'ab', 'c "d', '" e\\', '"f\\\\',
              "g'}}<|action_end|>"]
    per_chunk, message = fed(protocol, chunks, start="content")
    pieces = ["".join(c["function"]["arguments"] for d in deltas for c in d.get("tool_calls", []) if "id" not in c)
              for deltas in per_chunk]
    assert pieces == ['{"s": "ab', 'c \\"d', '\\" e', '\\"f\\\\', 'g"}', '']
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"s": 'abc "d" e"f\\g'}
    assert message == runtime.parse(protocol, "".join(chunks), start="content")


# --- what the fast paths of feed() hold and hand back -----------------------------------------


def test_a_value_nested_deeper_than_the_stream_reads_is_decoded_at_the_end(chatml):
    """Past the depth an argument stream follows, it stops giving out (the rest goes out with
    the complete call): the call is the decoder's, streamed and one-shot alike."""
    depth = 300  # (deeper than a stream follows; not as deep as the decoder refuses)
    text = CALL + '{"a": ' + "[" * depth + '"x"' + "]" * depth + '}}\n</tool_call>'
    one_shot = runtime.parse(chatml, text, start="content")
    assert one_shot["errors"] == [] and json.loads(one_shot["tool_calls"][0]["function"]["arguments"])["a"]
    for size in (1, 4, 64):
        per_chunk, message = fed(chatml, [text[i:i + size] for i in range(0, len(text), size)], start="content")
        assert message == one_shot, size
        pieces = [p for _, _, p in argument_pieces(per_chunk)]
        assert "".join(pieces) == one_shot["tool_calls"][0]["function"]["arguments"]
        assert len(pieces) > 1  # (what it could follow went out while the call arrived)


@pytest.mark.parametrize("tail, streamed", [
    ("\\", ""), ("\\u00", ""),
    ("\\ud83d", "\ud83d"),  # (a high surrogate with no low one after it: JSON keeps it alone)
])
def test_an_escape_cut_by_the_end_of_the_output_is_a_cut_call(chatml, tail, streamed):
    """A backslash held at a chunk's end (its escape to come with the next chunk) is not given
    out when no chunk comes: the call was cut, as one-shot says."""
    text = CALL + '{"a": "abc' + tail
    one_shot = runtime.parse(chatml, text, start="content")
    assert one_shot["tool_calls"] == [] and [e["kind"] for e in one_shot["errors"]] == ["truncated_tool_call"]
    for size in (1, 2, 4):
        per_chunk, message = fed(chatml, [text[i:i + size] for i in range(0, len(text), size)], start="content")
        assert message == one_shot, size
        assert [(e["index"], e["kind"]) for e in dropped(per_chunk)] == [(0, "truncated_tool_call")]
        assert "".join(p for _, _, p in argument_pieces(per_chunk)) == '{"a": "abc' + streamed


@needs_corpus
@pytest.mark.parametrize("chunks, expected", [
    # a newline that may begin "\n</parameter>": held, then out with what follows it
    (["<tool_call>\n<function=f>\n<parameter=s>\nab", "c\n", "def", "\n</parameter>\n</function>\n</tool_call>"],
     ['{"s": "ab', "c", "\\ndef", '"}']),
    # a quote and a backslash, escaped as they come
    (["<tool_call>\n<function=f>\n<parameter=s>\nab", 'c"d\\', "e", "\n</parameter>\n</function>\n</tool_call>"],
     ['{"s": "ab', 'c\\"d\\\\', "e", '"}']),
    # the closing text split across three chunks: held all along, nothing of it goes out
    (["<tool_call>\n<function=f>\n<parameter=s>\nab", "\n</pa", "rame", "ter>\n</function>\n</tool_call>"],
     ['{"s": "ab', "", "", '"}']),
    # the start of a closing text that goes on otherwise: out once that is known
    (["<tool_call>\n<function=f>\n<parameter=s>\nab", "\n</pa", "rty>", "\n</parameter>\n</function>\n</tool_call>"],
     ['{"s": "ab', "", "\\n</party>", '"}']),
    (["<tool_call>\n<function=f>\n<parameter=s>\nab", "\n</b", ">cd", "\n</parameter>\n</function>\n</tool_call>"],
     ['{"s": "ab', "\\n</b", ">cd", '"}']),
])
def test_a_key_value_string_holds_only_what_may_begin_its_closing_text(chunks, expected):
    _, spec, protocol = family("Qwen-Qwen3-Coder")
    per_chunk, message = fed(protocol, chunks, start="content")
    pieces = ["".join(c["function"]["arguments"] for d in deltas for c in d.get("tool_calls", []) if "id" not in c)
              for deltas in per_chunk]
    assert pieces[:len(expected)] == expected
    assert "".join(pieces) == message["tool_calls"][0]["function"]["arguments"]
    assert message == runtime.parse(protocol, "".join(chunks), start="content")


# --- between key/value arguments: one wait for the literals the template writes ------------

KV_TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {
    "s": {"type": "string"}, "t": {"type": "string"}}}}} for name in ("f", "g")]


def _kv_outputs(spec):
    """Two calls of two string arguments as the template writes them, and the same turn written
    otherwise where feed() waits for the template's text after a value (the next argument's
    start, the call's end and the next call's start): whitespace doubled between literals, the
    turn ending after the first call's closing text (an engine stopped there), content after it."""
    calls = [{"id": f"c{i}0000000x", "type": "function", "function": {"name": name, "arguments": {
        "s": f"v{i}", "t": f"w{i}"}}} for i, name in enumerate(("f", "g"))]
    text = spec.format({"role": "assistant", "content": "", "tool_calls": calls})
    one = spec.format({"role": "assistant", "content": "", "tool_calls": calls[:1]})
    end = text.find("w0") + 2
    first_end = len(os.path.commonprefix([text, one]))  # (where the first call's text stops)
    return {
        "as written": text,
        "whitespace doubled after a value": text[:end] + text[end:].replace("\n", "\n \n"),
        "ended after the first call": text[:first_end],
        "cut inside the text after a value": text[:end + (first_end - end) // 2],
        "content after the first call": text[:first_end] + " Done.",
    }


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(KV_FOLLOWS))
def test_what_follows_a_key_value_argument_reads_the_same_in_every_chunking(stem):
    """After a key/value argument's value, feed() keeps chunks without resuming the parse while
    they go on as the template's next text (one wait, not one per literal): whatever the output
    writes there instead, or wherever it ends, every chunking reads as the whole output does."""
    template, spec, protocol = family(stem)
    if spec.tool_calls is None or spec.tool_calls.arguments.style == ArgumentStyle.OBJECT or not any(
            o.expected["tool_calls"] for o in corpus_compiled(stem).outputs):
        pytest.skip(f"{stem}: no key/value calls")
    for label, text in _kv_outputs(spec).items():
        one_shot = runtime.parse(protocol, text, tools=KV_TOOLS, start="content")
        if label == "as written":  # (the turn as rendered reads as the calls it was rendered from)
            assert [json.loads(c["function"]["arguments"]) for c in one_shot["tool_calls"]] == [
                {"s": "v0", "t": "w0"}, {"s": "v1", "t": "w1"}], one_shot["errors"]
        for size in (1, 2, 3, 4, 7, len(text)):
            per_chunk, message = fed(protocol, [text[i:i + size] for i in range(0, len(text), size)],
                                     tools=KV_TOOLS, start="content")
            assert message == one_shot, (label, size)
            check_deltas_add_up([d for chunk in per_chunk for d in chunk], message)
