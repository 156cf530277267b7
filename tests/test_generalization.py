"""Issue #29's classes of misses, each on corpus templates and templates built here to show the
same shape under other names: the probe finds it by mechanism, the parser reads the output
after the real generation prompt (streamed as one-shot), and the compile proves every mode."""

from __future__ import annotations

import dataclasses
import json

import pytest

import tplparse
from tplparse import runtime
from tplparse.bridge import compile_in_memory
from tplparse.check.deviations import INSTRUCTED_FORM, STRING_LITERALS, VALUES_UNQUOTED, deviations
from tplparse.check.outputs import mode_outputs
from tplparse.check.proof import prove
from tplparse.probe import probe
from tplparse.source import ChatTemplate
from tplparse.spec import Start

from conftest import CORPUS, EXAMPLES, corpus_compiled, corpus_templates, needs_corpus

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


def calls(message: dict) -> list[tuple[str, dict]]:
    """The message's calls: (name, arguments decoded)."""
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]


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
@pytest.mark.parametrize("stem", ["DeepSeek-V4", "DeepSeek-V4-Flash-0731"])
def test_a_switch_whose_prompt_rewrites_the_headers_last_marker(stem):
    """DeepSeek V4's turns (thinking off) start `<｜Assistant｜></think>`; with thinking on, its
    prompt is `<｜Assistant｜><think>`: the mode's header is the part both write, its tail the
    opener, and the output starts inside reasoning."""
    template = corpus(stem)
    spec, protocol = compile_in_memory(template)
    assert spec.thinking_switch == {"variable": "enable_thinking", "on": True, "off": False}
    assert (spec.modes["thinking"].tail, spec.modes["thinking"].start) == ("<think>", Start.REASONING)
    thinking = read(protocol, "I'm thinking</think>Hello.", rendered_prompt(template, enable_thinking=True))
    assert (thinking["reasoning_content"], thinking["content"]) == ("I'm thinking", "Hello.")
    direct = read(protocol, "Hello.", rendered_prompt(template))
    assert (direct["reasoning_content"], direct["content"]) == (None, "Hello.")
    assert prove(template, spec, grammars=False).ok


def test_a_switch_whose_prompt_rewrites_the_headers_last_marker_in_a_built_template():
    source = ("{%- for m in messages %}<|im_start|>{{ m.role }}<|sep|>{% if m.role == 'assistant' %}</think>{% endif %}"
              "{{ m.content }}<|im_end|>\n{% endfor -%}{%- if add_generation_prompt %}<|im_start|>assistant<|sep|>"
              "{% if ponder %}<think>{% else %}</think>{% endif %}{% endif %}")
    template = inline(source)
    spec, protocol = compile_in_memory(template)
    assert spec.thinking_switch == {"variable": "ponder", "on": True, "off": False}
    thinking = read(protocol, "Hm.</think>Hello.<|im_end|>", rendered_prompt(template, ponder=True))
    assert (thinking["reasoning_content"], thinking["content"]) == ("Hm.", "Hello.")
    assert read(protocol, "Hello.<|im_end|>", rendered_prompt(template))["content"] == "Hello."


def test_a_prompt_that_writes_a_note_tag_after_the_opener_leaves_reasoning_open():
    """A thinking budget of 0 whose prompt opens the block and a budget note in it
    (`<think><budget>`, Seed-OSS's `<seed:think><seed:cot_budget_reflect>`): the model goes on
    inside the block, closes the note and the block, then answers; the proof reads every turn
    after that prompt, and its deviations."""
    source = (CHATML + "{%- if add_generation_prompt %}<|im_start|>assistant\n"
              "{% if budget == 0 %}<think><budget>{% endif %}{% endif %}")
    template = inline(source)
    spec, protocol = compile_in_memory(template)
    zero = next(m for m in spec.modes.values() if m.variables == {"budget": 0})
    assert (zero.tail, zero.start) == ("<think><budget>", Start.REASONING)
    noted = read(protocol, "Budget 0: answer now.</budget>\n</think>\n\nHello.<|im_end|>",
                 rendered_prompt(template, budget=0))
    assert (noted["reasoning_content"], noted["content"]) == ("Budget 0: answer now.</budget>", "Hello.")
    direct = read(protocol, "Hello.<|im_end|>", rendered_prompt(template))
    assert (direct["reasoning_content"], direct["content"]) == (None, "Hello.")
    proof = prove(template, spec, grammars=False)
    assert proof.ok, proof.table()
    assert any(t.turn.endswith(")") for t in proof.turns)  # (the budget mode's turns were read)


def test_a_prompt_that_writes_a_turn_before_its_opener_names_only_the_opener():
    """A prompt that opens reasoning after more than the header (DeepSeek V3.2 in llama.cpp's
    templates: the user turn writes `<|Assistant|><think>`, the prompt an empty user turn and
    `<|Assistant|><think>` again), when no render shows the opener: the opener is the end
    marker's pair, so a model that writes it again is read, not filed as reasoning."""
    source = ("{%- set think = think | default(true) -%}"
              "{%- set last = namespace(user=-1) %}{% for m in messages %}{% if m.role == 'user' %}"
              "{% set last.user = loop.index0 %}{% endif %}{% endfor -%}"
              "{%- for m in messages %}{% if m.role == 'user' %}<|User|>{{ m.content }}<|Assistant|>"
              "{% if loop.index0 == last.user and think %}<think>{% else %}</think>{% endif %}"
              "{% elif m.role == 'assistant' %}{% if m.reasoning_content %}{{ m.reasoning_content }}</think>"
              "{% endif %}{{ m.content }}<|end|>{% endif %}{% endfor %}"
              "{% if add_generation_prompt %}<|User|>\n<|Assistant|>{% if think %}<think>{% else %}</think>"
              "{% endif %}{% endif %}")
    template = inline(source)
    spec, protocol = compile_in_memory(template)
    assert (spec.reasoning.start, spec.reasoning.end) == ("<think>", "</think>")
    prompt = rendered_prompt(template)
    for output in ("Hm.</think>Hello.<|end|>", "<think>Hm.</think>Hello.<|end|>"):
        message = read(protocol, output, prompt)
        assert (message["reasoning_content"], message["content"]) == ("Hm.", "Hello."), output
    direct = read(protocol, "Hello.<|end|>", rendered_prompt(template, think=False))
    assert (direct["reasoning_content"], direct["content"]) == (None, "Hello.")


def test_an_empty_block_with_a_channel_name_keeps_the_name_in_its_opener():
    """Thinking off writes `<|channel>thought\n<channel|>` and no render shows a block (Gemma 4
    in llama.cpp's templates): the opener is `<|channel>thought`, so the channel's name is not
    read as the first word of the reasoning."""
    source = ("{%- for m in messages %}<|turn>{{ 'model' if m.role == 'assistant' else m.role }}\n"
              "{{ m.content }}<turn|>\n{% endfor -%}"
              "{%- if add_generation_prompt %}<|turn>model\n{% if not enable_thinking %}"
              "<|channel>thought\n<channel|>{% endif %}{% endif %}")
    template = inline(source)
    spec, protocol = compile_in_memory(template)
    assert (spec.reasoning.start, spec.reasoning.end) == ("<|channel>thought", "<channel|>")
    message = read(protocol, "<|channel>thought\nPlan.<channel|>Hello.<turn|>",
                   rendered_prompt(template, enable_thinking=True))
    assert (message["reasoning_content"], message["content"]) == ("Plan.", "Hello.")


PREFILL = ("{%- if messages[-1].role == 'assistant' %}{% set last = messages[-1].content %}"
           "{% set messages = messages[:-1] %}{% endif -%}"
           "{%- for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% if m.tool_calls %}<calls>["
           "{% for c in m.tool_calls %}{\"name\": \"{{ c.function.name }}\", \"arguments\": "
           "{{ c.function.arguments | tojson }}}{% if not loop.last %}, {% endif %}{% endfor %}]</calls>"
           "{% endif %}<|end|>\n{% endfor -%}"
           "{%- if add_generation_prompt or last is defined %}<|assistant|>\n{{ last or '' }}{% endif %}")


def test_a_template_that_renders_a_last_assistant_message_as_a_prefill_has_its_calls_read():
    """A last assistant message rendered as a prefill (the prompt, then its content; its calls
    dropped: vLLM's Nemotron JSON template): the calls show only when another message follows
    the turn, and are laid out from that render, cut where the next user turn opens."""
    template = inline(PREFILL)
    spec, protocol = compile_in_memory(template)
    assert spec.tool_calls is not None
    assert spec.tool_calls.section_start == "<calls>["
    assert spec.tool_calls.section_end.startswith("]</calls>")  # (and the turn's end, written after it)
    prompt = rendered_prompt(template)
    message = read(protocol, 'Checking.<calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
                             "</calls><|end|>", prompt)
    assert message["content"] == "Checking."
    assert calls(message) == [("get_weather", {"city": "Paris"})]
    proof = prove(template, spec, grammars=False)
    assert proof.ok, proof.table()


def test_a_template_that_refuses_a_message_after_the_turn_compiles_without_calls():
    """The render that looks for calls written only when a message follows the turn is a
    probe's try: a template that refuses that conversation (one question only) still
    compiles, without a call format, and says so."""
    source = ("{%- for m in messages %}{% if m.role == 'user' and not loop.first %}"
              "{{ raise_exception('one question only') }}{% endif %}"
              "<|{{ m.role }}|>\n{{ m.content }}<|end|>\n{% endfor -%}"
              "{%- if add_generation_prompt %}<|assistant|>\n{% endif %}")
    spec, protocol = compile_in_memory(inline(source))
    assert spec.tool_calls is None
    assert any("does not render tool calls" in warning for warning in spec.warnings)
    assert read(protocol, "Hello.<|end|>", "<|user|>\nHi<|end|>\n<|assistant|>\n")["content"] == "Hello."


TOOLS_IN_THE_LAST_USER_TURN = (
    "{{ bos_token }}{%- for m in messages %}{% if m.role == 'user' %}"
    "{% if loop.last and tools %}[TOOLS]{{ tools | tojson }}[/TOOLS]{% endif %}[INST] {{ m.content }}[/INST]"
    "{% elif m.role == 'assistant' %}{% if m.tool_calls %}[CALLS][{% for c in m.tool_calls %}"
    "{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}"
    "{% if not loop.last %}, {% endif %}{% endfor %}]{% else %} {{ m.content }}{% endif %}{{ eos_token }}"
    "{% endif %}{% endfor %}")


def test_a_template_that_writes_the_tools_in_the_last_user_turn_only_is_read():
    """The tools (or the system prompt) written in the last user turn only (vLLM's Mistral
    parallel template, Mistral's own): history is not a prefix of the conversation with the
    turn, and the turn is what follows the user's turn as history closes it."""
    template = inline(TOOLS_IN_THE_LAST_USER_TURN)
    spec, protocol = compile_in_memory(template)
    assert spec.tool_calls is not None and spec.tool_calls.section_start.strip() == "[CALLS]["
    prompt = rendered_prompt(template)
    assert read(protocol, " Sunny.<|im_end|>", prompt)["content"] == "Sunny."
    message = read(protocol, '[CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]<|im_end|>', prompt)
    assert calls(message) == [("get_weather", {"city": "Paris"})]
    proof = prove(template, spec, grammars=False)
    assert proof.ok, proof.table()


STRIPS_REASONING = CHATML.replace(
    "{%- if m.role == 'assistant' and m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
    "{{ m.content }}",
    "{%- if m.role == 'assistant' and '</think>' in m.content %}{{ m.content.split('</think>')[-1] | trim }}"
    "{% else %}{{ m.content }}{% endif %}") + "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"


def test_reasoning_that_history_strips_is_named_by_the_templates_code():
    """No render shows a reasoning block and no prompt opens one, but the template keeps only
    what follows `</think>` of an assistant message (DeepSeek R1's vLLM template, LFM 2.5):
    the model writes `<think>…</think>` first, read as reasoning; an answer without it is
    content. Without that cut in the code, the same output stays content (no guess)."""
    template = inline(STRIPS_REASONING)
    assert "split('</think>')[-1]" in template.source
    spec, protocol = compile_in_memory(template)
    assert (spec.reasoning.start, spec.reasoning.end, spec.reasoning.in_history) == ("<think>", "</think>", False)
    prompt = rendered_prompt(template)
    message = read(protocol, "<think>\nThe user greets me.\n</think>\n\nHello!<|im_end|>", prompt)
    assert (message["reasoning_content"], message["content"]) == ("The user greets me.", "Hello!")
    assert read(protocol, "Hello!<|im_end|>", prompt)["content"] == "Hello!"
    assert prove(template, spec, grammars=False).ok
    plain = inline(STRIPS_REASONING.replace(".split('</think>')[-1]", ".replace('</think>', '')"))
    spec, protocol = compile_in_memory(plain)
    assert spec.reasoning is None
    assert read(protocol, "<think>\nHm.\n</think>\n\nHello!<|im_end|>", prompt)["reasoning_content"] is None


THOUGHT_FIELD = (  # (vLLM's MiniCPM 3 template: reasoning from `message.thought`, arguments joined by `,`)
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{% if m.thought %}<|thought_start|>\n{{ m.thought }}\n"
    "<|thought_end|>\n{% endif %}{% if m.tool_calls %}<|tool_call_start|>\n{% for c in m.tool_calls %}"
    "{{ c.function.name }}({% for k, v in c.function.arguments | items %}{{ k }}={{ v | tojson }}"
    "{{ ',' if not loop.last }}{% endfor %})\n{% endfor %}<|tool_call_end|>\n{% endif %}{{ m.content }}<|im_end|>\n"
    "{% endfor -%}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_reasoning_read_from_a_thought_field_and_a_space_after_the_arguments_separator():
    """A template that renders a turn's reasoning from `message.thought` shows it (the
    reasoning is offered under that name too): its markers are found and read. Arguments it
    joins with `,` read joined with `, `, as its instructions and its model write them (the
    proof reads that form: rule "whitespace around markers")."""
    template = inline(THOUGHT_FIELD)
    spec, protocol = compile_in_memory(template)
    assert (spec.reasoning.start.strip(), spec.reasoning.end.strip()) == ("<|thought_start|>", "<|thought_end|>")
    assert spec.tool_calls.arguments.separator == ","
    message = read(protocol, '<|thought_start|>\nI should check.\n<|thought_end|>\n<|tool_call_start|>\n'
                             'get_weather(city="Paris", days=3)\n<|tool_call_end|>\nLet me see.<|im_end|>',
                   rendered_prompt(template))
    assert (message["reasoning_content"], message["content"], message["errors"]) == ("I should check.", "Let me see.", [])
    assert calls(message) == [("get_weather", {"city": "Paris", "days": 3})]
    proof = prove(template, spec, grammars=False)
    assert proof.ok, proof.table()
    spaced = [d for output in mode_outputs(template, spec) for d in deviations(output, spec)
              if d.eaten == ("a space after the arguments' separator",)]
    assert spaced and all('", ' in d.text for d in spaced)


@needs_corpus
def test_a_switch_that_writes_another_role_header_is_no_mode():
    """Granite 3.3's `controls` write the role header otherwise (`assistant {"citations"}`):
    not a prompt after the assistant header, so no mode."""
    spec = corpus_compiled("IBM-Granite-3.3-2B-Instruct").spec  # (the session's compile: tests/conftest.py)
    assert not [name for name in spec.modes if name.startswith("controls")]


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
    entry = corpus_compiled(stem)  # (the session's compile: tests/conftest.py)
    template, spec = entry.template, entry.spec
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


# --- class 7: the model is told one format, history renders another ------------------------

LLAMA4_SAYS = "{{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}"
LLAMA4_TOLD_A_SEPARATOR = ("{{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and "
                           "its value}. Separate calls by \" | \".' }}")

CALLS_IN_A_SECTION = (
    "{%- if tools %}<|im_start|>system\n{{ INSTRUCTIONS }}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role + '\\n' }}"
    "{%- if m.tool_calls %}{{ m.content or '' }}<calls>{% for c in m.tool_calls %}"
    "{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}{% endfor %}</calls>"
    "{%- else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
INSTRUCTIONS = 'To call a tool, answer with {\"name\": the tool\'s name, \"arguments\": its arguments as an object}.'


def edited(stem: str, old: str, new: str) -> ChatTemplate:
    """A corpus template with one piece of its instruction text rewritten (every occurrence)."""
    template = corpus(stem)
    assert old in template.source, f"{stem} no longer writes {old!r}"
    return ChatTemplate(source=template.source.replace(old, new), name=f"{template.name}-told", family="told",
                        origin="test", named_tokens=template.named_tokens)


def tool_names(message: dict) -> list[str]:
    return [call["function"]["name"] for call in message["tool_calls"]]


@needs_corpus
def test_the_instructed_format_is_read_from_the_templates_instructions():
    """Llama 4 renders a past call inside `<|python_start|><|python_end|>` and tells the model
    to respond with the bare object; its JSON revision renders calls back to back and tells it
    to separate them by `; `. Templates whose instructions spell the call inside the section's
    markers (Qwen 2.5, Nemotron, Apriel) are told nothing else."""
    told = {stem: corpus_compiled(stem).spec.tool_calls for stem in (
        "Meta-Llama-4-Instruct", "Meta-Llama-4-json-vllm-tool", "Qwen-Qwen2.5-7B-Instruct",
        "NVIDIA-Nemotron-Nano-9B-v2", "ServiceNow-Apriel-1.6-15b-Thinker-rev2")}
    assert {stem: (tc.instructed_bare, tc.instructed_separators) for stem, tc in told.items()} == {
        "Meta-Llama-4-Instruct": (True, []),
        "Meta-Llama-4-json-vllm-tool": (False, ["; "]),
        "Qwen-Qwen2.5-7B-Instruct": (False, []),
        "NVIDIA-Nemotron-Nano-9B-v2": (False, []),
        "ServiceNow-Apriel-1.6-15b-Thinker-rev2": (False, []),
    }


@needs_corpus
def test_a_call_written_as_instructed_reads_as_the_call():
    """What the instructions tell the model to write is a call, streamed as one-shot, after the
    real generation prompt: Llama 4's bare object, its JSON revision's `; ` between calls."""
    bare = corpus("Meta-Llama-4-Instruct")
    _, protocol = compile_in_memory(bare)
    message = read(protocol, '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot|>', rendered_prompt(bare))
    assert (message["content"], tool_names(message), message["errors"]) == (None, ["get_weather"], [])
    separated = corpus("Meta-Llama-4-json-vllm-tool")
    _, protocol = compile_in_memory(separated)
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {}}<|eot|>'
    message = read(protocol, text, rendered_prompt(separated))
    assert (message["content"], tool_names(message), message["errors"]) == (None, ["get_weather", "get_time"], [])
    # The separator is read between calls only: after the last call it is the model's text.
    message = read(protocol, '{"name": "get_weather", "parameters": {}}; done<|eot|>', rendered_prompt(separated))
    assert (tool_names(message), message["content"]) == (["get_weather"], "; done")


@needs_corpus
@pytest.mark.parametrize("stem", ["Meta-Llama-3.1-8B-Instruct", "Meta-Llama-4-Instruct"])
@pytest.mark.parametrize("separator", [";", "; ", ";\n", ", "])
def test_a_separator_the_format_does_not_write_between_calls(stem, separator):
    """Calls the layout writes back to back, joined by `;` or `,` as models write them unasked
    (llama.cpp's Llama 3.x cases): both calls, no content; after the last call the same text
    is the model's content."""
    template = corpus(stem)
    _, protocol = compile_in_memory(template)
    prompt = rendered_prompt(template)
    calls = '{"name": "get_weather", "parameters": {"city": "Paris"}}' + separator + '{"name": "get_time", "parameters": {}}'
    message = read(protocol, calls, prompt)
    assert (tool_names(message), message["content"], message["errors"]) == (["get_weather", "get_time"], None, [])
    message = read(protocol, '{"name": "get_time", "parameters": {}}' + separator + "then I answer.", prompt)
    assert (tool_names(message), message["content"]) == (["get_time"], separator + "then I answer.")


@needs_corpus
def test_the_instructions_decide_in_built_variants():
    """A built template that renders calls inside `<calls>…</calls>` and tells the model to
    answer with the bare object reads that object as a call; without that instruction, the same
    text is content. Llama 4 told a separator
    reads calls joined by it (` | `, which models do not write unasked); as shipped, each bare call
    reads, and the `|` between them is content.
    The compile proves the instructed forms of its call turns (the tolerance rule's deviations)."""
    text = '{"name": "get_weather", "arguments": {"city": "Paris"}}<|im_end|>'
    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    told = inline(CALLS_IN_A_SECTION.replace("{{ INSTRUCTIONS }}", INSTRUCTIONS))
    spec, protocol = compile_in_memory(told)
    assert spec.tool_calls.instructed_bare and spec.tool_calls.section_start == "<calls>"
    assert tool_names(read(protocol, text, prompt)) == ["get_weather"]
    _, protocol = compile_in_memory(inline(CALLS_IN_A_SECTION.replace("{{ INSTRUCTIONS }}", "Call the tools you need.")))
    message = read(protocol, text, prompt)
    assert (tool_names(message), message["content"]) == ([], text[: -len("<|im_end|>")])

    told = edited("Meta-Llama-4-Instruct", LLAMA4_SAYS, LLAMA4_TOLD_A_SEPARATOR)
    spec, protocol = compile_in_memory(told)
    assert (spec.tool_calls.instructed_bare, spec.tool_calls.instructed_separators) == (True, [" | "])
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}} | {"name": "get_time", "parameters": {}}<|eot|>'
    assert tool_names(read(protocol, text, rendered_prompt(told))) == ["get_weather", "get_time"]
    _, protocol = compile_in_memory(corpus("Meta-Llama-4-Instruct"))
    message = read(protocol, text, rendered_prompt(told))
    assert (tool_names(message), message["content"]) == (["get_weather", "get_time"], "|")
    assert prove(told, spec, grammars=False).ok
    forms = [d for output in mode_outputs(told, spec) for d in deviations(output, spec) if d.rule == INSTRUCTED_FORM]
    assert forms and all("<|python_start|>" not in d.text for d in forms)
    assert any(len(d.expected["tool_calls"]) > 1 and "} | {" in d.text for d in forms)


# --- class 3: reasoning as a segment with its own header ---------------------------------

SEGMENTED = {  # template -> (a reasoning segment's text, the next segment's header, a content segment's start)
    "Muse-Glimmer": (" to=self<|message|>{}<|eom|>", "<|start|>assistant", " to=user<|message|>"),
    "Naver-HyperCLOVAX-SEED-Think-14B-vllm-tool": ("/think\n{}<|im_end|>\n", "<|im_start|>assistant", "\n"),
}


@needs_corpus
@pytest.mark.parametrize("stem", sorted(SEGMENTED))
def test_reasoning_segments_each_with_its_header_are_one_reasoning(stem):
    """A turn of several headed segments, two of them reasoning: both bodies are the
    reasoning (in order, as harmony's reasoning messages are), the content segment the content."""
    template = corpus(stem)
    _, protocol = compile_in_memory(template)
    thought, header, content = SEGMENTED[stem]
    end = {"Muse-Glimmer": "<|eot|>"}.get(stem, "<|im_end|>")
    text = thought.format("First.") + header + thought.format("Second.") + header + content + "Hello." + end
    message = read(protocol, text, rendered_prompt(template))
    assert (message["reasoning_content"], message["content"], message["errors"]) == ("First.Second.", "Hello.", [])


@needs_corpus
@pytest.mark.parametrize("stem", sorted(SEGMENTED))
def test_a_reasoning_segment_after_content_then_a_call(stem):
    """Content, then a reasoning segment, then a call's segment: each read by its header."""
    template = corpus(stem)
    _, protocol = compile_in_memory(template)
    thought, header, content = SEGMENTED[stem]
    call = {"Muse-Glimmer": ' to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">\n'
                            '<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eot|>'}.get(
        stem, ' -> tool/function_call\n[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|im_end|>')
    segment_end = {"Muse-Glimmer": "<|eom|>"}.get(stem, "<|im_end|>\n")
    text = content + "Let me check." + segment_end + header + thought.format("Weather tool.") + header + call
    message = read(protocol, text, rendered_prompt(template))
    assert (message["content"], message["reasoning_content"]) == ("Let me check.", "Weather tool.")
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == \
        [("get_weather", '{"city": "Paris"}')]
    assert message["errors"] == []


# --- class 4: a call as its own turn after the content turn's end marker ---------------

GIGACHAT = "Sber-GigaChat3.1-10B-A1.8B"


def gigachat_with_a_call_role():
    """GigaChat 3.1 edited to write a call as GigaChat 3 did: its own `function call` turn after
    the content turn's end marker (`…<|message_sep|>\\n\\nfunction call<|role_sep|>\\n{…}`)."""
    template = corpus(GIGACHAT)
    inline_call = "add_tokens.function_call + render_function_call(message.tool_calls[0])"
    assert inline_call in template.source
    own_turn = "add_tokens.message_sep + 'function call' + add_tokens.role_sep + render_function_call(message.tool_calls[0])"
    return dataclasses.replace(template, source=template.source.replace(inline_call, own_turn))


CALL_TURNS = {  # template -> (content, then the call's own turn; a call alone; the turn's end)
    "Naver-HyperCLOVAX-SEED-Think-14B-vllm-tool": (
        "\nLet me check.<|im_end|>\n<|im_start|>assistant -> tool/function_call\n"
        '[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|im_end|>',
        ' -> tool/function_call\n[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|im_end|>',
        "<|im_end|>"),
    GIGACHAT: (
        'Let me check.<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "<|message_sep|>\n\n",
        '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Paris"}}<|message_sep|>',
        "<|message_sep|>"),
}


def _call_turn_template(stem):
    return gigachat_with_a_call_role() if stem == GIGACHAT else corpus(stem)


@needs_corpus
@pytest.mark.parametrize("stem", sorted(CALL_TURNS))
def test_a_call_in_its_own_turn_after_the_content_turns_end_is_read(stem):
    template = _call_turn_template(stem)
    spec, protocol = compile_in_memory(template)
    with_content, alone, end = CALL_TURNS[stem]
    prompt = rendered_prompt(template)
    for text, content in ((with_content, "Let me check."), (alone, None)):
        message = read(protocol, text, prompt)
        assert message["content"] == content and message["errors"] == []
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == \
            [("get_weather", '{"city": "Paris"}')]
    # The end marker without a call's turn after it still ends the turn, and what follows is not read.
    plain = read(protocol, "Hello." + end + "\n\nuser said more", prompt)
    assert (plain["content"], plain["tool_calls"]) == ("Hello.", [])
    assert [e["kind"] for e in plain["errors"]] == ["text_after_end_of_turn"]
    assert read(protocol, "Hello." + end, prompt)["content"] == "Hello."


@needs_corpus
@pytest.mark.parametrize("stem", sorted(CALL_TURNS))
def test_the_proof_reads_the_call_turn_after_the_content_turn(stem):
    """The proof's outputs run past the content turn's end into the call's turn: the turn with
    content and a call, and the call alone, are proved whole (not lossy)."""
    template = _call_turn_template(stem)
    spec = probe(template)
    proof = prove(template, spec, grammars=False)
    assert proof.ok, proof.table()
    turns = {t.turn: t for t in proof.turns}
    for name in ("content+call", "typed call"):
        assert turns[name].proved and not turns[name].detail, proof.table()  # (proved whole: nothing lossy)
        assert "convert_currency" in turns[name].text  # (the call's name: the output runs into the call's turn)


@needs_corpus
def test_nemotron_nanos_call_turn_after_its_content_turn_is_proved_whole():
    """Nemotron Nano 9B v2 renders content, its end marker, a new assistant header, then the
    calls (`…\n<SPECIAL_12>\n<SPECIAL_11>Assistant\n<TOOLCALL>[…`): one model turn, read whole."""
    template = corpus("NVIDIA-Nemotron-Nano-9B-v2")
    spec, protocol = compile_in_memory(template)
    proof = prove(template, spec, grammars=False)
    assert proof.ok, proof.table()
    turn = next(t for t in proof.turns if t.turn == "content+call (no_thinking)")
    assert turn.proved and not turn.detail and "<SPECIAL_11>Assistant" in turn.text, proof.table()
    text = ("Let me check.\n<SPECIAL_12>\n<SPECIAL_11>Assistant\n"
            '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL><SPECIAL_12>')
    prompt = template.render([{"role": "system", "content": "/no_think"}, {"role": "user", "content": "Hi"}],
                             add_generation_prompt=True)
    assert prompt.endswith("<think></think>")
    message = read(protocol, text, prompt)
    assert (message["content"], [c["function"]["name"] for c in message["tool_calls"]]) == ("Let me check.", ["get_weather"])


# --- class 8: role and channel variants at the output's start or between messages -------

ROLE_REPEATED = {  # template -> (an output after its default prompt, (reasoning, content, errors))
    "Cohere-Cohere2MoE": ("Plan.<|END_THINKING|><|START_TEXT|>Hello.<|END_TEXT|><|END_OF_TURN_TOKEN|>", ("Plan.", "Hello.", [])),
    "Cohere-Command-R7B-12-2024-tool_use-rev2": ("<|START_RESPONSE|>Hello.<|END_RESPONSE|><|END_OF_TURN_TOKEN|>",
                                                 (None, "Hello.", [])),
}


@needs_corpus
@pytest.mark.parametrize("stem", sorted(ROLE_REPEATED))
def test_a_role_token_the_prompt_already_wrote_is_absorbed(stem):
    """`<|CHATBOT_TOKEN|>` again at the output's start: the last marker of the assistant header
    the generation prompt wrote, repeated, is not text."""
    template = corpus(stem)
    spec, protocol = compile_in_memory(template)
    prompt = rendered_prompt(template)
    assert prompt.endswith("<|CHATBOT_TOKEN|>" + spec.modes["default"].tail)
    body, expected = ROLE_REPEATED[stem]
    plain, again = read(protocol, body, prompt), read(protocol, "<|CHATBOT_TOKEN|>" + body, prompt)
    assert (again["reasoning_content"], again["content"], again["errors"]) == expected
    assert again == plain


@needs_corpus
@pytest.mark.parametrize("stem", ["Google-Gemma-4-31B-it", "Google-Gemma-4-31B-it-interleaved"])
def test_a_repeated_reasoning_channel_is_reasoning_and_an_empty_one_nothing(stem):
    """Gemma 4's prompt writes the empty thought channel; the model writes it again, twice, or
    an empty one and then one with thoughts: none of the markers is content."""
    template = corpus(stem)
    _, protocol = compile_in_memory(template)
    prompt = rendered_prompt(template)
    empty = "<|channel>thought\n<channel|>"
    for text, reasoning in ((empty + empty + "Hello.<turn|>", None),
                            (empty + "<|channel>thought\nPlan.<channel|>Hello.<turn|>", "Plan."),
                            ("<|channel>thought\nPlan.<channel|><|channel>thought\nMore.<channel|>Hello.<turn|>", "Plan.More.")):
        message = read(protocol, text, prompt)
        assert (message["reasoning_content"], message["content"], message["errors"]) == (reasoning, "Hello.", [])


@needs_corpus
@pytest.mark.parametrize("stem", sorted(SEGMENTED))
def test_a_segment_end_and_a_new_header_do_not_leak_into_content(stem):
    """`Hello.<|eom|><|start|>assistant to=user<|message|> More.`: a content segment, ended, then
    another content segment: the separator and the header are the format's, not content."""
    template = corpus(stem)
    _, protocol = compile_in_memory(template)
    _, header, content = SEGMENTED[stem]
    segment_end, end = {"Muse-Glimmer": ("<|eom|>", "<|eot|>")}.get(stem, ("<|im_end|>\n", "<|im_end|>"))
    text = content + "Hello." + segment_end + header + content + "More." + end
    message = read(protocol, text, rendered_prompt(template))
    assert (message["content"], message["reasoning_content"], message["errors"]) == ("Hello.More.", None, [])


# --- a key quoted in a format's own notation ------------------------------------------------

@needs_corpus
@pytest.mark.parametrize("stem", ["Google-Gemma-4-31B-it", "Google-Gemma-4-31B-it-interleaved"])
def test_an_object_key_in_the_notations_quotes_is_the_key(stem):
    """Gemma 4's template writes a call's nested keys bare and its other values' keys quoted
    (`escape_keys`); models write either (llama.cpp's Gemma 4 cases): the quoted key is its
    text, never the text with its quotes; a key quoted and not closed is no call."""
    template = corpus(stem)
    _, protocol = compile_in_memory(template)
    prompt = rendered_prompt(template)
    message = read(protocol, '<|tool_call>call:f{m:{<|"|>3<|"|>:<|"|>new text<|"|>,b:2}}<tool_call|>', prompt)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("f", '{"m": {"3": "new text", "b": 2}}')]
    message = read(protocol, '<|tool_call>call:f{m:{<|"|>3:1}}<tool_call|>', prompt)  # (a string never closed)
    assert (message["tool_calls"], len(message["errors"])) == ([], 1)


# --- a call object whose arguments the template writes as a Python literal ----------------

@needs_corpus
@pytest.mark.parametrize("stem, old, new", [
    ("InternLM-InternLM2.5-chat-vllm-tool", None, None),
    ("Qwen-Qwen2.5-7B-Instruct", "{{- tool_call.arguments | tojson }}", "{{- tool_call.arguments }}"),
])
def test_a_call_object_with_python_arguments_is_read_by_its_keys(stem, old, new):
    """InternLM 2.5 writes a call's arguments as Python's str of the dict inside a JSON-looking
    call object (Qwen 2.5, edited, the same): a model's `"parameters"` for `"arguments"`, its
    keys in another order, or the object pretty-printed read as the call (llama.cpp's and
    vLLM's InternLM cases), as a JSON call object's layout reads them."""
    template = corpus(stem) if old is None else edited(stem, old, new)
    spec, protocol = compile_in_memory(template)
    assert spec.tool_calls.arguments.encoder == "python"
    head = spec.tool_calls.call[0][: spec.tool_calls.call[0].index("{")]
    prompt = rendered_prompt(template)
    for body in ('{"name": "get_weather", "parameters": {"city": "Tokyo"}}',
                 '{\n  "arguments": {"city": "Tokyo"},\n  "name": "get_weather"\n}',
                 "{'name': 'get_weather', 'arguments': {'city': 'Tokyo'}}"):
        call = head + body + spec.tool_calls.call[-1][spec.tool_calls.call[-1].index("}") + 1:]
        message = read(protocol, call, prompt)
        assert ([(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]],
                message["errors"]) == ([("get_weather", '{"city": "Tokyo"}')], []), body


# --- a compound reasoning end written without its closing part ---------------------------

BLOCKS = ("{%- for m in messages %}<|im_start|>{{ m.role }}<|im_sep|>"
          "{%- if m.role == 'assistant' %}<|open|>think<|sep|>{{ m.reasoning_content or '' }}<|close|>think<|sep|>"
          "<|open|>answer<|sep|>{{ m.content or '' }}<|close|>answer<|sep|>"
          "{%- if m.tool_calls %}<|open|>tools<|sep|>{% for c in m.tool_calls %}<|open|>call<|sep|>"
          "{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}<|close|>call<|sep|>"
          "{% endfor %}<|close|>tools<|sep|>{% endif %}{% else %}{{ m.content }}{% endif %}<|im_end|>"
          "{% endfor -%}{%- if add_generation_prompt %}<|im_start|>assistant<|im_sep|><|open|>think<|sep|>{% endif %}")


@pytest.mark.parametrize("stem", ["Moonshot-Kimi-K3", "built"])
def test_an_output_that_opens_the_content_block_first_wrote_an_empty_reasoning_block(stem):
    """The prompt opens reasoning, and the model opens the content block at once, leaving out
    the compound end's closing part (llama.cpp's and SGLang's Kimi K3 cases): an empty block,
    then content; the same opener later in the reasoning is reasoning's text."""
    if stem == "built":
        template = ChatTemplate(source=BLOCKS, name="t", family="t", origin="test",
                                named_tokens={"bos_token": "", "eos_token": "<|im_end|>"},
                                special_tokens=("<|open|>", "<|close|>", "<|sep|>", "<|im_start|>", "<|im_end|>",
                                                "<|im_sep|>"))
        opener, closer, end = "<|open|>answer<|sep|>", "<|close|>answer<|sep|>", "<|im_end|>"
    else:
        template = corpus(stem)
        opener, closer, end = "<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>"
    spec, protocol = compile_in_memory(template)
    prompt = rendered_prompt(template)
    assert spec.modes["default"].start == Start.REASONING
    message = read(protocol, f"{opener}Hello, world!{closer}{end}", prompt)
    assert (message["reasoning_content"], message["content"], message["errors"]) == (None, "Hello, world!", [])
    message = read(protocol, f"I could write {opener} here.{spec.reasoning.end}Hi.{closer}{end}", prompt)
    assert (message["reasoning_content"], message["content"]) == (f"I could write {opener} here.", "Hi.")


# --- class 5: pythonic calls one per line -------------------------------------------------

def read_in_every_chunking(protocol, text: str, prompt: str | None = None, tools=None, start=None) -> dict:
    """The message of `text`, one-shot; fed in chunks of every size (and one character at a
    time), the same message every time."""
    one_shot = runtime.parse(protocol, text, tools=tools, generation_prompt=prompt, start=start)
    for size in range(1, len(text) + 1):
        parser = runtime.StreamParser(protocol, tools=tools, generation_prompt=prompt, start=start)
        for i in range(0, len(text), size):
            parser.feed(text[i:i + size])
        parser.end()
        assert parser.message == one_shot, size
    return one_shot


ONE_PER_LINE = {  # calls that start with their name, one per line, no list brackets around them
    "Python values, each call ends its line": (
        "{%- for m in messages %}<|im_start|>{{ m.role + '\\n' }}{{ m.content or '' }}{%- if m.tool_calls %}<fn_calls>\n"
        "{% for c in m.tool_calls %}{{ c.function.name }}({% for k, v in c.function.arguments.items() %}{{ k }}="
        "{{ v | tojson if v is not string else \"'\" + v + \"'\" }}{% if not loop.last %}, {% endif %}{% endfor %})\n"
        "{% endfor %}</fn_calls>{% endif %}<|im_end|>\n{% endfor -%}"
        "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        "<fn_calls>\nget_weather(city='Paris', days=3)\nget_time(zone='CET')\n</fn_calls><|im_end|>"),
    "JSON values, a newline between calls": (
        "{%- for m in messages %}<|im_start|>{{ m.role + '\\n' }}{{ m.content or '' }}{%- if m.tool_calls %}[CALLS]"
        "{% for c in m.tool_calls %}{{ c.function.name }}({% for k, v in c.function.arguments.items() %}{{ k }}="
        "{{ v | tojson }}{% if not loop.last %}, {% endif %}{% endfor %}){% if not loop.last %}\n{% endif %}"
        "{% endfor %}[/CALLS]{% endif %}<|im_end|>\n{% endfor -%}"
        "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        '[CALLS]get_weather(city="Paris", days=3)\nget_time(zone="CET")[/CALLS]<|im_end|>'),
}


@pytest.mark.parametrize("case", sorted(ONE_PER_LINE))
def test_calls_one_per_line_each_start_with_a_name(case):
    """A call layout that starts with its name slot, calls separated by whitespace only: the
    next call starts where a name and the literal after it (`(`) come, in any chunking."""
    source, text = ONE_PER_LINE[case]
    template = inline(source)
    spec, protocol = compile_in_memory(template)
    assert spec.tool_calls.call[0] == {"slot": "name"} and not spec.tool_calls.separator.strip()
    message = read_in_every_chunking(protocol, text, rendered_prompt(template))
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == \
        [("get_weather", '{"city": "Paris", "days": 3}'), ("get_time", '{"zone": "CET"}')]
    assert message["errors"] == []
    # What is not a name and `(` after a call is not another call: the section's end is expected.
    broken = runtime.parse(protocol, text.replace("get_time(", "get_time ("), generation_prompt=rendered_prompt(template))
    assert [e["kind"] for e in broken["errors"]] == ["invalid_tool_call"]
    proof = prove(template, spec)
    assert proof.ok, proof.table()


# --- class 10: values typed by the schema ---------------------------------------------------

ALARM = [{"type": "function", "function": {"name": "set_alarm", "parameters": {"type": "object", "properties": {
    "label": {"type": ["string", "null"]}, "loud": {"type": "boolean"}, "days": {"type": "array"},
    "extra": {"type": "object"}, "minutes": {"type": "number"}}}}}]

# How each format writes set_alarm's four arguments (the template's own layout, values as a
# model writes them: `{label}` etc.), and the turn's end after it.
VALUE_LAYOUTS = {
    "Qwen-Qwen3-Coder": "<tool_call>\n<function=set_alarm>\n<parameter=label>\n{label}\n</parameter>\n"
                        "<parameter=loud>\n{loud}\n</parameter>\n<parameter=days>\n{days}\n</parameter>\n"
                        "<parameter=extra>\n{extra}\n</parameter>\n</function>\n</tool_call><|im_end|>",
    "ZAI-GLM-4.6": "<tool_call>set_alarm\n<arg_key>label</arg_key>\n<arg_value>{label}</arg_value>\n"
                   "<arg_key>loud</arg_key>\n<arg_value>{loud}</arg_value>\n<arg_key>days</arg_key>\n"
                   "<arg_value>{days}</arg_value>\n<arg_key>extra</arg_key>\n<arg_value>{extra}</arg_value>\n"
                   "</tool_call><|user|>",
    "TeamACE-ToolACE-8B-vllm-tool": "[set_alarm(label={label}, loud={loud}, days={days}, extra={extra})]<|eot_id|>",
}


def _alarm_call(stem, **values):
    """The message of set_alarm written with `values` in the format of `stem`, after its real
    generation prompt (the tools offered), streamed in every chunking as one-shot."""
    template = corpus(stem)
    spec, protocol = compile_in_memory(template)
    text = VALUE_LAYOUTS[stem].format(**values)
    return read_in_every_chunking(protocol, text, rendered_prompt(template, tools=ALARM), tools=ALARM)


@needs_corpus
@pytest.mark.parametrize("stem", sorted(VALUE_LAYOUTS))
def test_values_are_read_as_the_schema_types_them(stem):
    """null for a nullable string is null; 1/0 for a boolean are true/false; a JSON object or
    array written as a parameter's text is that object or array."""
    for label, loud, days, extra, expected in [
            ("null", "1", '["mon", "tue"]', '{"at": "07:00", "snooze": 2}',
             {"label": None, "loud": True, "days": ["mon", "tue"], "extra": {"at": "07:00", "snooze": 2}}),
            ("None", "0", "[]", "{}", {"label": None, "loud": False, "days": [], "extra": {}}),
            ("Wake up", "true", '["sun"]', '{"tone": "bell"}',
             {"label": "Wake up", "loud": True, "days": ["sun"], "extra": {"tone": "bell"}})]:
        message = _alarm_call(stem, label=label, loud=loud, days=days, extra=extra)
        assert message["errors"] == [], (label, loud, message["errors"])
        assert [c["function"]["name"] for c in message["tool_calls"]] == ["set_alarm"]
        assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == expected


@needs_corpus
@pytest.mark.parametrize("stem", sorted(VALUE_LAYOUTS))
@pytest.mark.parametrize("bad", ["loud=yes", "loud=2", "days=mon", "extra=[1]"])
def test_a_value_that_is_not_of_its_schema_type_drops_the_call(stem, bad):
    """What cannot be read as the schema's type is invalid_arguments, and no call: never a guess."""
    values = {"label": "Wake up", "loud": "true", "days": '["sun"]', "extra": '{"tone": "bell"}'}
    key, value = bad.split("=")
    message = _alarm_call(stem, **{**values, key: value})
    assert message["tool_calls"] == []
    assert [e["kind"] for e in message["errors"]] == ["invalid_arguments"]


EMPTY_SECTIONS = {  # an empty calls section, in each family's own markers, between two pieces of content
    "Moonshot-Kimi-K2": "<|tool_calls_section_begin|><|tool_calls_section_end|>",
    "LiquidAI-LFM2.5-Instruct": "<|tool_call_start|>[]<|tool_call_end|>",
    "NVIDIA-Llama-3.3-Nemotron-Super-49B-v1.5": "<TOOLCALL>[]</TOOLCALL>",
    "Mistral-Nemo-Instruct-2407": "[TOOL_CALLS][]",
    # a call's wrapper holding no call, where the spec knows the wrapper's pair
    "Qwen-Qwen3-Coder": "\n<tool_call>\n</tool_call>\n",
    "ByteDance-Seed-OSS-36B-Instruct": "<seed:tool_call>\n</seed:tool_call>",
}


@needs_corpus
@pytest.mark.parametrize("stem", sorted(EMPTY_SECTIONS))
def test_an_empty_calls_section_between_content_keeps_both_pieces(stem):
    template = corpus(stem)
    spec, protocol = compile_in_memory(template)
    before, after = "Twelve euros is about thirteen dollars.", "Rates change daily."
    message = read_in_every_chunking(protocol, before + EMPTY_SECTIONS[stem] + " " + after, rendered_prompt(template))
    assert (message["tool_calls"], message["errors"]) == ([], [])
    content = message["content"]  # both pieces, in order, whitespace alone between them
    assert content.startswith(before) and content[len(before):].strip() == after, content


# A bare pythonic list whose string values the template writes unquoted ('%s'|format, or
# {{ v }}) beside Python literals of the other types (ToolACE; built: another wrapper).
UNQUOTED = {
    "TeamACE-ToolACE-8B-vllm-tool": ("[", "]<|eot_id|>"),
    "built: {{ v }} in <calls>": ("<calls>", "</calls><|im_end|>"),
}
UNQUOTED_BUILT = (
    "{%- for m in messages %}<|im_start|>{{ m.role + '\\n' }}{{ m.content or '' }}{%- if m.tool_calls %}<calls>"
    "{% for c in m.tool_calls %}{{ c.function.name }}({% for k, v in c.function.arguments.items() %}{{ k }}={{ v }}"
    "{% if not loop.last %}, {% endif %}{% endfor %}){% if not loop.last %}, {% endif %}{% endfor %}</calls>{% endif %}"
    "<|im_end|>\n{% endfor -%}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def unquoted(case: str) -> ChatTemplate:
    if case not in VALUE_LAYOUTS:
        return inline(UNQUOTED_BUILT)
    if not corpus_templates():
        pytest.skip("the shared template corpus is not here")
    return corpus(case)


@pytest.mark.parametrize("case", sorted(UNQUOTED))
def test_unquoted_strings_beside_python_literals_end_at_the_separator_or_the_call(case):
    """An object or array value runs as its brackets balance (the `, ` inside it is its own);
    a string runs to the separator or the call's `)`; with the tools offered or not."""
    template = unquoted(case)
    spec, protocol = compile_in_memory(template)
    assert spec.tool_calls.arguments.value_encoders["string"] == "raw"
    proof = prove(template, spec)
    assert proof.ok, proof.table()
    opening, closing = UNQUOTED[case]
    text = (opening + "set_alarm(extra={'at': '07:00', 'snooze': 2}, label=Wake up, days=['mon', 'tue']), "
            "set_alarm(label=Tea)" + closing)
    for tools in (ALARM, None):
        message = read_in_every_chunking(protocol, text, rendered_prompt(template), tools=tools)
        assert message["errors"] == []
        assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
            {"extra": {"at": "07:00", "snooze": 2}, "label": "Wake up", "days": ["mon", "tue"]}, {"label": "Tea"}]


@pytest.mark.parametrize("case", sorted(UNQUOTED))
def test_a_string_written_as_a_literal_where_the_template_writes_it_raw_is_the_string_it_holds(case):
    """Models write the strings of these formats as the literals the other values are
    (`label="Wake up, now"`, `label='Tea'`: vLLM's Llama 3.2 pythonic template writes `"%s"`,
    its model Python): each is the string it holds, the separator inside one included. A
    value that only starts with a quote is raw text. The compile proves these forms (rule
    "strings as literals": every string of a call turn as a JSON, then a Python literal)."""
    template = unquoted(case)
    spec, protocol = compile_in_memory(template)
    opening, closing = UNQUOTED[case]
    text = (opening + 'set_alarm(label="Wake up, now"), set_alarm(label=\'Tea\', days=["mon"]), '
            'set_alarm(label="Hi" she said)' + closing)
    for tools in (ALARM, None):
        message = read_in_every_chunking(protocol, text, rendered_prompt(template), tools=tools)
        assert message["errors"] == []
        assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
            {"label": "Wake up, now"}, {"label": "Tea", "days": ["mon"]}, {"label": '"Hi" she said'}]
    proof = prove(template, spec, grammars=False)
    assert proof.ok, proof.table()
    forms = [d for output in mode_outputs(template, spec) for d in deviations(output, spec) if d.rule == STRING_LITERALS]
    assert {d.eaten for d in forms} == {("json",), ("python",)}


# Every value in quotes, strings raw inside them (vLLM's Llama 4 pythonic template: `k="%s"`).
QUOTED_BUILT = UNQUOTED_BUILT.replace("{{ k }}={{ v }}", "{{ k }}=\"{{ '%s' | format(v) }}\"")


def test_a_value_written_without_the_quotes_the_layout_puts_around_every_value_is_the_literal_it_is():
    """Where the template quotes every value (`loud="True"`, `days="['mon']"`), a model
    writes each as the Python literal it is (`loud=True`, `label='Tea'`): read as the value
    it is, typed by the schema, as the quoted form is. The compile proves these forms (rule
    "values without quotes")."""
    template = inline(QUOTED_BUILT)
    spec, protocol = compile_in_memory(template)
    assert spec.tool_calls.arguments.argument["string"][1] == '="'
    text = ("<calls>set_alarm(label='Wake up, now', loud=True, days=[\"mon\"], extra={'at': '07:00'}), "
            'set_alarm(label="Tea", loud="false")</calls><|im_end|>')
    message = read_in_every_chunking(protocol, text, rendered_prompt(template), tools=ALARM)
    assert message["errors"] == []
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
        {"label": "Wake up, now", "loud": True, "days": ["mon"], "extra": {"at": "07:00"}},
        {"label": "Tea", "loud": False}]
    proof = prove(template, spec, grammars=False)
    assert proof.ok, proof.table()
    forms = [d for output in mode_outputs(template, spec) for d in deviations(output, spec) if d.rule == VALUES_UNQUOTED]
    assert forms and all('="' not in d.text for d in forms)


# Pythonic calls: values are Python literals; one of another type than its schema's is read
# as the schema types it where it can be (a string's text, 1/0), else the call is dropped.
PYTHONIC = {
    "LiquidAI-LFM2.5-Instruct": "<|tool_call_start|>[set_alarm({})]<|tool_call_end|><|im_end|>",
    "LiquidAI-LFM2-1.2B-rev40f3da0": "<|tool_call_start|>[set_alarm({})]<|tool_call_end|><|im_end|>",
}


@needs_corpus
@pytest.mark.parametrize("stem", sorted(PYTHONIC))
@pytest.mark.parametrize("arguments, expected", [
    ("label=None, loud=1, days='[\"mon\", \"tue\"]', extra='{\"at\": \"07:00\"}'",
     {"label": None, "loud": True, "days": ["mon", "tue"], "extra": {"at": "07:00"}}),
    ("label='Wake up', loud=0, days=['sun'], extra={'tone': 'bell'}",
     {"label": "Wake up", "loud": False, "days": ["sun"], "extra": {"tone": "bell"}}),
    ("label='null', loud=True", {"label": "null", "loud": True}),  # (in quotes: a string)
    ("minutes=5, loud=False", {"minutes": 5, "loud": False}), ("minutes=2.5", {"minutes": 2.5}),
    ("loud=2", None), ("loud='yes'", None), ("days='mon'", None), ("extra=[1]", None), ("label=3", None),
])
def test_pythonic_values_are_read_as_the_schema_types_them(stem, arguments, expected):
    template = corpus(stem)
    spec, protocol = compile_in_memory(template)
    message = read_in_every_chunking(protocol, PYTHONIC[stem].format(arguments), rendered_prompt(template, tools=ALARM),
                                     tools=ALARM)
    if expected is None:
        assert (message["tool_calls"], [e["kind"] for e in message["errors"]]) == ([], ["invalid_arguments"])
    else:
        assert message["errors"] == []
        assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [expected]


# --- NOT_YET_PROVED: what it holds, and that it works -----------------------------------------

def test_a_listed_template_is_a_strict_xfail_of_the_checks_it_names(monkeypatch):
    """Each listed template is a corpus template with its reason and the checks that fail on it
    (the property tests draw from the others); a template put on the list is a strict xfail of
    the checks it names, and of those only."""
    import conftest
    checks = {value for name, value in vars(conftest).items() if name.isupper() and isinstance(value, str)}
    for stem, entry in conftest.NOT_YET_PROVED.items():
        assert entry.why and entry.fails and entry.fails <= checks, stem
        if conftest.corpus_templates():
            assert (conftest.CORPUS / f"{stem}.jinja").is_file(), f"{stem} is not in the corpus: take it off the list"
    assert conftest.proved_corpus_stems() == [p.stem for p in conftest.corpus_templates()
                                              if p.stem not in conftest.NOT_YET_PROVED]
    path = conftest.CORPUS / "Some-New-Template.jinja"
    monkeypatch.setitem(conftest.NOT_YET_PROVED, path.stem,
                        conftest.NotYetProved("what is not read yet", frozenset({conftest.PROOF})))
    [listed] = conftest.marked_sources([path], conftest.PROOF)
    assert [(m.name, m.kwargs["strict"], m.kwargs["reason"]) for m in listed.marks] == [
        ("xfail", True, "what is not read yet")]
    [other] = conftest.marked_sources([path], conftest.GRAMMAR)
    assert list(other.marks) == []
    assert conftest.not_yet_proved(conftest.PROOF)[path.stem] == "what is not read yet"


# --- a call object read whole that is no call --------------------------------------------

@needs_corpus
@pytest.mark.parametrize("stem, head, tail", [("Meta-Llama-3.1-8B-Instruct", "", ""),
                                              ("Qwen-Qwen3-0.6B", "<tool_call>\n", "\n</tool_call>")])
def test_a_whole_call_object_without_a_name_is_invalid_not_truncated(stem, head, tail):
    """`{"parameters": {}}` where a call goes (vLLM's Llama 3 JSON cases): read whole, it has no
    name: invalid_tool_call, whatever its last character begins; cut inside it, truncated."""
    template = corpus(stem)
    _, protocol = compile_in_memory(template)
    message = read(protocol, head + '{"parameters": {}}' + tail, rendered_prompt(template))
    assert (message["tool_calls"], [e["kind"] for e in message["errors"]]) == ([], ["invalid_tool_call"])
    message = read(protocol, head + '{"parameters": {}, "na', rendered_prompt(template))
    assert (message["tool_calls"], [e["kind"] for e in message["errors"]]) == ([], ["truncated_tool_call"])
