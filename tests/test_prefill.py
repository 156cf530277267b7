"""Prefilled answers (issue #53, class 1): a conversation that ends with an assistant message
the client began, continued (transformers' `continue_final_message`). The prompt ends inside
that message, the parser starts where its text leaves the model (inside reasoning, after it,
inside content), and what the model adds is read without repeating or losing the prefill.

The corpus test takes each template's own render of the whole answer as the truth: the prompt
must be its prefix, and the rest, read from the prompt's start, must read as the same turn read
from the ordinary generation prompt does."""

from __future__ import annotations

import pytest
import tplparse
from tplparse import InputError, TemplateError, runtime
from tplparse.bridge.prompt import compile_in_memory
from tplparse.check.ir_match import accepts
from tplparse.grammar.build import GrammarOptions, build
from tplparse.probe.derive import PLACEHOLDER_TOKENS

from conftest import CORPUS, EXAMPLES, load_corpus, needs_corpus, proved_corpus_stems

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
EXAMPLE = EXAMPLES / "chatml-think-tools.gguf"


def assistant(**fields) -> list[dict]:
    return USER + [{"role": "assistant", **fields}]


def read(parser, output: str, step: int | None = None) -> dict:
    """The message `parser` reads from `output`, whole or `step` characters at a time."""
    if step is None:
        return runtime.read_all(parser, output, "stop")
    for i in range(0, len(output), step):
        parser.feed(output[i:i + step])
    parser.end("stop")
    return parser.message


# --- the three start states, on the example (reasoning is optional there) -----------------

def test_a_prefill_in_content_is_continued_with_its_leading_space():
    template = tplparse.load(EXAMPLE)
    prompt = tplparse.prompt(template, assistant(content="The answer is"), continue_final_message=True)
    assert prompt.text.endswith("<|im_start|>assistant\nThe answer is")
    assert prompt.prefill == "The answer is" and prompt.start == "content"
    message = read(prompt.parser(), " sunny.<|im_end|>")
    # (joined, the client's text and the model's are the answer: the space is the model's)
    assert message["content"] == " sunny." and message["reasoning_content"] is None
    # a reasoning opener after text is not a new block: the answer began
    assert read(prompt.parser(), " <think> is a tag.<|im_end|>")["content"] == " <think> is a tag."


def test_a_prefill_inside_reasoning_goes_on_thinking_then_answers():
    template = tplparse.load(EXAMPLE)
    prompt = tplparse.prompt(template, assistant(reasoning_content="Let me"), continue_final_message=True)
    assert prompt.text.endswith("<|im_start|>assistant\n<think>\nLet me") and prompt.start == "reasoning"
    message = read(prompt.parser(), " think.\n</think>\n\nSunny.<|im_end|>")
    assert (message["reasoning_content"], message["content"]) == (" think.", "Sunny.")


def test_a_prefill_after_closed_reasoning_continues_the_answer_and_may_call():
    template = tplparse.load(EXAMPLE)
    prompt = tplparse.prompt(template, assistant(reasoning_content="Warm?", content="Let me check"),
                             continue_final_message=True)
    assert prompt.text.endswith("</think>\n\nLet me check") and prompt.start == "content"
    assert prompt.reasoning_closed  # (the grammar offers no second block)
    output = ' the weather.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    message = read(prompt.parser(), output)
    assert message["content"] == " the weather." and message["errors"] == []
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]


def test_the_runtime_reads_the_same_state_from_the_prompt_text():
    """parser_for(generation_prompt=the prompt) starts where prompt().parser() starts."""
    template = tplparse.load(EXAMPLE)
    for fields in ({"content": "The answer is"}, {"reasoning_content": "Let me"},
                   {"reasoning_content": "Warm?", "content": "Let me check"}):
        prompt = tplparse.prompt(template, assistant(**fields), continue_final_message=True)
        parser = tplparse.parser_for(template, generation_prompt=prompt.text)
        assert parser.start_state == prompt.parser_start, fields


@pytest.mark.parametrize("messages, says", [
    (USER, "the last message must be the assistant's answer"),
    (assistant(content=""), "no text to continue"),
    (assistant(content=None, tool_calls=[{"type": "function", "function": {"name": "f", "arguments": "{}"}}]),
     "a prefill continues text or reasoning, not a call"),
    (assistant(content='Sure. <tool_call>\n{"name": "f"'), "holds the call opener '<tool_call>'"),
])
def test_what_cannot_be_continued_is_refused_with_the_reason(messages, says):
    template = tplparse.load(EXAMPLE)
    with pytest.raises(InputError, match=says):
        tplparse.prompt(template, messages, continue_final_message=True)


def test_thinking_off_and_a_prefill_inside_reasoning_contradict():
    template = tplparse.load(EXAMPLE)
    with pytest.raises(InputError, match="ends inside a reasoning block, and thinking is off"):
        tplparse.prompt(template, assistant(reasoning_content="Let me"), thinking=False,
                        continue_final_message=True)


# --- every corpus template: the prompt is a prefix of the whole answer's render -----------

CASES = {
    # name: (the prefill, the whole answer, the text the model adds in the field it goes to)
    "inside content": ({"content": "The answer is"}, {"content": "The answer is sunny."}, " sunny."),
    "inside reasoning": ({"reasoning_content": "Let me", "content": ""},
                         {"reasoning_content": "Let me think.", "content": "Sunny."}, " think."),
    "after reasoning": ({"reasoning_content": "I thought.", "content": "The answer is"},
                        {"reasoning_content": "I thought.", "content": "The answer is sunny."}, " sunny."),
}


def _template(stem: str):
    template = load_corpus(CORPUS / f"{stem}.jinja")
    return template.with_tokens(**{k: v for k, v in PLACEHOLDER_TOKENS.items() if k not in template.named_tokens})


def _first_turn(text: str, end_of_turn: list[str]) -> str:
    """`text` up to and with its first end-of-turn marker (the engine stops there)."""
    ends = [text.find(m) + len(m) for m in end_of_turn if m and m in text]
    return text[:min(ends)] if ends else text


@needs_corpus
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("stem", proved_corpus_stems())
def test_a_continued_answer_reads_as_the_whole_answer_does(stem, case):
    template = _template(stem)
    try:
        ordinary = tplparse.prompt(template, USER)
    except TemplateError:
        pytest.skip("the template does not render this conversation without tools")
    prefill, whole, added = CASES[case]
    try:
        prompt = tplparse.prompt(template, assistant(**prefill), continue_final_message=True)
    except InputError as e:
        # only where the template does not write the text into the final turn
        assert "does not write the final message's text" in str(e), e
        assert case == "inside reasoning", e  # (content is in every template's turns)
        return
    except TemplateError as e:  # the template's own refusal of a turn without content
        assert case == "inside reasoning" and "raised" in str(e), e
        return
    rendered = template.render(assistant(**whole), add_generation_prompt=False)
    assert rendered.startswith(prompt.text)
    continuation = rendered[len(prompt.text):]
    assert continuation.startswith(added)
    spec, _ = compile_in_memory(template)
    output = _first_turn(continuation, spec.end_of_turn)
    message = read(prompt.parser(), output)
    # streamed a character at a time, the same
    assert read(prompt.parser(), output, step=1) == message
    # the model's text goes on in one field, with its leading space; the prefill is not repeated
    fields = {k: message[k] for k in ("content", "reasoning_content") if message[k]}
    assert added in fields.values(), (fields, message["errors"])
    assert not any(prefill_text in value for value in fields.values()
                   for prefill_text in prefill.values() if prefill_text), fields
    if rendered.startswith(ordinary.text):
        # ... and the field is the one the whole answer's text is read into from the turn's start
        # (the whole answer's output, cut where the continuation is)
        reference = read(ordinary.parser(), rendered[len(ordinary.text):len(prompt.text) + len(output)])
        field = next(k for k, v in fields.items() if v == added)
        assert reference[field] is not None and reference[field].endswith(added.strip()), (reference, fields)
    # the grammar for the continued prompt takes the rest wherever the grammar of its start
    # state does (a turn's start: reasoning, or content)
    plain = build(spec, GrammarOptions(start=prompt.start.value), template.special_tokens)
    if accepts(plain, output.lstrip()):
        continued = build(spec, GrammarOptions(start=prompt.parser_start,
                                               reasoning_closed=prompt.reasoning_closed),
                          template.special_tokens)
        assert accepts(continued, output)
