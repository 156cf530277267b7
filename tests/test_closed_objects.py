"""Undeclared properties in generation grammars (issue #15).

By default an object whose schema lists `properties` takes no other unless
`additionalProperties` allows it (llama.cpp's converter and OpenAI strict mode); a bare
`{"type": "object"}` takes any object; `open_objects` gives JSON Schema's own rule. No
grammar admits a declared key twice. GBNF is checked with the real llama.cpp, Lark with
the real llguidance, both `%json` (llguidance's own converter, given the closed copy of the
schema) and the IR (a schema llguidance does not enforce: `format` here).
"""

from __future__ import annotations

import ast
import copy
import json
import warnings

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tplparse
from tplparse import runtime
from tplparse.bridge import compile_in_memory
from tplparse.check import llama as llama_check
from tplparse.check import llguidance as llguidance_check
from tplparse.emit.gbnf import emit_gbnf
from tplparse.emit.lark import emit_lark
from tplparse.grammar import GrammarOptions, build
from tplparse.grammar.ir import Grammar
from tplparse.grammar.json_schema import add_schema, closed_objects, extra_properties
from tplparse.probe import probe

from conftest import EXAMPLES, examples

needs_llama = pytest.mark.skipif(not llama_check.available(), reason="llama-cpp-python is not installed")
needs_llguidance = pytest.mark.skipif(not llguidance_check.available(), reason="llguidance is not installed")

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
           "required": ["city"]}
# The same, with a keyword llguidance does not enforce: the Lark grammar is written from the IR.
WEATHER_IR = {**WEATHER, "properties": {**WEATHER["properties"], "city": {"type": "string", "format": "city"}}}


def _grammar(schema, flavor="json", open_objects=False) -> Grammar:
    g = Grammar(root="root")
    g.add("root", add_schema(g, schema, "value", [], flavor, open_objects))
    return g


def gbnf_accepts(schema, text, flavor="json", open_objects=False) -> bool:
    return llama_check.checker().accepts(emit_gbnf(_grammar(schema, flavor, open_objects)), text)


def lark_accepts(schema, text, open_objects=False) -> bool:
    lark = emit_lark(_grammar(schema, open_objects=open_objects))
    checker = llguidance_check.LarkChecker()
    assert checker.validate(lark) == (True, "")
    return checker.accepts(lark, text)


# --- The convention -----------------------------------------------------------------------

OBJECT_CASES = [
    # (schema, text, accepted by default, accepted with open_objects)
    (WEATHER, '{"city": "Paris"}', True, True),
    (WEATHER, '{"city": "Paris", "unit": "c"}', True, True),
    (WEATHER, '{"city": "Paris", "type": "object"}', False, True),
    (WEATHER, '{"city": "Paris", "unit": "c", "properties": {}}', False, True),
    ({**WEATHER, "additionalProperties": True}, '{"city": "Paris", "type": "object"}', True, True),
    ({**WEATHER, "additionalProperties": {"type": "integer"}}, '{"city": "Paris", "days": 3}', True, True),
    ({**WEATHER, "additionalProperties": {"type": "integer"}}, '{"city": "Paris", "days": "3"}', False, False),
    ({**WEATHER, "additionalProperties": False}, '{"city": "Paris", "days": 3}', False, False),
    ({**WEATHER, "additionalProperties": False}, '{"city": "Paris"}', True, True),
    ({"type": "object"}, '{"a": 1, "b": [true, null], "c": {"d": "e"}}', True, True),
    ({"type": "object"}, "{}", True, True),
    ({"type": "object", "additionalProperties": False}, '{"a": 1}', False, False),
    ({"type": "object", "additionalProperties": False}, "{}", True, True),
    ({"type": "object", "properties": {}}, '{"a": 1}', False, True),  # (no arguments: llama.cpp's reading too)
    ({"type": "object", "properties": {}}, "{}", True, True),
    # the declared key again, whatever the mode and whatever extras are allowed
    (WEATHER, '{"city": "Paris", "city": "Rome"}', False, False),
    (WEATHER, '{"city": "Paris", "unit": "c", "unit": "f"}', False, False),
    ({**WEATHER, "additionalProperties": True}, '{"city": "Paris", "city": "Rome"}', False, False),
    ({**WEATHER, "additionalProperties": True}, '{"city": "Paris", "x": 1, "city": "Rome"}', False, False),
]
IDS = [f"{json.dumps(s)[:50]} {t}" for s, t, _, _ in OBJECT_CASES]


@needs_llama
@pytest.mark.parametrize("schema, text, closed, opened", OBJECT_CASES, ids=IDS)
def test_gbnf_objects(schema, text, closed, opened):
    assert gbnf_accepts(schema, text) == closed
    assert gbnf_accepts(schema, text, open_objects=True) == opened


@needs_llama
@pytest.mark.parametrize("schema, text, closed, opened", OBJECT_CASES, ids=IDS)
def test_gbnf_python_literal_objects(schema, text, closed, opened):
    """The Python flavor (arguments a template prints as a dict) follows the same rules."""
    text = _py_keys(text)
    assert gbnf_accepts(schema, text, "python") == closed, text
    assert gbnf_accepts(schema, text, "python", open_objects=True) == opened, text


def _py_keys(text: str) -> str:
    """The JSON text in Python's literal notation, keeping repeated keys (repr() of the
    decoded dict would merge them)."""
    pairs = json.loads(text, object_pairs_hook=lambda items: _PairList(items))
    return _py_value(pairs)


class _PairList(list):
    pass


def _py_value(value) -> str:
    if isinstance(value, _PairList):
        return "{" + ", ".join(f"{k!r}: {_py_value(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_py_value(v) for v in value) + "]"
    return repr(value)


@needs_llguidance
@pytest.mark.parametrize("ir", [False, True], ids=["%json", "IR"])
@pytest.mark.parametrize("schema, text, closed, opened", OBJECT_CASES, ids=IDS)
def test_lark_objects(schema, text, closed, opened, ir):
    if ir:
        schema = {**schema, "format": "any"}  # (a keyword llguidance does not enforce: written from the IR)
    lark = emit_lark(_grammar(schema))
    assert ("\nvalue: %json" in lark) == (not ir)
    assert lark_accepts(schema, text) == closed
    assert lark_accepts(schema, text, open_objects=True) == opened


@needs_llama
@pytest.mark.parametrize("flavor", ["json", "python"])
def test_optional_members_are_not_repeated(flavor):
    """Each declared key at most once, whichever members are present (optional ones around a
    required one), in both modes."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
              "required": ["b"]}
    good = ['{"b": 1}', '{"a": 1, "b": 2}', '{"b": 2, "c": 3}', '{"a": 1, "b": 2, "c": 3}']
    bad = ['{"a": 1, "a": 1, "b": 2}', '{"b": 2, "b": 2}', '{"b": 2, "c": 3, "c": 3}', '{"a": 1, "b": 2, "a": 1}',
           '{"a": 1, "b": 2, "c": 3, "b": 2}']
    convert = _py_keys if flavor == "python" else (lambda t: t)
    for open_objects in (False, True):
        for text in good:
            assert gbnf_accepts(schema, convert(text), flavor, open_objects), (open_objects, text)
        for text in bad:
            assert not gbnf_accepts(schema, convert(text), flavor, open_objects), (open_objects, text)


@needs_llama
def test_a_declared_name_spelled_with_escapes_is_not_an_extra_key():
    """`c\\u0069ty` is the key `city` once decoded: not a second `city`, and not an undeclared
    key whose value escapes city's schema."""
    schema = {**WEATHER, "additionalProperties": True}
    for text in [r'{"city": "Paris", "c\u0069ty": "Rome"}', r'{"city": "Paris", "\u0063\u0069\u0074\u0079": 1}',
                 r'{"city": "Paris", "c\u0069t\u0079": 1}', r'{"city": "Paris", "\u0063ity": 1}', r'{"city": "P", "u\u006Eit": 1}',
                 r'{"city": "P", "unit": "c", "\u0075nit": "f"}', r'{"c\u0069ty": 1}']:
        assert not gbnf_accepts(schema, text), text
    for text in [r'{"city": "Paris", "c\u0069tx": 1}', r'{"city": "Paris", "\u0064ity": 1}', r'{"city": "Paris", "cit": 1}',
                 r'{"city": "Paris", "cityy": 1}', r'{"city": "Paris", "\n": 1}']:
        assert gbnf_accepts(schema, text), text
    python = {**WEATHER, "additionalProperties": True}
    assert not gbnf_accepts(python, r"{'city': 'P', 'c\x69ty': 'Q'}", "python")
    assert gbnf_accepts(python, r"{'city': 'P', 'ci\ty': 'Q'}", "python")


# The extra-key rule against Python's own decoding: accepted exactly when the key, decoded,
# is none of the declared names (every spelling here is one the rule follows exactly).
JSON_NAMES = ["a", "ab", "b\u00e9", "\U0001F600x", "/"]
JSON_PIECES = ["a", "b", "x", "\u00e9", "\U0001F600", "/", "\\u0061", "\\u0041", "\\u0062", "\\u00e9", "\\u00E9",
               "\\/", "\\n", "\\\\", "\\ud83d\\ude00", "\\uD83D\\uDE00", "\\ud83d\\ude01", "\\u0078"]
PYTHON_NAMES = ["a", "ab", "a'b", "\u00e9\t"]
PYTHON_PIECES = ["a", "b", "\u00e9", "\t", "\\t", "\\'", '"', '\\"', "\\\\", "\\q", "\\a"]


@needs_llama
@settings(max_examples=examples(120), deadline=None)
@given(st.lists(st.sampled_from(JSON_PIECES), max_size=4))
@example(["\\u0061", "b"]).via("a declared name, escaped")
@example(["b", "\\u00E9"]).via("a declared name, escaped in upper case")
@example(["\\ud83d\\ude00", "x"]).via("a declared name above U+FFFF, as a surrogate pair")
@example(["\\/"]).via("a declared name, by a one-letter escape")
@example(["\\u0061", "x"]).via("no name, escaped")
def test_json_extra_key_is_no_declared_name(pieces):
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in JSON_NAMES}, "additionalProperties": True}
    key = '"' + "".join(pieces) + '"'
    assert gbnf_accepts(schema, "{" + key + ": true}") == (json.loads(key) not in JSON_NAMES), key


@needs_llama
@settings(max_examples=examples(120), deadline=None)
@given(st.lists(st.sampled_from(PYTHON_PIECES), max_size=4))
@example(["a", "\\'", "b"]).via("a declared name with a quote, escaped")
@example(["\u00e9", "\\t"]).via("a declared name with a tab, escaped")
@example(["\u00e9", "\\t", "a"]).via("no name: an escaped tab, then more")
@example(["\\q"]).via("an escape Python does not know: a backslash and the letter")
def test_python_extra_key_is_no_declared_name(pieces):
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in PYTHON_NAMES}, "additionalProperties": True}
    key = "'" + "".join(pieces) + "'"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (\q: an invalid escape, which Python keeps as it is)
        decoded = ast.literal_eval(key)
    assert gbnf_accepts(schema, "{" + key + ": True}", "python") == (decoded not in PYTHON_NAMES), key


@needs_llama
def test_two_extra_keys_may_repeat_and_the_parser_refuses_them():
    """A context-free grammar cannot keep the set of extra names written: the grammar accepts
    a repeated extra key; the runtime parser refuses the duplicate on read."""
    schema = {**WEATHER, "additionalProperties": True}
    text = '{"city": "Paris", "x": 1, "x": 2}'
    assert gbnf_accepts(schema, text)
    _, protocol = compile_in_memory(tplparse.load(EXAMPLES / "chatml-think-tools.gguf"))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
    call = '<tool_call>\n{"name": "get_weather", "arguments": ' + text + "}\n</tool_call><|im_end|>"
    message = runtime.parse(protocol, call, tools=tools)
    assert message["tool_calls"] == []
    assert [e["kind"] for e in message["errors"]] == ["invalid_arguments"] and "twice" in message["errors"][0]["message"]


# --- The %json copy ---------------------------------------------------------------------------

NESTED = {
    "type": "object",
    "properties": {
        "stops": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
        "where": {"anyOf": [{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                            {"type": "null"}]},
        "pair": {"type": "array", "prefixItems": [{"type": "object", "properties": {"k": {"type": "integer"}}}]},
        "free": {"type": "object"},
        "open": {"type": "object", "properties": {"o": {"type": "integer"}}, "additionalProperties": True},
        "ref": {"$ref": "#/$defs/leaf"},
        "properties": {"type": "object", "properties": {"additionalProperties": {"type": "integer"}}},
        "choice": {"enum": [{"properties": {"x": 1}}]},
    },
    "$defs": {"leaf": {"type": "object", "properties": {"v": {"type": "integer"}}}},
}


def _json_of(lark: str) -> dict:
    line = next(line for line in lark.splitlines() if line.startswith("value: %json "))
    return json.loads(line[len("value: %json "):])


def test_closed_copy_closes_every_listing_object_and_leaves_the_schema_alone():
    before = copy.deepcopy(NESTED)
    closed = closed_objects(NESTED)
    assert NESTED == before
    assert closed is not NESTED
    props = closed["properties"]
    assert closed["additionalProperties"] is False
    assert props["stops"]["items"]["additionalProperties"] is False
    assert props["where"]["anyOf"][0]["additionalProperties"] is False and props["where"]["anyOf"][1] == {"type": "null"}
    assert props["pair"]["prefixItems"][0]["additionalProperties"] is False
    assert props["free"] == {"type": "object"}  # (lists no properties: any object)
    assert props["open"]["additionalProperties"] is True
    assert closed["$defs"]["leaf"]["additionalProperties"] is False and props["ref"] == {"$ref": "#/$defs/leaf"}
    # a property named "properties", whose own property is named "additionalProperties"
    assert props["properties"]["additionalProperties"] is False
    assert props["properties"]["properties"] == {"additionalProperties": {"type": "integer"}}
    assert props["choice"] == {"enum": [{"properties": {"x": 1}}]}  # (a value, not a schema)
    assert list(closed) == list(NESTED) + ["additionalProperties"]  # (key order kept, the new key last)
    assert list(props) == list(NESTED["properties"])
    for keyword in ("not", "if", "then", "else", "contains", "additionalProperties", "patternProperties", "definitions"):
        sub = {"properties": {"a": {}}}
        wrapped = {keyword: {"x": sub} if keyword in ("patternProperties", "definitions") else sub}
        found = closed_objects(wrapped)[keyword]
        found = found["x"] if keyword in ("patternProperties", "definitions") else found
        assert found["additionalProperties"] is False, keyword
    assert closed_objects(True) is True and closed_objects({"type": "object"}) == {"type": "object"}


def test_extra_properties():
    assert extra_properties({"properties": {}}) is False
    assert extra_properties({"properties": {}}, open_objects=True) is True
    assert extra_properties({"type": "object"}) is True
    assert extra_properties({"properties": {}, "additionalProperties": {"type": "integer"}}) == {"type": "integer"}
    assert extra_properties({"additionalProperties": False}, open_objects=True) is False


@needs_llguidance
def test_lark_json_is_the_closed_copy_unless_open():
    before = copy.deepcopy(NESTED)
    closed = emit_lark(_grammar(NESTED))
    opened = emit_lark(_grammar(NESTED, open_objects=True))
    assert NESTED == before  # (building and writing the grammar changed nothing of the user's schema)
    assert _json_of(closed) == closed_objects(NESTED)
    assert _json_of(opened) == NESTED
    good = '{"stops": [{"name": "A"}], "where": {"city": "P"}, "free": {"z": 1}, "open": {"o": 1, "p": 2}, "ref": {"v": 1}}'
    nested_extras = ['{"stops": [{"name": "A", "x": 1}]}', '{"where": {"city": "P", "x": 1}}', '{"ref": {"v": 1, "x": 1}}',
                     '{"pair": [{"k": 1, "x": 1}]}', '{"x": 1}']
    checker = llguidance_check.LarkChecker()
    assert checker.accepts(closed, good) and checker.accepts(opened, good)
    for text in nested_extras:
        assert not checker.accepts(closed, text), text
        assert checker.accepts(opened, text), text


@needs_llama
def test_gbnf_nested_objects_follow_the_convention():
    good = '{"stops": [{"name": "A"}], "where": {"city": "P"}, "free": {"z": 1}, "open": {"o": 1, "p": 2}, "ref": {"v": 1}}'
    nested_extras = ['{"stops": [{"name": "A", "x": 1}]}', '{"where": {"city": "P", "x": 1}}', '{"ref": {"v": 1, "x": 1}}',
                     '{"x": 1}']
    schema = {k: v for k, v in NESTED.items()}
    schema["properties"] = {k: v for k, v in NESTED["properties"].items() if k not in ("pair", "choice")}
    assert gbnf_accepts(schema, good) and gbnf_accepts(schema, good, open_objects=True)
    for text in nested_extras:
        assert not gbnf_accepts(schema, text), text
        assert gbnf_accepts(schema, text, open_objects=True), text


# --- Through GrammarOptions: tool arguments, structured output, parsing grammars ------------------

@pytest.fixture(scope="module")
def example():
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    return template, probe(template)


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


def _call(arguments: str) -> str:
    return f'<tool_call>\n{{"name": "get_weather", "arguments": {arguments}}}\n</tool_call><|im_end|>'


@needs_llama
def test_tool_arguments_gbnf(example):
    template, spec = example
    closed = emit_gbnf(build(spec, GrammarOptions(tools=TOOLS, tool_choice="required"), template.special_tokens))
    opened = emit_gbnf(build(spec, GrammarOptions(tools=TOOLS, tool_choice="required", open_objects=True),
                             template.special_tokens))
    checker = llama_check.checker()
    extra = _call('{"city": "Paris", "type": "object", "properties": {"city": "Paris"}}')
    assert checker.accepts(closed, _call('{"city": "Paris"}')) and not checker.accepts(closed, extra)
    assert checker.accepts(opened, extra)
    for grammar in (closed, opened):
        assert not checker.accepts(grammar, _call('{"city": "Paris", "city": "Rome"}'))
    # a parsing grammar (the reference parser's) reads what the model wrote: extras too
    parsing = emit_gbnf(build(spec, GrammarOptions(tools=TOOLS, trailing_text=True), template.special_tokens))
    assert checker.accepts(parsing, extra)


@needs_llguidance
def test_tool_arguments_and_structured_output_lark(example):
    template, spec = example
    checker = llguidance_check.LarkChecker(template.control_tokens)

    def lark(**options):
        return emit_lark(build(spec, GrammarOptions(**options), template.special_tokens), template.control_tokens)

    closed, opened = lark(tools=TOOLS, tool_choice="required"), lark(tools=TOOLS, tool_choice="required", open_objects=True)
    extra = _call('{"city": "Paris", "type": "object"}')
    assert checker.accepts(closed, _call('{"city": "Paris"}')) and not checker.accepts(closed, extra)
    assert checker.accepts(opened, extra)
    assert not checker.accepts(opened, _call('{"city": "Paris", "city": "Rome"}'))
    answer = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    closed, opened = lark(tool_choice="none", content_schema=answer), lark(tool_choice="none", content_schema=answer,
                                                                           open_objects=True)
    assert checker.accepts(closed, '{"answer": 42}<|im_end|>')
    assert not checker.accepts(closed, '{"answer": 42, "why": "because"}<|im_end|>')
    assert checker.accepts(opened, '{"answer": 42, "why": "because"}<|im_end|>')
    assert answer == {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
