"""`ChatTemplate.render` reproduces transformers' `apply_chat_template` byte for byte.

transformers (a test-only dependency; its chat-template rendering needs no torch) is the
oracle: for every template of the shared corpus and each conversation below, both render
the same input and must produce the same text, or both must refuse it with the same
message. Some templates only accept certain shapes of the same conversation (arguments as
a JSON string, `content: ""` instead of null, tools without the `{type, function}`
wrapper, Firefunction's `functions` variable); each shape is tried in order, and the
comparison holds on every shape tried, not only the one that renders.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tplparse
from tplparse import TemplateError
from tplparse.bridge.prompt import continued_render
from tplparse.errors import InputError

from conftest import CORPUS_TOKEN_LISTS, ORACLE_RENDER, ORACLE_THINKING, corpus_ids, corpus_templates, examples, marked_sources, needs_corpus

transformers = pytest.importorskip("transformers")
from tokenizers import Tokenizer, models  # noqa: E402  (installed with transformers)

BOS, EOS, UNK = "<|bos|>", "<|eos|>", "<unk>"
NAMED = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK}
TEMPLATES = corpus_templates()

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}},
        "required": ["city"],
    },
}
# The same tool as Cohere's Command R templates declare tools.
WEATHER_COHERE = {
    "name": "get_weather",
    "description": "Get the current weather",
    "parameter_definitions": {"city": {"description": "City name", "type": "str", "required": True}},
}
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}


def hf_tokenizer(source: str):
    """A transformers tokenizer carrying `source` as its chat template (its vocabulary is irrelevant)."""
    vocab = {UNK: 0, BOS: 1, EOS: 2}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS, eos_token=EOS, unk_token=UNK, chat_template=source
    )


def shapes(kind: str):
    """(label, messages, tools, add_generation_prompt, extra variables), in the order tried."""
    wrapped, bare, cohere = [{"type": "function", "function": WEATHER}], [WEATHER], [WEATHER_COHERE]
    firefunction = {"functions": json.dumps([WEATHER]), "datetime": "2026-11-30"}
    if kind == "user":
        for tools_label, tools in (("no tools", None), ("tools", wrapped), ("bare tools", bare), ("cohere tools", cohere)):
            yield tools_label, [QUESTION], tools, True, {}
        yield "functions variable", [QUESTION], None, True, firefunction
        return
    for tools_label, tools in (("tools", wrapped), ("bare tools", bare), ("cohere tools", cohere)):
        for args in ({"city": "Paris"}, '{"city": "Paris"}'):
            for content in (None, ""):
                call = {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": args}}
                messages = [QUESTION, {"role": "assistant", "content": content, "tool_calls": [call]}]
                label = f"{tools_label}, arguments as {type(args).__name__}, content={content!r}"
                yield label, messages, tools, False, {}
                if kind == "tool_call" and tools_label == "tools":
                    yield label + ", functions variable", messages, tools, False, firefunction


# A deliberate difference (docs/design.md, what a template is given): tplparse offers a message's
# reasoning under each name templates read it by; transformers passes the message as sent. The
# oracle is given the same names, so that the renders are compared on the same input.
REASONING_NAMES = ("reasoning_content", "thinking", "thought")


def with_reasoning_names(messages: list) -> list:
    """Each message whose reasoning is given as reasoning_content, with it under every name."""
    return [{**{name: m["reasoning_content"] for name in REASONING_NAMES}, **m}
            if isinstance(m, dict) and m.get("reasoning_content") is not None else m
            for m in messages]


def render_both(path, messages, tools, add_generation_prompt, extra):
    source = path.read_bytes().decode("utf-8")  # as stored (one template has CRLF line ends)
    # The token lists its model's tokenizer holds, as variables to both: transformers 5 passes
    # only the named tokens itself (4 passed the lists; tplparse does, loaded from the model)
    extra = {**CORPUS_TOKEN_LISTS.get(path.stem, {}), **extra}
    try:
        expected = hf_tokenizer(source).apply_chat_template(
            with_reasoning_names(messages), tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )
    except Exception as e:  # noqa: BLE001 - the oracle's refusal is an outcome to compare
        expected = e
    template = tplparse.load(path)
    template = tplparse.ChatTemplate(
        source=template.source, name=template.name, family=template.family, origin=template.origin,
        named_tokens=NAMED,
    )
    try:
        got = template.render(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                              own_containers=False, **extra)
    except TemplateError as e:
        got = e
    return expected, got


def compare(path, kind):
    """Try each shape; returns the label of the first one transformers renders (None if none)."""
    for label, messages, tools, gen, extra in shapes(kind):
        expected, got = render_both(path, messages, tools, gen, extra)
        if isinstance(expected, Exception):
            assert isinstance(got, TemplateError), (
                f"{label}: transformers refused ({type(expected).__name__}: {expected}) but tplparse rendered:\n{got!r}"
            )
            assert str(expected) in str(got), f"{label}: different refusals:\n  {expected}\n  {got}"
            continue
        assert not isinstance(got, Exception), f"{label}: transformers rendered, tplparse raised: {got}"
        assert got == expected, f"{label}: renders differ\n--- transformers\n{expected!r}\n--- tplparse\n{got!r}"
        return label
    return None


@needs_corpus
@pytest.mark.parametrize("kind", ["user", "tool_call"])
@pytest.mark.parametrize("path", marked_sources(TEMPLATES, ORACLE_RENDER))
def test_render_matches_transformers(path, kind):
    used = compare(path, kind)
    if used is None:
        # transformers refuses every shape, and so does tplparse's parity render (compare
        # checked that). These templates ship in GGUF files llama.cpp renders: tplparse renders
        # them in the own-containers sandbox and says why.
        template = tplparse.load(path).with_tokens(**NAMED)
        for label, messages, tools, gen, extra in shapes(kind):
            try:
                template.render(messages, tools=tools, add_generation_prompt=gen, **extra)
            except TemplateError:
                continue
            assert template.compat_notes, f"{path.stem}: rendered in the fallback without a note"
            return
        pytest.fail(f"{path.stem}: no shape of the {kind} conversation renders, in transformers or in the fallback")


@needs_corpus
@pytest.mark.parametrize("path", marked_sources(TEMPLATES, ORACLE_THINKING))
def test_reasoning_and_thinking_switch_match_transformers(path):
    messages = [
        QUESTION,
        {"role": "assistant", "reasoning_content": "Look it up.", "content": "It is sunny."},
        {"role": "user", "content": "And tomorrow?"},
    ]
    for extra in ({}, {"enable_thinking": False}, {"enable_thinking": True, "reasoning_effort": "high"}):
        expected, got = render_both(path, messages, None, True, extra)
        if isinstance(expected, Exception):
            assert isinstance(got, TemplateError) and str(expected) in str(got), (expected, got)
        else:
            assert got == expected, f"{extra}: renders differ\n{expected!r}\n{got!r}"


@needs_corpus
@pytest.mark.parametrize("path", marked_sources(TEMPLATES, ORACLE_RENDER))
def test_a_continued_final_message_renders_as_in_transformers(path):
    """`tplparse render --continue-final-message` (bridge.prompt.continued_render) against
    transformers' `continue_final_message`: the same prompt, ending right after the final
    answer's text; where transformers refuses (a template that drops or rewrites that text),
    tplparse refuses too."""
    source = path.read_bytes().decode("utf-8")
    messages = [QUESTION, {"role": "assistant", "content": "The weather in Paris is"}]
    extra = CORPUS_TOKEN_LISTS.get(path.stem, {})
    try:
        expected = hf_tokenizer(source).apply_chat_template(
            messages, tokenize=False, continue_final_message=True, **extra)
    except Exception as e:  # noqa: BLE001 - the oracle's refusal is an outcome to compare
        expected = e
    template = tplparse.load(path)
    template = tplparse.ChatTemplate(source=template.source, name=template.name, family=template.family,
                                     origin=template.origin, named_tokens=NAMED)
    try:
        got = continued_render(template, messages, own_containers=False, **extra)
    except (InputError, TemplateError) as e:
        got = e
    if isinstance(expected, Exception):
        assert isinstance(got, Exception), f"transformers refused ({expected}), tplparse rendered {got!r}"
    else:
        assert got == expected
        assert got.endswith("The weather in Paris is")


# Random message text (quotes, braces, markers, non-ASCII, control characters) through a
# few structurally different templates.
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["", " ", "<think>", "</tool_call>", '{"a": "}"}', "\\n", "é✓🙂", "{{ x }}", "{% raw %}"]
)
SAMPLED = [p for p in TEMPLATES if p.stem in {
    "Qwen-Qwen3-0.6B", "Meta-Llama-3.1-8B-Instruct", "Mistral-Small-3.2-24B-Instruct-2506",
    "OpenAI-gpt-oss-120b", "Google-Gemma-4-31B-it", "ZAI-GLM-4.6",
}]


@needs_corpus
@pytest.mark.parametrize("path", SAMPLED or [None], ids=corpus_ids(SAMPLED) or ["none"])
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(system=text, user=text, answer=text)
def test_random_text_matches_transformers(path, system, user, answer):
    if path is None:
        pytest.skip("sampled templates not in the corpus")
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": user},
    ]
    expected, got = render_both(path, messages, None, True, {})
    if isinstance(expected, Exception):
        assert isinstance(got, TemplateError) and str(expected) in str(got), (expected, got)
    else:
        assert got == expected
