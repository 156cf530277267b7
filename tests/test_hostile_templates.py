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
