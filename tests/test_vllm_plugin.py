"""`tplparse export vllm`: each family's plugin, loaded by the real vLLM and driven the way its
chat-completion server drives a parser, reads the template's own renders as the family's
generated parser does, one-shot and streamed in small deltas.

vLLM lives in a virtual environment of its own (`.ci/run` makes it: vLLM pins its own torch
and transformers); TPLPARSE_VLLM_PYTHON names its Python. tests/vllm_driver.py runs there,
once for every family (importing vLLM takes seconds), and writes what vLLM assembled; the
tests here compare that with the generated parser's message. Without that Python the vLLM
tests skip and say why.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

import tplparse
from conftest import CORPUS, EXAMPLES, FIXTURES, REPO, compiled, corpus_ids, corpus_templates, needs_corpus, run_cli
from corpus_outputs import FRESH_TOOLS
from tplparse.export import CannotExport
from tplparse.export.vllm_plugin import vllm_plugin
from tplparse.grammar.reading import reading_tables
from tplparse.pipeline import compile_template, export_vllm

VLLM_PYTHON = os.environ.get("TPLPARSE_VLLM_PYTHON", "")
needs_vllm = pytest.mark.skipif(not (VLLM_PYTHON and Path(VLLM_PYTHON).is_file()),
                                reason="no vLLM: set TPLPARSE_VLLM_PYTHON to the Python of a venv with vLLM "
                                       "(.ci/run makes one)")
# Delta sizes in characters (vLLM hands a parser a few tokens' text at a time), and the whole text.
CHUNKS = [1, 3, 7, 1_000_000]
SOURCES = [EXAMPLES / "chatml-think-tools.gguf", EXAMPLES / "bracket-tools.gguf", *corpus_templates()]
TOOLS = FRESH_TOOLS
# A real tokenizer with ChatML's tokens (<|im_end|> a special token): transformers' of the Qwen
# 3.5 vocabulary, from llama.cpp's test vocabularies (tests/fetch_fixtures.py).
QWEN_VOCAB = FIXTURES / "vocab" / "ggml-vocab-qwen35.gguf"


def _prompt_for(spec, start):
    """The request of the first mode whose output starts in `start`: a prompt that ends with the
    mode's tail (what vLLM hands the reasoning parser as token ids), the mode's template
    variables, its system flag as the system message (one-shot, vLLM gives no prompt), and
    whether a request can select the mode without a prompt (the default mode, or one that
    variables or a system flag select)."""
    name, mode = next(((n, m) for n, m in spec.modes.items() if m.start.value == start), (None, None))
    if mode is None:
        return "<user turn>", {}, "", False
    selectable = name == "default" or bool(mode.variables) or bool(mode.system_flag)
    return "<user turn>" + mode.tail, dict(mode.variables), mode.system_flag, selectable


# Outputs beyond the renders, for the example family: a call whose arguments turn out invalid
# after some went out (a duplicate key), a call cut off by the length limit, a long argument,
# a call of another tool than tool_choice names, and a second reasoning block (see below).
NAMED = {"type": "function", "function": {"name": "convert_currency"}}
EXTRA_EXAMPLE_OUTPUTS = {
    "invalid-after-streaming": '<tool_call>\n{"name": "convert_currency", "arguments": {"amount": "EUR 12", '
                               '"amount": "EUR 13"}}\n</tool_call>',
    "truncated-call": 'Let me check.\n\n<tool_call>\n{"name": "convert_currency", "arguments": {"amount": "EU',
    "long-argument": '<tool_call>\n{"name": "convert_currency", "arguments": {"amount": "' + "EUR 12, " * 40
                     + '", "target": "USD"}}\n</tool_call>',
    "named-choice": '<tool_call>\n{"name": "get_rate", "arguments": {}}\n</tool_call>\n\n<tool_call>\n'
                    '{"name": "convert_currency", "arguments": {"amount": "EUR 12"}}\n</tool_call>',
    "two-reasoning-blocks": "<think>\nFirst.\n</think>\n\n<think>\nSecond.\n</think>\n\nDone.",
}
# Streamed, vLLM hands the tool parser the text after the first block without saying so, and it
# reads a second block as reasoning where the generated parser reads it as content (documented).
STREAMED_DIFFERS = {"two-reasoning-blocks"}


class Family:
    """A family's plugin files, its cases and the messages its generated parser reads."""

    def __init__(self, source: Path):
        shared = compiled(source)  # the session's probe, proof, parser and outputs of the template
        template, spec = shared.template, shared.spec
        self.proved = shared.proof.ok
        self.stem, self.source, self.refused = source.stem, source, None
        if not self.proved:
            return
        try:
            self.plugin = vllm_plugin(spec, shared.protocol.tables)
        except CannotExport as e:
            self.refused = e
            return
        self.special_tokens = list(template.special_tokens)
        self.module = shared.module
        texts = [(f"{i}-{o.turn}", o.text, o.start) for i, o in enumerate(shared.outputs)]
        if source.name == "chatml-think-tools.gguf":
            texts += [(name, text, "content") for name, text in EXTRA_EXAMPLE_OUTPUTS.items()]
        self.cases, self.expected, self.selectable = [], {}, {}
        self.ended = {}  # case id -> where the generated parser's reasoning ended (reasoning_ended_at)
        for case_id, text, start in texts:
            prompt, variables, system, self.selectable[case_id] = _prompt_for(spec, start)
            case = {"id": case_id, "text": text, "tools": TOOLS, "prompt": prompt, "template_kwargs": variables,
                    "system": system, "chunks": CHUNKS}
            tools = TOOLS
            if case_id == "named-choice":
                case["tool_choice"] = NAMED
                tools = [t for t in TOOLS if t["function"]["name"] == NAMED["function"]["name"]]
            self.cases.append(case)
            reader = self.module.StreamParser(tools=tools, generation_prompt=prompt)
            reader.feed(text)
            reader.end("stop")
            self.expected[case_id], self.ended[case_id] = reader.message, reader.reasoning_ended_at

    def write(self, folder: Path) -> dict:
        for name, text in self.plugin.files.items():
            (folder / name).write_text(text, encoding="utf-8")
        return {"plugin": str(folder / self.plugin.plugin_file), "name": self.plugin.parser_name,
                "reasoning": self.plugin.has_reasoning, "special_tokens": self.special_tokens, "cases": self.cases}


class Families(Mapping):
    """stem -> Family of every source, each made the first time it is read (without vLLM only
    the example's is: the other tests skip)."""

    def __init__(self, sources):
        self._sources = {source.stem: source for source in sources}
        self._made: dict[str, Family] = {}

    def __getitem__(self, stem: str) -> Family:
        if stem not in self._made:
            self._made[stem] = Family(self._sources[stem])
        return self._made[stem]

    def __contains__(self, stem) -> bool:
        return stem in self._sources

    def __iter__(self):
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)


@pytest.fixture(scope="module")
def families():
    return Families(SOURCES)


@pytest.fixture(scope="module")
def vllm_results(families, tmp_path_factory):
    """What vLLM assembled for every case of every proved family (one driver run)."""
    folder = tmp_path_factory.mktemp("vllm-plugins")
    plugins = [f.write(folder) for f in families.values() if f.proved and not f.refused]
    if QWEN_VOCAB.is_file():  # the example family again, with a real tokenizer of ChatML's tokens
        example = next(p for p in plugins if p["name"] == "tplparse-chatml-think-tools")
        plugins.append({**example, "tokenizer": [str(QWEN_VOCAB.parent), QWEN_VOCAB.name]})
    cases, results = folder / "cases.json", folder / "results.json"
    cases.write_text(json.dumps({"plugins": plugins}), encoding="utf-8")
    run = subprocess.run([VLLM_PYTHON, str(REPO / "tests" / "vllm_driver.py"), str(cases), str(results)],
                         capture_output=True, text=True, timeout=1200, cwd=folder)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(results.read_text(encoding="utf-8"))


def _calls(message):
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]


def _view(message: dict) -> dict:
    """A message as compared: content, reasoning, and each call's name and argument string."""
    if "reasoning_content" in message:  # (the generated parser's)
        return {"content": message["content"], "reasoning": message["reasoning_content"], "calls": _calls(message)}
    return {"content": message["content"], "reasoning": message["reasoning"],
            "calls": [(c["name"], c["arguments"]) for c in message["tool_calls"]]}


def _check_case(family: Family, case: dict, result: dict) -> list[str]:
    """What differs between vLLM's assembled results and the generated parser's message."""
    if "error" in result:
        return [result["error"]]
    want = family.expected[case["id"]]
    want_view = _view(want)
    ended = family.ended[case["id"]]
    problems = []
    runs = [("one-shot", result["one_shot"])]
    if case["id"] not in STREAMED_DIFFERS:
        runs += [(f"streamed by {size}", got) for size, got in result["streamed"].items()]
    if "responses_one_shot" in result and family.selectable[case["id"]]:
        runs.append(("Responses API one-shot", result["responses_one_shot"]))
    for label, got in runs:
        if _view(got) != want_view:
            problems.append(f"{case['id']} {label}:\n   vLLM   {_view(got)}\n   tplparse {want_view}")
            continue
        ids = [c["id"] for c in got["tool_calls"]]
        if len(set(ids)) != len(ids) or not all(ids):
            problems.append(f"{case['id']} {label}: call ids {ids}")
        if family.plugin.call_ids_from_model and ids != [c["id"] for c in want["tool_calls"]]:
            problems.append(f"{case['id']} {label}: the model's call ids {[c['id'] for c in want['tool_calls']]}, got {ids}")
    if "reasoning_end" in result:
        problems += _check_reasoning_end(family, case, result["reasoning_end"])
        # the reasoning tokens vLLM reports (one token per character here): up to where the
        # reasoning ended, none when vLLM skipped the reasoning parser (the prompt closed the block)
        want_tokens = 0 if result["reasoning_end"]["prompt_ended"] else (len(case["text"]) if ended is None else ended)
        for size, got in result["streamed"].items():
            if got["reasoning_tokens"] != want_tokens:
                problems.append(f"{case['id']} streamed by {size}: {got['reasoning_tokens']} reasoning tokens, "
                                f"expected {want_tokens}")
    if "tool_only" in result and family.selectable[case["id"]]:
        # --tool-call-parser alone: the content and calls, the reasoning dropped
        alone = {**want_view, "reasoning": None}
        for label, got in [("one-shot", result["tool_only"]["one_shot"]), ("streamed", result["tool_only"]["streamed"]["3"])]:
            if _view(got) != alone:
                problems.append(f"{case['id']} tool parser alone, {label}:\n   vLLM   {_view(got)}\n   tplparse {alone}")
    return problems


def _check_reasoning_end(family: Family, case: dict, got: dict) -> list[str]:
    """vLLM's structured-output gate: the prompt ends the reasoning when it closed the block;
    fed token by token, the reasoning ends at the token that completes the first end marker."""
    end = family.module.protocol.reasoning_end
    text, prompt = case["text"], case["prompt"]
    problems = []
    if got["prompt_ended"] != prompt.rstrip().endswith(end):
        problems.append(f"{case['id']}: is_reasoning_end(prompt) is {got['prompt_ended']} for {prompt[-30:]!r}")
    # (the character, one token here, that completes the first end marker: the gate cannot wait
    # to see whether another block follows, which the parser then reads as more reasoning)
    want = text.find(end) + len(end) - 1 if end in text else None
    if got["first_end_token"] != want:
        problems.append(f"{case['id']}: the reasoning ends at token {got['first_end_token']}, expected {want}")
    return problems


@needs_vllm
@pytest.mark.parametrize("stem", [s.stem for s in SOURCES], ids=corpus_ids(SOURCES))
def test_vllm_reads_every_render_as_the_generated_parser(families, vllm_results, stem):
    family = families[stem]
    if not family.proved:
        pytest.skip(f"{stem}: the compile is not proved (tplparse build reports it); no plugin is exported")
    if family.refused is not None:
        # (a family vLLM does not hand to a plugin: the CLI says so, exit 2, naming the construct)
        result = run_cli("export", "vllm", family.source, "-o", "unused")
        assert result.returncode == 2 and family.refused.construct in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
        return
    problems = []
    for case in family.cases:
        problems += _check_case(family, case, vllm_results[f"{family.plugin.parser_name}/{case['id']}"])
    assert not problems, "\n".join(problems[:8])


@needs_vllm
def test_a_call_dropped_after_its_arguments_streamed_is_said(families, vllm_results):
    """Invalid arguments found after part of them went out: vLLM's stream carried the header and
    the arguments so far, then the drop (a tool-call delta with `tplparse_error`); the one-shot
    result has no call."""
    result = vllm_results["tplparse-chatml-think-tools/invalid-after-streaming"]
    assert result["one_shot"]["tool_calls"] == []
    for size in ("1", "7"):
        assert result["streamed"][size]["dropped"] == [0], result["streamed"][size]
    assert families["chatml-think-tools"].expected["invalid-after-streaming"]["errors"][0]["kind"] == "invalid_arguments"


@needs_vllm
def test_arguments_stream_before_the_call_ends(vllm_results):
    """A long argument goes out in many deltas, not as one at the end of the call."""
    streamed = vllm_results["tplparse-chatml-think-tools/long-argument"]["streamed"]
    assert streamed["1"]["argument_deltas"][0] > 50, streamed["1"]
    assert streamed["7"]["argument_deltas"][0] > 10, streamed["7"]


@needs_vllm
def test_a_truncated_call_is_not_returned(vllm_results):
    result = vllm_results["tplparse-chatml-think-tools/truncated-call"]
    assert result["one_shot"]["tool_calls"] == [] and result["one_shot"]["content"] == "Let me check."
    for got in result["streamed"].values():
        assert got["tool_calls"] == [] and got["content"] == "Let me check.", got


@needs_vllm
def test_a_named_tool_choice_reads_calls_of_that_tool_only(families, vllm_results):
    result = vllm_results["tplparse-chatml-think-tools/named-choice"]
    for got in [result["one_shot"], *result["streamed"].values()]:
        assert [c["name"] for c in got["tool_calls"]] == ["convert_currency"], got


@needs_vllm
def test_a_second_reasoning_block_is_not_lost(families, vllm_results):
    """A block opened right after one closes is more reasoning (docs/tolerance.md's "a reasoning
    block written again"): one-shot and streamed, vLLM reads what the generated parser reads."""
    result = vllm_results["tplparse-chatml-think-tools/two-reasoning-blocks"]
    want = families["chatml-think-tools"].expected["two-reasoning-blocks"]
    assert "First." in want["reasoning_content"] and "Second." in want["reasoning_content"] and want["content"] == "Done."
    assert (result["one_shot"]["reasoning"], result["one_shot"]["content"]) == (want["reasoning_content"], "Done.")
    for size, got in result["streamed"].items():
        assert got["content"] == "Done.", (size, got)
        if int(size) < len("<think>\nFirst.\n</think>\n\n<think>"):
            # (a delta that holds both blocks loses the first: vLLM keeps one reasoning per delta)
            assert "First." in got["reasoning"] and "Second." in got["reasoning"], (size, got)


@needs_vllm
def test_gpt_oss_is_refused(families):
    family = families.get("OpenAI-gpt-oss-120b")
    if family is None:
        pytest.skip("the corpus is not here")
    assert family.refused is not None and family.refused.construct == "channel messages (harmony)"


@needs_vllm
def test_a_real_tokenizer_detokenized_as_vllm_does(families, vllm_results):
    """The example family with a real tokenizer: each output as token ids, detokenized one token
    at a time as vLLM does (special tokens dropped unless adjust_request keeps them): vLLM
    assembles the generated parser's message, and the plugin kept special tokens because
    <|im_end|>, a marker of the family, is one."""
    if not QWEN_VOCAB.is_file():
        pytest.skip(f"{QWEN_VOCAB.name} not fetched (run tests/fetch_fixtures.py)")
    family = families["chatml-think-tools"]
    problems = []
    for case in family.cases:
        got = vllm_results[f"{family.plugin.parser_name}/{case['id']}/detokenized"]
        if "error" in got:
            problems.append(got["error"])
            continue
        assert got["skip_special_tokens"] is False, case["id"]
        want = _view(family.expected[case["id"]])
        for label, result in (("streamed by token", got), ("one-shot", got["one_shot"])):
            if case["id"] not in STREAMED_DIFFERS or label == "one-shot":
                if _view(result) != want:
                    problems.append(f"{case['id']} {label}:\n   vLLM   {_view(result)}\n   tplparse {want}")
    assert not problems, "\n".join(problems[:8])


def test_the_parser_file_imports_only_the_standard_library(families):
    family = families["chatml-think-tools"]
    parser_file = family.plugin.files["chatml_think_tools.py"]
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(parser_file))
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(parser_file))
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and all(name in __import__("sys").stdlib_module_names for name in imported), imported
    assert "vllm" in family.plugin.files["chatml_think_tools_vllm.py"]


def test_the_plugin_embeds_template_strings_through_repr(tmp_path):
    """A marker with quotes and a backslash (from an untrusted template) is data in the plugin,
    never code: the plugin compiles and holds the marker exactly."""
    source = (EXAMPLES / "templates" / "chatml-think-tools.jinja").read_text(encoding="utf-8")
    hostile = "<th'\"\\ink>"  # what the template's Jinja strings below spell
    path = tmp_path / "hostile.jinja"
    path.write_text(source.replace("<think>", "<th\\'\"\\\\ink>"), encoding="utf-8")
    template = tplparse.load(path)
    spec = compile_template(template, allow_partial=True).spec
    plugin = vllm_plugin(spec, reading_tables(spec, template.special_tokens))
    text = plugin.files[plugin.plugin_file]
    tree = ast.parse(text)
    values = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
              if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
              and node.targets[0].id in ("REASONING_START", "MARKERS")}
    assert values["REASONING_START"] == hostile, values
    assert hostile in values["MARKERS"]


def test_export_is_deterministic(families):
    """A second export, probed and proved afresh (not the session's shared compile), writes the same files."""
    family = families["chatml-think-tools"]
    _, again = export_vllm(tplparse.load(EXAMPLES / "chatml-think-tools.gguf"))
    assert again is not None and again.files == family.plugin.files


def test_cli_writes_the_plugin_and_says_how_to_serve(tmp_path):
    result = run_cli("export", "vllm", EXAMPLES / "chatml-think-tools.gguf", "-o", tmp_path / "plugin")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "plugin").iterdir()) == ["chatml_think_tools.py",
                                                                      "chatml_think_tools_vllm.py"]
    assert "--tool-call-parser tplparse-chatml-think-tools" in result.stdout
    assert f"--reasoning-parser-plugin {tmp_path / 'plugin' / 'chatml_think_tools_vllm.py'}" in result.stdout


@needs_corpus
def test_a_family_without_reasoning_gets_no_reasoning_parser(tmp_path):
    result = run_cli("export", "vllm", CORPUS / "Qwen-Qwen2.5-7B-Instruct.jinja", "-o", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--tool-call-parser tplparse-qwen-qwen2-5-7b-instruct" in result.stdout
    assert "--reasoning-parser" not in result.stdout
    assert "REASONING_END = ''" in (tmp_path / "qwen_qwen2_5_7b_instruct_vllm.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("args, message", [
    (["export", "vllm", "/nonexistent/model.gguf", "-o", "x"], "nonexistent"),
    (["export", "vllm", str(EXAMPLES / "chatml-think-tools.gguf")], "-o"),
])
def test_cli_errors_are_exit_2(tmp_path, args, message):
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert message in result.stderr and "Traceback" not in result.stderr
