"""A way forward when the probe is wrong (issue #29): a refused compile names the spec fields
involved, and a user's declarative override (`--override FILE`, a manifest's `override`)
sets them, checked, recorded in the spec, and proved like everything else."""

from __future__ import annotations

import json
import shutil

import pytest

import tplparse
from tplparse import runtime
from tplparse.check.fields import involved_fields
from tplparse.check.proof import prove
from tplparse.errors import InputError
from tplparse.grammar.reading import reading_tables
from tplparse.probe import probe
from tplparse.probe.overrides import (Override, blamed_on, check_patch, load_overrides, parse_override, patched_spec,
                                      read_override)

from conftest import CORPUS, EXAMPLES, run_cli

EXAMPLE = EXAMPLES / "chatml-think-tools.gguf"
APERTUS = CORPUS / "SwissAI-Apertus-8B-Instruct-rev2.jinja"


@pytest.fixture(scope="module")
def example():
    template = tplparse.load(EXAMPLE)
    return template, probe(template)


def override_file(path, sha256, patch, why="a test override", **extra):
    path.write_text(json.dumps({"why": why, "template_sha256": [sha256], "patch": patch, **extra}), encoding="utf-8")
    return path


def the_error(result) -> str:
    """The one line a failed command prints (and nothing else on stderr)."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("tplparse: error: "), result.stderr
    return lines[0]


# --- a wrong probe result on a real template, overridden end to end ---------------------------

APERTUS_WHY = ("The template writes reasoning only from an assistant content given as blocks ({\"blocks\": "
               "[{\"type\": \"thoughts\", ...}, {\"type\": \"response\", ...}]}), never from reasoning_content, so "
               "no render the probe makes shows a reasoning block: it reports no reasoning markers.")
APERTUS_SOURCE = ("the template's own thoughts/response branch: <|inner_prefix|> before the thoughts, "
                  "<|inner_suffix|> before the response (and SOURCES.md's row for Apertus)")
APERTUS_PATCH = {"reasoning": {"start": "<|inner_prefix|>", "end": "<|inner_suffix|>", "in_history": False}}


@pytest.mark.skipif(not APERTUS.is_file(), reason=f"{APERTUS.name} is not in the corpus at {CORPUS}")
def test_an_override_fixes_a_wrong_probe_result_on_a_real_template(tmp_path):
    """Apertus 8B (rev2, llama.cpp's copy) reasons between <|inner_prefix|> and <|inner_suffix|>,
    but writes them only for an assistant message whose content is a dict of blocks (type
    "thoughts", then "response"), a shape of its own that no probe conversation uses: the probe
    says the template has no reasoning markers (honestly: no render it makes shows one), so the
    parser compiled from it reads a thinking turn as content, markers and all. That is wrong:
    the template's own render of a blocks message shows the markers (asserted below, so the
    override's fact is the template's, not this test's). The override sets reasoning.start and
    reasoning.end; compile proves it (the standard turns the template renders read back: the
    reasoning they carry is dropped by this template, which the proof names as lossy), records
    it in the spec, and the generated parser reads the template's own thinking turn."""
    template = tplparse.load(APERTUS)
    wrong = probe(template)
    assert wrong.reasoning is None, "the probe now finds Apertus's reasoning: pick another wrong probe result here"
    rendered = template.render([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": {"blocks": [
        {"type": "thoughts", "text": "The user greets me."}, {"type": "response", "text": "Hello!"}]}}],
        add_generation_prompt=False)
    turn = rendered[rendered.rindex("<|assistant_start|>") + len("<|assistant_start|>"):]
    assert turn == "<|inner_prefix|>The user greets me.<|inner_suffix|>Hello!"
    as_probed = runtime.parse(runtime.Protocol(reading_tables(wrong, template.special_tokens)), turn)
    assert as_probed["reasoning_content"] is None and as_probed["content"] == turn  # the wrong reading

    fix = override_file(tmp_path / "apertus-reasoning.json", template.sha256, APERTUS_PATCH, why=APERTUS_WHY,
                        source=APERTUS_SOURCE)
    shown = run_cli("probe", APERTUS, "--override", fix.name, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "start          '<|inner_prefix|>'" in shown.stdout and "end            '<|inner_suffix|>'" in shown.stdout
    assert "- user override apertus-reasoning.json (sha256 " in shown.stdout.split("\nOverrides\n")[1]

    out = tmp_path / "out"
    compiled = run_cli("compile", APERTUS, "--override", fix.name, "-o", out, cwd=tmp_path)
    assert compiled.returncode == 0, compiled.stderr
    assert "NOT PROVED" not in compiled.stdout and compiled.stdout.count(" proved") == 6
    spec = json.loads((out / "grammars" / "swissai-apertus-8b-instruct-rev2.spec.json").read_text(encoding="utf-8"))
    assert (spec["reasoning"]["start"], spec["reasoning"]["end"]) == ("<|inner_prefix|>", "<|inner_suffix|>")
    [record] = spec["overrides"]
    assert record.startswith("user override apertus-reasoning.json (sha256 ")
    assert "sets reasoning.start, reasoning.end, reasoning.in_history" in record
    assert APERTUS_WHY in record and f"(source: {APERTUS_SOURCE})" in record
    read = run_cli("parse", out / "generated" / "swissai_apertus_8b_instruct_rev2.py", stdin=turn)
    assert read.returncode == 0, read.stderr
    message = json.loads(read.stdout)
    assert (message["reasoning_content"], message["content"], message["errors"]) == ("The user greets me.", "Hello!", [])


# --- the error paths: one line, exit 2, nothing written ---------------------------------------


def test_an_override_for_another_template_names_both_hashes(tmp_path, example):
    template, _ = example
    other = "0" * 64
    fix = override_file(tmp_path / "fix.json", other, {"end_of_turn": ["<|im_end|>"]})
    out = tmp_path / "out"
    error = the_error(run_cli("compile", EXAMPLE, "--override", fix, "-o", out))
    assert other in error and template.sha256 in error and not out.exists()


@pytest.mark.parametrize("patch, message", [
    ({"reasoning": {"stop": "</think>"}}, "reasoning.stop: no such field"),
    ({"end_of_turn": "<|im_end|>"}, "end_of_turn: expected a list"),
    ({"modes": {"default": {"start": "thinking"}}}, "modes.default.start: 'thinking' is not one of 'content', 'reasoning'"),
    ({"template_sha256": "0" * 64}, "'template_sha256' is not a protocol field"),
    ({"tool_calls": {"call": ["{", {"slot": "nme"}, "}"]}}, "tool_calls.call[1]: a layout's piece is a string or"),
])
def test_a_patch_that_is_no_spec_names_its_path(tmp_path, example, patch, message):
    """Checked when the file is read, before any work with the template."""
    template, _ = example
    fix = override_file(tmp_path / "fix.json", template.sha256, patch)
    out = tmp_path / "out"
    error = the_error(run_cli("compile", EXAMPLE, "--override", fix, "-o", out))
    assert message in error and str(fix) in error and not out.exists()


@pytest.mark.parametrize("data, message", [
    ({"why": "x", "template_sha256": ["a" * 64]}, "missing patch"),
    ({"why": "", "patch": {"end_of_turn": []}, "template_sha256": ["a" * 64]}, "why must be a non-empty string"),
    ({"why": "x", "patch": {"end_of_turn": []}, "template_sha256": "a" * 64}, "template_sha256 must be a list"),
    ({"why": "x", "patch": {"end_of_turn": []}, "template_sha256": ["A" * 64]}, "template_sha256 must be a list"),
    ({"why": "x", "patch": {}, "template_sha256": ["a" * 64]}, "patch must be a non-empty JSON object"),
    ({"why": "x", "patch": {"end_of_turn": []}, "template_sha256": ["a" * 64], "sources": "y"}, "unknown key(s) 'sources'"),
    ([], "an override is a JSON object"),
])
def test_an_override_file_is_checked(data, message):
    with pytest.raises(InputError) as raised:
        parse_override(data, "fix.json")
    assert str(raised.value).startswith("fix.json: ") and message in str(raised.value)


def test_an_override_file_that_does_not_read(tmp_path):
    (tmp_path / "bad.json").write_text('{"why": "x",', encoding="utf-8")
    (tmp_path / "latin1.json").write_bytes(b'{"why": "\xe9"}')
    for name, message in (("bad.json", "invalid JSON (an override file) at line 1"), ("none.json", "no such file"),
                          ("latin1.json", "is not UTF-8"), (".", "is a folder")):
        with pytest.raises(InputError) as raised:
            read_override(tmp_path / name)
        assert message in str(raised.value), name


def test_a_part_the_spec_lacks_must_be_given_whole(example):
    """A spec without reasoning markers (the example's, patched to none) cannot take half of
    them: reasoning.end is missing, and said."""
    _, spec = example
    bare = patched_spec(spec, {"reasoning": None}, "a.json")
    with pytest.raises(InputError) as raised:
        patched_spec(bare, {"reasoning": {"start": "<r>"}}, "b.json")
    assert "b.json: reasoning: the spec has none, so the patch must give all of it (missing: end)" in str(raised.value)


def test_a_new_part_takes_the_defaults_of_what_it_leaves_out(example):
    """As the shipped overrides give a calls format to a template that renders none (IBM
    Granite 3.3): the fields with defaults may be left out."""
    _, spec = example
    bare = patched_spec(spec, {"tool_calls": None}, "a.json")
    calls = {"section_start": "<|tool_call|>[", "section_end": "]", "separator": ", ",
             "call": ['{"name": "', {"slot": "name"}, '", "arguments": ', {"slot": "arguments"}, "}"],
             "arguments": {"style": "object"}}
    patched = patched_spec(bare, {"tool_calls": calls}, "b.json")
    assert patched.tool_calls.arguments.encoder == "json" and patched.tool_calls.parallel == "all"


@pytest.mark.parametrize("patch, message", [
    ({"tool_calls": {"call": ["{", {"slot": "arguments"}, "}"]}}, 'tool_calls.call: the call\'s layout has no {"slot": "name"}'),
    ({"tool_calls": {"arguments": {"encoder": "yaml"}}}, "tool_calls.arguments.encoder: 'yaml' is not one of json"),
    ({"tool_calls": {"arguments": {"style": "kv"}}}, "need a layout for strings (argument.string)"),
    ({"tool_calls": {"arguments": {"style": "kv", "argument": {"string": [{"slot": "value"}]}}}},
     'tool_calls.arguments.argument.string: the layout has no {"slot": "key"}'),
])
def test_a_calls_format_no_stage_can_use_is_refused(example, patch, message):
    _, spec = example
    with pytest.raises(InputError) as raised:
        patched_spec(spec, patch, "fix.json")
    assert message in str(raised.value)


def test_what_a_patch_breaks_past_the_checks_is_one_line_naming_it():
    override = Override("fix.json", "why", {"end_of_turn": ["x"]}, ("a" * 64,), user=True)
    with pytest.raises(InputError) as raised, blamed_on(override):
        raise KeyError("slot")
    assert str(raised.value).startswith("fix.json: the patched spec cannot be compiled (KeyError: 'slot')")
    assert "the fields it sets: end_of_turn" in str(raised.value)
    with pytest.raises(KeyError), blamed_on(None):  # (without a user's override, a bug is a bug)
        raise KeyError("slot")


def test_an_override_that_breaks_the_proof_is_a_failed_compile_naming_the_fields(tmp_path, example):
    template, _ = example
    fix = override_file(tmp_path / "fix.json", template.sha256, {"reasoning": {"end": "</thought>"}})
    out = tmp_path / "out"
    result = run_cli("compile", EXAMPLE, "--override", fix, "-o", out)
    error = the_error(result)
    assert "the parser does not read back the 'reasoning+content' turn" in error
    assert error.endswith("spec fields involved: reasoning.end, reasoning.start, modes.default.start "
                          "(an override sets them: compile --override FILE)")
    assert "NOT PROVED" in result.stdout and "[spec fields: reasoning.end, reasoning.start" in result.stdout
    assert not out.exists()


# --- the fields a failed turn involves ----------------------------------------------------------


def value_at(data, path: str):
    for key in path.split("."):
        data = data[key] if isinstance(data, dict) else None
    return data


def nested(path: str, value) -> dict:
    for key in reversed(path.split(".")):
        value = {key: value}
    return value


@pytest.mark.parametrize("patch, turn, fields", [
    ({"reasoning": {"end": "</thought>"}}, "reasoning+content", ["reasoning.end", "reasoning.start", "modes.default.start"]),
    ({"reasoning": None}, "reasoning+content", ["reasoning", "modes.default.start", "content_start"]),
    ({"end_of_turn": ["<|eot|>"]}, "content", ["content_end", "end_of_turn"]),
    ({"tool_calls": {"section_start": "<call>"}}, "typed call", ["tool_calls.section_start", "tool_calls.call"]),
    # (the parser reads a Python literal's JSON too; the grammar, written from the spec, does not)
    ({"tool_calls": {"arguments": {"encoder": "python"}}}, "typed call", ["turns.calls", "tool_calls.section_start",
                                                                         "tool_calls.call", "tool_calls.section_end",
                                                                         "tool_calls.arguments.encoder"]),
    ({"tool_calls": {"separator": ""}}, "two calls", ["turns.calls", "tool_calls.section_start", "tool_calls.call",
                                                      "tool_calls.section_end", "tool_calls.separator"]),
])
def test_a_failed_turn_names_the_fields_an_override_sets(example, patch, turn, fields):
    """Each field named is a real path of the spec's data that an override's patch accepts."""
    template, spec = example
    broken = patched_spec(spec, patch, "fix.json")
    proof = prove(template, broken)
    failed = {t.turn: t for t in proof.unproved}
    assert turn in failed, proof.table()
    assert failed[turn].fields[:len(fields)] == fields, failed[turn].fields
    data = broken.to_dict()
    for path in failed[turn].fields:
        check_patch(nested(path, value_at(data, path)), "fix.json")


def test_fields_from_arguments_read_wrong_name_their_value_type(example):
    """Arguments written one by one: the value encoder and layout of each value's type that
    differs (the string layout where the type has none of its own); one encoded object: its
    encoder."""
    _, spec = example
    pair = [{"slot": "key"}, "=", {"slot": "value"}]
    kv = patched_spec(spec, {"tool_calls": {"arguments": {
        "style": "kv", "argument": {"string": pair}, "value_encoders": {"string": "quoted", "integer": "json"},
        "separator": ", ", "quotes": ["'", "'"]}}}, "fix.json")
    typed = patched_spec(kv, {"tool_calls": {"arguments": {"argument": {"integer": ["#", *pair]}}}}, "fix.json")
    expected = {"content": None, "reasoning_content": None, "tool_calls": [("f", {"a": "x", "n": 3})]}
    got = {"content": None, "reasoning_content": None, "tool_calls": [("f", {"a": "x", "n": "3"})]}
    assert involved_fields(kv, expected, got, []) == ["tool_calls.arguments.value_encoders.integer",
                                                      "tool_calls.arguments.argument.string"]
    assert involved_fields(typed, expected, got, []) == ["tool_calls.arguments.value_encoders.integer",
                                                         "tool_calls.arguments.argument.integer"]
    assert involved_fields(spec, expected, got, []) == ["tool_calls.arguments.encoder"]
    missing = {**got, "tool_calls": [("f", {"a": "x"})]}
    assert involved_fields(kv, expected, missing, []) == ["tool_calls.arguments.argument",
                                                          "tool_calls.arguments.value_encoders",
                                                          "tool_calls.arguments.separator"]


# --- the patch holds -------------------------------------------------------------------------------


def test_a_field_the_patch_sets_keeps_its_value(example):
    """The probe derives each mode's start state after the overrides; a user's patch of one
    is applied again at the end, so it holds (and is recorded once)."""
    template, spec = example
    assert spec.modes["default"].start == "content"
    override = Override("fix.json", "why", {"modes": {"default": {"start": "reasoning"}}}, (template.sha256,),
                        user=True, file_sha256="f" * 64)
    patched = probe(template, override=override)
    assert patched.modes["default"].start == "reasoning"
    assert patched.overrides == [f"user override fix.json (sha256 {'f' * 16}, sets modes.default.start): why"]


def test_the_probes_evidence_for_a_replaced_value_is_dropped(example):
    template, spec = example
    assert "reasoning.end" in spec.evidence and "reasoning.start" in spec.evidence
    override = Override("fix.json", "why", {"reasoning": {"end": "</reflect>"}}, (template.sha256,), user=True)
    patched = probe(template, override=override)
    assert "reasoning.end" not in patched.evidence and "reasoning.start" in patched.evidence


def test_the_shipped_overrides_are_checked_as_a_users_are():
    assert {o.name for o in load_overrides()} >= {"granite-3.3.json", "lfm2.5-instruct.json"}
    assert all(not o.user and o.why and o.patch for o in load_overrides())


def test_grammar_takes_the_override(tmp_path, example):
    template, _ = example
    fix = override_file(tmp_path / "fix.json", template.sha256, {"reasoning": {"end": "</reflect>"}})
    result = run_cli("gbnf", EXAMPLE, "--override", fix)
    assert result.returncode == 0, result.stderr
    assert "</reflect>" in result.stdout and "</reflect>" not in run_cli("gbnf", EXAMPLE).stdout


# --- build: a manifest's override ---------------------------------------------------------------


@pytest.fixture
def manifest_with_override(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(EXAMPLE, models / "chat.gguf")
    (tmp_path / "overrides").mkdir()
    fix = override_file(tmp_path / "overrides" / "chat.json", tplparse.load(models / "chat.gguf").sha256,
                        {"reasoning": {"in_history": False}}, why="the deployment drops reasoning from history")
    manifest = tmp_path / "families.toml"
    manifest.write_text('[[family]]\nname = "chat"\nsource = "models/chat.gguf"\noverride = "overrides/chat.json"\n',
                        encoding="utf-8")
    return tmp_path, manifest, fix


def test_build_applies_and_records_the_manifests_override(manifest_with_override):
    root, manifest, fix = manifest_with_override
    out = root / "out"
    built = run_cli("build", "--manifest", manifest, "-o", out)
    assert built.returncode == 0, built.stderr
    spec = json.loads((out / "grammars" / "chat.spec.json").read_text(encoding="utf-8"))
    assert spec["reasoning"]["in_history"] is False
    assert spec["overrides"] == [f"user override overrides/chat.json (sha256 {read_override(fix).file_sha256[:16]}, "
                                 "sets reasoning.in_history): the deployment drops reasoning from history"]
    assert run_cli("build", "--manifest", manifest, "-o", out, "--check").returncode == 0
    # The override file changes: the check sees the spec is stale.
    data = json.loads(fix.read_text(encoding="utf-8"))
    fix.write_text(json.dumps({**data, "why": "the deployment keeps no reasoning"}), encoding="utf-8")
    stale = run_cli("build", "--manifest", manifest, "-o", out, "--check")
    assert stale.returncode == 1 and "grammars/chat.spec.json" in stale.stderr


@pytest.mark.parametrize("entry, message", [
    ('override = "overrides/none.json"', "family chat: "),
    ('override = "overrides/none.json"', "none.json: no such file (an override file)"),
    ('override = 3', "override must be the path of an override file"),
])
def test_a_manifests_bad_override_exits_2(manifest_with_override, entry, message):
    root, manifest, _ = manifest_with_override
    manifest.write_text(f'[[family]]\nname = "chat"\nsource = "models/chat.gguf"\n{entry}\n', encoding="utf-8")
    error = the_error(run_cli("build", "--manifest", manifest, "-o", root / "out", "--check"))
    assert message in error and "Traceback" not in error
