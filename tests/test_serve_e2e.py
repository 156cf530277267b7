"""`tplparse serve` end to end: the official OpenAI client -> tplparse serve -> the real
llama-server with SmolLM2 (tests/servers.py). Each answer is also parsed one-shot from its
raw output (`tplparse.raw`) by the family's generated parser: the stream must equal it.
Without llama-server built (.ci/llama-server.sh) these tests skip and say so."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time

import pytest

openai = pytest.importorskip("openai", reason="the openai client is a test dependency: pip install -e '.[test,serve]'")
httpx = pytest.importorskip("httpx", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")
pytest.importorskip("starlette", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")

from conftest import EXAMPLES, REPO, SMOLLM2  # noqa: E402
from servers import free_port, llama_server_binary, start_llama_server, start_tplparse_serve  # noqa: E402
from tplparse.bridge import validate_content, validate_tool_calls  # noqa: E402

pytestmark = pytest.mark.e2e
sys.path.insert(0, str(REPO))
TOOLS = json.loads((EXAMPLES / "tools.json").read_text())
ASK = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "sunny": {"type": "boolean"}},
          "required": ["city", "sunny"]}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
SOURCES = {"chatml-think-tools.gguf": "chatml_think_tools", "bracket-tools.gguf": "bracket_tools"}


@pytest.fixture(scope="module")
def serving(llama_server, tmp_path_factory):
    """tplparse serve for each example template, in front of the session's llama-server."""
    servers = {source: start_tplparse_serve(EXAMPLES / source, llama_server.url,
                                            tmp_path_factory.mktemp("serve") / f"{source}.log", "--model-name", source)
               for source in SOURCES}
    yield servers
    for server in servers.values():
        server.stop()


def client(server) -> "openai.OpenAI":
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def one_shot(source: str, raw: str, finish: str, tools=None) -> dict:
    module = importlib.import_module(f"generated.{SOURCES[source]}")
    return module.parse(raw, tools=tools, finish_reason=finish)


def collect(stream) -> tuple[dict, list, dict]:
    """A client's view of a stream: content, reasoning, calls (their argument pieces), the
    finish reason and the last chunk's tplparse field."""
    message = {"content": "", "reasoning_content": "", "calls": {}}
    pieces, last = [], {}
    for chunk in stream:
        choice = chunk.choices[0]
        delta = choice.delta
        message["content"] += delta.content or ""
        message["reasoning_content"] += (delta.model_extra or {}).get("reasoning_content") or ""
        for call in delta.tool_calls or []:
            entry = message["calls"].setdefault(call.index, {"name": "", "arguments": ""})
            if call.function.name:
                entry["name"] += call.function.name
            if call.function.arguments:
                entry["arguments"] += call.function.arguments
                pieces.append(call.function.arguments)
        if choice.finish_reason:
            message["finish_reason"] = choice.finish_reason
            last = (chunk.model_extra or {}).get("tplparse") or {}
    return message, pieces, last


def same_as(message: dict, parsed: dict, dropped=()) -> None:
    """The stream's view equals the one-shot parse; a call the stream said it dropped (its
    header went out, then it was cut or invalid) is not a call."""
    for drop in dropped:
        del message["calls"][drop["index"]]
    assert message["content"] == (parsed["content"] or "")
    assert message["reasoning_content"] == (parsed["reasoning_content"] or "")
    assert [message["calls"][i] for i in sorted(message["calls"])] == [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in parsed["tool_calls"]]


@pytest.mark.parametrize("source", list(SOURCES))
def test_streamed_tool_call_with_argument_deltas(serving, source):
    stream = client(serving[source]).chat.completions.create(
        model=source, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, stream=True,
        temperature=0, max_tokens=120)
    message, pieces, extra = collect(stream)
    assert message["finish_reason"] == "tool_calls"
    assert [c["name"] for c in message["calls"].values()] == ["get_weather"]
    assert len(pieces) >= 3  # the arguments arrived in pieces, as they were generated
    parsed = one_shot(source, extra["raw"], "stop", TOOLS)
    same_as(message, parsed)
    assert validate_tool_calls(parsed, TOOLS) == [] and extra["validation"] == []


@pytest.mark.parametrize("source", list(SOURCES))
def test_structured_answer_with_thinking_off(serving, source):
    """bracket-tools has no thinking switch (the prompt closes an empty block: left alone,
    SmolLM2 opens [THINK] and never closes it); chatml-think-tools switches it off."""
    answer = client(serving[source]).chat.completions.create(
        model=source, messages=ASK, response_format=RESPONSE_FORMAT, temperature=0, max_tokens=100,
        extra_body={"thinking": False})
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    extra = answer.model_extra["tplparse"]
    assert extra["validation"] == [] and validate_content({"content": choice.message.content}, SCHEMA) == []
    assert (choice.message.model_extra or {}).get("reasoning_content") is None
    assert any("thinking" in note for note in extra["notes"])
    assert one_shot(source, extra["raw"], "stop")["content"] == choice.message.content


def test_a_request_cut_by_max_tokens(serving):
    source = "chatml-think-tools.gguf"
    answer = client(serving[source]).chat.completions.create(
        model=source, messages=[{"role": "user", "content": "Tell me about Paris."}], temperature=0, max_tokens=7)
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 7 and answer.choices[0].message.content


def test_max_tokens_beyond_the_context_is_capped(serving):
    source = "chatml-think-tools.gguf"
    answer = client(serving[source]).chat.completions.create(
        model=source, messages=[{"role": "user", "content": "Say hi."}], temperature=0, max_tokens=1_000_000)
    assert any("capped to" in note for note in answer.model_extra["tplparse"]["notes"])


def test_sixteen_concurrent_streams(serving):
    source = "chatml-think-tools.gguf"
    questions = [f"What is the weather in city number {i}? Use the tool." for i in range(16)]

    async def one(ai, i):
        kwargs = {"tools": TOOLS, "tool_choice": "required"} if i % 2 else {}
        stream = await ai.chat.completions.create(model=source, messages=[{"role": "user", "content": questions[i]}],
                                                  stream=True, temperature=0, max_tokens=60, **kwargs)
        chunks = [chunk async for chunk in stream]
        return i, chunks

    async def run():
        ai = openai.AsyncOpenAI(base_url=serving[source].url + "/v1", api_key="unused", max_retries=0, timeout=300)
        return await asyncio.gather(*(one(ai, i) for i in range(16)))

    for i, chunks in asyncio.run(run()):
        message, _, extra = collect(chunks)
        assert message.get("finish_reason") in ("stop", "length", "tool_calls"), (i, message)  # every stream complete
        finish = "length" if message["finish_reason"] == "length" else "stop"
        same_as(message, one_shot(source, extra["raw"], finish, TOOLS if i % 2 else None),
                extra.get("dropped_tool_calls", ()))


def _busy_slots(url: str) -> int:
    return sum(1 for slot in httpx.get(url + "/slots", timeout=5).json() if slot.get("is_processing"))


def test_a_client_that_disconnects_cancels_its_generation(serving, llama_server):
    source = "chatml-think-tools.gguf"
    body = {"model": source, "messages": [{"role": "user", "content": "Write a long story about Paris."}],
            "stream": True, "max_tokens": 1500, "temperature": 0}
    with httpx.stream("POST", serving[source].url + "/v1/chat/completions", json=body, timeout=60) as response:
        events = (line for line in response.iter_lines() if line.startswith("data: "))
        for _ in range(6):
            next(events)
        assert _busy_slots(llama_server.url) == 1  # generating, with some 1,500 tokens to go
    # the client is gone: llama-server's slot must be freed long before 1500 tokens
    deadline = time.monotonic() + 20
    while _busy_slots(llama_server.url) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _busy_slots(llama_server.url) == 0
    answer = client(serving[source]).chat.completions.create(
        model=source, messages=[{"role": "user", "content": "Say hi."}], temperature=0, max_tokens=5)
    assert answer.choices[0].finish_reason in ("stop", "length")


def test_an_upstream_killed_mid_stream(tmp_path):
    binary = llama_server_binary()
    if binary is None or not SMOLLM2.is_file():
        pytest.skip("llama-server or SmolLM2 is missing (.ci/llama-server.sh, tests/fetch_fixtures.py)")
    port = free_port()
    upstream = start_llama_server(binary, SMOLLM2, tmp_path / "llama.log", port)
    serve = start_tplparse_serve(EXAMPLES / "chatml-think-tools.gguf", upstream.url, tmp_path / "serve.log",
                                 "--model-name", "m", "--timeout", "10")
    try:
        ai = client(serve)
        stream = ai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Write a long story."}],
                                            stream=True, temperature=0, max_tokens=1500)
        got = 0
        with pytest.raises(openai.APIError) as caught:
            for chunk in stream:
                got += 1
                if got == 5:
                    upstream.kill()
        assert "upstream" in str(caught.value)
        # The bridge stays up: it says the upstream is gone, at once, in OpenAI's error shape.
        assert httpx.get(serve.url + "/health", timeout=5).status_code == 503
        with pytest.raises(openai.APIStatusError) as down:
            ai.chat.completions.create(model="m", messages=ASK, max_tokens=5)
        assert down.value.status_code == 502
        # The upstream comes back on its port: the next request is served.
        upstream = start_llama_server(binary, SMOLLM2, tmp_path / "llama2.log", port)
        answer = ai.chat.completions.create(model="m", messages=ASK, temperature=0, max_tokens=5)
        assert answer.choices[0].finish_reason in ("stop", "length")
    finally:
        serve.stop()
        upstream.stop()


# --- a prefilled answer, continued (issue #53, class 1) ----------------------------------

PREFILLS = {
    "inside content": {"content": "The capital of France is"},
    "inside reasoning": {"reasoning_content": "The user asks about France. Its capital"},
    "after reasoning": {"reasoning_content": "Easy.", "content": "The capital of France is"},
}


@pytest.mark.parametrize("case", list(PREFILLS))
def test_a_prefilled_answer_is_continued_as_llama_server_continues_the_prompt(serving, llama_server, case):
    """serve sends the prompt cut inside the final message and reads what the model adds from
    there: the same message as tplparse's parser reads from llama-server's own continuation of
    that prompt (greedy), and the prefill is not repeated."""
    import tplparse
    from tplparse import runtime

    messages = [{"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", **PREFILLS[case]}]
    response = client(serving["chatml-think-tools.gguf"]).chat.completions.create(
        model="chatml-think-tools.gguf", messages=messages, max_tokens=24, temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False})
    got = response.choices[0].message
    prompt = tplparse.prompt(tplparse.load(EXAMPLES / "chatml-think-tools.gguf"), messages,
                             continue_final_message=True)
    assert prompt.text.endswith(prompt.prefill) and prompt.prefill.endswith(("is", "capital"))
    raw = httpx.post(llama_server.url + "/completion", timeout=120, json={
        "prompt": prompt.text, "n_predict": 24, "temperature": 0, "stop": prompt.stop}).json()
    expected = runtime.read_all(prompt.parser(), raw["content"],
                                "length" if raw["stop_type"] == "limit" else "stop")
    assert got.content == expected["content"]
    assert getattr(got, "reasoning_content", None) == expected["reasoning_content"]
    added = expected["content"] if prompt.start == "content" else expected["reasoning_content"]
    assert added and not added.lstrip().startswith(prompt.prefill[:12]), added


def test_a_continued_answer_needs_an_assistant_message_to_continue(serving):
    with pytest.raises(openai.BadRequestError, match="the last message must be the assistant's answer"):
        client(serving["chatml-think-tools.gguf"]).chat.completions.create(
            model="chatml-think-tools.gguf", messages=ASK, max_tokens=4,
            extra_body={"continue_final_message": True})
    with pytest.raises(openai.BadRequestError, match="add_generation_prompt must be false"):
        client(serving["chatml-think-tools.gguf"]).chat.completions.create(
            model="chatml-think-tools.gguf", messages=ASK + [{"role": "assistant", "content": "Hm"}],
            max_tokens=4, extra_body={"continue_final_message": True, "add_generation_prompt": True})
