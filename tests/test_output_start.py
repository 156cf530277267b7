"""Channel and role anomalies at the output's start (issue #53, class 5): a doubled opener, an
empty channel followed by text, a channel marker after the content, a role header the prompt
already wrote. Each reads as the documented superset (docs/tolerance.md) or as an error of the
right kind, the same one-shot and one character at a time, and no text the model wrote as
content or reasoning is lost."""

from __future__ import annotations

import pytest

from tplparse import runtime
from tplparse.bridge import compile_in_memory

from conftest import corpus_template, needs_corpus

# (template, variables of its prompt, what the model writes, (reasoning, content, error kinds))
CASES = {
    "Qwen 3: the opener written twice": (
        "Qwen-Qwen3-0.6B", {}, "<think><think>Plan.</think>Hi.<|im_end|>", ("Plan.", "Hi.", [])),
    "Qwen 3: the opener twice, a line break after each": (
        "Qwen-Qwen3-0.6B", {}, "<think>\n<think>\nPlan.\n</think>\n\nHi.<|im_end|>", ("Plan.", "Hi.", [])),
    "Qwen 3: the role header written again": (
        "Qwen-Qwen3-0.6B", {}, "<|im_start|>assistant\nHi.<|im_end|>", (None, "Hi.", [])),
    "Gemma 4: the thought channel opened twice": (
        "Google-Gemma-4-31B-it", {"enable_thinking": True},
        "<|channel>thought\n<|channel>thought\nPlan.<channel|>Hi.<turn|>", ("Plan.", "Hi.", [])),
    "Gemma 4: an empty thought channel, then text": (
        "Google-Gemma-4-31B-it", {"enable_thinking": True}, "<|channel>thought\n<channel|>Hi.<turn|>", (None, "Hi.", [])),
    "gpt-oss: the channel header written twice": (
        "OpenAI-gpt-oss-120b", {}, "<|channel|>final<|channel|>final<|message|>Hi.<|return|>", (None, "Hi.", [])),
    "gpt-oss: an empty channel name, then text": (
        "OpenAI-gpt-oss-120b", {}, "<|channel|><|message|>Hi.<|return|>", (None, "Hi.", [])),
    "gpt-oss: the role header the prompt wrote, again": (
        "OpenAI-gpt-oss-120b", {}, "<|start|>assistant<|channel|>final<|message|>Hi.<|return|>", (None, "Hi.", [])),
    "gpt-oss: a channel marker after the content": (
        "OpenAI-gpt-oss-120b", {}, "<|channel|>final<|message|>Hi.<|channel|><|return|>",
        (None, "Hi.", ["invalid_message_header"])),
}


@needs_corpus
@pytest.mark.parametrize("case", sorted(CASES))
def test_an_anomaly_at_the_start_reads_as_the_superset_or_an_error_of_its_kind(case):
    stem, variables, text, expected = CASES[case]
    template = corpus_template(stem, bos_token="<|bos|>", eos_token="<|eos|>")
    _, protocol = compile_in_memory(template)
    prompt = template.render([{"role": "user", "content": "Hello"}], add_generation_prompt=True, **variables)
    message = runtime.parse(protocol, text, generation_prompt=prompt)
    parser = runtime.StreamParser(protocol, generation_prompt=prompt)
    for ch in text:
        parser.feed(ch)
    parser.end()
    assert parser.message == message
    assert (message["reasoning_content"], message["content"], [e["kind"] for e in message["errors"]]) == expected
