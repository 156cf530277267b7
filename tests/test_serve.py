"""`tplparse serve` without a real engine: the app in process, with a scripted upstream (the
`Upstream` interface), and `LlamaServer` against scripted HTTP answers (a real server on
127.0.0.1, tests/scripted_http.py, spoken to through the upstream's own client). What is
checked: requests refused by field (400), the answer's shapes, finish reasons, a token limit
inside reasoning reported, max_tokens capped to the context, retries, and every way an upstream
fails (502 / 504, or an error event once the stream started).
The end-to-end run against the real llama-server is tests/test_serve_e2e.py."""

from __future__ import annotations

import asyncio
import json

import pytest

httpx = pytest.importorskip("httpx", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")
pytest.importorskip("starlette", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")

import tplparse  # noqa: E402
from conftest import CORPUS, EXAMPLES, needs_corpus, run_cli  # noqa: E402
from scripted_http import Answer, Hangup, ScriptedServer, Stall  # noqa: E402
from tplparse.bridge.grammar import GrammarForm  # noqa: E402
from tplparse.serve import Completion, Finished, Limits, LlamaServer, Upstream, UpstreamError, create_app  # noqa: E402

TOOLS = json.loads((EXAMPLES / "tools.json").read_text())
TEMPLATE = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
MODEL = "example"
ASK = [{"role": "user", "content": "Weather in Paris?"}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'


class Scripted(Upstream):
    """Answers each generation with the next script: a list of text pieces and a Finished
    (or an UpstreamError, raised where it stands). Records what it was asked. Takes the
    grammar as llama-server does."""

    grammar_form = GrammarForm.LLAMA_REQUEST

    def __init__(self, *scripts, context=2048, prompt_tokens=20):
        self.scripts = list(scripts)
        self.context, self.prompt_tokens = context, prompt_tokens
        self.asked: list[Completion] = []

    async def limits(self):
        return Limits(self.context, "scripted")

    async def count_tokens(self, prompt):
        self.counted = getattr(self, "counted", 0) + 1
        return self.prompt_tokens

    async def healthy(self):
        return True

    async def generate(self, completion):
        self.asked.append(completion)
        for step in self.scripts.pop(0):
            if isinstance(step, Exception):
                raise step
            yield step
            await asyncio.sleep(0)


def post(upstream: Upstream, body: dict, template=TEMPLATE):
    """POST /v1/chat/completions to the app in process: (status, JSON body or SSE events)."""

    async def run():
        transport = httpx.ASGITransport(app=create_app(template, upstream, MODEL))
        async with httpx.AsyncClient(transport=transport, base_url="http://tplparse") as client:
            response = await client.post("/v1/chat/completions", json=body)
        if response.headers["content-type"].startswith("text/event-stream"):
            events = [line[6:] for line in response.text.split("\n") if line.startswith("data: ")]
            return response.status_code, [e if e == "[DONE]" else json.loads(e) for e in events]
        return response.status_code, response.json()

    return asyncio.run(run())


def assembled(events: list) -> dict:
    """A client's view of a stream: content, reasoning and calls added up from the deltas."""
    message = {"content": "", "reasoning_content": "", "tool_calls": {}}
    for event in events:
        if event == "[DONE]" or "choices" not in event:
            continue
        delta = event["choices"][0]["delta"]
        for key in ("content", "reasoning_content"):
            message[key] += delta.get(key) or ""
        for call in delta.get("tool_calls", []):
            entry = message["tool_calls"].setdefault(call["index"], {"name": "", "arguments": ""})
            entry["name"] += call.get("function", {}).get("name") or ""
            entry["arguments"] += call.get("function", {}).get("arguments") or ""
    return message


@pytest.mark.parametrize("body, param", [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": ASK, "tool_choice": "required"}, "tool_choice"),
    ({"messages": ASK, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"messages": ASK, "tools": [{"type": "function", "function": {}}]}, "tools[0]"),
    ({"messages": ASK, "temperature": 9}, "temperature"),
    ({"messages": ASK, "max_tokens": 0}, "max_tokens"),
    ({"messages": ASK, "max_tokens": True}, "max_tokens"),
    ({"messages": ASK, "logprobs": True}, "logprobs"),
    ({"messages": ASK, "stream": True, "max_attempts": 2}, "max_attempts"),
    ({"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {"schema": 3}}},
     "response_format.json_schema.schema"),
    ({"messages": ASK, "thinking": False, "chat_template_kwargs": {"enable_thinking": True}}, "thinking"),
    # (found by review: each was a 500, or a schema error only after a whole generation)
    ({"messages": [{"role": "assistant", "content": "", "tool_calls": 5}]}, "messages[0].tool_calls"),
    ({"messages": ASK, "response_format": {"type": "json_schema", "json_schema": "x"}}, "response_format.json_schema.schema"),
    ({"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {"schema": {"minLength": "3"}}}},
     "response_format.json_schema.schema"),
    ({"messages": ASK, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": []}}}]},
     "tools[0].function.parameters"),
    ({"messages": ASK, "tools": TOOLS, "tool_choice": {"function": "get_weather"}}, "tool_choice"),
    ({"messages": ASK, "max_completion_tokens": 0}, "max_completion_tokens"),
    ({"messages": ASK, "calls": "later"}, "calls"),
    ({"messages": ASK, "calls": True}, "calls"),
])
def test_bad_requests_are_400_naming_the_field(body, param):
    upstream = Scripted()
    status, answer = post(upstream, body)
    assert status == 400, answer
    assert answer["error"]["param"] == param and answer["error"]["type"] == "invalid_request_error"
    assert upstream.asked == []  # nothing went upstream


def test_a_body_that_is_not_json_and_a_model_not_served():
    async def run():
        transport = httpx.ASGITransport(app=create_app(TEMPLATE, Scripted(), MODEL))
        async with httpx.AsyncClient(transport=transport, base_url="http://tplparse") as client:
            garbled = await client.post("/v1/chat/completions", content=b"{not json")
            other = await client.post("/v1/chat/completions", json={"model": "gpt-9", "messages": ASK})
            models = await client.get("/v1/models")
        return garbled, other, models

    garbled, other, models = asyncio.run(run())
    assert garbled.status_code == 400 and "not JSON" in garbled.json()["error"]["message"]
    assert other.status_code == 404 and other.json()["error"]["param"] == "model"
    assert [m["id"] for m in models.json()["data"]] == [MODEL]


def test_a_tool_call_non_streamed_and_streamed():
    request = {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": "required"}
    upstream = Scripted([CALL, Finished("stop", 20, 30)], [CALL[:9], CALL[9:40], CALL[40:], Finished("stop", 20, 30)])
    status, answer = post(upstream, request)
    assert status == 200
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}
    assert answer["usage"] == {"prompt_tokens": 20, "completion_tokens": 30, "total_tokens": 50}
    assert answer["tplparse"]["raw"] == CALL and answer["tplparse"]["validation"] == []
    # what went upstream: the rendered prompt, the family's stop, a strict grammar
    asked = upstream.asked[0]
    assert asked.prompt == tplparse.prompt(TEMPLATE, ASK, tools=TOOLS).text
    assert "<|im_end|>" in asked.stop and asked.grammar.fields["grammar_lazy"] is False
    status, events = post(upstream, {**request, "stream": True})
    assert status == 200 and events[-1] == "[DONE]"
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"
    streamed = assembled(events)
    assert streamed["tool_calls"] == {0: {"name": "get_weather", "arguments": call["function"]["arguments"]}}


def test_lazy_grammar_for_auto_and_the_text_answer():
    upstream = Scripted(["It is sunny.", Finished("stop")])
    status, answer = post(upstream, {"messages": ASK, "tools": TOOLS})
    assert status == 200 and answer["choices"][0]["finish_reason"] == "stop"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "It is sunny."}
    constraint = upstream.asked[0].grammar.fields
    assert constraint["grammar_lazy"] is True and constraint["grammar_triggers"] == [{"type": 1, "value": "<tool_call>"}]


def test_length_inside_reasoning_is_reported():
    upstream = Scripted(["<think>\nLet me think about Par", Finished("length", 20, 8)])
    status, answer = post(upstream, {"messages": ASK, "max_tokens": 8})
    assert status == 200
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["choices"][0]["message"]["content"] is None
    assert answer["choices"][0]["message"]["reasoning_content"] == "Let me think about Par"
    assert [e["kind"] for e in answer["tplparse"]["errors"]] == ["reasoning_truncated"]
    assert upstream.asked[0].max_tokens == 8


def test_a_prompt_that_surely_fits_is_not_counted_before_it_is_sent():
    """Every token holds at least one byte of the prompt: where the prompt's bytes and
    max_tokens fit the context, the bridge sends it at once (a /tokenize round trip made each
    of 16 concurrent requests wait, bench_serve.py), and the usage takes the upstream's own
    count of the prompt; without max_tokens, or where the bound does not fit, it counts first."""
    prompt_bytes = len(tplparse.prompt(TEMPLATE, ASK).text.encode())
    upstream = Scripted(["Sunny.", Finished("stop", 33, 2)], ["Sunny.", Finished("stop", 33, 2)],
                        ["Sunny.", Finished("stop", 33, 2)], context=prompt_bytes + 8 + 50, prompt_tokens=20)
    status, answer = post(upstream, {"messages": ASK, "max_tokens": 50})
    assert status == 200 and getattr(upstream, "counted", 0) == 0 and upstream.asked[0].max_tokens == 50
    assert answer["usage"] == {"prompt_tokens": 33, "completion_tokens": 2, "total_tokens": 35}
    status, answer = post(upstream, {"messages": ASK, "max_tokens": 51})  # (one more than the bound leaves)
    assert status == 200 and upstream.counted == 1 and answer["usage"]["prompt_tokens"] == 20
    status, answer = post(upstream, {"messages": ASK})
    assert status == 200 and upstream.counted == 2 and upstream.asked[2].max_tokens == prompt_bytes + 58 - 20


def test_max_tokens_capped_to_the_context_and_a_prompt_too_long():
    upstream = Scripted(["Sunny.", Finished("stop")], context=100, prompt_tokens=90)
    status, answer = post(upstream, {"messages": ASK, "max_tokens": 50})
    assert status == 200 and upstream.asked[0].max_tokens == 10
    assert any("capped to 10" in note for note in answer["tplparse"]["notes"])
    status, answer = post(Scripted(context=100, prompt_tokens=100), {"messages": ASK})
    assert status == 400 and "no room" in answer["error"]["message"]


def test_thinking_off_by_the_templates_switch():
    upstream = Scripted(["Sunny.", Finished("stop")])
    status, answer = post(upstream, {"messages": ASK, "chat_template_kwargs": {"enable_thinking": False}})
    assert status == 200
    assert upstream.asked[0].prompt.endswith("<think>\n\n</think>\n\n")
    assert any("enable_thinking=False" in note for note in answer["tplparse"]["notes"])


def test_structured_answer_validated_and_retried():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    request = {"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}}
    upstream = Scripted(['{"town": "Paris"}', Finished("stop")], ['{"city": "Paris"}', Finished("stop")])
    status, answer = post(upstream, {**request, "max_attempts": 3})
    assert status == 200 and answer["choices"][0]["message"]["content"] == '{"city": "Paris"}'
    attempts = answer["tplparse"]["attempts"]
    assert len(attempts) == 2 and attempts[0]["errors"] and attempts[1]["errors"] == []
    assert answer["tplparse"]["gave_up"] is False
    # the second prompt carries the first answer and the errors fed back
    assert '{"town": "Paris"}' in upstream.asked[1].prompt and "could not be used" in upstream.asked[1].prompt
    upstream = Scripted(['{"town": "Paris"}', Finished("stop")], ['{"town": "Lyon"}', Finished("stop")])
    status, answer = post(upstream, {**request, "max_attempts": 2})
    assert status == 200 and answer["tplparse"]["gave_up"] is True and len(answer["tplparse"]["attempts"]) == 2
    assert answer["tplparse"]["validation"], answer  # the last attempt's errors, said


def test_a_call_dropped_after_its_header_is_said_in_the_stream():
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "city": "Lyon"}}\n</tool_call>'
    upstream = Scripted([broken[:40], broken[40:], Finished("stop")])
    status, events = post(upstream, {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "stream": True})
    last = events[-2]
    # said at once, in its own chunk, after the header and some arguments went out
    said = [i for i, e in enumerate(events[:-2]) if "tool_call_error" in e.get("tplparse", {})]
    header = next(i for i, e in enumerate(events) if e["choices"][0]["delta"].get("tool_calls"))
    assert len(said) == 1 and said[0] > header
    assert last["choices"][0]["finish_reason"] == "stop"  # no call came through
    assert [d["kind"] for d in last["tplparse"]["dropped_tool_calls"]] == ["invalid_arguments"]
    assert [e["kind"] for e in last["tplparse"]["errors"]] == ["invalid_arguments"]


def test_the_dispatch_stream_sends_each_valid_call_once_whole_and_nothing_to_take_back():
    """`"calls": "complete"`: a broken call (a duplicate key) and one whose arguments do not
    validate (a unit not in the enum) never go out; the valid one goes out once, whole, with
    the id the UI stream gives it."""
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "city": "Lyon"}}\n</tool_call>'
    kelvin = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "kelvin"}}\n</tool_call>'
    text = broken + kelvin + CALL
    pieces = [text[i:i + 9] for i in range(0, len(text), 9)]
    upstream = Scripted(pieces + [Finished("stop")], pieces + [Finished("stop")])
    _, events = post(upstream, {"messages": ASK, "tools": TOOLS, "stream": True, "calls": "complete"})
    calls = [c for e in events[:-1] for c in e["choices"][0]["delta"].get("tool_calls") or []]
    assert calls == [{"index": 0, "id": "call_2", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]
    assert not any("tool_call_error" in e.get("tplparse", {}) for e in events[:-2])
    last = events[-2]
    assert last["choices"][0]["finish_reason"] == "tool_calls"
    assert [e["kind"] for e in last["tplparse"]["errors"]] == ["invalid_arguments", "invalid_arguments"]
    status, answer = post(upstream, {"messages": ASK, "tools": TOOLS, "calls": "complete"})
    assert [c["id"] for c in answer["choices"][0]["message"]["tool_calls"]] == ["call_2"]


def test_upstream_failure_before_and_during_the_stream():
    status, answer = post(Scripted([UpstreamError(502, "the upstream cannot be reached")]), {"messages": ASK})
    assert status == 502 and answer["error"]["type"] == "upstream_error"
    upstream = Scripted(["Sunny ", UpstreamError(504, "the upstream stopped sending tokens")])
    status, events = post(upstream, {"messages": ASK, "stream": True})
    assert status == 200  # the stream had started
    assert events[-2]["error"]["code"] == 504 and events[-1] == "[DONE]"
    assert assembled(events)["content"] == "Sunny "  # what the model wrote before the upstream failed


# --- LlamaServer against scripted HTTP answers -------------------------------------------

def llama(handler) -> LlamaServer:
    return LlamaServer(ScriptedServer(handler).url, timeout=1)


async def _drain(upstream: Upstream):
    return [piece async for piece in upstream.generate(Completion("p", 5))]


def sse_body(*events) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)


def test_llama_server_protocol_read():
    def handler(request):
        if request.path == "/completion":
            body = json.loads(request.content)
            assert body["stream"] is True and body["n_predict"] == 5 and body["prompt"] == "p"
            return Answer(200, content=sse_body({"content": "Hi", "stop": False},
                                                         {"content": "", "stop": True, "stop_type": "limit",
                                                          "tokens_evaluated": 3, "tokens_predicted": 5}))
        if request.path == "/props":
            return Answer(200, json={"default_generation_settings": {"n_ctx": 2048}, "model_path": "/m/x.gguf"})
        body = json.loads(request.content)
        assert request.path == "/tokenize" and body["add_special"] is True and body["parse_special"] is True
        return Answer(200, json={"tokens": [1, 2, 3] if body["content"] else []})

    upstream = llama(handler)
    assert asyncio.run(_drain(upstream)) == ["Hi", Finished("length", 3, 5)]
    assert asyncio.run(upstream.limits()) == Limits(2048, "x.gguf", prefix="")
    assert asyncio.run(upstream.count_tokens("abc")) == 3


@pytest.mark.parametrize("answer, status, words", [
    (Answer(200, content=b"data: {not json\n\n"), 502, "not JSON"),
    (Answer(200, content=sse_body([1, 2])), 502, "not a JSON object"),
    (Answer(200, content=sse_body({"content": "Hi", "stop": False})), 502, "before it said why"),
    (Answer(200, content=sse_body({"content": "", "stop": True, "stop_type": "sideways"})), 502, "unknown reason"),
    (Answer(400, json={"error": {"message": "failed to parse grammar"}}), 502, "failed to parse grammar"),
    (Answer(500, content=b"<html>oops</html>"), 502, "HTTP 500"),
    (Answer(200, content=sse_body({"error": {"message": "slot crashed"}})), 502, "slot crashed"),
    (Stall(), 504, "stopped sending tokens"),
    (Hangup(), 502, "failed mid-answer: the connection closed before an answer"),
    (Hangup(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n20\r\ndata: {"), 502,
     "failed mid-answer: the connection closed mid-answer"),
    (Hangup(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"), 502, "not an HTTP/1.x answer"),
])
def test_llama_server_failures_are_upstream_errors(answer, status, words):
    def handler(request):
        return answer

    with pytest.raises(UpstreamError) as caught:
        asyncio.run(_drain(llama(handler)))
    assert caught.value.status == status and words in caught.value.message


def test_an_upstream_that_is_down():
    upstream = LlamaServer("http://127.0.0.1:9", timeout=2)  # port 9 (discard): nothing listens
    with pytest.raises(UpstreamError) as caught:
        asyncio.run(upstream.limits())
    assert caught.value.status == 502 and "cannot be reached" in caught.value.message
    assert asyncio.run(upstream.healthy()) is False


def test_cli_serve_refuses_bad_arguments_cleanly(tmp_path):
    bad = run_cli("serve", EXAMPLES / "chatml-think-tools.gguf", "--upstream", "llama:8080")
    assert bad.returncode == 2 and "--upstream must be an http" in bad.stderr and "Traceback" not in bad.stderr
    missing = run_cli("serve", tmp_path / "none.gguf", "--upstream", "http://127.0.0.1:9")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = run_cli("serve", EXAMPLES / "chatml-think-tools.gguf", "--upstream", "http://127.0.0.1:9",
                       "--port", str(taken.getsockname()[1]))
    assert busy.returncode == 2 and "cannot listen on" in busy.stderr and "Traceback" not in busy.stderr


class Endless(Scripted):
    """Generates until it is cancelled, and says when it was."""

    closed = False

    async def generate(self, completion):
        self.asked.append(completion)
        try:
            while True:
                yield "and on "
                await asyncio.sleep(0.01)
        finally:
            self.closed = True


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_goes_away_cancels_the_generation(stream):
    import threading
    import time

    import uvicorn
    from servers import free_port

    upstream = Endless()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(TEMPLATE, upstream, MODEL), port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        if stream:  # a client that reads the first chunk and hangs up
            with httpx.stream("POST", url, json={"messages": ASK, "stream": True}, timeout=5) as response:
                next(response.iter_bytes())
        else:  # a client that gives up waiting for the whole answer
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(url, json={"messages": ASK}, timeout=httpx.Timeout(1.0))
        deadline = time.monotonic() + 5
        while not upstream.closed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert upstream.asked and upstream.closed
    finally:
        server.should_exit = True
        thread.join(10)


def test_nulls_are_absent_and_text_parts_are_one_text():
    upstream = Scripted(["Sunny.", Finished("stop")])
    parts = [{"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}]}]
    status, answer = post(upstream, {"messages": parts, "top_logprobs": None, "logprobs": False, "tools": None,
                                     "temperature": None})
    assert status == 200, answer
    assert upstream.asked[0].prompt == tplparse.prompt(TEMPLATE, ASK).text  # the parts, as one text


def test_llama_server_events_holding_unicode_line_separators():
    """llama-server writes U+2028 raw in its JSON: a split at every Unicode line break cut the
    event in two (a 502 mid-answer); and the bridge's own events carry it escaped."""
    text = "a\u2028b\u2029c\u0085d"

    def handler(request):
        raw = json.dumps({"content": text, "stop": False}, ensure_ascii=False).encode()  # as llama-server writes it
        return Answer(200, content=sse_body(raw, {"content": "", "stop": True, "stop_type": "eos"}))

    assert asyncio.run(_drain(llama(handler))) == [text, Finished("stop")]
    status, events = post(Scripted([text, Finished("stop")]), {"messages": ASK, "stream": True})
    assert assembled(events)["content"] == text
    from tplparse.serve import responses

    written = responses.sse({"content": text}).decode()
    assert not any(ch in written for ch in "\u2028\u2029\u0085") and json.loads(written[6:])["content"] == text


# --- The upstream's HTTP client (serve/http.py) against a real server ---------------------

def _client(handler, path="", **kwargs):
    from tplparse.serve.http import Client

    server = ScriptedServer(handler)
    return server, Client(server.url + path, **kwargs)


def test_the_client_keeps_its_connection_between_requests():
    seen = []

    def handler(request):
        seen.append((request.method, request.path, request.json()))
        return Answer(200, json={"n": len(seen)}, chunked=len(seen) % 2 == 0)

    server, client = _client(handler, "/api/")

    async def run():
        first = await client.request("GET", "/props")
        second = await client.request("POST", "/tokenize", {"content": "héllo ☃"})
        third = await client.request("GET", "/props")
        await client.aclose()
        return [first.json(), second.json(), third.json()]

    # by Content-Length and chunked, on one connection; the URL's path kept before each path;
    # a JSON body as UTF-8 with its byte length
    assert asyncio.run(run()) == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert seen == [("GET", "/api/props", {}), ("POST", "/api/tokenize", {"content": "héllo ☃"}),
                    ("GET", "/api/props", {})]
    assert server.connections == 1


def test_a_stream_left_mid_answer_closes_its_connection():
    # The client went away: the connection goes (how an engine learns to stop generating),
    # it is not handed to the next request with the rest of an answer in it.
    events = sse_body(*({"content": str(i), "stop": False} for i in range(50)))
    server, client = _client(lambda request: Answer(200, content=events))

    async def run():
        async with client.stream("POST", "/completion", {"prompt": "p"}) as response:
            async for _ in response.pieces():
                break
        assert not client._idle
        return (await client.request("POST", "/completion", {})).body

    assert asyncio.run(run()) == events and server.connections == 2


def test_a_kept_connection_the_upstream_closed_is_replaced():
    # An engine that closes a kept connection (its keep-alive timeout) between two requests:
    # the second goes on a new connection, answered, not a 502.
    server, client = _client(lambda request: Answer(200, json={"ok": True}, close_after=True))

    async def run():
        answers = [await client.request("GET", "/health") for _ in range(3)]
        return [a.json() for a in answers]

    assert asyncio.run(run()) == [{"ok": True}] * 3 and server.connections == 3


@pytest.mark.parametrize("answer, error, words", [
    (Hangup(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"), "BrokenAnswer", "closed mid-answer"),
    (Hangup(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), "BrokenAnswer", "chunk size"),
    (Hangup(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000 + b"\r\n\r\n"), "BrokenAnswer", "head is longer"),
    (Hangup(b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n"), "BrokenAnswer", "Content-Length"),
    (Stall(), "TimedOut", "no answer in 0.5 s"),
])
def test_the_client_says_what_went_wrong(answer, error, words):
    from tplparse.serve import http

    _, client = _client(lambda request: answer, read_timeout=0.5)
    with pytest.raises(getattr(http, error)) as caught:
        asyncio.run(client.request("GET", "/props"))
    assert words in str(caught.value)


def test_nothing_listening_is_a_connect_failure():
    from tplparse.serve.http import Client, ConnectFailed

    with pytest.raises(ConnectFailed, match="cannot connect to 127.0.0.1:9"):
        asyncio.run(Client("http://127.0.0.1:9").request("GET", "/health"))


@pytest.mark.parametrize("url", ["http://", "ftp://host", "http://host:port"])
def test_an_upstream_url_that_names_no_host_or_port_exits_2(url):
    result = run_cli("serve", EXAMPLES / "chatml-think-tools.gguf", "--upstream", url)
    assert result.returncode == 2 and "--upstream" in result.stderr and "Traceback" not in result.stderr


@needs_corpus
def test_a_past_call_as_openai_sends_it_renders_with_a_template_that_iterates_its_arguments():
    """GLM 4.6 iterates a past call's arguments: OpenAI's JSON text was a 400 ("the chat template
    cannot render this conversation"); the bridge gives the template the object it holds."""
    template = tplparse.load(CORPUS / "ZAI-GLM-4.6.jinja")
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "call_0", "type": "function", "function": {
                   "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
               {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
               {"role": "user", "content": "And tomorrow?"}]
    upstream = Scripted(["It will rain.", Finished("stop", 20, 4)])
    status, answer = post(upstream, {"messages": history, "tools": TOOLS, "max_tokens": 8}, template)
    assert status == 200, answer
    assert "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>" in upstream.asked[0].prompt
