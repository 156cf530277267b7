"""Lark grammars for llguidance, checked with the real llguidance matcher.

The same questions tests/test_grammars.py asks of the GBNF grammars through llama.cpp:
every corpus family's grammar compiles, reads back the template's renders, and, with
tools, refuses an unknown tool and arguments against the tool's schema.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tplparse
from tplparse.check import llama as llama_check
from tplparse.check import llguidance as llguidance_check
from tplparse.emit.gbnf import emit_gbnf
from tplparse.emit.lark import emit_lark, lark_warnings, llguidance_enforces
from tplparse.grammar import GrammarOptions, build
from tplparse.grammar.ir import Grammar, Lit, TextUntil, seq
from tplparse.grammar.json_schema import add_schema
from tplparse.probe import probe
from tplparse.probe.conversations import Call, Turn

from conftest import EXAMPLES, GRAMMAR, TOOL_GRAMMAR, corpus_compiled, corpus_ids, corpus_stems, corpus_templates, examples, needs_corpus
from corpus_outputs import outputs
from test_grammars import CALLS, SCHEMA_TABLE, TOOL

pytestmark = pytest.mark.skipif(not llguidance_check.available(), reason="llguidance is not installed")

TEMPLATES = corpus_templates()

@pytest.fixture(scope="module")
def corpus(compiled_corpus):
    """stem -> (template, spec): the session's compiles (tests/conftest.py)."""
    return compiled_corpus.view(lambda entry: (entry.template, entry.spec))


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(GRAMMAR))
def test_corpus_lark_grammars_read_back_the_templates_renders(corpus, stem):
    template, spec = corpus[stem]
    checker = llguidance_check.LarkChecker(template.control_tokens)
    grammars = {}
    for output in corpus_compiled(stem).outputs:
        if output.start not in grammars:
            grammars[output.start] = emit_lark(build(spec, GrammarOptions(start=output.start), template.special_tokens),
                                               template.control_tokens)
            ok, message = checker.validate(grammars[output.start])
            assert ok, message
        assert checker.accepts(grammars[output.start], output.text), (output.turn, output.text)


def _rendered(template, spec, turns):
    rendered = {o.turn: o for o in outputs(template, spec, turns)}
    texts = {label: o.text for label, o in rendered.items()}
    if not next(iter(rendered.values())).expected["tool_calls"]:
        # The template renders no call (its format comes from an override): as the spec writes them.
        texts = {label: spec.tool_calls.format([{"name": c.name, "arguments": c.arguments} for c in t.calls])
                 for label, t in turns.items()}
    return rendered, texts


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(TOOL_GRAMMAR))
def test_lark_tool_grammar_rejects_unknown_tools_and_schema_violations(corpus, stem):
    template, spec = corpus[stem]
    if spec.tool_calls is None:
        pytest.skip(f"{stem} does not render tool calls")
    turns = {label: Turn(calls=(Call("convert_currency", args, "a1b2c3d4e"),)) for label, args in CALLS.items()}
    turns["unknown tool"] = Turn(calls=(Call("drop_tables", CALLS["valid"], "a1b2c3d4e"),))
    rendered, texts = _rendered(template, spec, turns)
    start = rendered["valid"].start
    checker = llguidance_check.LarkChecker(template.control_tokens)
    for choice in ("required", "convert_currency"):
        grammar = emit_lark(build(spec, GrammarOptions(tools=[TOOL], tool_choice=choice, start=start),
                                  template.special_tokens), template.control_tokens)
        ok, message = checker.validate(grammar)
        assert ok, message
        assert checker.accepts(grammar, texts["valid"]), (choice, texts["valid"])
        for label in ("wrong type", "missing required", "outside the enum", "unknown tool"):
            assert not checker.accepts(grammar, texts[label]), (choice, label, texts[label])


@pytest.fixture(scope="module")
def example():
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    return template, probe(template), json.loads((EXAMPLES / "tools.json").read_text())


def _example_grammar(example, **options):
    template, spec, tools = example
    grammar = emit_lark(build(spec, GrammarOptions(tools=tools, **options), template.special_tokens),
                        template.control_tokens)
    return grammar, llguidance_check.LarkChecker(template.control_tokens)


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_example_control_tokens_are_written_as_tokens(example):
    """<|im_end|> is a control token of the example GGUF (llama.cpp keeps it apart from text);
    <tool_call> is a user-defined token, which llama.cpp hands llguidance as text."""
    grammar, checker = _example_grammar(example)
    assert "end-of-turn: <|im_end|>" in grammar and '"<|im_end|>"' not in grammar
    rules = [line for line in grammar.splitlines() if not line.startswith("//")]
    assert any('"<tool_call>"' in line for line in rules)
    assert not any(re.search(r"(^|\s)<tool_call>(\s|$)", line) for line in rules)
    assert checker.accepts(grammar, f"<think>\nhm\n</think>\n\nSure.\n{CALL}<|im_end|>")
    # The control token written as plain bytes is not the model's token.
    spelled = checker.encode(f"Sure.\n{CALL}") + list(b"<|im_end|>")
    assert not checker.accepts_tokens(grammar, spelled)
    assert checker.accepts_tokens(grammar, checker.encode(f"Sure.\n{CALL}<|im_end|>"))


def test_tool_choice_and_parallel_calls(example):
    two = f"{CALL}\n{CALL}<|im_end|>"
    grammar, checker = _example_grammar(example, tool_choice="required")
    assert checker.accepts(grammar, two)
    assert not checker.accepts(grammar, "Just text.<|im_end|>")
    grammar, checker = _example_grammar(example, tool_choice="required", parallel=False)
    assert checker.accepts(grammar, f"{CALL}<|im_end|>") and not checker.accepts(grammar, two)
    grammar, checker = _example_grammar(example, tool_choice="none")
    assert checker.accepts(grammar, "Just text.<|im_end|>") and "tool-calls" not in grammar
    grammar, checker = _example_grammar(example, tool_choice="auto")
    assert checker.accepts(grammar, "Just text.<|im_end|>") and checker.accepts(grammar, f"Sure.\n{CALL}<|im_end|>")


def test_structured_output_by_json_schema(example):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}
    grammar, checker = _example_grammar(example, tool_choice="none", content_schema=schema)
    assert "%json" in grammar
    assert checker.accepts(grammar, '{"answer": 42}<|im_end|>')
    assert not checker.accepts(grammar, '{"answer": "42"}<|im_end|>')
    assert not checker.accepts(grammar, 'The answer is 42.<|im_end|>')


# --- JSON Schema: %json where llguidance enforces the schema, the IR otherwise -------------

def _schema_grammar(schema):
    g = Grammar(root="root")
    found: list[str] = []
    g.add("root", add_schema(g, schema, "value", found))
    return g, found


@pytest.mark.parametrize("schema, good, bad", SCHEMA_TABLE, ids=[json.dumps(s)[:40] for s, _, _ in SCHEMA_TABLE])
def test_json_schema_to_lark(schema, good, bad):
    g, _ = _schema_grammar(schema)
    lark = emit_lark(g)
    checker = llguidance_check.LarkChecker()
    assert ("%json" in lark) == llguidance_enforces(schema)
    for text in good:
        assert checker.accepts(lark, text), text
    for text in bad:
        assert not checker.accepts(lark, text), text


def test_json_strings_in_llguidance():
    """What %json strings take: JSON's escapes and raw Unicode; not `\\u00e9` for a printable
    character (llguidance's default, kept: the option that lifts it breaks llguidance < 1.8)."""
    g, _ = _schema_grammar({"type": "object", "properties": {"s": {"type": "string"}}})
    checker = llguidance_check.LarkChecker()
    lark = emit_lark(g)
    assert "x-guidance" not in lark
    for text in ['{"s": "a\\nb \\"q\\" \\\\ \\u0001"}', '{"s": "caf\u00e9 \U0001F600"}']:
        assert checker.accepts(lark, text), text
    assert not checker.accepts(lark, '{"s": "caf\\u00e9"}')


def test_non_ascii_markers_split_text_at_their_lead_byte():
    """A marker such as `◁think▷`: text before it holds other characters of the same lead
    byte (`─`, `◆`), which the lexer, reading bytes, must not half read."""
    g = Grammar(root="root")
    g.add("root", seq(Lit("◁think▷"), TextUntil(("◁/think▷",)), Lit("◁/think▷"), TextUntil(())))
    checker = llguidance_check.LarkChecker()
    lark = emit_lark(g)
    for text in ["◁think▷hm ─ ◆◁/think▷Hi", "◁think▷◁/think▷", "◁think▷a◁b◁/think▷c"]:
        assert checker.accepts(lark, text), text
    assert not checker.accepts(lark, "◁think▷never closed ◁/thin")


def test_one_of_is_written_from_the_ir():
    """llguidance refuses a oneOf it cannot prove exclusive: the IR writes it instead."""
    schema = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    g, _ = _schema_grammar(schema)
    lark = emit_lark(g)
    checker = llguidance_check.LarkChecker()
    assert checker.validate(lark) == (True, "") and "\nvalue: %json" not in lark
    assert checker.accepts(lark, "1.5") and not checker.accepts(lark, '"1"')


def test_keywords_llguidance_enforces_are_not_reported():
    schema = {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 3}}, "required": ["n"]}
    g, found = _schema_grammar(schema)
    assert any("'multipleOf'" in w for w in found)  # the GBNF path does not enforce it
    assert lark_warnings(g, found) == []  # llguidance does
    checker = llguidance_check.LarkChecker()
    assert checker.accepts(emit_lark(g), '{"n": 9}') and not checker.accepts(emit_lark(g), '{"n": 10}')


def test_keywords_llguidance_does_not_enforce_are_reported():
    schema = {"type": "object", "properties": {"s": {"not": {"const": "x"}}}}
    g, found = _schema_grammar(schema)
    lark = emit_lark(g)
    assert "\nvalue: %json" not in lark  # written from the IR, which reports what it leaves out
    assert any("'not' at #/properties/s" in w for w in lark_warnings(g, found))


# --- Text without markers ----------------------------------------------------------------

STOPS = ("</think>", "<tool_call>", "[END]")


def _until_grammar(after=None):
    g = Grammar(root="root")
    g.add("root", seq(TextUntil(STOPS), after))
    return emit_lark(g)


@settings(max_examples=examples(200), deadline=None)
@given(st.text(alphabet="<>/[]thinkENDx_ca l", max_size=24))
def test_text_until_in_llguidance_matches_the_texts_without_a_stop(text):
    checker = llguidance_check.LarkChecker()
    assert checker.accepts(_until_grammar(), text) == (not any(stop in text for stop in STOPS)), text


@settings(max_examples=examples(150), deadline=None)
@given(st.text(alphabet="<>/[]thinkENDx_ca l", max_size=16))
def test_text_until_ends_where_its_stop_begins(text):
    checker = llguidance_check.LarkChecker()
    whole = text + "<tool_call>"
    first_stop = min(whole.find(stop) for stop in STOPS if stop in whole)
    assert checker.accepts(_until_grammar(Lit("<tool_call>")), whole) == (first_stop == len(text)), text


@pytest.mark.parametrize("text, accepted", [
    ("a</think", True), ("a</think>", False), ("a</think<x", True), ("x-- b </thin", True),
    ("[EN]", True), ("[END", True), ("[END]", False), ("<<tool_call", True), ("a<tool_call>b", False),
])
def test_text_until_examples(text, accepted):
    assert llguidance_check.LarkChecker().accepts(_until_grammar(), text) == accepted


# --- The tokenizer llama.cpp's %llguidance path builds -------------------------------------

def _llama_cpp_tokenizer(gguf):
    """llguidance's tokenizer as llama.cpp's common/llguidance.cpp builds it from a vocabulary:
    a token is special (marked with byte 0xFF) when its plain detokenization is empty, which
    is what control tokens are; user-defined tokens are their text."""
    import ctypes

    import llama_cpp
    import llguidance

    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), params)
    assert model, gguf
    vocab = llama_cpp.llama_model_get_vocab(model)
    buffer = ctypes.create_string_buffer(1024)
    pieces = []
    for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        one = (llama_cpp.llama_token * 1)(token)
        size = llama_cpp.llama_detokenize(vocab, one, 1, buffer, 1024, False, False)
        if size == 0:
            size = llama_cpp.llama_detokenize(vocab, one, 1, buffer, 1024, False, True)
            pieces.append(b"\xff" + buffer.raw[:size] if size > 0 else b"")
        else:
            pieces.append(buffer.raw[:max(size, 0)])
    eos = llama_cpp.llama_vocab_eot(vocab)
    if eos == -1:
        eos = llama_cpp.llama_vocab_eos(vocab)
    tokenize = ctypes.cast(llama_cpp.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
    tokenizer = llguidance.LLTokenizer.from_llamacpp(tokens=pieces, vocab_ptr=vocab, tokenize_fptr=tokenize,
                                                     eos_token=eos, slices=None)

    def encode(text: str) -> list[int]:
        data = text.encode("utf-8")
        ids = (llama_cpp.llama_token * (len(data) + 8))()
        count = llama_cpp.llama_tokenize(vocab, data, len(data), ids, len(data) + 8, False, True)
        assert count >= 0
        return list(ids[:count])

    return tokenizer, encode, model


@pytest.mark.skipif(not llama_check.available(), reason="llama-cpp-python is not installed")
@pytest.mark.parametrize("gguf", ["chatml-think-tools.gguf", "bracket-tools.gguf"])
def test_example_grammars_with_the_tokenizer_llama_cpp_builds(gguf):
    import llguidance

    template = tplparse.load(EXAMPLES / gguf)
    spec = probe(template)
    tokenizer, encode, _model = _llama_cpp_tokenizer(EXAMPLES / gguf)
    outputs_seen = 0
    for output in outputs(template, spec):
        lark = emit_lark(build(spec, GrammarOptions(start=output.start), template.special_tokens),
                         template.control_tokens)
        matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(lark), log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        for token in encode(output.text):
            assert matcher.consume_token(token), (output.turn, output.text, token)
        assert matcher.is_accepting(), (output.turn, output.text)
        outputs_seen += 1
    assert outputs_seen >= 4


# --- Content models write, read as the GBNF grammar reads it --------------------------------

SNIPPETS = [
    'Here is the JSON: {"a": 1, "b": [1, 2]}',
    'Output:\n```json\n{"city": "Paris"}\n```',
    "if a < b and c[i] > d: swap(a[i], b[j])",
    "<div class=\"x\"><b>bold</b></div> and a <br/>",
    "Math: x < y, y > z, a -- b, ---, 3 <= 4 => true",
    "I moved to Toronto, here is a photo",
    "import functools\nprint([x for x in range(3)])",
]
FAMILIES = ["Meta-Llama-3.1-8B-Instruct", "Qwen-Qwen3-0.6B", "ZAI-GLM-4.6", "Mistral-Small-3.2-24B-Instruct-2506",
            "Naver-HyperCLOVAX-SEED-Think-14B-vllm-tool", "Muse-Glimmer", "Fireworks-Firefunction-v2",
            "llamacpp-DeepSeek-R1", "Google-Gemma-4-31B-it"]


@needs_corpus
@pytest.mark.skipif(not llama_check.available(), reason="llama-cpp-python is not installed")
@pytest.mark.parametrize("stem", FAMILIES)
def test_written_content_reads_as_the_gbnf_grammar_reads_it(corpus, stem):
    """Code, JSON, HTML and `a < b` in the answer: llguidance takes what llama.cpp takes."""
    if stem not in corpus:
        pytest.skip(f"{stem} is not in the corpus")
    template, spec = corpus[stem]
    content = next(o for o in corpus_compiled(stem).outputs if o.turn == "content")
    original = "Twelve euros is about thirteen dollars."
    assert original in content.text
    grammar = build(spec, GrammarOptions(start=content.start), template.special_tokens)
    lark, gbnf = emit_lark(grammar, template.control_tokens), emit_gbnf(grammar)
    checker = llguidance_check.LarkChecker(template.control_tokens)
    for snippet in SNIPPETS:
        text = content.text.replace(original, snippet)
        assert llama_check.checker().accepts(gbnf, text), text  # (valid content: the GBNF grammar takes it)
        assert checker.accepts(lark, text), text
