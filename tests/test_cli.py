"""The command line, run as a user runs it: real processes, real files, exit codes."""

from __future__ import annotations

import json
import os
import re

import pytest

from conftest import EXAMPLES, run_cli

CHATML_GGUF = EXAMPLES / "chatml-think-tools.gguf"


def test_info_table():
    result = run_cli("info", CHATML_GGUF)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(":", 1) for line in result.stdout.splitlines())
    assert lines["family"].strip() == "chatml-think-tools"
    assert lines["eos_token"].strip() == "'<|im_end|>'"
    assert lines["special tokens"].strip().startswith("9: <|endoftext|> <|im_start|> <|im_end|> <think>")


def test_info_json_matches_the_library():
    import tplparse

    result = run_cli("info", CHATML_GGUF, "--json")
    facts = json.loads(result.stdout)
    template = tplparse.load(CHATML_GGUF)
    assert facts["sha256"] == template.sha256
    assert facts["special_tokens"] == list(template.special_tokens)
    assert facts["variants"] == ["default"]


def test_render_with_tools_and_vars():
    result = run_cli("render", CHATML_GGUF, EXAMPLES / "messages.json", "--tools", EXAMPLES / "tools.json",
                     "--var", "enable_thinking=false")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("<|im_start|>system\nYou are a concise assistant.\n\nYou may call tools.")
    assert '"name": "get_weather"' in out
    assert out.endswith("<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_render_is_byte_exact_and_reads_stdin():
    messages = [{"role": "user", "content": "no trailing newline is added"}]
    result = run_cli("render", CHATML_GGUF, "-", "--no-generation-prompt", stdin=json.dumps(messages))
    assert result.stdout == "<|im_start|>user\nno trailing newline is added<|im_end|>\n"


def test_render_accepts_an_object_with_messages_and_tools():
    doc = {"messages": [{"role": "user", "content": "hi"}], "tools": json.loads((EXAMPLES / "tools.json").read_text())}
    result = run_cli("render", EXAMPLES / "bracket-tools.gguf", "-", stdin=json.dumps(doc))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('<s>[AVAILABLE_TOOLS][{"type": "function"')


def test_render_continues_a_final_message_where_its_text_ends():
    """transformers' continue_final_message: no new turn, the prompt ends with the answer begun
    (its leading space kept), and the answer's own end of turn is not written."""
    messages = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": " The answer is"}]
    result = run_cli("render", CHATML_GGUF, "-", "--continue-final-message", stdin=json.dumps(messages))
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("What is 2+2?<|im_end|>\n<|im_start|>assistant\n The answer is")


@pytest.mark.parametrize("messages, extra, says", [
    ([{"role": "user", "content": "hi"}], (), "the last message must be the assistant's answer"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}], (), "no text to continue"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hi"}], ("--no-generation-prompt",),
     "leave out --no-generation-prompt"),
])
def test_render_refuses_what_it_cannot_continue_in_one_line(messages, extra, says):
    result = run_cli("render", CHATML_GGUF, "-", "--continue-final-message", *extra, stdin=json.dumps(messages))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr


def _write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _truncated(tmp_path):
    data = CHATML_GGUF.read_bytes()
    return _write(tmp_path, "cut.gguf", data[: data.index(b"<|im_start|>system") + 5])


def _no_template(tmp_path):
    import gguf

    path = tmp_path / "plain.gguf"
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name("no template here")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# Each bad input: how to make it, the command, what the one-line error must say.
BAD_INPUTS = {
    "missing file": (lambda t: t / "nope.gguf", "info", r"nope.gguf: no such file or directory"),
    "bad magic": (lambda t: _write(t, "x.gguf", b"\x89PNG\r\n\x1a\n...."), "info", r"x.gguf: not a GGUF file \(it starts with b'\\x89PNG'"),
    "truncated gguf": (_truncated, "info", r"cut.gguf: truncated GGUF file: metadata key 'tokenizer.chat_template' runs past the end"),
    "no chat template": (_no_template, "info", r"plain.gguf: this GGUF file has no chat template"),
    "jinja syntax error": (lambda t: _write(t, "t.jinja", b"a\nb\n{% if x %}never closed"), "info",
                           r"t, line 3: Jinja syntax error: Unexpected end of template"),
    "template raises": (lambda t: _write(t, "t.jinja", b"{{ raise_exception('no system role') }}"), "render",
                        r"t, line 1: the template raised an exception: 'no system role'"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(tmp_path, case):
    make, command, message = BAD_INPUTS[case]
    source = make(tmp_path)
    args = [command, source] + ([EXAMPLES / "messages.json"] if command == "render" else [])
    result = run_cli(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tplparse: error: ")
    assert re.search(message, lines[0]), lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize("args, message", [
    (["render", CHATML_GGUF, "missing.json"], "missing.json: no such file"),
    (["render", CHATML_GGUF, "-", "--var", "novalue"], "--var 'novalue': expected KEY=VALUE"),
    (["render", CHATML_GGUF, "-", "--variant", "tool_use"], "no chat template named 'tool_use'"),
])
def test_bad_arguments_exit_2(args, message):
    result = run_cli(*args, stdin="[]")
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_bad_messages_json(tmp_path):
    path = _write(tmp_path, "m.json", b'[{"role": "user",\n "content": }]')
    result = run_cli("render", CHATML_GGUF, path)
    assert result.returncode == 2
    assert "m.json: invalid JSON (messages) at line 2, column 13" in result.stderr


def test_messages_must_be_a_list():
    result = run_cli("render", CHATML_GGUF, "-", stdin='{"role": "user"}')
    assert result.returncode == 2 and "expected a JSON list of messages" in result.stderr


def test_unknown_command_is_a_usage_error():
    result = run_cli("frobnicate", CHATML_GGUF)
    assert result.returncode == 2 and "No such command 'frobnicate'" in result.stderr


def test_probe_report_and_json():
    report = run_cli("probe", CHATML_GGUF)
    assert report.returncode == 0, report.stderr
    assert "end            '</think>'" in report.stdout
    assert "Check: the spec re-renders 6 of 6 standard turns" in report.stdout
    spec = json.loads(run_cli("probe", CHATML_GGUF, "--json").stdout)
    assert spec["reasoning"]["start"] == "<think>" and spec["end_of_turn"][0] == "<|im_end|>"


def test_probe_bad_source_exit_2(tmp_path):
    bad = tmp_path / "t.jinja"
    bad.write_text("{% if %}", encoding="utf-8")
    result = run_cli("probe", bad)
    assert result.returncode == 2 and "Jinja syntax error" in result.stderr and "Traceback" not in result.stderr


def test_gbnf_generic_and_with_tools():
    generic = run_cli("gbnf", CHATML_GGUF)
    assert generic.returncode == 0, generic.stderr
    assert generic.stdout.splitlines()[1].startswith("# template sha256 ")
    assert "root ::= " in generic.stdout
    request = run_cli("gbnf", CHATML_GGUF, "--tools", EXAMPLES / "tools.json", "--llama-request")
    fields = json.loads(request.stdout)
    assert fields["grammar_lazy"] is True and fields["grammar_triggers"] == [{"type": 1, "value": "<tool_call>"}]
    assert '"get_weather"' in fields["grammar"]


def test_grammar_lark_format(tmp_path):
    lark = run_cli("grammar", CHATML_GGUF, "--format", "lark", "--tools", EXAMPLES / "tools.json")
    assert lark.returncode == 0, lark.stderr
    assert lark.stdout.startswith("%llguidance {}\n")
    assert "end-of-turn: <|im_end|>" in lark.stdout and '%json {"type": "object"' in lark.stdout
    same = run_cli("grammar", CHATML_GGUF, "--format", "gbnf").stdout
    assert same == run_cli("gbnf", CHATML_GGUF).stdout
    # llguidance enforces multipleOf: no warning; it does not know `not`: the IR's warning stays.
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"n": {"type": "number", "multipleOf": 2}}}))
    enforced = run_cli("grammar", CHATML_GGUF, "--format", "lark", "--json-schema", schema, "--tool-choice", "none")
    assert enforced.returncode == 0 and "warning" not in enforced.stderr
    schema.write_text(json.dumps({"type": "object", "properties": {"n": {"not": {"const": 1}}}}))
    left_out = run_cli("grammar", CHATML_GGUF, "--format", "lark", "--json-schema", schema, "--tool-choice", "none")
    assert left_out.returncode == 0 and "warning: JSON Schema keyword 'not' at #/properties/n" in left_out.stderr


@pytest.mark.parametrize("command", [["gbnf"], ["grammar", "--format", "gbnf"], ["grammar", "--format", "lark"]],
                         ids=["gbnf", "grammar-gbnf", "grammar-lark"])
def test_open_objects_flag(command):
    """Default: a schema that lists properties takes no other (llama.cpp's, OpenAI strict
    mode's convention); --open-objects: JSON Schema's own rule, extras allowed."""
    args = [*command, CHATML_GGUF, "--tools", EXAMPLES / "tools.json", "--tool-choice", "required"]
    closed, opened = run_cli(*args), run_cli(*args, "--open-objects")
    assert closed.returncode == 0 and opened.returncode == 0, (closed.stderr, opened.stderr)
    assert closed.stdout != opened.stdout
    if "lark" in command:
        assert '"required": ["city"], "additionalProperties": false}' in closed.stdout
        assert '"required": ["city"]}' in opened.stdout and '"additionalProperties"' not in opened.stdout
    else:
        assert "extra-key" not in closed.stdout and "arguments-get-weather-json-extra-key ::=" in opened.stdout


def test_open_objects_flag_for_structured_output_and_llama_request(tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"answer": {"type": "integer"}}}))
    args = ["gbnf", CHATML_GGUF, "--json-schema", schema, "--tool-choice", "none", "--llama-request"]
    closed, opened = run_cli(*args), run_cli(*args, "--open-objects")
    assert closed.returncode == 0 and opened.returncode == 0, (closed.stderr, opened.stderr)
    assert "content-json-extra-key" not in json.loads(closed.stdout)["grammar"]
    assert "content-json-extra-key ::=" in json.loads(opened.stdout)["grammar"]
    assert "--open-objects" in run_cli("grammar", "--help").stdout


def test_grammar_lark_warns_when_the_source_names_no_control_tokens():
    result = run_cli("grammar", EXAMPLES / "templates" / "chatml-think-tools.jinja", "--format", "lark")
    assert result.returncode == 0 and "names no control tokens" in result.stderr
    assert '"<|im_end|>"' in result.stdout  # (written as text)


@pytest.mark.parametrize("tools, message", [
    ([{"type": "function", "function": {"description": "no name"}}], "tool 1 has no name"),
    ([3], "tool 1 has no name"),
    ({"name": "f"}, "expected a JSON list of tool definitions, not a JSON object"),
    ([{"name": "f", "parameters": "x"}], "parameters must be a JSON Schema object"),
])
def test_grammar_bad_tools_exit_2(tmp_path, tools, message):
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools), encoding="utf-8")
    result = run_cli("grammar", CHATML_GGUF, "--tools", path)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_grammar_lark_with_odd_tool_names(tmp_path):
    path = tmp_path / "tools.json"
    names = ['quo"te', "new\nline", "del\x7fete", "sla/sh\\"]
    path.write_text(json.dumps([{"name": n, "parameters": {"type": "object"}} for n in names]), encoding="utf-8")
    result = run_cli("grammar", CHATML_GGUF, "--format", "lark", "--tools", path)
    assert result.returncode == 0, result.stderr  # (the grammar compiled in llguidance before it was printed)


def test_grammar_lark_with_llama_request_exit_2():
    result = run_cli("grammar", CHATML_GGUF, "--format", "lark", "--llama-request")
    assert result.returncode == 2 and "--llama-request" in result.stderr and "Traceback" not in result.stderr


def test_gbnf_reports_unsupported_schema_keywords(tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"n": {"type": "number", "multipleOf": 2}}}))
    result = run_cli("gbnf", CHATML_GGUF, "--json-schema", schema, "--tool-choice", "none")
    assert result.returncode == 0
    assert "warning: JSON Schema keyword 'multipleOf' at #/properties/n" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--tool-choice", "nope"], "--tool-choice 'nope'"),
    (["--mode", "sideways"], "--mode 'sideways'"),
    (["--tools", "missing.json"], "missing.json: no such file"),
])
def test_gbnf_bad_arguments_exit_2(args, message):
    result = run_cli("gbnf", CHATML_GGUF, *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [["export", "response-template"], ["export", "vllm", "-o", "out"]])
def test_exports_warn_when_a_stand_in_token_is_in_them(tmp_path, command):
    """A bare .jinja names no eos_token: the probe used a stand-in, and where the export holds it,
    the user is told (and told how to name the model's); with --eos-token, no warning."""
    source = EXAMPLES / "templates" / "bracket-tools.jinja"
    result = run_cli(*command[:2], source, *command[2:], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "stand-in '<|eos_token|>'" in result.stderr and "--eos-token" in result.stderr, result.stderr
    named = run_cli(*command[:2], source, *command[2:], "--eos-token", "</s>", cwd=tmp_path)
    assert named.returncode == 0 and "stand-in" not in named.stderr, named.stderr


@pytest.mark.parametrize("command", [["export", "response-template"], ["export", "vllm", "-o", "out"]])
def test_exports_of_a_template_that_renders_no_turn_are_exit_2(tmp_path, command):
    source = tmp_path / "plain.jinja"
    source.write_text("hello", encoding="utf-8")
    result = run_cli(*command[:2], source, *command[2:], cwd=tmp_path)
    assert result.returncode == 2 and "renders no assistant turn" in result.stderr, result.stderr
    assert result.stdout == "" and not (tmp_path / "out").exists()


def test_written_files_get_the_mode_a_plain_write_gives(tmp_path):
    """Files are written through a temporary file (0600) and a rename: they end with the mode
    the umask gives a new file, or the mode of the file they replace."""
    old = os.umask(0o022)
    try:
        result = run_cli("export", "response-template", EXAMPLES / "chatml-think-tools.gguf", "-o", tmp_path / "rt.json")
        assert result.returncode == 0, result.stderr
        assert (tmp_path / "rt.json").stat().st_mode & 0o777 == 0o644
        (tmp_path / "rt.json").chmod(0o640)
        result = run_cli("export", "response-template", EXAMPLES / "chatml-think-tools.gguf", "-o", tmp_path / "rt.json")
        assert result.returncode == 0 and (tmp_path / "rt.json").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


HEAVY_MODULES = ("tplparse.probe", "tplparse.grammar", "tplparse.bridge", "tplparse.source.loader", "gguf", "numpy",
                 "jinja2", "jsonschema", "lark")


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["parse", "generated/qwen_qwen3_0_6b.py"]],
                         ids=["version", "help", "parse-module"])
def test_the_commands_that_need_no_probe_import_none_of_it(argv):
    """`tplparse --version`, `--help` and `parse MODULE` start fast (issue #32; the time is
    tests/benchmarks/bench_start.py's): none of the probe, the grammar builder, the GGUF
    reader (numpy), jinja2, jsonschema or lark is imported."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = ("import json, sys\nfrom tplparse.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('LOADED', json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code, *argv], input="<think>a</think>b", capture_output=True,
                          text=True, cwd=root, check=True)
    loaded = json.loads(done.stdout.rsplit("LOADED", 1)[1])
    assert [m for m in loaded if m.startswith(HEAVY_MODULES)] == [], done.stdout
    if argv[0] == "parse":
        assert '"reasoning_content": "a"' in done.stdout


def test_the_version_is_the_package_version():
    """`tplparse --version` reads tplparse/version.py (no metadata lookup at start): the same
    version pyproject.toml gives the package."""
    from pathlib import Path

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    declared = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]["version"]
    shown = run_cli("--version")
    assert shown.returncode == 0 and shown.stdout.strip() == f"tplparse, version {declared}"
