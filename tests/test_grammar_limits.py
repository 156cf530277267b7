"""Grammars from what a request may hold (issue #28, round 2): a schema or a tool that a
grammar cannot be written for is a SchemaError naming where, never a grammar llama.cpp
refuses; what the grammar can hold it writes so that llama.cpp (its own GBNF parser, through
llama-cpp-python) reads it; a large enum builds in linear time; and a tool named like a
tool_choice mode is forced when it is named, and refused where a bare string is ambiguous."""

from __future__ import annotations

import json
import time

import pytest

import tplparse
from conftest import EXAMPLES, run_cli
from tplparse.bridge import compile_in_memory
from tplparse.check import llama as llama_check
from tplparse.check.gbnf_lark import GbnfAcceptor, parse_gbnf
from tplparse.emit.gbnf import emit_gbnf
from tplparse.emit.llama_request import llama_request
from tplparse.grammar import GrammarOptions, ToolChoice
from tplparse.grammar.ir import Grammar
from tplparse.grammar.json_schema import MAX_REPETITION, SchemaError, add_schema

TEMPLATE = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
SPEC = compile_in_memory(TEMPLATE)[0]
needs_llama = pytest.mark.skipif(not llama_check.available(), reason="llama-cpp-python is not installed "
                                 "(pip install 'llama-cpp-python>=0.3.30'): llama.cpp's own GBNF parser is the check")


def tool(name: str, parameters: dict | None = None) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters or {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def arguments(properties: dict, required=None) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties) if required is None else required}


def schema_gbnf(schema) -> tuple[str, list[str]]:
    g = Grammar(root="root")
    found: list[str] = []
    g.add("root", add_schema(g, schema, "value", found))
    return emit_gbnf(g), found


def llama_reads(gbnf: str) -> None:
    parse_gbnf(gbnf)
    if llama_check.available():
        ok, message = llama_check.checker().validate(gbnf)
        assert ok, message


def test_a_large_enum_builds_in_linear_time():
    """ir.alt compared each new alternative with every one before it: 16,000 values took 36 s
    (100,000 some 25 minutes); now a pass over a dict."""
    values = [f"value-{i}" for i in range(20_000)]
    tools = [tool("f", arguments({"x": {"enum": values}}))]
    started = time.monotonic()
    request = llama_request(SPEC, GrammarOptions(tools=tools, tool_choice="required"), TEMPLATE.special_tokens)
    assert time.monotonic() - started < 5
    assert '"\\"value-19999\\""' in request["grammar"]


@needs_llama
def test_a_tool_name_with_a_newline_writes_a_grammar_llama_cpp_reads():
    """The rule's comment held the name as it is: its newline started a line that llama.cpp
    read as grammar (failed to parse grammar: a 502 blamed on the upstream)."""
    for name in ("get\nweather", "nul\x00name", "sep\u2028name"):
        request = llama_request(SPEC, GrammarOptions(tools=[tool(name)], tool_choice="required"), TEMPLATE.special_tokens)
        llama_reads(request["grammar"])


@pytest.mark.parametrize("schema, path, words", [
    ({"enum": []}, "#", "enum is empty"),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "#/$defs/b", "loop"),
    ({"anyOf": [{"$ref": "#"}, {"type": "string"}]}, "#/anyOf/0", "loop"),
    ({"type": "array", "minItems": 1_000_000}, "#", "minItems 1000000"),
    ({"type": "object", "properties": {"s": {"type": "string", "minLength": MAX_REPETITION + 1}}}, "#/properties/s",
     f"minLength {MAX_REPETITION + 1}"),
    ({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}, "#/properties/x", "does not resolve"),
    ({"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}, "#/properties/x",
     "not a local reference"),
    ({"type": "array", "maxItems": -1}, "#", "non-negative integer"),
])
def test_a_schema_no_grammar_holds_is_an_error_naming_where(schema, path, words):
    with pytest.raises(SchemaError) as caught:
        schema_gbnf(schema)
    assert caught.value.path == path and words in caught.value.reason


@pytest.mark.parametrize("schema, good, bad, warned", [
    ({"type": "string", "maxLength": 10**12}, ['"abc"'], ["abc"], "maxLength"),
    ({"type": "array", "items": {"type": "integer"}, "maxItems": 10**6}, ["[1, 2]"], ['["x"]'], "maxItems"),
    ({"type": "string", "minLength": 700, "maxLength": 1900}, ['"' + "\\n" * 700 + '"'], ['"' + "a" * 699 + '"'], None),
    ({"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}, "minItems": MAX_REPETITION},
     ["[" + ", ".join(["{}"] * MAX_REPETITION) + "]"], ["[" + ", ".join(["{}"] * (MAX_REPETITION - 1)) + "]"], None),
    ({"type": "string", "pattern": "^a{100000}$"}, ['"b"'], [], "pattern"),
    ({"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}, "additionalProperties": False},
     ['{"kids": [{"kids": []}, {}]}'], ['{"kids": [1]}'], None),
    ({"$defs": {"a b": {"type": "boolean"}}, "type": "array", "items": {"$ref": "#/$defs/a%20b"}}, ["[true]"], ['["x"]'],
     None),
    ({"$defs": {"a-b": {"type": "string"}, "a_b": {"type": "integer"}},
      "type": "object", "properties": {"x": {"$ref": "#/$defs/a-b"}, "y": {"$ref": "#/$defs/a_b"}}, "required": ["x", "y"]},
     ['{"x": "s", "y": 1}'], ['{"x": 1, "y": 1}'], None),
])
@needs_llama
def test_what_a_grammar_holds_llama_cpp_reads(schema, good, bad, warned):
    """Bounds past llama.cpp's 2000 repetitions: a maximum is left to validation (said), a
    bounded repetition of a group repeats one named rule (llama.cpp multiplies a group's
    rules by the bound)."""
    gbnf, found = schema_gbnf(schema)
    llama_reads(gbnf)
    assert [w for w in found if warned and repr(warned) in w] if warned else found == []
    checker = llama_check.checker()
    for text in good:
        assert checker.accepts(gbnf, text), text[:60]
    for text in bad:
        assert not checker.accepts(gbnf, text), text[:60]


# --- tool_choice: a named tool, and a tool named like a mode ------------------------------

def named(name: str) -> dict:
    return {"type": "function", "function": {"name": name}}


@pytest.mark.parametrize("tools, choice", [
    ([tool("auto")], named("auto")),
    ([tool("none"), tool("get_weather")], named("none")),
    ([tool("required"), tool("get_weather")], ToolChoice("function", "required")),
])
def test_a_named_tool_choice_is_forced_whatever_the_name(tools, choice):
    """The named choice became the mode of that name: auto (a lazy grammar, any tool or
    none), or none (no call at all)."""
    options = GrammarOptions(tools=tools, tool_choice=choice)
    name = choice["function"]["name"] if isinstance(choice, dict) else choice.name
    assert options.choice == ToolChoice("function", name)
    request = llama_request(SPEC, options, TEMPLATE.special_tokens)
    assert request["grammar_lazy"] is False
    acceptor = GbnfAcceptor(request["grammar"])
    call = '<tool_call>\n{"name": "%s", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert acceptor.accepts(call % name)
    assert not acceptor.accepts("It is sunny.")
    others = [t["function"]["name"] for t in tools if t["function"]["name"] != name]
    assert all(not acceptor.accepts(call % other) for other in others)


@pytest.mark.parametrize("mode", ["auto", "none", "required"])
def test_a_bare_mode_word_beside_a_tool_of_that_name_is_refused(mode):
    with pytest.raises(ValueError) as caught:
        GrammarOptions(tools=[tool(mode), tool("get_weather")], tool_choice=mode)
    assert "ambiguous" in str(caught.value) and mode in str(caught.value)
    # the mode left unsaid is auto; the tool, named as an object, is forced
    assert GrammarOptions(tools=[tool(mode)]).choice == ToolChoice("auto")
    assert GrammarOptions(tools=[tool(mode)], tool_choice=named(mode)).choice == ToolChoice("function", mode)
    # a bare string that is no mode word names a tool, as before
    assert GrammarOptions(tools=[tool("get_weather")], tool_choice="get_weather").choice == ToolChoice("function",
                                                                                                       "get_weather")


def test_the_cli_refuses_an_ambiguous_tool_choice_and_takes_the_object(tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([tool("none"), tool("get_weather")]))
    source = EXAMPLES / "chatml-think-tools.gguf"
    ambiguous = run_cli("gbnf", source, "--tools", tools, "--tool-choice", "none")
    assert ambiguous.returncode == 2 and "ambiguous" in ambiguous.stderr and "Traceback" not in ambiguous.stderr
    assert len(ambiguous.stderr.strip().splitlines()) == 1
    forced = run_cli("gbnf", source, "--tools", tools, "--tool-choice", json.dumps(named("none")))
    assert forced.returncode == 0, forced.stderr
    assert "\ntool-call ::= call-none\n" in forced.stdout and 'tool-name-none ::= "none"' in forced.stdout
