"""The real llama-server over HTTP (SSE streaming), with SmolLM2 and the example templates:
`tplparse gbnf --llama-request` fields posted unchanged to /completion, each streamed answer
fed to the family's generated parser as it arrives, then validated.

llama-server is built from the llama.cpp that the installed llama-cpp-python vendors
(.ci/llama-server.sh); without it these tests skip and say so.
"""

from __future__ import annotations

import importlib
import json
import sys

import pytest

httpx = pytest.importorskip("httpx", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")

import tplparse  # noqa: E402
from conftest import EXAMPLES, REPO, run_cli  # noqa: E402
from tplparse.bridge import prompt_for, validate_content, validate_tool_calls  # noqa: E402
from tplparse.emit.llama_request import llama_request  # noqa: E402
from tplparse.grammar import GrammarOptions  # noqa: E402

pytestmark = pytest.mark.e2e

sys.path.insert(0, str(REPO))
TOOLS = json.loads((EXAMPLES / "tools.json").read_text())
QUESTION = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]
TRIAGE = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "sunny": {"type": "boolean"}},
          "required": ["city", "sunny"]}
# The example templates, each with its generated module.
EXAMPLE_FAMILIES = {"chatml-think-tools.gguf": "chatml_think_tools", "bracket-tools.gguf": "bracket_tools"}


def generated(source: str):
    return importlib.import_module(f"generated.{EXAMPLE_FAMILIES[source]}")


def request_fields(source: str, *options: str) -> dict:
    """What `tplparse gbnf SOURCE ... --llama-request` prints, as a user pastes it."""
    result = run_cli("gbnf", EXAMPLES / source, "--llama-request", *options)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def streamed(url: str, body: dict) -> tuple[list[str], dict]:
    """POST /completion with stream: the content pieces, and the last event (stop_type)."""
    pieces, last = [], None
    with httpx.stream("POST", url + "/completion", json={**body, "stream": True}, timeout=120) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event.get("content"):
                    pieces.append(event["content"])
                if event.get("stop"):
                    last = event
    assert last is not None, "the stream ended without its stop event"
    return pieces, last


def finish(last: dict) -> str:
    return {"eos": "stop", "word": "stop", "limit": "length"}[last["stop_type"]]


def generate(url: str, source: str, fields: dict, tools=None, n_predict: int = 160, messages=QUESTION, prompt=None):
    """Render the prompt (or take `prompt`), generate under `fields`, feed each piece to the
    generated parser as it arrives; the streamed message, the one-shot message of the same
    text, and the stop event."""
    prompt = prompt or prompt_for(tplparse.load(EXAMPLES / source), messages, tools=tools)
    body = {"prompt": prompt.text, "n_predict": n_predict, "stop": prompt.stop, "temperature": 0, "seed": 7,
            "cache_prompt": True, **fields}
    pieces, last = streamed(url, body)
    module = generated(source)
    parser = module.StreamParser(tools=tools, start=prompt.start)
    deltas = [d for piece in pieces for d in parser.feed(piece)]
    deltas += parser.end(finish(last))
    one_shot = module.parse("".join(pieces), tools=tools, start=prompt.start, finish_reason=finish(last))
    return parser.message, one_shot, deltas, last


def test_structured_output_by_json_schema(llama_server, tmp_path):
    source = "chatml-think-tools.gguf"
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(TRIAGE))
    message, one_shot, _, last = generate(llama_server.url, source, request_fields(source, "--json-schema", schema))
    assert message == one_shot
    assert finish(last) == "stop", last["stop_type"]  # the grammar ends the JSON: the model stops by itself
    assert validate_content(message, TRIAGE) == []
    assert message["tool_calls"] == [] and message["errors"] == []


def test_structured_output_with_thinking_off(llama_server):
    """A template without a thinking switch: left to itself SmolLM2 opens [THINK] and never
    closes it (the whole budget gone, no answer); with thinking off the prompt ends with an
    empty reasoning block and the grammar starts in the content the prompt left the model in."""
    source = "bracket-tools.gguf"
    template = tplparse.load(EXAMPLES / source)
    prompt = prompt_for(template, QUESTION, thinking=False)
    assert prompt.start == "content" and any("empty reasoning block" in n for n in prompt.notes)
    fields = llama_request(prompt.spec, GrammarOptions(content_schema=TRIAGE, mode=prompt.mode, start=prompt.start,
                                                         reasoning_closed=prompt.reasoning_closed),
                           template.special_tokens)
    message, one_shot, _, last = generate(llama_server.url, source, fields, prompt=prompt)
    assert message == one_shot and finish(last) == "stop", last["stop_type"]
    assert message["reasoning_content"] is None and validate_content(message, TRIAGE) == []


@pytest.mark.parametrize("source", list(EXAMPLE_FAMILIES))
@pytest.mark.parametrize("choice", ["required", "get_weather"])
def test_strict_tool_call(llama_server, source, choice):
    fields = request_fields(source, "--tools", EXAMPLES / "tools.json", "--tool-choice", choice, "--no-parallel")
    assert fields["grammar_lazy"] is False
    message, one_shot, deltas, last = generate(llama_server.url, source, fields, tools=TOOLS)
    assert message == one_shot
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"], message
    assert validate_tool_calls(message, TOOLS) == []
    # streamed: the header, then argument pieces that add up to the arguments
    pieces = [c["function"]["arguments"] for d in deltas for c in d.get("tool_calls", []) if "id" not in c]
    assert len(pieces) >= 2 and "".join(pieces) == message["tool_calls"][0]["function"]["arguments"]
    assert finish(last) == "stop"


def _called(city: str, call_id: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}]}


# Two calls in the history: SmolLM2 (greedy) then writes the ChatML template's call opener.
FEW_SHOT = [{"role": "system", "content": "You answer every question by calling get_weather."},
            {"role": "user", "content": "Weather in Rome?"}, _called("Rome", "c1"),
            {"role": "user", "content": "Weather in Oslo?"}, _called("Oslo", "c2"),
            {"role": "user", "content": "Weather in Paris?"}]


@pytest.mark.parametrize("source", list(EXAMPLE_FAMILIES))
def test_lazy_tool_call_triggers_in_the_servers_format(llama_server, source):
    """tool_choice=auto: llama-server takes the trigger types as its numbers and a one-token
    trigger word only among the preserved tokens (it answered HTTP 400 to the names); the
    model writes freely until the trigger."""
    fields = request_fields(source, "--tools", EXAMPLES / "tools.json")
    assert fields["grammar_lazy"] is True and all(isinstance(t["type"], int) for t in fields["grammar_triggers"])
    message, one_shot, _, last = generate(llama_server.url, source, fields, tools=TOOLS, n_predict=96)
    assert message == one_shot
    if message["tool_calls"]:  # the model may answer in text instead; a call it makes is held to the grammar
        assert validate_tool_calls(message, TOOLS) == []
    else:
        assert message["content"], message


def test_lazy_grammar_holds_the_call_after_the_trigger(llama_server):
    source = "chatml-think-tools.gguf"
    fields = request_fields(source, "--tools", EXAMPLES / "tools.json")
    message, one_shot, _, last = generate(llama_server.url, source, fields, tools=TOOLS, messages=FEW_SHOT)
    assert message == one_shot
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"], message
    assert validate_tool_calls(message, TOOLS) == [] and message["errors"] == []
    assert json.loads(message["tool_calls"][0]["function"]["arguments"])["city"] == "Paris"
    assert finish(last) == "stop"


def test_finish_reason_length_from_the_stop_type(llama_server):
    source = "chatml-think-tools.gguf"
    message, one_shot, _, last = generate(llama_server.url, source, {}, n_predict=5)
    assert last["stop_type"] == "limit" and message["finish_reason"] == "length" == one_shot["finish_reason"]
    assert message == one_shot and message["content"]
