"""The dispatch stream (`StreamParser(calls="complete")`): for code that executes tools, each
call goes out once, whole, when it is complete and its arguments validate against its tool's
schema, and nothing is ever taken back; content and reasoning deltas are the UI stream's.

Checked on every corpus family's call turns (the template's own renders), cut at every
offset and with one character removed at every offset, under both finish reasons, one-shot
and fed in several chunkings (hypothesis draws more; CI draws the same ones every run):

- the calls the stream sends are the final message's calls, each exactly once, in order,
  numbered by their place in the message;
- no call header, argument piece or `tool_call_error` goes out;
- its text deltas add up to the message's content and reasoning, as the UI stream's do;
- the message is the UI stream's, less the calls whose arguments do not validate (each
  named in an `invalid_arguments` error).

Also: the runtime's own schema check (runtime/schema.py) against jsonschema on the same
cases, and the check refusing a keyword it does not know.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tplparse
from conftest import DISPATCH, EXAMPLES, corpus_stems, corpus_templates, needs_corpus, proved_corpus_stems
from test_tolerance import compiled
from tplparse import runtime
from tplparse.bridge import compile_in_memory, dispatch_check, parser_for
from tplparse.check.outputs import STANDARD_TOOLS

TEMPLATES = corpus_templates()
CHUNKINGS = (1, 3, 7)


def _fed(protocol, text, start, finish, size, calls, tools=STANDARD_TOOLS):
    """(deltas, message) of `text` fed in chunks of `size` (0: whole)."""
    parser = runtime.StreamParser(protocol, tools=tools, start=start, calls=calls)
    deltas = []
    pieces = [text] if size == 0 else [text[i:i + size] for i in range(0, len(text), size)]
    for piece in pieces:
        deltas += parser.feed(piece)
    deltas += parser.end(finish)
    return deltas, parser.message


def _text_of(deltas, key):
    return "".join(d[key] for d in deltas if key in d)


def check_dispatch(protocol, text, start, finish, size, tools=STANDARD_TOOLS):
    """The dispatch stream's promises on one output, fed one way."""
    deltas, message = _fed(protocol, text, start, finish, size, "complete", tools)
    ui_deltas, ui_message = _fed(protocol, text, start, finish, size, "deltas", tools)
    sent = [d["tool_calls"] for d in deltas if "tool_calls" in d]
    assert all(len(calls) == 1 for calls in sent), sent
    sent = [calls[0] for calls in sent]
    assert not any("tool_call_error" in d for d in deltas)
    # each final call exactly once, whole, in order, numbered by its place in the message
    assert [c["index"] for c in sent] == list(range(len(message["tool_calls"])))
    assert [{k: v for k, v in c.items() if k != "index"} for c in sent] == message["tool_calls"]
    # the text is the UI stream's, and adds up to the message
    for key in ("content", "reasoning_content"):
        assert _text_of(deltas, key) == _text_of(ui_deltas, key) == (message[key] or "")
    # the message is the UI one less the calls that do not validate (each named in an error)
    check = dispatch_check(tools)
    kept = [c for c in ui_message["tool_calls"]
            if check(c["function"]["name"], json.loads(c["function"]["arguments"])) is None]
    assert message["tool_calls"] == kept
    dropped = len(ui_message["tool_calls"]) - len(kept)
    schema_errors = [e for e in message["errors"] if "do not validate against the tool's schema" in e["message"]]
    assert len(schema_errors) == dropped
    assert [e for e in message["errors"] if e not in schema_errors] == ui_message["errors"]
    assert {k: v for k, v in message.items() if k not in ("tool_calls", "errors")} == \
        {k: v for k, v in ui_message.items() if k not in ("tool_calls", "errors")}
    return message


def _call_outputs(stem):
    spec, protocol, outputs = compiled(stem)
    if spec.tool_calls is None:
        pytest.skip(f"{stem}: the template writes no tool calls")
    found = [o for o in outputs if o.expected.get("tool_calls")]
    if not found:
        pytest.skip(f"{stem}: no call turn reads back")
    return protocol, found


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(DISPATCH))
def test_the_dispatch_stream_sends_each_final_call_once_whole_at_every_cut(stem):
    protocol, outputs = _call_outputs(stem)
    for output in outputs:
        text = output.text
        whole = check_dispatch(protocol, text, output.start, "stop", 0)
        assert len(whole["tool_calls"]) == len(output.expected["tool_calls"]), output.label
        for cut in range(len(text) + 1):
            broken = text[:cut] + text[cut + 1:]
            for finish in ("length", "stop"):
                check_dispatch(protocol, text[:cut], output.start, finish, 0)
                check_dispatch(protocol, broken, output.start, finish, 0)
            if cut % 11 == 0:  # (streamed: a sample of the cuts, each in every chunking; hypothesis draws others)
                for size in CHUNKINGS:
                    check_dispatch(protocol, text[:cut], output.start, "length", size)
                    check_dispatch(protocol, broken, output.start, "stop", size)


@needs_corpus
@settings(max_examples=60)
@given(data=st.data())
def test_the_dispatch_stream_in_random_chunkings(data):
    stems = proved_corpus_stems()  # (the templates that do not prove yet have their strict xfails)
    stem = data.draw(st.sampled_from(stems), label="template")
    spec, protocol, outputs = compiled(stem)
    found = [o for o in outputs if o.expected.get("tool_calls")]
    if not found:
        return
    output = data.draw(st.sampled_from(found), label="turn")
    text = output.text
    cut = data.draw(st.integers(0, len(text)), label="cut")
    finish = data.draw(st.sampled_from(["stop", "length"]), label="finish")
    text = text[:cut]
    bounds = sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=12), label="chunk bounds")))
    deltas, message = [], None
    parser = runtime.StreamParser(protocol, tools=STANDARD_TOOLS, start=output.start, calls="complete")
    last = 0
    for bound in bounds + [len(text)]:
        deltas += parser.feed(text[last:bound])
        last = bound
    deltas += parser.end(finish)
    message = parser.message
    sent = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert [{k: v for k, v in c.items() if k != "index"} for c in sent] == message["tool_calls"]
    one_shot = runtime.parse(protocol, text, tools=STANDARD_TOOLS, start=output.start, finish_reason=finish,
                             calls="complete")
    assert one_shot == message


# --- schema-invalid calls, on the example template ------------------------------------------

TEMPLATE = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
TOOLS = json.loads((EXAMPLES / "tools.json").read_text())
TWO = ('Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "kelvin"}}\n'
       '</tool_call><tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')


@pytest.mark.parametrize("size", [0, 1, 4, 9])
def test_a_call_that_does_not_validate_is_never_sent_and_the_next_keeps_its_id(size):
    protocol = compile_in_memory(TEMPLATE)[1]
    message = check_dispatch(protocol, TWO, "content", "stop", size, TOOLS)
    assert [c["id"] for c in message["tool_calls"]] == ["call_1"]  # (the UI stream's id for it)
    assert "'kelvin' is not one of" in message["errors"][0]["message"]
    assert message["errors"][0]["kind"] == "invalid_arguments"


def test_the_bridge_checks_with_jsonschema_every_keyword_and_the_runtime_refuses_what_it_cannot_check():
    tools = [{"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"xs": {"type": "array", "contains": {"const": 3}}}}}}]
    with pytest.raises(runtime.SchemaError, match="'contains' is not one the dispatch stream's own check knows"):
        runtime.StreamParser(compile_in_memory(TEMPLATE)[1], tools=tools, calls="complete")
    parser = parser_for(TEMPLATE, tools, calls="complete")  # (the library's: jsonschema)
    parser.feed('<tool_call>\n{"name": "pick", "arguments": {"xs": [1, 2]}}\n</tool_call>')
    assert parser.end("stop") == [] and parser.message["tool_calls"] == []
    assert "$.xs: [1, 2] does not contain items matching" in parser.message["errors"][0]["message"]
    good = parser_for(TEMPLATE, tools, calls="complete")
    sent = good.feed('<tool_call>\n{"name": "pick", "arguments": {"xs": [1, 3]}}\n</tool_call>') + good.end("stop")
    assert [d["tool_calls"][0]["function"]["arguments"] for d in sent if "tool_calls" in d] == ['{"xs": [1, 3]}']


def test_calls_is_checked_at_the_door():
    with pytest.raises(ValueError, match="calls must be 'deltas' or 'complete'"):
        parser_for(TEMPLATE, TOOLS, calls="eventually")
    with pytest.raises(TypeError, match="validate must be a function"):
        runtime.StreamParser(compile_in_memory(TEMPLATE)[1], calls="complete", validate="yes")


# --- the runtime's own check against jsonschema ----------------------------------------------

SCHEMAS = [
    {"type": "integer"}, {"type": ["string", "null"]}, {"type": "number", "minimum": 1, "exclusiveMaximum": 5},
    {"type": "number", "multipleOf": 0.5}, {"enum": [1, "a", None, True]}, {"const": {"a": [1]}},
    {"type": "string", "minLength": 2, "maxLength": 3}, {"type": "string", "pattern": "^[a-z]+$"},
    {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2, "uniqueItems": True},
    {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "boolean"}},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False},
    {"type": "object", "patternProperties": {"^x": {"type": "string"}}, "additionalProperties": {"type": "null"},
     "minProperties": 1, "maxProperties": 2},
    {"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"oneOf": [{"type": "number"}, {"type": "integer"}]},
    {"allOf": [{"type": "number"}, {"minimum": 0}]}, {"not": {"type": "string"}},
    {"$defs": {"n": {"type": "integer", "maximum": 9}}, "type": "object", "properties": {"v": {"$ref": "#/$defs/n"}}},
    {"type": "object", "properties": {"t": {"type": "string", "title": "T", "description": "d", "format": "email"}}},
]
VALUES = [None, True, False, 0, 1, 1.0, 2.5, 3, 7, -1, 12, "", "a", "ab", "abc", "ABC", "x1", [], [1], [1, 1], [1, 2, 3],
          ["s"], ["s", True], ["s", 1], {}, {"a": 1}, {"a": "1"}, {"a": 1, "b": 2}, {"x": "s"}, {"y": None},
          {"x": "s", "y": None, "z": None}, {"v": 3}, {"v": 10}, {"t": "not an email"}, {"a": [1]}]


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:50] for s in SCHEMAS])
def test_the_runtimes_schema_check_agrees_with_jsonschema(schema):
    check = runtime.SchemaCheck(schema)
    reference = jsonschema.Draft202012Validator(schema)
    for value in VALUES:
        assert (check.problem(value) is None) == reference.is_valid(value), (schema, value, check.problem(value))


@pytest.mark.parametrize("schema, said", [
    ({"type": "object", "dependentRequired": {"a": ["b"]}}, "'dependentRequired'"),
    ({"$ref": "https://example.com/s.json"}, "points outside the tool's schema"),
    ({"$ref": "#/$defs/missing"}, "points to nothing"),
    ({"type": "string", "pattern": "("}, "is not a regular expression"),
])
def test_the_runtimes_check_refuses_a_schema_it_cannot_check(schema, said):
    with pytest.raises(runtime.SchemaError, match=said.replace("(", r"\(").replace("'", "'")):
        runtime.SchemaCheck(schema)
