"""Call objects whose name and arguments sit inside an object of the call's (issue #53, the
indented OpenAI call objects of batch 4a): Falcon 3 writes the raw OpenAI `tool_calls` list,
`{"id": …, "type": "function", "function": {"name": …, "arguments": …}}`. The call is read by
the keys' paths, so what is tolerated of a flat call object holds here too: the id left out,
keys in another order, the arguments as a JSON string. Checked on Falcon 3 and on a built
template that nests the call without an id, compact."""

from __future__ import annotations

import json


from tplparse import runtime
from tplparse.bridge import compile_in_memory
from tplparse.check.proof import prove
from tplparse.runtime import json_call_object
from tplparse.source import ChatTemplate

from conftest import corpus_template, needs_corpus

NESTED = (
    "{%- for m in messages %}<|{{ m.role }}|>\n"
    "{%- if m.tool_calls %}<calls>["
    "{%- for c in m.tool_calls %}"
    '{"type": "function", "function": {"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}}'
    "{% if not loop.last %}, {% endif %}{% endfor %}]</calls>"
    "{%- else %}{{ m.content }}{% endif %}<|end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def built() -> ChatTemplate:
    return ChatTemplate(source=NESTED, name="nested", family="nested", origin="test",
                        named_tokens={"bos_token": "", "eos_token": "<|end|>"})


def falcon3() -> ChatTemplate:
    return corpus_template("TII-Falcon3", bos_token="<|bos|>", eos_token="<|endoftext|>")


def calls(message: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]


def read(protocol, text: str) -> dict:
    """One-shot, and one character at a time: the same message."""
    one_shot = runtime.parse(protocol, text)
    parser = runtime.StreamParser(protocol)
    for ch in text:
        parser.feed(ch)
    parser.end()
    assert parser.message == one_shot
    return one_shot


def test_the_keys_of_a_nested_call_object_are_paths():
    layout = ['{"type": "function", "function": {"name": "', {"slot": "name"}, '", "arguments": ',
              {"slot": "arguments"}, "}}"]
    found = json_call_object(layout)
    assert found is not None and found.keys == {"name": ("function", "name"), "arguments": ("function", "arguments")}
    flat = json_call_object(['{"name": "', {"slot": "name"}, '", "arguments": ', {"slot": "arguments"}, "}"])
    assert flat is not None and flat.keys == {"name": ("name",), "arguments": ("arguments",)}


def test_a_built_template_of_nested_call_objects_proves_and_reads_them_by_key():
    template = built()
    spec, protocol = compile_in_memory(template)
    proof = prove(template, spec, grammars=True)
    assert proof.ok, proof
    written = {
        "as the template writes it": '<calls>[{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]</calls><|end|>',
        "keys reversed inside": '<calls>[{"type": "function", "function": {"arguments": {"a": 1}, "name": "f"}}]</calls><|end|>',
        "no type": '<calls>[{"function": {"name": "f", "arguments": {"a": 1}}}]</calls><|end|>',
        "arguments as a JSON string": '<calls>[{"type": "function", "function": {"name": "f", "arguments": "{\\"a\\": 1}"}}]</calls><|end|>',
    }
    for how, text in written.items():
        message = read(protocol, text)
        assert calls(message) == [("f", {"a": 1})] and message["errors"] == [], how


@needs_corpus
def test_falcon3_reads_a_call_without_its_id_and_keeps_an_id_it_writes():
    _, protocol = compile_in_memory(falcon3())
    with_id = ('\n<tool_call>\n[{"id": "abc123", "type": "function", "function": {"name": "get_rate", '
               '"arguments": {"target": "USD"}}}]\n</tool_call><|endoftext|>')
    message = read(protocol, with_id)
    assert calls(message) == [("get_rate", {"target": "USD"})] and message["tool_calls"][0]["id"] == "abc123"
    without = with_id.replace('"id": "abc123", ', "")
    message = read(protocol, without)
    assert calls(message) == [("get_rate", {"target": "USD"})] and message["tool_calls"][0]["id"] == "call_0"
    assert message["errors"] == []


@needs_corpus
def test_falcon3_refuses_a_nested_call_object_whose_name_is_not_a_string():
    _, protocol = compile_in_memory(falcon3())
    text = ('\n<tool_call>\n[{"type": "function", "function": {"name": 7, "arguments": {}}}]\n'
            '</tool_call><|endoftext|>')
    message = runtime.parse(protocol, text)
    assert message["tool_calls"] == [] and message["errors"][0]["kind"] == "invalid_tool_call"
    assert "'function.name'" in message["errors"][0]["message"]
