"""Bracketed role tags (issue #53, class 6): markers such as `<[role_assistant]>`,
`<[role]><[assistant]>` (a tag of several bracketed pieces) or `[[call]]`, where one marker
begins another's way (`<[t]>`, `<[t_end]>`, `<[t_call]>`). The probe cut them where a bracket
begins (`<[` and `call]>`), so the spec's markers were halves and the parser read a call as
content; the runtime's word splitter likewise let a space into `< [call] >`. Both now keep a
compound delimiter whole (`<[`, `]>`, `[[`, `]]`). The reproducers are kept as built templates;
a property test draws more of them (tag names and bracket styles) and each must prove: every
standard turn read back one-shot and one character at a time, and in chunks of 1 to 7 here."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tplparse import runtime
from tplparse.bridge import compile_in_memory
from tplparse.check.outputs import mode_outputs
from tplparse.check.proof import prove
from tplparse.runtime import MARKER_BOUNDARY
from tplparse.source import ChatTemplate

from conftest import examples

SHAPE = (
    "{%- for m in messages %}HEAD(m.role)"
    "{%- if m.role == 'assistant' and m.reasoning_content %}THINK{{ m.reasoning_content }}THINK_END{% endif %}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls %}CALL"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}CALL_END{% endfor %}{% endif %}'
    "{%- if m.content %}{{ m.content }}{% endif %}END(m.role)\n{% endfor %}"
    "{%- if add_generation_prompt %}HEAD('assistant'){% endif %}"
)


def tags(open_: str, close: str, think: str, think_end: str, call: str, call_end: str,
         head: str = "role_{}", end: str = "role_{}_end") -> ChatTemplate:
    """A template of SHAPE with its markers written `open_ + name + close`; `head` and `end`
    name a role's tags (`{}`: the role)."""
    def tag(name: str) -> str:
        return open_ + name + close

    source = SHAPE
    for key, value in (("THINK_END", tag(think_end)), ("THINK", tag(think)), ("CALL_END", tag(call_end)),
                       ("CALL", tag(call))):
        source = source.replace(key, value)
    source = source.replace("HEAD(m.role)", "{{ '" + open_ + head.format("' + m.role + '") + close + "' }}")
    source = source.replace("HEAD('assistant')", open_ + head.format("assistant") + close)
    source = source.replace("END(m.role)", "{{ '" + open_ + end.format("' + m.role + '") + close + "' }}")
    eos = open_ + end.format("assistant") + close
    return ChatTemplate(source=source, name="tags", family="tags", origin="test",
                        named_tokens={"bos_token": "", "eos_token": eos})


REPRODUCERS = {
    "angle and square brackets": tags("<[", "]>", "think", "think_end", "call", "call_end"),
    "markers that begin another's way": tags("<[", "]>", "t", "t_end", "t_call", "t_call_end"),
    "a tag of several bracketed pieces": tags("<[", "]>", "think]><[begin", "think]><[end", "tool]><[begin",
                                              "tool]><[end", head="role]><[{}", end="role]><[end_{}"),
    "doubled square brackets": tags("[[", "]]", "think", "/think", "call", "/call", head="{}", end="/{}"),
}


def assert_proved_in_every_chunking(template: ChatTemplate) -> None:
    spec, protocol = compile_in_memory(template)
    assert spec.tool_calls is not None and spec.reasoning is not None, spec
    proof = prove(template, spec, grammars=False)
    assert proof.ok, proof
    for output in mode_outputs(template, spec):
        one_shot = runtime.parse(protocol, output.text, start=output.start)
        for size in range(1, 8):
            parser = runtime.StreamParser(protocol, start=output.start)
            for at in range(0, len(output.text), size):
                parser.feed(output.text[at:at + size])
            parser.end()
            assert parser.message == one_shot, (size, output.text)


@pytest.mark.parametrize("case", sorted(REPRODUCERS))
def test_bracketed_tags_prove_and_read_alike_in_every_chunking(case):
    assert_proved_in_every_chunking(REPRODUCERS[case])


def test_a_bracketed_tag_is_one_marker_to_the_word_splitter():
    """No space is read into `<[call]>` or `[[call]]` (a model does not write `< [call] >`);
    between two tags and after a tag's end, as before."""
    assert MARKER_BOUNDARY.sub(" ", "<[call]>{") == "<[call]> {"
    assert MARKER_BOUNDARY.sub(" ", "[[call]]{") == "[[call]] {"
    assert MARKER_BOUNDARY.sub(" ", "<[role]><[assistant]>") == "<[role]> <[assistant]>"
    assert MARKER_BOUNDARY.sub(" ", "<|tool_call_begin|>functions.") == "<|tool_call_begin|> functions."


_NAME = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=6)


@settings(max_examples=examples(12), deadline=None)
@given(style=st.sampled_from([("<[", "]>"), ("[[", "]]"), ("<|", "|>"), ("<", ">")]),
       think=_NAME, call=_NAME, suffix=st.sampled_from(["_end", "/", "end"]))
def test_drawn_bracketed_tags_prove(style, think, call, suffix):
    """Tag names drawn so that one may begin another's way (`t`, `t_end`); each template proves."""
    if think == call or think.startswith(call) or call.startswith(think):
        think, call = think + "a", call + "b"  # (two kinds of block are told apart by their names)
    open_, close = style
    template = tags(open_, close, think, think + suffix, call, call + suffix)
    assert_proved_in_every_chunking(template)
