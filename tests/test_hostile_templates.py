"""Hostile templates (issue #28, round 2): each is stopped with one line on stderr and exit
status 2, inside the budget and the memory limit the command was given.

Every test sets small limits (`tplparse --time-limit / --memory-limit`, RenderLimits) so that
it takes seconds, and so that it stays bounded on code without the limits too.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time

import gguf
import pytest

import tplparse
from tplparse import ChatTemplate, RenderLimits, TemplateError
from tplparse.errors import LoadError

from conftest import EXAMPLES, TPLPARSE, run_cli

USER = [{"role": "user", "content": "hi"}]
MESSAGES = EXAMPLES / "messages.json"
# A template that renders a conversation, appended to a hostile part so that the probe gets
# past its first render only through the hostile part.
CONVERSATION = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"


def one_line_error(result, *words) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tplparse: error: "), result.stderr[-2000:]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def write(tmp_path, text: str, name: str = "hostile.jinja"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def tpl(source: str, **kwargs) -> ChatTemplate:
    return ChatTemplate(source=source, name="t", family="t", origin="test", **kwargs)

# --- the documented width refusals, without the bypasses -------------------------------------

SMALL = RenderLimits(max_output_chars=10_000)


@pytest.mark.parametrize("source", [
    "{{ ('%0100000d' | format(1)) | length }}",
    "{{ ('%*d' % (100000, 1)) | length }}",
    "{{ ('%.*f' % (100000, 1.5)) | length }}",
    "{{ '{0:{1}}'.format('a', 100000) | length }}",
    "{{ '{x:>{w}}'.format(x='a', w=100000) | length }}",
    "{{ ('\\t' * 100).expandtabs(5000) | length }}",
])
def test_width_bypasses_are_refused(source):
    with pytest.raises(TemplateError, match="blocked by the sandbox") as raised:
        tpl(source, limits=SMALL).render(USER)
    assert raised.value.limit


def test_ordinary_widths_still_render():
    source = ("[{{ '%5d' % 3 }}][{{ '%*d' % (3, 1) }}][{{ '%s-%s' | format('a', 'b') }}][{{ '{0:{1}}'.format('a', 3) }}]"
              "[{{ '{:>4}'.format(7) }}][{{ 'a\\tb'.expandtabs(4) }}][{{ '%d items' % 12345678901234 }}]")
    assert tpl(source, limits=SMALL).render(USER) == "[    3][  1][a-b][a  ][   7][a   b][12345678901234 items]"

# --- what the template says is printed escaped, on one line ----------------------------------


def test_a_raise_exception_message_is_printed_escaped(tmp_path):
    source = write(tmp_path, "{{ raise_exception('one\\ntwo\\r\\x1b[31mred\\x1b[0m\\x00' ~ 'x' * 5000) }}")
    result = run_cli("render", source, MESSAGES)
    line = one_line_error(result, r"'one\ntwo\r\x1b[31mred\x1b[0m\x00xxx", "more characters")
    assert not any(ch in result.stderr for ch in "\r\x1b\x00")
    assert len(line) < 600


def test_any_error_line_is_escaped(tmp_path):
    result = run_cli("info", tmp_path / "two\nlines\x1b[2J.jinja")
    one_line_error(result, r"two\nlines\x1b[2J.jinja", "no such file")
    assert "\x1b" not in result.stderr

# --- budgets that hold: a C call the watchdog cannot interrupt is killed at the budget ------

ONE_LONG_C_CALL = {
    # each squaring is one C call; the 25th takes seconds, the 30th minutes
    "big-integer squarings": "{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}"
                             "{% endfor %}{{ ns.x > 1 }}" + CONVERSATION,
    # list + list inside one sum(): quadratic, and slow to grow in memory
    "summing lists": "{{ ([[0] * 1000] * 100000) | sum(start=[]) | length }}" + CONVERSATION,
}


@pytest.mark.parametrize("what", list(ONE_LONG_C_CALL))
@pytest.mark.parametrize("command", ["render", "compile"])
def test_the_budget_bounds_the_whole_command(tmp_path, what, command):
    source = write(tmp_path, ONE_LONG_C_CALL[what])
    args = [MESSAGES] if command == "render" else ["-o", tmp_path / "out"]
    started = time.monotonic()
    result = run_cli("--time-limit", "2", command, source, *args, timeout=120)
    took = time.monotonic() - started
    one_line_error(result, "the render budget of 2 s")
    assert took < 2 + 6, took  # (the budget, a second's grace, and the start of the command)
    assert not (tmp_path / "out").exists()


def test_compile_stops_where_probe_stops(tmp_path):
    """Each render takes tenths of a second, the probe renders dozens of times: the budget is
    the whole command's, not the probe's and again the proof's."""
    source = write(tmp_path, "{%- for i in range(3000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
                             + CONVERSATION)
    for command, args in (("probe", []), ("compile", ["-o", tmp_path / "out"])):
        started = time.monotonic()
        one_line_error(run_cli("--time-limit", "2", command, source, *args), "the render budget of 2 s")
        assert time.monotonic() - started < 2 + 6
    assert not (tmp_path / "out").exists()


def test_the_time_limit_comes_from_the_environment_too(tmp_path):
    source = write(tmp_path, ONE_LONG_C_CALL["big-integer squarings"])
    result = subprocess.run([str(TPLPARSE), "render", str(source), str(MESSAGES)], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "TPLPARSE_TIME_LIMIT": "1.5"})
    one_line_error(result, "the render budget of 1.5 s")


def test_a_library_caller_gets_the_same_bound():
    from tplparse.source.isolation import WorkLimits, run_isolated

    template = tpl(ONE_LONG_C_CALL["big-integer squarings"])
    started = time.monotonic()
    with pytest.raises(TemplateError, match="the render budget of 1 s") as raised:
        run_isolated(lambda: template.render(USER), WorkLimits(seconds=1), name="t")
    assert raised.value.limit and time.monotonic() - started < 4
    # what a job returns, and what it raises, come back as they were
    assert run_isolated(lambda: tpl(CONVERSATION).render(USER)) == "<user>hi</s>"
    with pytest.raises(TemplateError) as raised:
        run_isolated(lambda: tpl("{{ raise_exception('no') }}").render(USER))
    assert str(raised.value) == "t, line 1: the template raised an exception: 'no'" and raised.value.line == 1


def test_a_probe_inside_a_budget_keeps_to_it():
    from tplparse.probe import probe
    from tplparse.source.render import time_budget

    slow = tpl("{%- for i in range(3000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}" + CONVERSATION)
    started = time.monotonic()
    with pytest.raises(TemplateError, match="probing stopped: the render budget of 1 s"):
        with time_budget(1):
            probe(slow)
    assert time.monotonic() - started < 4


def test_a_template_crosses_to_the_child_and_back():
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    again = pickle.loads(pickle.dumps(template))
    assert again == template and dict(again.named_tokens) == dict(template.named_tokens)
    assert again.render(USER) == template.render(USER)

# --- memory: peak bounded by the limit, not by a poll ---------------------------------------

AMPLIFIERS = {
    "replace": "{{ ('x' * 5000000) | replace('x', 'y' * 600) | length }}",
    "join": "{{ (['a'] * 5000000) | join('x' * 600) | length }}",
    "tojson separators": "{{ ([0] * 5000000) | tojson(separators=('x' * 600, ':')) | length }}",
}

# Runs the CLI and prints the peak resident memory of it and its child (the test process's own
# children would count every earlier test's).
_PEAK = """
import json, resource, subprocess, sys
result = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=120)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"returncode": result.returncode, "stderr": result.stderr, "peak": peak}))
"""


def peak_run(*args):
    out = subprocess.run([sys.executable, "-c", _PEAK, str(TPLPARSE), *map(str, args)], capture_output=True,
                         text=True, timeout=180, check=True)
    facts = json.loads(out.stdout)
    return subprocess.CompletedProcess(args, facts["returncode"], "", facts["stderr"]), facts["peak"]


@pytest.mark.parametrize("what", list(AMPLIFIERS))
def test_memory_amplification_stops_at_the_memory_limit(tmp_path, what):
    limit = 200 << 20
    _, baseline = peak_run("render", write(tmp_path, CONVERSATION, "plain.jinja"), MESSAGES)
    result, peak = peak_run("--memory-limit", limit >> 20, "render", write(tmp_path, AMPLIFIERS[what]), MESSAGES)
    one_line_error(result, "the memory limit of 200 MB")
    assert peak < baseline + limit + (32 << 20), (peak >> 20, baseline >> 20)

# --- nesting that Jinja or Python cannot compile: a limit, not a traceback ------------------

NESTED = {
    "parentheses": "{{ " + "(" * 300 + "1" + ")" * 300 + " }}",
    "lists": "{{ " + "[" * 300 + "1" + "]" * 300 + " }}",
    "ifs": "{% if true %}" * 500 + "x" + "{% endif %}" * 500,
    "a filter chain": "{{ 'x'" + "|string" * 2000 + " }}",
    "30 nested for loops": "".join(f"{{% for i{n} in [1] %}}" for n in range(30)) + "x" + "{% endfor %}" * 30,
}


@pytest.mark.parametrize("what", list(NESTED))
def test_nesting_too_deep_to_compile_is_one_line(tmp_path, what):
    line = one_line_error(run_cli("probe", write(tmp_path, NESTED[what])), "nests too deeply to compile")
    assert "Traceback" not in line


@pytest.mark.parametrize("what", list(NESTED))
def test_nesting_too_deep_is_a_limit_error_for_the_library_too(what):
    with pytest.raises(TemplateError, match="nests too deeply to compile") as raised:
        tpl(NESTED[what]).check()
    assert raised.value.limit

# --- the size of a template, and the time its compile may take ------------------------------


def test_a_template_over_the_size_limit_is_not_compiled(tmp_path):
    source = write(tmp_path, "x" * (256 * 1024 + 1))
    one_line_error(run_cli("info", source), "262145 characters", "262144")
    with pytest.raises(TemplateError, match="the limit is 100") as raised:
        tpl("x" * 101, limits=RenderLimits(max_template_chars=100)).check()
    assert raised.value.limit


def test_a_slow_compile_is_stopped_at_the_budget(tmp_path):
    # Under the size limit, but some seconds of Jinja's compile (filter chains are its slowest).
    source = write(tmp_path, "{{ a|e|e|e|e }}" * 17000)
    started = time.monotonic()
    result = run_cli("--time-limit", "1", "info", source)
    took = time.monotonic() - started
    one_line_error(result, "the render budget of 1 s")
    assert took < 8, took

# --- probe and compile agree on a template that renders nothing ------------------------------


def test_probe_refuses_a_template_that_raises_on_every_render(tmp_path):
    source = write(tmp_path, "{{ raise_exception('no conversation is good enough') }}")
    compiled = run_cli("compile", source, "-o", tmp_path / "out")
    one_line_error(compiled, "renders none of the standard turns")
    for args in (["probe"], ["probe", "--json"], ["gbnf"]):
        result = run_cli(*args, source)
        one_line_error(result, "renders none of the standard turns", "no conversation is good enough")
        assert result.stdout == ""

# --- a prompt is Unicode text, or an error ------------------------------------------------


def test_a_prompt_with_a_lone_surrogate_is_an_error(tmp_path):
    result = run_cli("render", write(tmp_path, "{{ '\\ud800' }}"), MESSAGES)
    one_line_error(result, "lone surrogate", r"'\ud800'")
    assert result.stdout == ""

# --- GGUF: a chat template is read as written, or not at all ---------------------------------


def test_a_gguf_template_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "bad.gguf"
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name("not utf-8")
    writer.add_chat_template("{{ messages[0].content }}<|end|>")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    data = path.read_bytes()
    at = data.index(b"<|end|>")
    path.write_bytes(data[:at] + b"\xff" + data[at + 1:])  # one byte of the template is no UTF-8
    with pytest.raises(LoadError, match=r"the chat template .*'tokenizer.chat_template'.* not valid UTF-8"):
        tplparse.load(path)
    one_line_error(run_cli("info", path), "not valid UTF-8", "0xff")
