"""`compile` proves the parser it writes; the probe reads templates of many shapes; hostile
templates end the probe with one line, inside its budget."""

from __future__ import annotations

import json
import time

import pytest

import tplparse
from tplparse import runtime
from tplparse.bridge import compile_in_memory
from tplparse.check.outputs import STANDARD_TOOLS, model_outputs
from tplparse.check.proof import prove
from tplparse.grammar.reading import reading_tables
from tplparse.probe import PROBE_SECONDS, probe
from tplparse.spec import slot

from conftest import EXAMPLES, PROOF, TOLERATED, corpus_compiled, corpus_templates, needs_corpus, not_yet_proved, run_cli

TEMPLATES = corpus_templates()


@pytest.fixture(scope="module")
def proofs(compiled_corpus):
    """stem -> the proof of the session's compile (tests/conftest.py)."""
    return compiled_corpus.view(lambda entry: entry.proof)


@needs_corpus
def test_every_corpus_template_proves_every_turn_it_renders(proofs, capsys):
    """The table of the whole corpus: a template that renders no standard turn, or a turn its
    parser does not read back, is a gap."""
    with capsys.disabled():
        print(f"\n{'template':<48} {'rendered':>8} {'proved':>7} {'lossy':>6}")
        for stem, proof in sorted(proofs.items()):
            lossy = sum(1 for t in proof.turns if t.proved and t.detail)
            print(f"{stem:<48} {len(proof.turns):>8} {sum(t.proved for t in proof.turns):>7} {lossy:>6}")
    gaps = {stem: proof.error or [f"{t.turn}: {t.detail}" for t in proof.unproved]
            for stem, proof in proofs.items() if not proof.ok}
    # The gaps are exactly the templates listed as not proved yet (tests/conftest.py).
    assert set(gaps) == set(not_yet_proved(PROOF)), {stem: gap for stem, gap in gaps.items()
                                                     if stem not in not_yet_proved(PROOF)} or "take the template off the list"
    assert len(proofs) == len(TEMPLATES) >= 69


@needs_corpus
def test_the_proof_reads_back_the_tolerated_forms_of_its_turns(proofs):
    """The compile's proof also feeds the deviated forms of each proved turn (the tolerance
    rules) and reports those that do not read back as the render: none on the corpus, and
    most families have some."""
    not_read = {stem: proof.not_tolerated for stem, proof in proofs.items() if proof.not_tolerated}
    assert set(not_read) == set(not_yet_proved(TOLERATED)), not_read
    assert sum(1 for proof in proofs.values() if proof.tolerated) >= 60
    assert "tolerance: " in proofs["Qwen-Qwen3-Coder"].table()


def corpus_outputs(stem):
    """(template, spec, turn -> model output) of the session's compile (tests/conftest.py)."""
    entry = corpus_compiled(stem)
    return entry.template, entry.spec, {o.turn: o for o in entry.outputs}


# --- Lossy renders are read from the render, not listed by name ---------------------------


@needs_corpus
@pytest.mark.parametrize("stem, turn, reason", [
    ("OpenAI-gpt-oss-120b", "content+call", "writes the content where reasoning goes"),
    ("DeepSeek-R1-Distill-Qwen-32B-rev2", "content+call", "renders this message as two turns"),
    ("Cohere-Command-R7B-12-2024-tool_use", "reasoning+content", "drops the reasoning"),
    ("llamacpp-DeepSeek-R1", "content+call", "renders 0 of this turn's 1 calls"),
    ("MiniMax-M3", "typed call", "drops the argument 'note'"),
    ("Meta-Llama-3.1-8B-Instruct", "content+call", "drops the content"),
])
def test_lossy_turns_say_what_the_template_loses(stem, turn, reason):
    _, _, found = corpus_outputs(stem)
    assert any(reason in line for line in found[turn].lossy), found[turn].lossy


@needs_corpus
@pytest.mark.parametrize("stem", ["OpenAI-gpt-oss-120b", "LLMjp-llm-jp-4.1-8b-thinking"])
def test_a_reading_the_render_cannot_tell_is_said_with_the_one_taken(stem):
    """Harmony templates render the content before a call on the analysis channel: the spec
    says which reading the parser takes and why (a warning), and the compile's table too."""
    _, spec, found = corpus_outputs(stem)
    said = [w for w in spec.warnings if "writes its content inside the reasoning markers" in w]
    assert said and "the parser reads such text as reasoning" in said[0], spec.warnings
    assert any("read as reasoning, which the render cannot tell it from" in line
               for line in found["content+call"].lossy), found["content+call"].lossy


@needs_corpus
def test_content_written_as_reasoning_is_expected_as_reasoning():
    _, _, found = corpus_outputs("OpenAI-gpt-oss-120b")
    expected = found["content+call"].expected
    assert expected["content"] is None and expected["reasoning_content"] == "Converting the amount."


def test_a_turn_that_reads_back_is_not_lossy():
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    proof = prove(template, probe(template))
    assert proof.ok and all(t.proved and not t.detail for t in proof.turns)
    assert [t.turn for t in proof.turns] == ["content", "reasoning+content", "typed call", "two calls", "content+call",
                                             "reasoning+call"]


# --- compile: the proof decides -----------------------------------------------------------

WRONG = {
    "template_sha256": [],  # filled in: the example template's
    "why": "a deliberately wrong end-of-turn marker, to show that compile refuses a parser it cannot prove",
    "patch": {"end_of_turn": ["<|im_start|>"]},
}


@pytest.fixture()
def wrong_override(tmp_path):
    """An override file that breaks the example's spec, given with --override. (Never written
    into the package's override folder: every tplparse process of the machine reads that one,
    and the other test worker's compiles of the example read this wrong end-of-turn marker.)"""
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps({**WRONG, "template_sha256": [template.sha256]}), encoding="utf-8")
    return path


def test_compile_refuses_a_parser_that_does_not_read_back_its_template(wrong_override, tmp_path):
    out = tmp_path / "out"
    result = run_cli("compile", EXAMPLES / "chatml-think-tools.gguf", "-o", out, "--override", wrong_override)
    assert result.returncode == 2
    assert "NOT PROVED" in result.stdout
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("tplparse: error: chatml-think-tools: the parser does not read back")
    assert "expected" in errors[0] and "got" in errors[0] or "reports" in errors[0]
    assert not out.exists()  # nothing written


def test_allow_partial_writes_and_records_the_unproved_turns(wrong_override, tmp_path):
    result = run_cli("compile", EXAMPLES / "chatml-think-tools.gguf", "-o", tmp_path, "--allow-partial",
                     "--override", wrong_override)
    assert result.returncode == 1, result.stderr
    spec = json.loads((tmp_path / "grammars" / "chatml-think-tools.spec.json").read_text(encoding="utf-8"))
    assert spec["unproved"] and all(":" in line for line in spec["unproved"])
    module = (tmp_path / "generated" / "chatml_think_tools.py").read_text(encoding="utf-8")
    assert "# Not proved: the parser does not read back these turns" in module


def test_compile_prints_the_proof_table(tmp_path):
    result = run_cli("compile", EXAMPLES / "chatml-think-tools.gguf", "-o", tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("proof of chatml-think-tools")
    assert sum(line.strip().endswith("proved") for line in lines) == 6


# --- Hostile templates: one line, exit 2, inside the budget, nothing written ----------------

HOSTILE = {
    "refuses every render": "{{- raise_exception('no conversation is good enough') }}",
    "a CPU bomb": "{%- for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
                  "{% for m in messages %}{{ m.content }}{% endfor %}",
    "a memory bomb": "{%- set ns = namespace(items=[]) %}{% for i in range(100000) %}"
                     "{% set _ = ns.items.append('x' * 7000000 ~ i) %}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}",
    "a doubling list": "{%- set a = [0] * 7000000 %}{% set b = a + a %}{% set c = b + b %}{{ c|length }}",
    "a huge output": "{{- 'x' * 7000000 }}{{ 'y' * 7000000 }}{% for m in messages %}{{ m.content }}{% endfor %}",
    "only a huge string, no turns": "{{- 'x' * 7000000 }}",
}


@pytest.mark.parametrize("what", list(HOSTILE))
def test_hostile_templates_end_with_one_line(tmp_path, what):
    source = tmp_path / "hostile.jinja"
    source.write_text(HOSTILE[what], encoding="utf-8")
    out = tmp_path / "out"
    from test_budgets import cpu_run
    from tplparse.source.isolation import backstop_seconds

    code, stderr, cpu, took = cpu_run("compile", source, "-o", out)
    assert code == 2, stderr
    errors = stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("tplparse: error: ") and "Traceback" not in stderr
    # The budget is CPU time: the budget, plus the interpreter's start and the child's
    # teardown; the wall clock is bounded by the backstop, whatever the machine's load.
    assert cpu < PROBE_SECONDS + 4, cpu
    assert took < backstop_seconds(PROBE_SECONDS) + 5, took
    assert not out.exists()


def test_the_probe_budget_covers_all_renders_together():
    """Every render fits in its own 10 s; together they exceed a budget of 1 s (each takes
    some tenths of a second, and the probe renders dozens of times)."""
    slow = ("{%- for i in range(3000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
            "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    template = tplparse.ChatTemplate(source=slow, name="slow", family="slow", origin="test")
    started = time.monotonic()
    with pytest.raises(tplparse.TemplateError) as raised:
        probe(template, budget=1.0)
    assert "probing stopped" in str(raised.value) and "budget" in str(raised.value)
    assert time.monotonic() - started < 5


# --- The classes of templates the probe used to miss (each on a corpus template) ------------


@needs_corpus
def test_calls_that_render_only_in_another_input_shape():
    """Firefunction v2 rev2 reads `functions` and prints arguments with tojson: only object
    arguments through the functions variable render a call that reads back."""
    _, spec, _ = corpus_outputs("Fireworks-Firefunction-v2-rev2")
    assert spec.shape == "functions variable" and spec.tool_calls is not None


@needs_corpus
@pytest.mark.parametrize("stem", ["Poolside-Laguna-XS-2.1", "Spark-2.5"])
def test_reasoning_whose_end_a_content_turn_writes_alone(stem):
    """</think>{content}: the template closes the block even without reasoning."""
    _, spec, _ = corpus_outputs(stem)
    assert (spec.reasoning.start, spec.reasoning.end) == ("<think>", "</think>")
    assert {name: mode.start for name, mode in spec.modes.items()}["thinking"] == "reasoning"


@needs_corpus
def test_a_section_start_that_is_only_whitespace():
    template, spec, _ = corpus_outputs("Poolside-Laguna-XS-2.1")
    assert not spec.tool_calls.section_start.strip()
    assert reading_tables(spec, template.special_tokens)["tool_calls"]["opener"] == "<tool_call>"


@needs_corpus
def test_a_generation_prompt_written_whatever_add_generation_prompt_says():
    """Command R7B rev2 always ends with <|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|> (and an empty
    thinking block unless thinking is on): that trailer is its generation prompt."""
    template, spec, found = corpus_outputs("Cohere-Command-R7B-12-2024-tool_use-rev2")
    assert spec.modes["default"].tail == "<|START_THINKING|><|END_THINKING|>"
    assert spec.modes["thinking"].tail == "" and spec.end_of_turn[0] == "<|END_OF_TURN_TOKEN|>"
    # After the default prompt (the block closed) no turn writes a block of its own; after
    # the thinking prompt the turn is read after the header: its own block, then the calls.
    assert "reasoning+call" not in found
    thinking = {o.turn: o for o in model_outputs(template, spec, mode="thinking")}
    assert thinking["reasoning+call"].text.startswith(
        "<|START_THINKING|>A currency conversion is needed.<|END_THINKING|>")


@needs_corpus
def test_a_generic_close_tag_is_not_an_end_of_turn():
    """Kimi K3's tags all close with <|close|>: the turn ends at <|close|>message<|sep|>, and a
    calls section opens at more than <|close|>."""
    template, spec, _ = corpus_outputs("Moonshot-Kimi-K3")
    assert spec.end_of_turn[0] == "<|close|>message<|sep|>"
    opener = reading_tables(spec, template.special_tokens)["tool_calls"]["opener"]
    assert opener.startswith("<|close|>response<|sep|><|open|>") and opener != spec.content_end


@needs_corpus
def test_a_key_written_again_in_its_closing_tag_and_nested_xml_values():
    template, spec, found = corpus_outputs("MiniMax-M3")
    layout = spec.tool_calls.arguments.argument["string"]
    assert layout.count(slot("key")) == 2
    _, protocol = compile_in_memory(template)
    message = runtime.parse(protocol, found["typed call"].text, tools=STANDARD_TOOLS, start=found["typed call"].start)
    arguments = json.loads(message["tool_calls"][0]["function"]["arguments"])
    assert arguments["options"] == {"round": True, "places": 2} and arguments["tags"] == ["fx", "daily"]


@needs_corpus
def test_strings_quoted_only_when_they_need_it():
    """MiniCPM5 wraps a value in CDATA when it holds <, & or a line break."""
    template, spec, _ = corpus_outputs("OpenBMB-MiniCPM5-1B")
    fmt = spec.tool_calls.arguments
    assert fmt.value_encoders["string"] == "raw-or-quoted" and fmt.quotes == ["<![CDATA[", "]]>"]
    assert set("<&\n") <= set(fmt.quote_when)
    _, protocol = compile_in_memory(template)
    text = '<function name="f"><param name="a"><![CDATA[x </param> & y]]></param><param name="b">plain</param></function>'
    message = runtime.parse(protocol, text, start="content")
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"a": "x </param> & y", "b": "plain"}


@needs_corpus
def test_a_call_that_names_its_tool_twice():
    """Muse Glimmer: the recipient in the header and the invoke element both name the tool."""
    template, spec, _ = corpus_outputs("Muse-Glimmer")
    assert spec.tool_calls.call.count(slot("name")) == 2
    _, protocol = compile_in_memory(template)
    text = (' to=f<|message|><atem:function_calls>\n<atem:invoke name="g">\n<atem:parameter name="a">1'
            '</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eot|>')
    for chunks in ([text], list(text)):
        parser = runtime.StreamParser(protocol, start="content")
        for chunk in chunks:
            parser.feed(chunk)
        parser.end()
        assert parser.message["tool_calls"] == [] and parser.message["errors"][0]["kind"] == "invalid_tool_call"


@needs_corpus
@pytest.mark.parametrize("stem", ["Moonshot-Kimi-K2-Instruct-rev2", "llamacpp-DeepSeek-R1"])
def test_templates_transformers_refuses_but_llama_cpp_renders(stem):
    """They build their own lists (ns.ids.append) or print a filter's iterator with tojson: the
    own-containers sandbox renders them, the spec says so, and calls are found."""
    _, spec, found = corpus_outputs(stem)
    assert any("transformers' sandbox refuses this template" in w for w in spec.warnings)
    assert spec.tool_calls is not None and found["two calls"].expected["tool_calls"]


def test_the_fallback_sandbox_still_refuses_to_touch_its_inputs():
    """A template may mutate what it built, never the messages or tools it was given."""
    template = tplparse.ChatTemplate(source="{% set _ = messages.append({'role': 'user', 'content': 'x'}) %}ok",
                                     name="t", family="t", origin="test")
    with pytest.raises(tplparse.TemplateError) as raised:
        template.render([{"role": "user", "content": "hi"}])
    assert "unsafe" in str(raised.value)
    own = tplparse.ChatTemplate(source="{% set ns = namespace(l=[]) %}{% set _ = ns.l.append(1) %}{{ ns.l }}",
                                name="t", family="t", origin="test")
    assert own.render([{"role": "user", "content": "hi"}]) == "[1]" and own.compat_notes


@needs_corpus
def test_python_literal_arguments_also_read_as_json():
    """InternLM prints arguments as a Python dict; a model may still write JSON (true, null)."""
    template, _, _ = corpus_outputs("InternLM-InternLM2.5-chat-vllm-tool")
    _, protocol = compile_in_memory(template)
    text = '<|action_start|><|plugin|>\n{"name": "f", "arguments": {"a": true, "b": null}}<|action_end|>'
    for chunks in ([text], list(text)):
        parser = runtime.StreamParser(protocol, start="content")
        for chunk in chunks:
            parser.feed(chunk)
        parser.end()
        assert json.loads(parser.message["tool_calls"][0]["function"]["arguments"]) == {"a": True, "b": None}


# --- Inputs a user has ----------------------------------------------------------------------


def test_a_tokenizer_config_beside_a_jinja_names_its_tokens(tmp_path):
    (tmp_path / "chat.jinja").write_text("{% for m in messages %}{{ bos_token }}{{ m.content }}{{ eos_token }}"
                                         "{% endfor %}", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>",
        "added_tokens_decoder": {"1": {"content": "<s>", "special": True}, "2": {"content": "</s>", "special": True}},
    }), encoding="utf-8")
    template = tplparse.load(tmp_path / "chat.jinja")
    assert (template.bos_token, template.eos_token) == ("<s>", "</s>") and "</s>" in template.special_tokens
    assert template.render([{"role": "user", "content": "hi"}]) == "<s>hi</s>"


def test_bos_and_eos_options(tmp_path):
    source = tmp_path / "t.jinja"
    source.write_text("{% for m in messages %}{{ bos_token }}{{ m.content }}{{ eos_token }}{% endfor %}", encoding="utf-8")
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    result = run_cli("render", source, messages, "--bos-token", "<s>", "--eos-token", "</s>")
    assert result.returncode == 0 and result.stdout == "<s>hi</s>"
    for command in ("probe", "compile", "gbnf"):
        assert "--bos-token" in run_cli(command, "--help").stdout, command


def test_a_string_variable_that_looks_like_json(tmp_path):
    source = tmp_path / "t.jinja"
    source.write_text("{{ functions is string }} {{ functions }}", encoding="utf-8")
    messages = tmp_path / "m.json"
    messages.write_text("[]", encoding="utf-8")
    as_json = run_cli("render", source, messages, "--var", "functions=[1, 2]")
    as_string = run_cli("render", source, messages, "--var-str", "functions=[1, 2]")
    assert as_json.stdout == "False [1, 2]" and as_string.stdout == "True [1, 2]"


@needs_corpus
@pytest.mark.parametrize("stem, text, name", [
    # (a template that declares tools but renders no call: the format comes from an override, with its source)
    ("LiquidAI-LFM2.5-Instruct", "Checking.<|tool_call_start|>[get_rate(target='USD')]<|tool_call_end|><|im_end|>", "get_rate"),
    ("IBM-Granite-3.3-2B-Instruct", 'Checking.<|tool_call|>[{"name": "get_rate", "arguments": {"target": "USD"}}]'
                                    "<|end_of_text|>", "get_rate"),
])
def test_a_call_format_only_described_in_prose_comes_from_an_override(stem, text, name):
    template, spec, _ = corpus_outputs(stem)
    assert any("renders no call in history" in w for w in spec.warnings)
    assert any("source:" in line for line in spec.overrides)
    _, protocol = compile_in_memory(template)
    message = runtime.parse(protocol, text, start="content")
    assert message["errors"] == [] and message["content"] == "Checking."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
        (name, {"target": "USD"})]


@needs_corpus
def test_reasoning_a_generation_prompt_opens_and_history_strips():
    """DeepSeek-R1-Distill opens <think> in every prompt and keeps only what follows </think>
    in history: the end is the opening tag's own closing tag."""
    _, spec, _ = corpus_outputs("DeepSeek-R1-Distill-Qwen-32B")
    assert (spec.reasoning.start, spec.reasoning.end, spec.reasoning.in_history) == ("<think>", "</think>", False)
    assert spec.modes["default"].start == "reasoning" and not spec.overrides
