"""Grammars from specs: PEG + reference parser, GBNF checked by the real llama.cpp."""

from __future__ import annotations

import json
import re
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tplparse
from tplparse.check import llama as llama_check
from tplparse.probe.conversations import Call, Turn
from tplparse.emit.gbnf import emit_gbnf
from tplparse.check.gbnf_lark import GbnfAcceptor, GbnfSyntaxError, parse_gbnf
from tplparse.grammar import GrammarOptions, build
from tplparse.grammar.ir import Alt, Grammar, Lit, Ref, Rep, TextUntil, alt, chars, covers, seq
from tplparse.grammar.json_schema import add_schema
from tplparse.emit.llama_request import TRIGGER_WORD, lazy_grammar, llama_request
from tplparse.grammar.reading import call_opener
from tplparse.probe.spans import Boundaries
from tplparse.check.reference import ReferenceParser
from tplparse.emit.peg import emit_peg
from tplparse.probe import probe

from conftest import EXAMPLES, GRAMMAR, TOOL_GRAMMAR, corpus_compiled, corpus_ids, corpus_stems, corpus_templates, examples, needs_corpus
from corpus_outputs import FRESH_TOOLS, outputs, readable

TEMPLATES = corpus_templates()

@pytest.fixture(scope="session")
def accepts():
    """accepts(gbnf, text): the real llama.cpp when installed, else the lark check (and say so)."""
    if llama_check.available():
        checker = llama_check.checker()
        return checker.accepts
    warnings.warn("llama-cpp-python is not installed: GBNF acceptance is checked with the lark Earley parser")
    cache = {}

    def lark_accepts(gbnf, text):
        if gbnf not in cache:
            cache[gbnf] = GbnfAcceptor(gbnf)
        return cache[gbnf].accepts(text)

    return lark_accepts


def valid(gbnf: str) -> None:
    parse_gbnf(gbnf)  # lark: syntax and references, with line numbers
    if llama_check.available():
        ok, message = llama_check.checker().validate(gbnf)
        assert ok, message


@pytest.fixture(scope="module")
def corpus(compiled_corpus):
    """stem -> (template, spec): the session's compiles (tests/conftest.py)."""
    return compiled_corpus.view(lambda entry: (entry.template, entry.spec))


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(GRAMMAR))
def test_corpus_grammars_read_back_the_templates_renders(corpus, stem, accepts, tmp_path):
    template, spec = corpus[stem]
    grammar_ir = build(spec, special_tokens=template.special_tokens)
    peg, gbnf = emit_peg(grammar_ir), emit_gbnf(grammar_ir)
    (tmp_path / f"{spec.family}.peg").write_text(peg, encoding="utf-8")
    (tmp_path / f"{spec.family}.gbnf").write_text(gbnf, encoding="utf-8")
    assert f"template sha256 {spec.template_sha256}" in peg.splitlines()[1]
    valid(gbnf)
    parsers = {}
    grammars = {}
    for output in corpus_compiled(stem).outputs:
        if output.start not in parsers:
            parsers[output.start] = ReferenceParser(spec, FRESH_TOOLS, start=output.start,
                                                    special_tokens=template.special_tokens)
            grammars[output.start] = emit_gbnf(build(spec, GrammarOptions(start=output.start), template.special_tokens))
        message = parsers[output.start].parse(output.text)
        assert message["errors"] == [], (output.turn, output.text, message["errors"])
        assert readable(message) == output.expected, (output.turn, output.text)
        assert accepts(grammars[output.start], output.text), (output.turn, output.text)


TOOL = {"type": "function", "function": {"name": "convert_currency", "description": "Convert", "parameters": {
    "type": "object",
    "properties": {"amount": {"type": "string"}, "target": {"enum": ["USD", "EUR"]}, "count": {"type": "integer"}},
    "required": ["amount", "target"],
}}}
CALLS = {
    "valid": {"amount": "EUR 12", "target": "USD", "count": 3},
    "wrong type": {"amount": "EUR 12", "target": "USD", "count": "three"},
    "missing required": {"amount": "EUR 12", "count": 3},
    "outside the enum": {"amount": "EUR 12", "target": "GBP", "count": 3},
}


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(TOOL_GRAMMAR))
def test_tool_grammar_rejects_unknown_tools_and_schema_violations(corpus, stem, accepts):
    template, spec = corpus[stem]
    if spec.tool_calls is None:
        pytest.skip(f"{stem} does not render tool calls")
    turns = {label: Turn(calls=(Call("convert_currency", args, "a1b2c3d4e"),)) for label, args in CALLS.items()}
    turns["unknown tool"] = Turn(calls=(Call("drop_tables", CALLS["valid"], "a1b2c3d4e"),))
    rendered = {o.turn: o for o in outputs(template, spec, turns)}
    start = rendered["valid"].start
    texts = {label: o.text for label, o in rendered.items()}
    if not rendered["valid"].expected["tool_calls"]:
        # The template renders no call (its format comes from an override): the calls as the
        # spec writes them.
        texts = {label: spec.tool_calls.format([{"name": t.calls[0].name, "arguments": t.calls[0].arguments}])
                 for label, t in turns.items()}
    grammar = emit_gbnf(build(spec, GrammarOptions(tools=[TOOL], tool_choice="required", start=start),
                              template.special_tokens))
    valid(grammar)
    assert accepts(grammar, texts["valid"]), texts["valid"]
    for label in ("wrong type", "missing required", "outside the enum", "unknown tool"):
        assert rendered[label].start == start
        assert not accepts(grammar, texts[label]), (label, texts[label])


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(TOOL_GRAMMAR))
def test_lazy_grammar_accepts_from_the_trigger_on(corpus, stem, accepts):
    template, spec = corpus[stem]
    if spec.tool_calls is None:
        pytest.skip(f"{stem} does not render tool calls")
    request = llama_request(spec, GrammarOptions(tools=FRESH_TOOLS), template.special_tokens)
    valid(request["grammar"])
    if not call_opener(spec, Boundaries(template.special_tokens)):
        # (no marker opens a call: the parser reads free text as calls, the grammar is strict)
        assert request["grammar_lazy"] is False and "grammar_triggers" not in request
        return
    assert request["grammar_lazy"] is True
    trigger, *others = request["grammar_triggers"]
    for output in corpus_compiled(stem).outputs:
        if not output.expected["tool_calls"] or output.start == "reasoning" and output.turn.startswith("reasoning"):
            continue
        at = _trigger_at(trigger, output.text)
        assert at != -1, (trigger, output.text)
        assert accepts(request["grammar"], output.text[at:]), (output.turn, output.text[at:])
        for other in others:
            # a call the parser reads without the opener, from its own marker; or after a
            # wrapper: the grammar takes it from that trigger on
            at_marker = _trigger_at(other, output.text)
            tail = output.text[at_marker:] if other["value"] not in spec.tool_calls.wrappers \
                else other["value"] + output.text[at:]
            assert at_marker != -1 or other["value"] in spec.tool_calls.wrappers, (other, output.text)
            assert accepts(request["grammar"], tail), (output.turn, other, tail)


def _trigger_at(trigger: dict, text: str) -> int:
    if trigger["type"] == TRIGGER_WORD:
        return text.find(trigger["value"])
    match = re.search(trigger["value"], text)
    return match.start() if match else -1


def test_example_request_fields():
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    tools = json.loads((EXAMPLES / "tools.json").read_text())
    request = llama_request(probe(template), GrammarOptions(tools=tools), template.special_tokens)
    # llama-server's numbers for the trigger type (WORD is 1), and the word is preserved
    assert request["grammar_triggers"] == [{"type": 1, "value": "<tool_call>"}]
    assert {"<tool_call>", "</tool_call>", "<think>", "</think>"} <= set(request["preserved_tokens"])
    strict = llama_request(probe(template), GrammarOptions(tools=tools, tool_choice="required"), template.special_tokens)
    assert strict["grammar_lazy"] is False and "grammar_triggers" not in strict


def test_reference_parser_keeps_markers_inside_json_strings():
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    parser = ReferenceParser(probe(template))
    text = ('Sure.\n<tool_call>\n{"name": "f", "arguments": {"s": "use </tool_call> and <|im_end|> here"}}\n'
            "</tool_call><|im_end|>")
    message = parser.parse(text)
    assert message["errors"] == []
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"s": "use </tool_call> and <|im_end|> here"}
    assert message["content"] == "Sure."


def test_reference_parser_reports_what_it_cannot_read():
    parser = ReferenceParser(probe(tplparse.load(EXAMPLES / "chatml-think-tools.gguf")))
    broken = parser.parse('<tool_call>\n{"name": "f", "arguments": {"a": }}\n</tool_call>')
    assert broken["tool_calls"] == [] and broken["errors"][0]["kind"] == "invalid_output"
    after = parser.parse("Hi<|im_end|>and more")
    assert after["content"] == "Hi" and after["errors"][0]["kind"] == "text_after_end_of_turn"


# --- JSON Schema -> GBNF, against llama.cpp ---------------------------------------------

SCHEMA_TABLE = [
    ({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}},
      "required": ["a"], "additionalProperties": False},
     ['{"a": {"b": 1}}', '{"a":{"b":-20}}'], ['{"a": {}}', '{"a": {"b": "1"}}', '{"a": {"b": 1}, "c": 2}']),
    ({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
     ['["x"]', '["x", "y"]'], ['[]', '["x", "y", "z"]', '[1]']),
    ({"enum": ["red", "green", 3]}, ['"red"', "3"], ['"blue"', '"3"']),
    ({"type": ["string", "null"]}, ['"x"', "null"], ["1", "true"]),
    ({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, ["7", "false"], ['"7"', "null"]),
    ({"$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                         "required": ["next"], "additionalProperties": False}},
      "$ref": "#/$defs/node"},
     ['{"next": null}', '{"next": {"next": null}}'], ['{"next": 1}', "{}"]),
    ({"type": "string", "minLength": 2, "maxLength": 3}, ['"ab"', '"abc"'], ['"a"', '"abcd"']),
    ({"type": "integer", "minimum": 1, "maximum": 5}, ["1", "5"], ["0", "6", "-1"]),
    ({"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$"}, ['"AB-12"'], ['"ab-12"', '"AB-"', '"AB-12x"']),
    ({"type": "object", "properties": {"x": {"type": "boolean"}}}, ["{}", '{"x": true}'],
     ['{"x": 1}', '{"x": true, "y": [1]}', '{"x": true, "x": false}']),
    ({"type": "object", "properties": {"x": {"type": "boolean"}}, "additionalProperties": True},
     ["{}", '{"x": true, "y": [1]}', '{"y": 1}'], ['{"x": 1}', '{"x": true, "x": false}', '{"y": 1, "x": true}']),
    ({"const": {"k": [1, 2]}}, ['{"k": [1, 2]}'], ['{"k": [1]}']),
]


@pytest.mark.parametrize("schema, good, bad", SCHEMA_TABLE, ids=[json.dumps(s)[:40] for s, _, _ in SCHEMA_TABLE])
def test_json_schema_to_gbnf(schema, good, bad, accepts):
    g = Grammar(root="root")
    warnings_found = []
    g.add("root", add_schema(g, schema, "value", warnings_found))
    gbnf = emit_gbnf(g)
    valid(gbnf)
    assert warnings_found == []
    for text in good:
        assert accepts(gbnf, text), text
    for text in bad:
        assert not accepts(gbnf, text), text


def test_unsupported_keywords_are_reported_with_their_path():
    g = Grammar(root="root")
    found = []
    schema = {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 3}, "s": {"not": {"const": "x"}}}}
    g.add("root", add_schema(g, schema, "value", found))
    assert any("'multipleOf' at #/properties/n" in w for w in found)
    assert any("'not' at #/properties/s" in w for w in found)


# --- Text without markers: the GBNF automaton ----------------------------------------------

STOPS = ("</think>", "<tool_call>", "<<x")


@settings(max_examples=examples(150), deadline=None)
@given(st.text(alphabet="<>/thinkx_ca l", max_size=24))
def test_text_until_matches_exactly_the_texts_without_a_stop(text):
    g = Grammar(root="root")
    g.add("root", TextUntil(STOPS))
    acceptor = _lark_until()
    assert acceptor.accepts(text) == (not any(stop in text for stop in STOPS))


_UNTIL = {}


def _lark_until():
    if "acceptor" not in _UNTIL:
        g = Grammar(root="root")
        g.add("root", TextUntil(STOPS))
        _UNTIL["gbnf"] = emit_gbnf(g)
        _UNTIL["acceptor"] = GbnfAcceptor(_UNTIL["gbnf"])
    return _UNTIL["acceptor"]


@pytest.mark.skipif(not llama_check.available(), reason="llama-cpp-python is not installed")
def test_text_until_in_llama_cpp():
    _lark_until()
    gbnf = _UNTIL["gbnf"]
    checker = llama_check.checker()
    for text in ["", "plain", "<thin", "a</think", "<<<tool_cal", "x<<", "<x"]:
        assert checker.accepts(gbnf, text), text
    for text in ["</think>", "a<tool_call>b", "<<x", "<<<x"]:
        assert not checker.accepts(gbnf, text), text


def test_gbnf_syntax_errors_name_the_line():
    with pytest.raises(GbnfSyntaxError, match="line 2"):
        parse_gbnf('root ::= "a"\nbad line here ::=\n')
    with pytest.raises(GbnfSyntaxError, match="undefined rule 'nope'"):
        parse_gbnf('root ::= nope\n')


def test_lazy_grammar_root_is_the_calls_section():
    spec = probe(tplparse.load(EXAMPLES / "chatml-think-tools.gguf"))
    g = lazy_grammar(spec, GrammarOptions())
    root = next(line for line in emit_gbnf(g).splitlines() if line.startswith("root ::="))
    # (the first alternative, or the only one: the rendered layouts are the calls section here)
    assert re.match(r"root ::= \(?tool-calls ws end-of-turn\?", root), root


@pytest.mark.parametrize("gbnf, texts", [
    (r'root ::= [^"\\\x00-\x1F]', {"a": True, '"': False, "\\": False, "\x01": False, "]": True}),
    (r"root ::= [^/HIKNT\x5B\x5D]", {"x": True, "H": False, "[": False, "]": False, "/": False}),
    (r"root ::= [A-Za-z0-9_.\x2D]+", {"ab-c": True, "a,b": False}),
    (r"root ::= [\^a]", {"^": True, "a": True, "b": False}),
])
def test_the_lark_check_reads_class_escapes_as_llama_cpp_does(gbnf, texts):
    """The lark fallback must not let Lark's own escape handling turn \\x5B into a bare '['."""
    acceptor = GbnfAcceptor(gbnf)
    assert {text: acceptor.accepts(text) for text in texts} == texts


def test_a_structured_answer_without_tools_is_the_answer_alone(accepts):
    """--json-schema without --tools: JSON of the schema, not JSON followed by calls of any
    tool (SmolLM2 on llama-server wrote three made-up calls after its answer)."""
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    gbnf = emit_gbnf(build(probe(template), GrammarOptions(content_schema=schema), template.special_tokens))
    assert accepts(gbnf, '{"city": "Paris"}<|im_end|>')
    assert not accepts(gbnf, '{"city": "Paris"}\n\n<tool_call>\n{"name": "x", "arguments": {}}\n</tool_call>')


@pytest.mark.parametrize("how", ["mode", "prefill"])
def test_a_prompt_that_closed_reasoning_leaves_none_to_generate(accepts, how):
    """Thinking off (the template's switch, or an empty block the prompt ends with): the
    generation grammar has no reasoning block, so a model cannot spend its budget in one."""
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    spec = probe(template)
    options = GrammarOptions(mode="no_thinking") if how == "mode" else GrammarOptions(reasoning_closed=True)
    gbnf = emit_gbnf(build(spec, options, template.special_tokens))
    assert accepts(gbnf, "Sunny.<|im_end|>")
    assert not accepts(gbnf, "<think>\nhm\n</think>\n\nSunny.<|im_end|>")
    default = emit_gbnf(build(spec, GrammarOptions(), template.special_tokens))
    assert accepts(default, "<think>\nhm\n</think>\n\nSunny.<|im_end|>")  # the default mode may think


def test_names_that_slug_alike_keep_their_own_rules(accepts):
    """get-weather, get_weather and get.weather are three tools; a-b and a_b two properties
    with their own types (found by review: the last one's rule replaced the others)."""
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    schema = {"type": "object", "properties": {"a-b": {"type": "integer"}, "a_b": {"type": "boolean"}},
              "required": ["a-b", "a_b"]}
    names = ["get-weather", "get_weather", "get.weather"]
    tools = [{"type": "function", "function": {"name": n, "parameters": schema}} for n in names]
    gbnf = emit_gbnf(build(probe(template), GrammarOptions(tools=tools, tool_choice="required"), template.special_tokens))
    call = '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
    for name in names:
        assert accepts(gbnf, call % (name, '{"a-b": 3, "a_b": true}')), name
    assert not accepts(gbnf, call % ("get_weather", '{"a-b": true, "a_b": true}'))


def _cover_grammar() -> Grammar:
    g = Grammar("root")
    g.add("ws", Rep(chars(" \t\n\r"), 0, 64))
    g.add("calls", seq(Lit("<calls>"), Ref("ws"), Lit("</calls>")))
    g.add("calls-then-ws", seq(Ref("calls"), Ref("ws")))
    g.add("text", TextUntil(("<calls>",)))
    return g


@pytest.mark.parametrize("general, specific, expected", [
    (seq(Ref("ws"), Ref("calls"), Ref("ws")), Ref("calls"), True),  # optional whitespace left out
    (seq(Ref("ws"), Ref("calls"), Ref("ws")), Ref("calls-then-ws"), True),  # a rule read in place
    (seq(Ref("ws"), Ref("calls")), seq(Ref("calls"), Ref("ws")), False),  # trailing whitespace it does not take
    (seq(Ref("text"), Ref("calls")), Ref("calls"), False),  # free text is not whitespace: not left out
    (seq(Lit(" "), Ref("calls")), Ref("calls"), False),  # a space it needs
    (alt(Lit("a"), seq(Ref("ws"), Ref("calls"))), Ref("calls"), True),  # one alternative covers it
    (Ref("calls"), seq(Lit("<calls>"), Lit("</calls>")), True),  # its whitespace left out
    (Ref("calls"), seq(Lit("<calls>"), Lit("x"), Lit("</calls>")), False),  # an item it does not have
    (Ref("calls"), seq(Ref("ws"), Ref("calls")), False),  # more than the general takes
])
def test_a_form_covers_what_its_shape_shows(general, specific, expected):
    """covers(): true only where every text of the specific node is one of the general's by
    their shapes (never a guess); a form the grammar already covers is left out."""
    assert covers(_cover_grammar(), general, specific) is expected


@needs_corpus
@pytest.mark.parametrize("stem", [p.stem for p in TEMPLATES], ids=corpus_ids(TEMPLATES))
def test_no_turn_form_is_one_an_earlier_form_covers(corpus, stem):
    """Every alternative of a request grammar's root (the turn's forms; a lazy grammar's ways
    on from the trigger) is one the alternatives before it do not cover: an engine's sampler
    follows every alternative that matches so far, and a covered one only doubles its work per
    token (the calls section was in Mistral Small 3.2's `required` grammar four times over).
    The renders still read back (the tests above, and the compile's proof)."""
    template, spec = corpus[stem]
    if spec.tool_calls is None:
        pytest.skip(f"{stem} does not render tool calls")
    for choice in ("required", "auto"):
        options = GrammarOptions(tools=FRESH_TOOLS, tool_choice=choice)
        built = lazy_grammar(spec, options, template.special_tokens) \
            if llama_request(spec, options, template.special_tokens).get("grammar_lazy") \
            else build(spec, options, template.special_tokens)
        root = built.rules[built.root].body
        forms = root.items if isinstance(root, Alt) else (root,)
        for at, form in enumerate(forms):
            assert not any(covers(built, earlier, form) for earlier in forms[:at]), (choice, form)
