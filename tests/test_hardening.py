"""Hostile use: calls of tools nobody offered, streams cut inside a call, the public API
misused, and every CLI error one line with exit status 2 and nothing written.

(Cost on hostile output shapes is a benchmark, tests/benchmarks/bench_adversarial.py, which
prints 4N/N ratios; no test here times anything.)
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tplparse
from tplparse import runtime
from tplparse.check.outputs import STANDARD_TOOLS
from tplparse.check.reference import ReferenceParser
from tplparse.errors import InputError
from tplparse.pipeline import write_text_atomically

from conftest import CUT, EXAMPLES, TPLPARSE, UNKNOWN_TOOLS, compiled as compiled_example, corpus_compiled, corpus_ids, corpus_stems, examples, needs_corpus, run_cli

CHATML_GGUF = EXAMPLES / "chatml-think-tools.gguf"
CHATML_JINJA = EXAMPLES / "templates" / "chatml-think-tools.jinja"
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
RM_RF = '<tool_call>\n{"name": "rm_rf", "arguments": {"path": "/"}}\n</tool_call>'
WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def chatml():
    entry = compiled_example(CHATML_GGUF)
    return entry.spec, entry.protocol


def streamed(protocol, text, size=1, **kwargs):
    parser = runtime.StreamParser(protocol, **kwargs)
    deltas = []
    for i in range(0, len(text), size):
        deltas += parser.feed(text[i:i + size])
    deltas += parser.end()
    return deltas, parser.message


def announced_names(deltas) -> list[str]:
    return [c["function"]["name"] for d in deltas for c in d.get("tool_calls", [])
            if c.get("function", {}).get("name")]


# --- calls of tools the caller did not offer ----------------------------------------------


def test_a_call_of_a_tool_not_offered_is_an_error_not_a_call(chatml):
    spec, protocol = chatml
    text = "Cleaning up.\n" + RM_RF
    for size in (len(text), 4, 1):
        deltas, message = streamed(protocol, text, size, tools=WEATHER, start="content")
        assert message["tool_calls"] == []
        assert [e["kind"] for e in message["errors"]] == ["unknown_tool"]
        error = message["errors"][0]
        assert "'rm_rf'" in error["message"]
        assert text.index("<tool_call>") < error["offset"] <= len(text)
        assert announced_names(deltas) == [], "a header for a tool nobody offered went out"
        assert message["content"] == "Cleaning up."


def test_without_tools_any_name_is_a_call(chatml):
    spec, protocol = chatml
    message = runtime.parse(protocol, RM_RF, start="content")
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["rm_rf"]
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"path": "/"}
    assert message["errors"] == []


def test_an_offered_call_beside_an_unknown_one_is_kept(chatml):
    spec, protocol = chatml
    text = RM_RF + "\n" + WEATHER_CALL
    deltas, message = streamed(protocol, text, 1, tools=WEATHER, start="content")
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    assert [e["kind"] for e in message["errors"]] == ["unknown_tool"]
    assert announced_names(deltas) == ["get_weather"]
    # The refused call's header never went out, so it takes no index: the offered call is the
    # client's first.
    assert {c["index"] for d in deltas for c in d.get("tool_calls", [])} == {0}
    assert message["tool_calls"][0]["id"] == "call_0"


def test_the_reference_parser_refuses_unknown_tools_too(chatml):
    spec, _ = chatml
    message = ReferenceParser(spec, tools=WEATHER, start="content").parse(RM_RF)
    assert message["tool_calls"] == []
    assert [e["kind"] for e in message["errors"]] == ["unknown_tool"]


OTHER_TOOL = [{"type": "function", "function": {"name": "a_tool_the_model_did_not_call", "parameters": {
    "type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def compiled():
    """stem -> (template, spec, protocol): the session's compile of a corpus template (tests/conftest.py)."""
    def get(stem):
        entry = corpus_compiled(stem)
        return entry.template, entry.spec, entry.protocol
    return get


class CallTurn:
    """A turn with calls: its text, the state it starts in, and the names of its calls."""

    def __init__(self, turn, text, start, names):
        self.turn, self.text, self.start, self.names = turn, text, start, names


def call_turns(spec, outputs) -> list[CallTurn]:
    """The family's turns with calls, as the template renders them (`outputs`, its model
    outputs); where it renders none and the calls' format comes from an override, as the spec
    writes them."""
    turns = [CallTurn(o.turn, o.text, o.start, [c[0] for c in o.expected["tool_calls"]])
             for o in outputs if o.expected["tool_calls"]]
    if not turns and spec.tool_calls is not None:
        calls = [{"name": "convert_currency", "arguments": {"amount": "EUR 12", "count": 3}},
                 {"name": "get_rate", "arguments": {"target": "USD", "exact": True}}]
        for label, written in (("one call", calls[:1]), ("two calls", calls)):
            turns.append(CallTurn(label, spec.tool_calls.format(written), "content", [c["name"] for c in written]))
    return turns


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(UNKNOWN_TOOLS))
def test_every_family_refuses_calls_of_tools_not_offered(compiled, stem):
    template, spec, protocol = compiled(stem)
    turns = call_turns(spec, corpus_compiled(stem).outputs)
    if not turns:
        pytest.skip(f"{stem}: the family has no tool-call format")
    for turn in turns:
        offered = runtime.parse(protocol, turn.text, tools=STANDARD_TOOLS, start=turn.start)
        assert [c["function"]["name"] for c in offered["tool_calls"]] == turn.names, (turn.turn, offered["errors"])
        deltas, refused = streamed(protocol, turn.text, 1, tools=OTHER_TOOL, start=turn.start)
        assert refused["tool_calls"] == [], turn.turn
        assert [e["kind"] for e in refused["errors"]] == ["unknown_tool"] * len(turn.names), turn.turn
        assert announced_names(deltas) == [], turn.turn


# --- a stream cut inside a call is truncated, not invalid ---------------------------------


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(CUT))
def test_a_stream_cut_inside_a_call_is_truncated(compiled, stem):
    """Every cut from the first call's name to the end of the turn: the output is a prefix of a
    valid turn, so "not enough input yet" is the only thing wrong with it; no cut may read as
    invalid, and no call may come back that the whole turn does not hold."""
    template, spec, protocol = compiled(stem)
    turns = call_turns(spec, corpus_compiled(stem).outputs)
    if not turns:
        pytest.skip(f"{stem}: the family has no tool-call format")
    wrong = []
    for turn in turns:
        text = turn.text
        first = min(text.find(name) for name in turn.names if name in text)
        end = len(text) - max((len(m) for m in spec.end_of_turn if m and text.endswith(m)), default=0)
        whole = runtime.parse(protocol, text, tools=STANDARD_TOOLS, start=turn.start)["tool_calls"]
        for cut in range(first, end):
            for finish in ("stop", "length"):
                message = runtime.parse(protocol, text[:cut], tools=STANDARD_TOOLS, start=turn.start,
                                        finish_reason=finish)
                kinds = {e["kind"] for e in message["errors"]}
                if kinds & {"invalid_tool_call", "invalid_arguments", "unknown_tool"}:
                    wrong.append((turn.turn, finish, text[max(0, cut - 30):cut], sorted(kinds)))
                assert message["tool_calls"] == whole[:len(message["tool_calls"])], (turn.turn, cut)
    assert not wrong, f"{len(wrong)} cut points read as invalid, e.g. {wrong[:3]}"


def test_a_cut_inside_a_literal_word_is_truncated(chatml):
    _, protocol = chatml
    for cut in ('<tool_call>\n{"name": "f", "arguments": {"x": tr', '<tool_call>\n{"name": "f", "arguments": {"x": -',
                '<tool_call>\n{"name": "f", "arguments": {"x": 1e', '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_ca'):
        message = runtime.parse(protocol, cut, start="content", finish_reason="length")
        assert [e["kind"] for e in message["errors"]] == ["truncated_tool_call"], (cut, message["errors"])
        assert message["tool_calls"] == []


def test_a_wrong_character_is_still_invalid(chatml):
    _, protocol = chatml
    message = runtime.parse(protocol, '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_cal!', start="content")
    assert [e["kind"] for e in message["errors"]] == ["invalid_tool_call"]


# --- the public API under misuse ----------------------------------------------------------


def test_the_documented_states(chatml):
    _, protocol = chatml
    parser = runtime.StreamParser(protocol, start="content")
    with pytest.raises(ValueError, match="after end"):
        parser.message  # noqa: B018 - the property raises before end()
    parser.feed("hi")
    parser.end()
    assert parser.end() == []  # a second end() says nothing more
    with pytest.raises(ValueError, match=r"feed\(\) after end\(\)"):
        parser.feed("more")
    assert parser.message["content"] == "hi"


@pytest.mark.parametrize("kwargs, kind, names", [
    ({"tools": ["get_weather"]}, TypeError, "tools[0]"),
    ({"tools": {"name": "f"}}, TypeError, "tools must be a list"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": "x"}}}]}, TypeError,
     "parameters.properties"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": ["a"]}}}]}, TypeError,
     "parameters.properties"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "object"}}]}, TypeError, "parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": 3}}}}]}, TypeError,
     "'a'"),
    ({"generation_prompt": b"<|im_start|>assistant\n"}, TypeError, "generation_prompt"),
    ({"start": "thinking"}, ValueError, "start"),
])
def test_bad_arguments_are_named_at_the_door(chatml, kwargs, kind, names):
    _, protocol = chatml
    with pytest.raises(kind) as raised:
        runtime.StreamParser(protocol, **kwargs)
    assert names in str(raised.value)
    with pytest.raises(kind):
        runtime.parse(protocol, "hi", **kwargs)


def test_bad_finish_reasons_and_chunks(chatml):
    _, protocol = chatml
    with pytest.raises(TypeError, match="finish_reason"):
        runtime.parse(protocol, "hi", finish_reason=None)
    parser = runtime.StreamParser(protocol)
    with pytest.raises(TypeError, match="str or bytes"):
        parser.feed(["hi"])
    with pytest.raises(TypeError, match="finish_reason"):
        parser.end("")
    parser.end("length")  # the failed calls changed nothing
    assert parser.message["finish_reason"] == "length"
    with pytest.raises(TypeError, match="protocol"):
        runtime.StreamParser("not tables")


_WRONG = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.binary(max_size=5), st.lists(st.integers(), max_size=2),
                   st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.floats(allow_nan=False))
_TOOLISH = st.one_of(_WRONG, st.lists(st.one_of(_WRONG, st.fixed_dictionaries({"type": st.just("function"), "function": st.one_of(
    _WRONG, st.fixed_dictionaries({"name": st.one_of(st.just("f"), _WRONG), "parameters": st.one_of(
        _WRONG, st.fixed_dictionaries({"properties": st.one_of(_WRONG, st.dictionaries(st.just("a"), _WRONG, max_size=1))}))}))})),
    max_size=2))
_STEP = st.one_of(
    st.tuples(st.just("feed"), st.one_of(st.text(max_size=12), st.binary(max_size=6), _WRONG,
                                         st.sampled_from(["<tool_call>", "</think>", "<think>", "{\"name\": \"f\""]))),
    st.tuples(st.just("end"), st.one_of(st.sampled_from(["stop", "length"]), _WRONG)),
    st.tuples(st.just("message"), st.none()),
)


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tools=_TOOLISH, prompt=st.one_of(st.none(), st.text(max_size=8), _WRONG),
       start=st.one_of(st.none(), st.sampled_from(["reasoning", "content"]), _WRONG), steps=st.lists(_STEP, max_size=8))
def test_random_misuse_raises_only_the_documented_exceptions(chatml, tools, prompt, start, steps):
    _, protocol = chatml
    try:
        parser = runtime.StreamParser(protocol, tools=tools, generation_prompt=prompt, start=start)
    except (TypeError, ValueError) as e:
        assert str(e)  # a message that says what was wrong
        return
    for step, value in steps:
        try:
            if step == "feed":
                out = parser.feed(value)
                assert isinstance(out, list)
            elif step == "end":
                out = parser.end(value)
                assert isinstance(out, list)
            else:
                message = parser.message
                assert set(message) >= {"content", "reasoning_content", "tool_calls", "errors"}
        except (TypeError, ValueError) as e:
            assert str(e)


# --- the CLI: one line, exit 2, nothing written -------------------------------------------


def one_line_error(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tplparse: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_parse_tools_must_be_a_list(tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text('{"x": 1}')
    one_line_error(run_cli("parse", CHATML_GGUF, "--tools", tools, stdin="hi"), str(tools), "JSON list")


def test_parse_tools_that_are_not_tool_definitions(tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text('[{"type": "function", "function": {"name": "f", "parameters": {"properties": "x"}}}]')
    one_line_error(run_cli("parse", CHATML_GGUF, "--tools", tools, stdin="hi"), str(tools), "parameters.properties")


def test_parse_prompt_that_is_not_utf8(tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_bytes(b"<|im_start|>assistant\n\xff\xfe")
    one_line_error(run_cli("parse", CHATML_GGUF, "--prompt", prompt, stdin="hi"), str(prompt), "not UTF-8")


def test_parse_output_that_is_not_utf8():
    one_line_error(run_cli("parse", CHATML_GGUF, stdin=b"caf\xe9"), "<stdin>", "not UTF-8")


def test_parse_an_empty_finish_reason():
    one_line_error(run_cli("parse", CHATML_GGUF, "--finish-reason", "", stdin="hi"), "--finish-reason")


def test_compile_into_a_file(tmp_path):
    out = tmp_path / "taken"
    out.write_text("mine")
    one_line_error(run_cli("compile", CHATML_GGUF, "-o", out), str(out), "not a folder")
    assert out.read_text() == "mine"
    assert files_under(tmp_path) == ["taken"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc on this system")
def test_compile_into_a_folder_that_cannot_be_made():
    one_line_error(run_cli("compile", CHATML_GGUF, "-o", "/proc/tplparse-nowhere"), "/proc/tplparse-nowhere")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders: run the tests as a user to check this")
def test_compile_into_a_read_only_folder(tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        one_line_error(run_cli("compile", CHATML_GGUF, "-o", out), str(out), "Permission denied")
        assert files_under(out) == []
    finally:
        out.chmod(0o755)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads unreadable files: run the tests as a user to check this")
def test_an_unreadable_template(tmp_path):
    source = tmp_path / "t.jinja"
    source.write_text("{{ messages }}")
    source.chmod(0)
    one_line_error(run_cli("info", source), str(source))


@pytest.mark.parametrize("args, words", [
    (("compile",), ("Missing argument 'SOURCE'", "tplparse compile --help")),
    (("compile", str(CHATML_GGUF), "--frobnicate"), ("--frobnicate",)),
    (("parse", str(CHATML_GGUF), "--start", "sideways"), ("sideways",)),
    (("info", "/nonexistent/t.jinja"), ("/nonexistent/t.jinja", "no such file")),
])
def test_usage_errors_are_one_line(args, words):
    one_line_error(run_cli(*args), *words)


def test_an_interrupted_write_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "generated" / "family.py"
    target.parent.mkdir()
    target.write_text("# the module a running server imports\n")

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomically(target, "# half of the new module")
    assert target.read_text() == "# the module a running server imports\n"
    assert files_under(tmp_path) == ["generated", "generated/family.py"]


def test_a_write_error_names_the_path(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="not a folder"):
        write_text_atomically(tmp_path / "file" / "x.py", "")


# --- sources from pipes and FIFOs ---------------------------------------------------------


def bash(command: str, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=cwd, timeout=300,
                            env={**os.environ, "TPLPARSE": str(TPLPARSE)})
    return result


def test_a_template_from_a_pipe_is_read_whole(tmp_path):
    expected = tplparse.load(CHATML_JINJA).sha256
    result = bash(f'"$TPLPARSE" info --json <(cat {CHATML_JINJA})', tmp_path)
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout)
    assert facts["sha256"] == expected
    rendered = bash(f'"$TPLPARSE" render <(cat {CHATML_JINJA}) {EXAMPLES / "messages.json"}', tmp_path)
    from_file = run_cli("render", CHATML_JINJA, EXAMPLES / "messages.json")
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout == from_file.stdout and from_file.stdout


def test_compile_from_a_pipe_names_the_family_template(tmp_path):
    result = bash(f'"$TPLPARSE" compile <(cat {CHATML_JINJA}) -o out', tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "generated" / "template.py").is_file()
    named = bash(f'"$TPLPARSE" compile <(cat {CHATML_JINJA}) --family chatml -o out2', tmp_path)
    assert (tmp_path / "out2" / "generated" / "chatml.py").is_file(), named.stderr


def test_a_template_from_stdin():
    result = run_cli("info", "--json", "-", stdin=CHATML_JINJA.read_text())
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sha256"] == tplparse.load(CHATML_JINJA).sha256


def test_a_fifo_with_one_writer_does_not_hang(tmp_path):
    fifo = tmp_path / "template.fifo"
    os.mkfifo(fifo)
    text = CHATML_JINJA.read_text()

    def write():
        with open(fifo, "w") as f:
            f.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    result = run_cli("info", "--json", fifo, timeout=60)
    writer.join(timeout=10)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sha256"] == tplparse.load(CHATML_JINJA).sha256


@pytest.mark.parametrize("command, words", [
    ('"$TPLPARSE" info <(true)', ("empty",)),
    ('"$TPLPARSE" info <(printf "\\377\\376x")', ("not UTF-8",)),
    (f'"$TPLPARSE" info <(cat {CHATML_GGUF})', ("GGUF", "give its path")),
])
def test_a_pipe_that_holds_no_template_is_refused(tmp_path, command, words):
    one_line_error(bash(command, tmp_path), *words)
