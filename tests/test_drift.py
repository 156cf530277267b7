"""`tplparse diff`: protocol drift between template revisions, on the corpus's real pairs.

Each batch-2 `-rev2` template is a later published revision of a batch-1 template of the
same model. What each pair changed was read from the two templates' text (the expectations
below say what in the template makes the difference); the test pins that the report names
exactly those protocol fields, and how far each revision's parser reads the other's turns.
"""

from __future__ import annotations

import json

import pytest

import tplparse
from tplparse.check.drift import drift

from conftest import CORPUS, EXAMPLES, needs_corpus, run_cli

# rev2 stem -> (batch-1 stem, the protocol fields that differ, turns old's parser reads of
# new's renders, turns new's parser reads of old's; of the 6 standard turns each renders after
# its default generation prompt, unless NEW_TURNS says otherwise)
PAIRS = {
    # rev2 renders a thinking block: reasoning markers, the enable_thinking switch and its
    # modes, an empty <|START_THINKING|><|END_THINKING|> before calls (no longer part of the
    # section's opener, now a turn layout literal and the default prompt's tail). Old's
    # parser expects that block to open every calls section, which rev2's calls (the block
    # written by the prompt, or holding reasoning) do not have: it reads only the two
    # turns without calls.
    "Cohere-Command-R7B-12-2024-tool_use-rev2": (
        "Cohere-Command-R7B-12-2024-tool_use",
        {"modes.default.tail", "modes.thinking", "modes.no_thinking", "turns.calls", "turns.content+calls",
         "turns.reasoning+calls", "reasoning", "tool_calls.section_start", "thinking_switch"}, 2, 6),
    # rev2 renders tool calls (the batch-1 template drops them), closes the think block in
    # the prompt unless thinking is on, and has the enable_thinking switch. Old's parser
    # knows no calls: it reads the four call turns' sections as content.
    "DeepSeek-R1-Distill-Qwen-32B-rev2": (
        "DeepSeek-R1-Distill-Qwen-32B",
        {"modes.default.start", "modes.default.tail", "modes.thinking", "modes.no_thinking", "turns.calls",
         "turns.content+calls", "turns.reasoning+calls", "tool_calls", "thinking_switch"}, 2, 6),
    # Only the input shape: batch-1 concatenates history arguments as a JSON string, rev2
    # writes them with tojson (an object).
    "Fireworks-Firefunction-v2-rev2": ("Fireworks-Firefunction-v2", {"shape"}, 6, 6),
    "MeetKai-Functionary-medium-v3.1-rev2": ("MeetKai-Functionary-medium-v3.1", {"shape"}, 6, 6),
    "SwissAI-Apertus-8B-Instruct-rev2": ("SwissAI-Apertus-8B-Instruct", {"shape"}, 6, 6),
    # rev2 drops the "always open a generation prompt" override (the fixed template writes
    # its generation prompt, "Here are my reasoning steps:" and all, after a last user message
    # whatever add_generation_prompt says): both ask for the same output, the same protocol.
    "ServiceNow-Apriel-1.6-15b-Thinker-rev2": ("ServiceNow-Apriel-1.6-15b-Thinker-fixed", set(), 6, 6),
    # Same protocol: the revisions change the template's code, not what it writes.
    "MiniMax-M1-rev2": ("MiniMax-M1-vllm-tool", set(), 6, 6),
    "Moonshot-Kimi-K2-Instruct-rev2": ("Moonshot-Kimi-K2-Instruct", set(), 6, 6),
    "Qwen-Qwen3-Coder-rev2": ("Qwen-Qwen3-Coder", set(), 6, 6),
}
# rev2's default prompt closes the thinking block (<|START_THINKING|><|END_THINKING|>): its
# reasoning+call turn, which writes a block of its own, does not follow that prompt.
NEW_TURNS = {"Cohere-Command-R7B-12-2024-tool_use-rev2": 5}


def test_every_revision_pair_of_the_corpus_is_pinned():
    if not CORPUS.is_dir():
        pytest.skip(f"the shared template corpus is not at {CORPUS}")
    assert {p.stem for p in CORPUS.glob("*-rev2.jinja")} == set(PAIRS)


@needs_corpus
@pytest.mark.parametrize("rev2", sorted(PAIRS))
def test_revision_pair_report(rev2):
    old_stem, fields, old_reads, new_reads = PAIRS[rev2]
    report = drift(tplparse.load(CORPUS / f"{old_stem}.jinja"), tplparse.load(CORPUS / f"{rev2}.jinja"))
    assert {d.field for d in report.differences} == fields
    assert report.same == (not fields)
    assert (len(report.old_reads_new.read), report.old_reads_new.total) == (old_reads, NEW_TURNS.get(rev2, 6))
    assert (len(report.new_reads_old.read), report.new_reads_old.total) == (new_reads, 6)


@needs_corpus
def test_diff_cli_exit_status_and_json():
    same = run_cli("diff", CORPUS / "Qwen-Qwen3-Coder.jinja", CORPUS / "Qwen-Qwen3-Coder-rev2.jinja")
    assert same.returncode == 0 and "protocol: the same" in same.stdout
    changed = run_cli("diff", CORPUS / "DeepSeek-R1-Distill-Qwen-32B.jinja",
                      CORPUS / "DeepSeek-R1-Distill-Qwen-32B-rev2.jinja", "--json")
    assert changed.returncode == 1
    report = json.loads(changed.stdout)
    differences = {d["field"]: (d["old"], d["new"]) for d in report["differences"]}
    assert differences["thinking_switch"] == (None, {"variable": "enable_thinking", "on": True, "off": False})


@needs_corpus
def test_diff_of_unrelated_families():
    result = run_cli("diff", CORPUS / "Qwen-Qwen3-0.6B.jinja", CORPUS / "OpenAI-gpt-oss-120b.jinja", "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    fields = {d["field"].split(".")[0] for d in report["differences"]}
    assert {"reasoning", "tool_calls", "end_of_turn", "turns"} <= fields
    assert report["old_parser_reads_new"]["read"] == [] and report["new_parser_reads_old"]["read"] == []


def test_diff_bad_input_exit_2(tmp_path):
    result = run_cli("diff", tmp_path / "missing.jinja", EXAMPLES / "chatml-think-tools.gguf")
    assert result.returncode == 2 and "missing.jinja" in result.stderr and "Traceback" not in result.stderr
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% if %}", encoding="utf-8")
    result = run_cli("diff", EXAMPLES / "chatml-think-tools.gguf", bad)
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_diff_of_a_template_that_renders_no_assistant_turn_exit_2(tmp_path):
    constant = tmp_path / "hello.jinja"
    constant.write_text("hello", encoding="utf-8")
    result = run_cli("diff", EXAMPLES / "chatml-think-tools.gguf", constant)
    assert result.returncode == 2 and "renders no assistant turn" in result.stderr and "Traceback" not in result.stderr


def test_diff_gives_a_bare_template_the_tokens_its_model_names():
    gguf, jinja = EXAMPLES / "bracket-tools.gguf", EXAMPLES / "templates" / "bracket-tools.jinja"
    bare = run_cli("diff", gguf, jinja)
    assert bare.returncode == 1 and "the same template text" in bare.stdout  # (the stand-in eos differs)
    given = run_cli("diff", gguf, jinja, "--bos-token", "<s>", "--eos-token", "</s>")
    assert given.returncode == 0 and "protocol: the same" in given.stdout


def test_diff_of_the_example_against_its_own_template_file():
    result = run_cli("diff", EXAMPLES / "chatml-think-tools.gguf", EXAMPLES / "templates" / "chatml-think-tools.jinja")
    assert result.returncode == 0 and "old's parser reads 6 of 6" in result.stdout
