"""A render that breaks its own notation (issue #53, class 7): a pythonic call list whose
keyword arguments the template joins without commas cannot prove (`amount="EUR 12"count=3`,
or `amount=EUR 12 count=3` with bare values), and the refusal names the defect: what Python's
call notation writes between keyword arguments, what the render wrote, and the way forward.
The override it names is a way forward that works: with it the compile proves, its parser
reads the calls as the notation writes them, and refuses them as the template wrote them."""

from __future__ import annotations

import json

import pytest

from tplparse import runtime
from tplparse.bridge import compile_in_memory
from tplparse.check.notation import notation_defects
from tplparse.grammar.reading import reading_tables
from tplparse.pipeline import compile_template
from tplparse.probe.overrides import parse_override
from tplparse.source import ChatTemplate

from conftest import run_cli

PYTHONIC = (
    "{%- for m in messages %}<|{{ m.role }}|>"
    "{%- if m.tool_calls %}[{% for c in m.tool_calls %}{{ c.function.name }}("
    "{%- for k, v in c.function.arguments.items() %}{{ k }}=VALUE{% if not loop.last %}SEPARATOR{% endif %}{% endfor %})"
    "{%- if not loop.last %}, {% endif %}{% endfor %}]"
    "{%- else %}{{ m.content }}{% endif %}<|end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif %}"
)
# name: (how a value is written, what the template writes between arguments)
BROKEN = {
    "JSON values joined with nothing": ("{{ v | tojson }}", ""),
    "bare values joined with a space": ('{{ "%s" | format(v) }}', " "),
}


def pythonic(value: str, separator: str) -> str:
    return PYTHONIC.replace("VALUE", value).replace("SEPARATOR", separator)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_render_that_breaks_its_notation_is_refused_naming_the_defect(tmp_path, case):
    value, separator = BROKEN[case]
    path = tmp_path / "broken.jinja"
    path.write_text(pythonic(value, separator))
    result = run_cli("compile", path, "--eos-token", "<|end|>", "-o", tmp_path / "out")
    assert result.returncode == 2, result.stdout + result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("tplparse: error: broken: the parser does not read back")
    assert "the render breaks its own notation: between a Python call's keyword arguments it " \
           f"writes {separator!r}" in error
    assert "where the notation writes ', '" in error and "compile the template corrected" in error
    assert 'compile --override FILE with {"patch": {"tool_calls": {"arguments": {"separator": ", "}}}}' in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_override_the_refusal_names_compiles_and_reads_the_notation(tmp_path, case):
    value, separator = BROKEN[case]
    template = ChatTemplate(source=pythonic(value, separator), name="broken", family="broken",
                            origin="test", named_tokens={"bos_token": "", "eos_token": "<|end|>"})
    override = parse_override({"why": "Python writes ', ' between keyword arguments.",
                               "template_sha256": [template.sha256],
                               "patch": {"tool_calls": {"arguments": {"separator": ", "}}}},
                              "separator.json", user=True)
    compiled = compile_template(template, override=override)
    assert compiled.proof.ok, compiled.proof.table()
    assert compiled.proof.restated == ("calls read as the notation writes them: the override states "
                                       f"tool_calls.arguments.separator ', ', the template writes {separator!r}")
    protocol = runtime.Protocol(reading_tables(compiled.spec))
    written = '[get_weather(city="Paris", days=3), get_time(zone="UTC")]<|end|>'
    days: object = 3
    if separator:  # (bare values, as the template writes them: text, where no schema types them)
        written, days = "[get_weather(city=Paris, days=3), get_time(zone=UTC)]<|end|>", "3"
    message = runtime.parse(protocol, written)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == \
        [("get_weather", {"city": "Paris", "days": days}), ("get_time", {"zone": "UTC"})], message
    # (the run-on form the template renders is not what the parser now reads)
    run_on = written.replace(", days", separator + "days")
    assert runtime.parse(protocol, run_on)["tool_calls"] != message["tool_calls"]


def test_an_override_of_another_field_reads_the_renders_as_they_are(tmp_path):
    """Only an override that states the broken notation changes what the proof reads."""
    template = ChatTemplate(source=pythonic("{{ v | tojson }}", ""), name="broken", family="broken",
                            origin="test", named_tokens={"bos_token": "", "eos_token": "<|end|>"})
    override = parse_override({"why": "another field", "template_sha256": [template.sha256],
                               "patch": {"end_of_turn": ["<|end|>"]}}, "eot.json", user=True)
    compiled = compile_template(template, override=override)
    assert not compiled.proof.ok and compiled.proof.restated == "" and compiled.proof.defects


def test_a_pythonic_template_that_keeps_its_notation_has_no_defect():
    template = ChatTemplate(source=pythonic("{{ v | tojson }}", ", "), name="kept", family="kept",
                            origin="test", named_tokens={"bos_token": "", "eos_token": "<|end|>"})
    spec, _ = compile_in_memory(template)
    assert spec.tool_calls is not None and spec.tool_calls.arguments.separator == ", "
    assert notation_defects(spec) == []


def test_the_defect_is_read_from_the_spec_of_a_broken_render():
    template = ChatTemplate(source=pythonic("{{ v | tojson }}", ""), name="b", family="b", origin="test",
                            named_tokens={"bos_token": "", "eos_token": "<|end|>"})
    spec, _ = compile_in_memory(template)
    [defect] = notation_defects(spec)
    assert (defect.field, defect.notation, defect.written) == ("tool_calls.arguments.separator", ", ", "")
    assert defect.example == 'get_weather(city="Paris"days=3)'
