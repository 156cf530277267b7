"""Typed content blocks (issue #53, class 2): a turn written as blocks, each opened by the
assistant's header and a marker naming its kind, each ended by one marker, the turn by another
(Inkling: `<|message_model|><|content_text|>…<|end_message|>`, a call's block
`<|message_model|>NAME<|content_invoke_tool_json|>{"name": …, "args": …}<|end_message|>`, then
`<|content_model_end_sampling|>`). The probe reads them as segments with headers (the block's
end, the next header) and a call whose layout starts with its name; the parser reads a call
where a segment starts with a name and the call's marker. Checked on Inkling and on a built
template of the same shape with other markers, keys and key order."""

from __future__ import annotations

import pytest

from tplparse import runtime
from tplparse.bridge import compile_in_memory
from tplparse.check.proof import prove
from tplparse.source import ChatTemplate

from conftest import corpus_template, needs_corpus

# A template of typed blocks written here: its own markers, `arguments` for the key, the keys
# as given (not sorted), and the eos as the marker that ends the turn.
BLOCKS = (
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}<|model|>"
    "{%- if m.reasoning_content %}<|blk|><|kind:thought|>{{ m.reasoning_content }}<|/blk|><|model|>{% endif %}"
    "{%- if m.content %}<|blk|><|kind:text|>{{ m.content }}<|/blk|>{% if m.tool_calls %}<|model|>{% endif %}{% endif %}"
    "{%- for c in m.tool_calls or [] %}{{ c.function.name }}<|kind:call|>"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}<|/blk|>'
    "{% if not loop.last %}<|model|>{% endif %}{% endfor %}<|done|>"
    "{%- elif m.role == 'tool' %}<|tool|><|kind:text|>{{ m.content }}<|/blk|>"
    "{%- else %}<|{{ m.role }}|><|kind:text|>{{ m.content }}<|/blk|>{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|model|>{% endif %}"
)
BLOCKS_TURNS = {
    "content": ("<|blk|><|kind:text|>Sure.<|/blk|><|done|>", "Sure.", None, []),
    "reasoning, then a call": ('<|blk|><|kind:thought|>Look it up.<|/blk|><|model|>get_weather<|kind:call|>'
                               '{"name": "get_weather", "arguments": {"city": "Paris"}}<|/blk|><|done|>',
                               None, "Look it up.", [("get_weather", {"city": "Paris"})]),
    "content, then two calls": ('<|blk|><|kind:text|>Checking.<|/blk|><|model|>get_weather<|kind:call|>'
                                '{"name": "get_weather", "arguments": {"city": "Paris"}}<|/blk|><|model|>'
                                'get_time<|kind:call|>{"name": "get_time", "arguments": {}}<|/blk|><|done|>',
                                "Checking.", None, [("get_weather", {"city": "Paris"}), ("get_time", {})]),
    "a call, keys in the other order": (
        'get_weather<|kind:call|>{"arguments": {"city": "Oslo"}, "name": "get_weather"}<|/blk|><|done|>',
        None, None, [("get_weather", {"city": "Oslo"})]),
    "a call, spaces around its marker": (
        'get_weather <|kind:call|> {"name": "get_weather", "arguments": {"city": "Oslo"}}<|/blk|><|done|>',
        None, None, [("get_weather", {"city": "Oslo"})]),
    "a word that is no call's name: text": ("Hello there.<|done|>", "Hello there.", None, []),
}


def built() -> ChatTemplate:
    return ChatTemplate(source=BLOCKS, name="blocks", family="blocks", origin="test",
                        named_tokens={"bos_token": "", "eos_token": "<|done|>"})


def corpus_inkling() -> ChatTemplate:
    return corpus_template("ThinkingMachines-Inkling-unsloth", bos_token="<|bos|>", eos_token="<|eos|>")


def read_in_every_chunking(protocol, text: str, prompt: str) -> dict:
    """The message of `text` after `prompt`, one-shot; fed in chunks of every size, the same."""
    one_shot = runtime.parse(protocol, text, generation_prompt=prompt)
    for size in range(1, len(text) + 1):
        parser = runtime.StreamParser(protocol, generation_prompt=prompt)
        for at in range(0, len(text), size):
            parser.feed(text[at:at + size])
        parser.end()
        assert parser.message == one_shot, (size, text)
    return one_shot


def calls(message: dict) -> list[tuple[str, dict]]:
    import json

    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]


def test_a_built_template_of_typed_blocks_compiles_and_proves():
    template = built()
    spec, _ = compile_in_memory(template)
    assert spec.tool_calls is not None and spec.tool_calls.call[0] == {"slot": "name"}
    assert spec.tool_calls.separator == "<|model|>"
    proof = prove(template, spec, grammars=True)
    assert proof.ok, proof


@pytest.mark.parametrize("case", sorted(BLOCKS_TURNS))
def test_a_built_template_of_typed_blocks_reads_each_block_by_its_kind(case):
    template = built()
    _, protocol = compile_in_memory(template)
    prompt = template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    text, content, reasoning, expected_calls = BLOCKS_TURNS[case]
    message = read_in_every_chunking(protocol, text, prompt)
    assert (message["content"], message["reasoning_content"], calls(message)) == (content, reasoning, expected_calls)
    assert message["errors"] == []


@needs_corpus
def test_inkling_reads_its_blocks_and_calls_in_every_chunking():
    template = corpus_inkling()
    _, protocol = compile_in_memory(template)
    prompt = template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert prompt.endswith("<|message_model|>")
    text = ('<|content_thinking|>Need the rate.<|end_message|><|message_model|><|content_text|>Checking.'
            '<|end_message|><|message_model|>get_rate<|content_invoke_tool_json|>'
            '{"args":{"target":"USD"},"name":"get_rate"}<|end_message|><|content_model_end_sampling|>')
    message = read_in_every_chunking(protocol, text, prompt)
    assert (message["reasoning_content"], message["content"]) == ("Need the rate.", "Checking.")
    assert calls(message) == [("get_rate", {"target": "USD"})] and message["errors"] == []


@needs_corpus
def test_a_call_block_is_not_dispatched_before_its_name_is_whole():
    """Streamed, nothing of a call's block goes out as content while its name may still be
    one: the name's characters are held until the call's marker (or other text) tells."""
    template = corpus_inkling()
    _, protocol = compile_in_memory(template)
    prompt = template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    parser = runtime.StreamParser(protocol, generation_prompt=prompt)
    deltas = []
    for ch in "get_ra":
        deltas += parser.feed(ch)
    assert all(not d.get("content") and not d.get("tool_calls") for d in deltas), deltas


@needs_corpus
def test_inkling_arguments_under_another_name_are_read_not_dropped():
    """`"arguments"` where the layout writes `"args"`: the arguments, not `{}`; both names in
    one object: not guessed."""
    template = corpus_inkling()
    _, protocol = compile_in_memory(template)
    prompt = template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    head = "get_rate<|content_invoke_tool_json|>"
    other = runtime.parse(protocol, head + '{"name":"get_rate","arguments":{"target":"USD"}}<|end_message|>',
                          generation_prompt=prompt)
    assert calls(other) == [("get_rate", {"target": "USD"})]
    both = runtime.parse(protocol, head + '{"name":"get_rate","args":{},"arguments":{"target":"USD"}}<|end_message|>',
                         generation_prompt=prompt)
    assert both["tool_calls"] == [] and both["errors"][0]["kind"] == "invalid_arguments"
