"""The probe: specs derived from real templates, checked by re-rendering with fresh values."""

from __future__ import annotations

import ast
import json
import re

import pytest

import tplparse
from tplparse.probe.conversations import FRESH, SENTINEL_SETS
from tplparse.probe.overrides import load_overrides
from tplparse.probe import probe
from tplparse.spec import ProtocolSpec, slot
from tplparse.source.template import ChatTemplate
from tplparse.probe import standard_turns, verify

from conftest import EXAMPLES, REPO, RERENDER, corpus_templates, needs_corpus, not_yet_proved

TEMPLATES = corpus_templates()

# Pairs (template, standard turn) whose re-rendering check fails, with the reason. Empty:
# every pair passes today; a new failure (or a fixed one) must be listed (or removed) here.
# Turns the spec reads (the proof: tests/test_proof.py) but cannot write back, and why.
KNOWN_FAILURES: dict[tuple[str, str], str] = {
    ("MiniMax-M3", "typed call"):
        "the template writes objects and arrays as XML elements and drops null arguments: the parser reads "
        "them, the spec has no way to write them",
    ("llamacpp-DeepSeek-R1", "content+call"):
        "the template drops the calls of a turn that has content: there is no content+calls layout to write",
}


@pytest.fixture(scope="module")
def specs(compiled_corpus):
    """stem -> (template, spec): the session's compiles (tests/conftest.py)."""
    return compiled_corpus.view(lambda entry: (entry.template, entry.spec))


def corpus_spec(specs, stem) -> ProtocolSpec:
    if stem not in specs:
        pytest.skip(f"{stem} is not in the corpus")
    return specs[stem][1]


@needs_corpus
def test_rerendering_table(specs, capsys):
    """Every template × standard turn: spec.format(turn) == the template's own render (fresh values)."""
    names = list(standard_turns())
    failures = {}
    rows = []
    for stem, (template, spec) in specs.items():
        checks = {c.turn: c for c in verify(template, spec)}
        rows.append((stem, ["pass" if checks[n].passed else "FAIL" for n in names]))
        for name in names:
            if not checks[name].passed:
                failures[(stem, name)] = checks[name].detail
    with capsys.disabled():
        print("\n" + "template".ljust(46) + " ".join(n[:14].ljust(14) for n in names))
        for stem, cells in rows:
            print(stem[:45].ljust(46) + " ".join(c.ljust(14) for c in cells))
        total = len(rows) * len(names)
        print(f"{total - len(failures)} of {total} pairs pass")
        for (stem, name), detail in failures.items():
            print(f"  FAIL {stem} / {name}: {detail}")
    assert (len(rows) * len(names) - len(failures)) / (len(rows) * len(names)) >= 0.95
    # (a template on the not-yet-proved list fails some pair of this table, and only those do)
    listed = not_yet_proved(RERENDER)
    assert {stem for stem, _ in failures if stem in listed} == set(listed), "take the template off the list"
    failures = {pair: detail for pair, detail in failures.items() if pair[0] not in listed}
    assert set(failures) == set(KNOWN_FAILURES), "update KNOWN_FAILURES with the reason for each failure"


@needs_corpus
def test_fresh_values_were_never_used_while_probing():
    used = json.dumps([s.__dict__ for s in SENTINEL_SETS])
    for value in (FRESH.content, FRESH.reasoning, FRESH.value1, *FRESH.names, FRESH.key1, FRESH.key2):
        assert value not in used


# --- Each tool-call format family of the corpus -----------------------------------------


@needs_corpus
def test_json_in_tags(specs):  # Hermes / Qwen 2.5: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
    tc = corpus_spec(specs, "Qwen-Qwen2.5-7B-Instruct").tool_calls
    assert tc.arguments.style == "object" and tc.arguments.encoder == "json"
    assert tc.call[0].strip().startswith("<tool_call>") and "</tool_call>" in tc.call[-1]
    assert slot("name") in tc.call and slot("arguments") in tc.call


@needs_corpus
def test_json_list_with_ids(specs):  # Mistral Nemo: [TOOL_CALLS][{"name", "arguments", "id"}, ...]
    tc = corpus_spec(specs, "Mistral-Nemo-Instruct-2407").tool_calls
    assert tc.section_start == "[TOOL_CALLS][" and tc.section_end == "]" and tc.separator == ", "
    assert slot("id") in tc.call


@needs_corpus
def test_name_after_marker_with_index(specs):  # Kimi K2: functions.NAME:IDX
    tc = corpus_spec(specs, "Moonshot-Kimi-K2-Instruct").tool_calls
    assert tc.call[:4] == ["<|tool_call_begin|>functions.", slot("name"), ":", slot("index")]
    assert tc.section_start == "<|tool_calls_section_begin|>"


@needs_corpus
def test_index_inside_json(specs):  # Cohere: {"tool_call_id": "0", "tool_name": NAME, "parameters": {...}}
    tc = corpus_spec(specs, "Cohere-Command-R7B-12-2024-tool_use").tool_calls
    assert slot("index") in tc.call and '"tool_name": "' in "".join(p for p in tc.call if isinstance(p, str))


@needs_corpus
@pytest.mark.parametrize("stem, argument_prefix", [
    ("Qwen-Qwen3-Coder", "<parameter="),  # <parameter=K>\nV\n</parameter>
    ("ZAI-GLM-4.6", "<arg_key>"),  # <arg_key>K</arg_key><arg_value>V</arg_value>
    ("MiniMax-M2", '<parameter name="'),
])
def test_key_value_tags(specs, stem, argument_prefix):
    args = corpus_spec(specs, stem).tool_calls.arguments
    assert args.style == "kv"
    assert args.argument["string"][0] == argument_prefix
    assert args.value_encoders["string"] == "raw"  # a string value is raw text up to the closing tag
    assert args.value_encoders["integer"] == "json"


@needs_corpus
def test_key_value_tags_typed_by_attribute(specs):  # DeepSeek V3.2 DSML: string="true" / "false"
    args = corpus_spec(specs, "DeepSeek-V3.2").tool_calls.arguments
    assert 'string="true"' in "".join(p for p in args.argument["string"] if isinstance(p, str))
    assert 'string="false"' in "".join(p for p in args.argument["integer"] if isinstance(p, str))


@needs_corpus
def test_pythonic(specs):  # LFM2: [name(key='value', n=1)]
    tc = corpus_spec(specs, "LiquidAI-LFM2.5-8B-A1B").tool_calls
    assert tc.section_start.endswith("[") and tc.separator == ", "
    assert tc.call[-1] == ")" and tc.arguments.separator == ", "
    # The template writes "'" + value + "'" (no escaping) and other values as JSON.
    assert tc.arguments.quotes == ["'", "'"] and tc.arguments.value_encoders["string"] == "quoted"
    assert tc.arguments.value_encoders["integer"] == "json"


@needs_corpus
def test_custom_quoting_and_native_objects(specs):  # Gemma 4: call:NAME{key:<|"|>v<|"|>,n:1}
    args = corpus_spec(specs, "Google-Gemma-4-31B-it").tool_calls.arguments
    assert args.quotes == ['<|"|>', '<|"|>'] and args.value_encoders["string"] == "quoted"
    assert args.order == "sorted" and args.value_encoders["object"] == "native"


@needs_corpus
def test_harmony_channels(specs):  # gpt-oss: to=functions.NAME ... <|call|>; analysis channel
    spec = corpus_spec(specs, "OpenAI-gpt-oss-120b")
    assert spec.tool_calls.section_start == " to=functions." and spec.tool_calls.parallel == "first"
    assert spec.reasoning.start == "<|channel|>analysis<|message|>"
    assert spec.content_start == "<|channel|>final<|message|>"


@needs_corpus
def test_bare_json_and_refused_parallel_calls(specs):  # Llama 3.1: {"name": ..., "parameters": ...}
    tc = corpus_spec(specs, "Meta-Llama-3.1-8B-Instruct").tool_calls
    assert tc.section_start == '{"name": "' and tc.parallel == "refused"


@needs_corpus
def test_indented_json(specs):  # Command R+: Action: ```json [ {...indented...} ]```
    args = corpus_spec(specs, "Cohere-Command-R-Plus-tool_use").tool_calls.arguments
    assert args.encoder == "json-indent4" and args.line_indent == " " * 8


@needs_corpus
def test_python_repr_arguments(specs):  # InternLM: arguments printed with |string
    assert corpus_spec(specs, "InternLM-InternLM2.5-chat-vllm-tool").tool_calls.arguments.encoder == "python"


@needs_corpus
def test_templates_without_tool_calls_give_a_content_only_spec(specs):
    spec = corpus_spec(specs, "Google-Gemma-2-2b-it")
    assert spec.tool_calls is None
    assert "the template does not render tool calls" in spec.warnings
    assert "content" in spec.turns


@needs_corpus
@pytest.mark.parametrize("stem, reads", [
    ("Microsoft-Phi-4-mini-instruct", "a message's 'tools' field"),
    ("HuggingFaceTB-SmolLM3-3B-xml-python-tools", "the variables python_tool_string, python_tools, xml_tool_string, "
                                                  "xml_tools (render --var or --var-str gives them)"),
])
def test_a_template_without_calls_says_what_it_reads_them_through(specs, stem, reads):
    """#53, class 3: a template that renders tools or calls only through fields other than
    OpenAI's says which, so that the user sees why no call format was found."""
    spec = corpus_spec(specs, stem)
    assert spec.tool_calls is None
    [said] = [w for w in spec.warnings if w.startswith("the template does not render tool calls")]
    assert said == (f"the template does not render tool calls; it reads tools or calls through {reads}, which "
                    "OpenAI's chat input does not carry: render it with them to see its format, and state that "
                    "format in an override (docs/overrides.md)")


def test_a_built_template_that_reads_function_call_says_so():
    source = ("{%- for m in messages %}<|{{ m.role }}|>{% if m.function_call %}CALL {{ m.function_call.name }}"
              "{% else %}{{ m.content }}{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
    template = ChatTemplate(source=source, name="fc", family="fc", origin="test",
                                     named_tokens={"bos_token": "", "eos_token": "<|end|>"})
    spec = probe(template)
    assert spec.tool_calls is None
    assert any("it reads tools or calls through a message's 'function_call' field" in w for w in spec.warnings)


# --- Reasoning and the generation prompt -----------------------------------------------


@needs_corpus
@pytest.mark.parametrize("stem, mode, start", [
    ("Qwen-Qwen3.5-4B", "default", "reasoning"),  # the prompt opens <think>
    ("Qwen-Qwen3.5-4B", "no_thinking", "content"),  # ... and closes it when thinking is off
    ("Qwen-Qwen3-0.6B", "default", "content"),  # the model opens <think> itself
    ("MiniMax-M2", "default", "reasoning"),
    ("DeepSeek-V3.2", "thinking", "reasoning"),
    ("DeepSeek-V3.2", "default", "content"),  # "<think></think>": opened and closed
    ("Cohere-Cohere2MoE", "default", "reasoning"),
    ("Cohere-Cohere2MoE", "no_thinking", "content"),
    ("NVIDIA-Nemotron-Nano-9B-v2", "no_thinking", "content"),  # a /no_think system flag
    ("Reka-Edge", "thinking", "reasoning"),  # reasoning rendered only with thinking on
    ("ServiceNow-Apriel-1.6-15b-Thinker-fixed", "default", "reasoning"),
])
def test_start_state(specs, stem, mode, start):
    assert corpus_spec(specs, stem).modes[mode].start == start


@needs_corpus
@pytest.mark.parametrize("stem, start, end", [
    ("Qwen-Qwen3-0.6B", "<think>", "</think>"),
    ("ByteDance-Seed-OSS-36B-Instruct", "<seed:think>", "</seed:think>"),
    ("Cohere-Cohere2MoE", "<|START_THINKING|>", "<|END_THINKING|>"),
    ("Mistral-Ministral-3-14B-Reasoning-2512", "[THINK]", "[/THINK]"),  # reasoning as content blocks
    # the reasoning starter its generation prompt writes (after a last user message, whatever
    # add_generation_prompt says), then a delimiter
    ("ServiceNow-Apriel-1.6-15b-Thinker-fixed", "Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"),
    ("Google-Gemma-4-31B-it", "<|channel>thought", "<channel|>"),
])
def test_reasoning_markers(specs, stem, start, end):
    reasoning = corpus_spec(specs, stem).reasoning
    assert (reasoning.start, reasoning.end) == (start, end)
    assert reasoning.tool_call_ends_reasoning  # the default policy


@needs_corpus
@pytest.mark.parametrize("stem, marker", [
    ("Qwen-Qwen3-0.6B", "<|im_end|>"),
    ("Cohere-Cohere2MoE", "<|END_OF_TURN_TOKEN|>"),
    ("ZAI-GLM-4.6", "<|user|>"),  # no end marker: the next turn's marker ends it
    ("OpenAI-gpt-oss-120b", "<|return|>"),
])
def test_end_of_turn(specs, stem, marker):
    assert marker in corpus_spec(specs, stem).end_of_turn


@needs_corpus
def test_content_wrapper(specs):
    spec = corpus_spec(specs, "Cohere-Command-R7B-12-2024-tool_use")
    assert spec.content_start == "<|START_RESPONSE|>"


# --- The spec as data ------------------------------------------------------------------


def test_example_spec_round_trips_and_is_deterministic():
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    spec = probe(template)
    again = ProtocolSpec.from_json(spec.to_json())
    assert again == spec
    assert probe(template).to_json() == spec.to_json()
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}
    assert again.format(message) == spec.format(message)
    assert all(c.passed for c in verify(template, spec))


def test_spec_version_is_checked():
    data = probe(tplparse.load(EXAMPLES / "chatml-think-tools.gguf")).to_dict()
    data["version"] = 99
    with pytest.raises(tplparse.TplparseError, match="spec version 99"):
        ProtocolSpec.from_dict(data)


def _inline(source: str, **tokens) -> ChatTemplate:
    return ChatTemplate(source=source, name="t", family="t", origin="test",
                        named_tokens=tokens or {"bos_token": "<s>", "eos_token": "</s>"})


def test_sentinel_leak_is_caught_by_the_second_set():
    # A template whose "marker" is made of the message's own first word: the two sentinel
    # sets see different markers, so the content layout is left out with a warning.
    source = ("{% for m in messages %}{% if m.role == 'assistant' %}<{{ (m.content or '').split(' ')[0] }}>"
              "{{ m.content }}</s>{% else %}[{{ m.content }}]{% endif %}{% endfor %}")
    spec = probe(_inline(source))
    assert "content" not in spec.turns
    assert any("disagree on the content layout" in w for w in spec.warnings)


def test_a_template_that_needs_string_arguments():
    source = ("{% for m in messages %}{% if m.role == 'assistant' %}{% for c in m.tool_calls or [] %}"
              "<call>{{ c.function.name + ' ' + c.function.arguments }}</call>{% endfor %}{{ m.content or '' }}</s>"
              "{% else %}[{{ m.content }}]{% endif %}{% endfor %}")
    spec = probe(_inline(source))
    assert spec.shape == "arguments as JSON string"
    assert spec.tool_calls.call == ["<call>", slot("name"), " ", slot("arguments"), "</call>"]


def test_a_template_that_renders_nothing_is_reported_not_raised():
    spec = probe(_inline("{{ raise_exception('nope') }}"))
    assert spec.turns == {} and spec.tool_calls is None
    assert any("no probe turn renders" in w for w in spec.warnings)


# --- Rules of the code base ------------------------------------------------------------

FAMILY_WORDS = ("qwen", "llama", "mistral", "gemma", "deepseek", "glm", "hermes", "cohere", "granite", "kimi",
                "minimax", "phi", "functionary", "nemotron", "apriel", "hunyuan", "seed", "lfm", "smollm",
                "gpt-oss", "harmony", "command-r", "internlm", "apertus", "reka", "stepfun", "ling")


def _string_constants(tree: ast.AST):
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


# Strings that name a family for another reason than branching on it, with that reason.
ALLOWED_FAMILY_STRINGS = {
    ("byte_vocab.py", "llama"): "the GGUF architecture llama.cpp loads a vocabulary under",
    ("requests.py", "seed"): "OpenAI's sampling field (a random seed), not the Seed model family",
    ("requests.py", "the sampling seed must be a 64-bit integer"): "the same sampling field, in its error",
}


def test_no_code_branches_on_a_family_name():
    for path in sorted((REPO / "compiler").rglob("*.py")):
        for node in _string_constants(ast.parse(path.read_text(encoding="utf-8"))):
            if (path.name, node.value) in ALLOWED_FAMILY_STRINGS:
                continue
            # llama.cpp (its server, and the modules that talk to it) is the engine, not a model family
            text = re.sub(r"llama[._-]?(cpp|request|check|server)", "engine", node.value.lower())
            for word in FAMILY_WORDS:
                assert f"{word}" not in text.split() and not text.startswith(word), (
                    f"{path.name}:{node.lineno}: string {node.value!r} names a model family"
                )


@needs_corpus
def test_overrides_are_few_and_justified():
    overrides = load_overrides()
    shas = {tplparse.load(p).sha256 for p in TEMPLATES}
    assert len(overrides) <= 0.10 * len(TEMPLATES)
    for override in overrides:
        assert len(override.why) > 40, override.name
        assert set(override.template_sha256) & shas, f"{override.name} matches no corpus template"


@needs_corpus
def test_name_as_key(specs):  # Apertus: [{"NAME": {args}}], bare tools, arguments as a JSON string
    spec = corpus_spec(specs, "SwissAI-Apertus-8B-Instruct")
    assert spec.shape == "bare tools, arguments as JSON string"
    assert spec.tool_calls.call == ['{"', slot("name"), '": ', slot("arguments"), "}"]
