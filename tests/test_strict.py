"""Strict means strict (issue #52): what a `required` grammar lets a model write is a call its
parser reads back, with arguments the tool's schema accepts; what it cannot force is refused.

The property: for every corpus family that writes calls, in every argument notation (JSON,
key/value, XML, pythonic), and tool schemas that use the keywords the grammar claims to force
(const, enum, pattern, lengths, bounds, nested objects and arrays, optional properties, names
with '.' and '-'), each text drawn from the grammar (check/ir_sample.py) that the grammar
accepts is read by the family's parser as a call of the tool, without an error, and its
arguments are valid under the schema. Then the values no notation can write are refused when
the grammar is built, naming why."""

from __future__ import annotations

import functools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tplparse
from tplparse.bridge import compile_in_memory, parser_for
from tplparse.check import ir_match
from tplparse.check.ir_sample import sample
from tplparse.grammar.build import GrammarOptions, build
from tplparse.grammar.json_schema import SchemaError
from tplparse.grammar.patterns import iter_errors

from conftest import CORPUS, EXAMPLES, examples, needs_corpus, proved_corpus_stems


def obj(properties: dict, required=None) -> dict:
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required}


SCHEMAS = {
    "const": obj({"n": {"const": 7}, "s": {"const": "exact"}}),
    "enum": obj({"e": {"enum": ["a b", "x'y", 'q"r', "c<d", 3, None]}}),
    "pattern": obj({"p": {"type": "string", "pattern": "^[a-z]{2,4}-[0-9]+$"}}),
    "lengths": obj({"s": {"type": "string", "minLength": 2, "maxLength": 5}}),
    "bounded integer": obj({"i": {"type": "integer", "minimum": 3, "maximum": 9}}),
    "types": obj({"b": {"type": "boolean"}, "z": {"type": "null"}, "f": {"type": "number"}}),
    "array": obj({"tags": {"type": "array", "items": {"type": "string", "enum": ["u", "v"]},
                           "minItems": 1, "maxItems": 3}}),
    "nested": obj({"o": obj({"k": {"type": "integer"}, "w": {"enum": ["on", "off"]}})}),
    "optional": obj({"a": {"type": "integer"}, "b.c": {"type": "string", "maxLength": 3},
                     "d-e": {"const": True}}, required=["a"]),
    "anyOf": obj({"v": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}}),
    "$ref": {**obj({"x": {"$ref": "#/$defs/level"}, "y": {"$ref": "#/$defs/count"}}),
             "$defs": {"level": {"enum": ["low", "high"]}, "count": {"type": "integer", "minimum": 0}}},
}


@functools.lru_cache(maxsize=None)
def family(stem: str):
    path = EXAMPLES / "chatml-think-tools.gguf" if stem == "example" else CORPUS / f"{stem}.jinja"
    template = tplparse.load(path)
    spec, _ = compile_in_memory(template)
    return template, spec


@functools.lru_cache(maxsize=None)
def grammar(stem: str, schema_name: str):
    """(the required grammar of a tool `f` of that schema, its start state, the tools, what the
    grammar says it does not force); None where the grammar refuses the schema (a
    SchemaError: said, and tested below)."""
    template, spec = family(stem)
    start = spec.modes["default"].start
    tools = [{"type": "function", "function": {"name": "f", "parameters": SCHEMAS[schema_name]}}]
    options = GrammarOptions(tools=tools, tool_choice="required", start=start)
    try:
        return build(spec, options, template.special_tokens), start, tools, options.warnings
    except SchemaError:
        return None


def families() -> list[str]:
    return ["example"] + [stem for stem in proved_corpus_stems() if family(stem)[1].tool_calls is not None]


@needs_corpus
@settings(max_examples=examples(400), deadline=None)
@given(data=st.data())
def test_what_a_required_grammar_lets_through_reads_back_valid(data):
    stem = data.draw(st.sampled_from(families()), label="family")
    schema_name = data.draw(st.sampled_from(sorted(SCHEMAS)), label="schema")
    built = grammar(stem, schema_name)
    if built is None:
        return
    g, start, tools, warnings = built
    if any("left to validation" in w for w in warnings):
        return  # (the grammar says it does not force this schema: validation does)
    text = sample(g, g.root, lambda n: data.draw(st.integers(0, n - 1)) if n > 1 else 0)
    if not ir_match.accepts(g, text):
        return  # (a draw a Not or a stop refused: not what the grammar lets through)
    template, _ = family(stem)
    parser = parser_for(template, tools=tools, start=start)
    parser.feed(text)
    parser.end()
    message = parser.message
    assert message["errors"] == [], (stem, schema_name, text, message["errors"])
    assert message["tool_calls"], (stem, schema_name, text)
    for call in message["tool_calls"]:
        assert call["function"]["name"] == "f"
        arguments = json.loads(call["function"]["arguments"])
        assert iter_errors(SCHEMAS[schema_name], arguments) == [], (stem, schema_name, text, arguments)


# The schemas a family's notation cannot write, and why (each a test of its own below too).
NOTATION_REFUSES = {
    # LFM2.5 writes a string between single quotes it does not escape: x'y cannot be written
    ("LiquidAI-LFM2.5-8B-A1B", "enum"): "holds \"'\", which ends a string in this notation",
    ("LiquidAI-LFM2.5-Instruct", "enum"): "holds \"'\", which ends a string in this notation",
}


@needs_corpus
def test_every_family_forces_the_schemas_it_is_given():
    """The property above draws from the grammars that were built: each family builds them
    (but for the refusals its notation needs, named in NOTATION_REFUSES), so that it is not
    vacuous."""
    refused = {}
    for stem in families():
        for name in SCHEMAS:
            if grammar(stem, name) is None:
                template, spec = family(stem)
                tools = [{"type": "function", "function": {"name": "f", "parameters": SCHEMAS[name]}}]
                with pytest.raises(SchemaError) as raised:
                    build(spec, GrammarOptions(tools=tools, tool_choice="required"), template.special_tokens)
                refused[(stem, name)] = str(raised.value)
    assert set(refused) == {key for key in NOTATION_REFUSES if key[0] in families()}, refused
    for key, message in refused.items():
        assert NOTATION_REFUSES[key] in message, (key, message)


KV = "ZAI-GLM-4.6"  # <arg_key>K</arg_key>\n<arg_value>V</arg_value>\n


@needs_corpus
@pytest.mark.parametrize("schema, words", [
    (obj({"": {"type": "string"}}), "the property name ''"),
    (obj({"a\nb": {"type": "string"}}), "the property name 'a\\nb'"),
    (obj({"</arg_key>": {"type": "string"}}), "the property name '</arg_key>'"),
    (obj({"x": {"enum": ["a</arg_value>b"]}}), "holds '</arg_value>'"),
    (obj({"x": {"const": "</arg_value>"}}), "holds '</arg_value>'"),
    (obj({"x": {"type": "string", "pattern": "^<[a-z]+>$"}}), "begins '</arg_value>'"),
])
def test_a_key_value_notation_refuses_what_its_parser_cannot_read_back(schema, words):
    template, spec = family(KV)
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    with pytest.raises(SchemaError) as raised:
        build(spec, GrammarOptions(tools=tools, tool_choice="required"), template.special_tokens)
    assert words in str(raised.value)


def test_a_value_holding_the_end_of_turn_marker_is_refused():
    """The engine stops at the end-of-turn marker: a const that holds it can never be written
    whole (the model wrote no call)."""
    template, spec = family("example")
    tools = [{"type": "function", "function": {"name": "f", "parameters": obj({"x": {"const": "a<|im_end|>b"}})}}]
    with pytest.raises(SchemaError, match="end-of-turn marker '<\\|im_end\\|>'"):
        build(spec, GrammarOptions(tools=tools, tool_choice="required"), template.special_tokens)


@needs_corpus
@pytest.mark.parametrize("stem", ["example", KV])
def test_const_and_enum_are_forced_and_typed_in_every_notation(stem):
    """A const 7 written as 1, an enum of an object written as a string: refused by the grammar
    (the key/value family let both through), and the value the grammar forces is read as the
    type it is (7, not '7')."""
    g, start, tools, _ = grammar(stem, "const")
    template, spec = family(stem)
    from tplparse.check.outputs import model_outputs
    from tplparse.probe.conversations import Call, Turn

    def written(arguments):
        [output] = model_outputs(template, spec, {"t": Turn(calls=(Call("f", arguments, "a1b2c3d4e"),))})
        return output.text

    assert ir_match.accepts(g, written({"n": 7, "s": "exact"}))
    assert not ir_match.accepts(g, written({"n": 1, "s": "exact"}))
    assert not ir_match.accepts(g, written({"n": 7, "s": "x"}))
    parser = parser_for(template, tools=tools, start=start)
    parser.feed(written({"n": 7, "s": "exact"}))
    parser.end()
    assert json.loads(parser.message["tool_calls"][0]["function"]["arguments"]) == {"n": 7, "s": "exact"}


# Values of each string format, one that is and one that is not (from the RFCs the formats cite).
FORMAT_VALUES = {
    "date-time": ("2026-12-07T10:00:00Z", "2026-13-07T10:00:00Z"),
    "date": ("2026-02-28", "2026-02-30"),
    "time": ("10:00:00+01:00", "25:00:00Z"),
    "duration": ("P1DT2H", "P1H"),
    "email": ("a@example.org", "a.example.org"),
    "idn-email": ("ä@example.org", "ä.example.org"),
    "hostname": ("example.org", "-example.org"),
    "idn-hostname": ("bücher.example", "-bücher.example"),
    "ipv4": ("192.0.2.1", "192.0.2.256"),
    "ipv6": ("2001:db8::1", "2001:db8:::1"),
    "uri": ("https://example.org/a?b=c", "no scheme"),
    "uri-reference": ("../a?b", "a b"),
    "iri": ("https://例え.jp/パス", "https://例え.jp/パ ス"),
    "iri-reference": ("../パス", "../\ud800"),
    "uuid": ("123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456"),
    "uri-template": ("https://example.org/{id}", "https://example.org/{id"),
    "json-pointer": ("/a/0", "a/0"),
    "relative-json-pointer": ("1/a", "/a"),
    "regex": ("^a+$", "(a"),
}


@pytest.mark.parametrize("name", list(FORMAT_VALUES))
def test_validation_checks_every_string_format(name):
    """A `format` the grammar leaves to validation is checked there, not read as an annotation."""
    good, bad = FORMAT_VALUES[name]
    schema = {"type": "string", "format": name}
    assert iter_errors(schema, good) == []
    assert [e.validator for e in iter_errors(schema, bad)] == ["format"]


def test_importing_the_validator_is_quick():
    """(a format checker's library that builds a parser when imported costs every command's start)"""
    import subprocess
    import sys
    import time

    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import tplparse.grammar.patterns"], check=True)
    assert time.monotonic() - started < 2.0
