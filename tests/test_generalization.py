"""Issue #29's classes of misses, each on corpus templates and templates built here to show the
same shape under other names: the probe finds it by mechanism, the parser reads the output
after the real generation prompt (streamed as one-shot), and the compile proves every mode."""

from __future__ import annotations

import pytest

import tplparse
from tplparse import runtime
from tplparse.bridge import compile_in_memory
from tplparse.check.proof import prove
from tplparse.probe import probe
from tplparse.source import ChatTemplate
from tplparse.spec import Start

from conftest import CORPUS, EXAMPLES, needs_corpus

CHATML = ("{%- for m in messages %}<|im_start|>{{ m.role + '\\n' }}"
          "{%- if m.role == 'assistant' and m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
          "{{ m.content }}<|im_end|>\n{% endfor -%}")


def inline(source: str) -> ChatTemplate:
    return ChatTemplate(source=source, name="t", family="t", origin="test",
                        named_tokens={"bos_token": "<s>", "eos_token": "<|im_end|>"})


def corpus(stem: str):
    path = CORPUS / f"{stem}.jinja"
    if not path.is_file():
        pytest.skip(f"{stem} is not in the corpus")
    return tplparse.load(path)


def read(protocol, text: str, prompt: str) -> dict:
    """The message of `text` after `prompt`, one-shot; fed one character at a time, the same."""
    one_shot = runtime.parse(protocol, text, generation_prompt=prompt)
    parser = runtime.StreamParser(protocol, generation_prompt=prompt)
    for ch in text:
        parser.feed(ch)
    parser.end()
    assert parser.message == one_shot
    return one_shot


def rendered_prompt(template: ChatTemplate, **variables) -> str:
    return template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True, **variables)


# --- class 1: reasoning opened by a switch of any name -------------------------------------

SWITCHED = {
    "a boolean of its own name": (CHATML + "{%- if add_generation_prompt %}<|im_start|>assistant\n"
                                  "{% if deep_think %}<think>\n{% else %}<think>\n\n</think>\n\n{% endif %}{% endif %}",
                                  "deep_think", True, False),
    "a string compared with literals": (CHATML + "{%- if add_generation_prompt %}<|im_start|>assistant\n"
                                        "{% if effort == 'deliberate' %}<think>\n{% elif effort == 'quick' %}"
                                        "<think>\n\n</think>\n\n{% endif %}{% endif %}",
                                        "effort", "deliberate", "quick"),
}


@pytest.mark.parametrize("case", sorted(SWITCHED))
def test_a_switch_is_found_from_the_templates_code_whatever_its_name(case):
    source, variable, on, off = SWITCHED[case]
    template = inline(source)
    spec, protocol = compile_in_memory(template)
    assert spec.thinking_switch == {"variable": variable, "on": on, "off": off}
    assert (spec.modes["thinking"].start, spec.modes["no_thinking"].start) == (Start.REASONING, Start.CONTENT)
    assert (spec.reasoning.start, spec.reasoning.end) == ("<think>", "</think>")
    thinking = read(protocol, "Let me see.\n</think>\n\nHello.<|im_end|>", rendered_prompt(template, **{variable: on}))
    assert (thinking["reasoning_content"], thinking["content"]) == ("Let me see.", "Hello.")
    direct = read(protocol, "Hello.<|im_end|>", rendered_prompt(template, **{variable: off}))
    assert (direct["reasoning_content"], direct["content"]) == (None, "Hello.")
    assert prove(template, spec, grammars=False).ok


@needs_corpus
def test_a_switch_with_three_values_in_a_corpus_template():
    """MiniMax M3's `thinking_mode` (enabled / disabled / adaptive), which no list of known
    names holds: its prompt opens the block, closes it, or leaves the choice to the model."""
    template = corpus("MiniMax-M3")
    spec, protocol = compile_in_memory(template)
    assert spec.thinking_switch == {"variable": "thinking_mode", "on": "enabled", "off": "disabled"}
    enabled = read(protocol, "Plan.</mm:think>Done.", rendered_prompt(template, thinking_mode="enabled"))
    assert (enabled["reasoning_content"], enabled["content"]) == ("Plan.", "Done.")
    disabled = read(protocol, "Done.", rendered_prompt(template, thinking_mode="disabled"))
    assert (disabled["reasoning_content"], disabled["content"]) == (None, "Done.")


@needs_corpus
@pytest.mark.parametrize("stem", ["NVIDIA-Nemotron-3-Ultra", "Moonshot-Kimi-K2.5-style-kite1.0"])
def test_the_start_state_comes_from_the_whole_prompt_the_template_writes(stem):
    """The assistant header every turn shares ends with the opener (`…<think>`), and the
    prompt adds only a newline, or nothing: the output starts inside reasoning."""
    template = corpus(stem)
    spec, protocol = compile_in_memory(template)
    assert spec.modes["default"].start == Start.REASONING
    message = read(protocol, "Let me see.\n</think>\nHello.", rendered_prompt(template))
    assert (message["reasoning_content"], message["content"]) == ("Let me see.", "Hello.")


@needs_corpus
def test_a_system_prompt_that_names_the_end_marker_does_not_decide_the_start():
    """Apriel's system prompt says "after the marker [BEGIN FINAL RESPONSE]": the state is read
    after the assistant header the generation prompt writes, not from the instructions."""
    template = corpus("ServiceNow-Apriel-1.6-15b-Thinker-fixed")
    spec, protocol = compile_in_memory(template)
    prompt = rendered_prompt(template)
    assert "[BEGIN FINAL RESPONSE]" in prompt
    message = read(protocol, "Add them.\n[BEGIN FINAL RESPONSE]\n391.", prompt)
    assert (message["reasoning_content"], message["content"]) == ("Add them.", "391.")


# --- class 2: every mode is proved after its real generation prompt ----------------------

@needs_corpus
@pytest.mark.parametrize("stem", ["Qwen-Qwen3.5-2B-nothink", "Qwen-Qwen3-0.6B"])
def test_the_proof_reads_each_mode_after_its_own_prompt(stem):
    """Thinking off by default (the prompt closes the block) or on: the reasoning turns are
    read after the prompt of the mode that opens the block, with its newline after `<think>`."""
    template = corpus(stem)
    spec = probe(template)
    proof = prove(template, spec, grammars=False)
    assert proof.ok, proof.table()
    modes = {t.turn.partition(" (")[2].rstrip(")") or "default" for t in proof.turns}
    assert {"default", "thinking"} <= modes or {"default", "no_thinking"} <= modes, modes


# --- class 6: a call's name written through its id ---------------------------------------

ID_AS_NAME = (CHATML.replace("{{ m.content }}<|im_end|>",
                             "{{ m.content }}{% for c in m.tool_calls or [] %}<call>{{ c.id }}|{{ c.function.arguments | tojson }}"
                             "</call>{% endfor %}<|im_end|>")
              + "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_a_calls_name_written_through_its_id_is_read_from_it():
    template = inline(ID_AS_NAME)
    spec, protocol = compile_in_memory(template)
    assert spec.tool_calls is not None and "call ids as functions.{name}:{index}" in spec.shape
    text = '<call>functions.get_weather:0|{"city": "Paris"}</call><|im_end|>'
    message = read(protocol, text, rendered_prompt(template))
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == \
        [("get_weather", '{"city": "Paris"}')]
    assert prove(template, spec, grammars=False).ok


@needs_corpus
def test_kimi_k2_5_style_ids_carry_the_name():
    template = corpus("Moonshot-Kimi-K2.5-style-kite1.0")
    spec, protocol = compile_in_memory(template)
    text = ("</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
            '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>')
    message = read(protocol, text, rendered_prompt(template))
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]


# --- class 8: variants at the output's start ---------------------------------------------

@needs_corpus
def test_a_leading_reasoning_end_is_an_empty_block():
    """MiniMax M3 in its adaptive mode tells the model to begin an answer without thinking
    after the end marker: `</mm:think>Done.` is the content `Done.`."""
    template = corpus("MiniMax-M3")
    _, protocol = compile_in_memory(template)
    message = read(protocol, "</mm:think>Done.", rendered_prompt(template))
    assert (message["reasoning_content"], message["content"]) == (None, "Done.")


def test_a_leading_reasoning_end_is_an_empty_block_in_a_built_template():
    template = inline(SWITCHED["a boolean of its own name"][0])
    _, protocol = compile_in_memory(template)
    message = read(protocol, "</think>\n\nHello.<|im_end|>", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert (message["reasoning_content"], message["content"]) == (None, "Hello.")


@needs_corpus
def test_whitespace_before_the_assistant_header_is_the_prompts():
    """Llama 4's JSON template writes a newline before the assistant header in the prompt and
    before a call turn, none before a content turn: the header is the same, and content has
    no wrapper; a call object in another key order reads after it."""
    template = corpus("Meta-Llama-4-json-vllm-tool")
    spec, protocol = compile_in_memory(template)
    assert (spec.content_start, spec.modes["default"].tail) == ("", "")
    prompt = rendered_prompt(template)
    assert read(protocol, "Hello.<|eot|>", prompt)["content"] == "Hello."
    message = read(protocol, '{"parameters": {"city": "Paris"}, "name": "get_weather"}<|eot|>', prompt)
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]


# --- class 9: a call quoted inside reasoning ----------------------------------------------

QUOTED_CALLS = {  # family -> (a call in its format, its reasoning end marker)
    "examples/chatml-think-tools.gguf": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
                                         "</think>"),
    "InclusionAI-Ling-2.0": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
                             "</think>"),
    "DeepSeek-V3.2": ('<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" '
                      'string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>', "</think>"),
}


def _quoted_call_family(name):
    return tplparse.load(EXAMPLES / name.removeprefix("examples/")) if name.startswith("examples/") else corpus(name)


@pytest.mark.parametrize("name", sorted(QUOTED_CALLS))
def test_a_call_quoted_inside_open_reasoning_is_reasoning_if_the_reasoning_closes_after_it(name):
    """Ling's rule (a call opener inside open reasoning ends it) against models that quote a call
    in their reasoning and close the block later: decided by what follows, nothing dispatched
    (or shown) until the output tells."""
    template = _quoted_call_family(name)
    spec, protocol = compile_in_memory(template)
    call, end = QUOTED_CALLS[name]
    assert spec.reasoning.tool_call_ends_reasoning  # the policy this rule refines
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    quoted = f"I could answer with {call} but first I check the units.{end}Paris is sunny."
    called = f"The user wants the weather. {call}"
    for text, calls, content in ((quoted, [], "Paris is sunny."), (called, ["get_weather"], None)):
        one_shot = runtime.parse(protocol, text, tools=tools, start="reasoning")
        assert [c["function"]["name"] for c in one_shot["tool_calls"]] == calls and one_shot["content"] == content
        assert one_shot["errors"] == []
        for size in (1, 3, 7):
            parser = runtime.StreamParser(protocol, tools=tools, start="reasoning")
            deltas = [d for i in range(0, len(text), size) for d in parser.feed(text[i:i + size])]
            before_the_end = list(deltas)
            deltas += parser.end()
            assert parser.message == one_shot
            # Until the output tells, nothing of the call goes out: no header, no arguments, and
            # none of its text as reasoning either.
            assert not any("tool_calls" in d for d in before_the_end)
            if calls:
                shown = "".join(d.get("reasoning_content", "") for d in before_the_end)
                assert "<tool_call>" not in shown
    if name == "examples/chatml-think-tools.gguf":
        quoted_message = runtime.parse(protocol, quoted, tools=tools, start="reasoning")
        assert call in quoted_message["reasoning_content"]
