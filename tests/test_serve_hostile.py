"""`tplparse serve` under hostile requests (issue #28, round 2).

The bad-request corpus (tests/bad_requests.py: each class the issue found, and a wrong value
for each field of OpenAI's request) runs against the app in process, with an upstream that
records what it is asked, and against the real llama-server (SmolLM2): no 5xx, no hang,
every 4xx names the field, nothing refused goes upstream. Then each bug that needs more than
a body: a bug of the bridge's own on a keep-alive connection, a client that leaves while
its prompt is counted, a prompt far beyond the context, a double BOS, and the `error:` lines
of older llama-server builds."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
from collections import Counter

import pytest

httpx = pytest.importorskip("httpx", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")
pytest.importorskip("starlette", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")

import tplparse  # noqa: E402
from bad_requests import ASK, CASES, OK, Case  # noqa: E402
from conftest import EXAMPLES  # noqa: E402
from scripted_http import Answer, ScriptedServer  # noqa: E402
from servers import free_port, start_tplparse_serve  # noqa: E402
from tplparse.check import llama as llama_check  # noqa: E402
from tplparse.bridge.grammar import GrammarForm  # noqa: E402
from tplparse.serve import Completion, Finished, Limits, LlamaServer, Upstream, UpstreamError, create_app  # noqa: E402

SOURCE = EXAMPLES / "chatml-think-tools.gguf"
TEMPLATE = tplparse.load(SOURCE)
MODEL = "example"


class Recording(Upstream):
    """An upstream that answers every generation with `answer` and records each prompt it
    counts and each completion it is asked for. Takes the grammar as llama-server does."""

    grammar_form = GrammarForm.LLAMA_REQUEST

    def __init__(self, answer: str = "Sunny.", context: int = 4096, prefix: str = "", tokens=lambda text: 20):
        self.answer, self.context, self.prefix, self.tokens = answer, context, prefix, tokens
        self.counted: list[str] = []
        self.asked: list[Completion] = []

    async def limits(self):
        return Limits(self.context, "recording", self.prefix)

    async def count_tokens(self, prompt):
        self.counted.append(prompt)
        return self.tokens(prompt)

    async def healthy(self):
        return True

    async def generate(self, completion):
        self.asked.append(completion)
        yield self.answer
        yield Finished("stop", 20, 5)


def send(upstream: Upstream, body: dict | bytes) -> tuple[int, dict]:
    """POST a body (a dict as JSON, bytes as they are) to the app in process."""

    async def run():
        transport = httpx.ASGITransport(app=create_app(TEMPLATE, upstream, MODEL))
        async with httpx.AsyncClient(transport=transport, base_url="http://tplparse", timeout=60) as client:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            response = await client.post("/v1/chat/completions", content=content,
                                         headers={"content-type": "application/json"})
        return response.status_code, response.json()

    return asyncio.run(run())


def verdict(case: Case, status: int, answer: dict) -> str | None:
    """What is wrong with the answer to `case` (None: it is right)."""
    if status >= 500:
        return f"a {status}: {answer}"
    if case.status == OK:
        return None if status == 200 else f"{status}, not 200: {answer}"
    if isinstance(case.status, str):  # calls:NAME
        if status != 200:
            return f"{status}, not 200: {answer}"
        raw = answer["tplparse"]["raw"]
        name = case.status.split(":", 1)[1]
        return None if raw.lstrip().startswith(f'<tool_call>\n{{"name": "{name}"') else f"not a call of {name}: {raw!r}"
    error = answer.get("error") or {}
    if status != case.status or error.get("param") != case.param:
        return f"{status} {error.get('param')!r}, not {case.status} {case.param!r}: {error.get('message')}"
    if case.param is None and not error.get("message", "").startswith("the request body"):
        return f"names no field: {error.get('message')}"
    return None


# --- the corpus, in process ------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_requests_in_process(case):
    name = case.status.split(":", 1)[1] if isinstance(case.status, str) and case.status != OK else None
    answer = f'<tool_call>\n{{"name": "{name}", "arguments": {{"city": "Paris"}}}}\n</tool_call>' if name else "Sunny."
    upstream = Recording(answer)
    status, body = send(upstream, case.body)
    assert verdict(case, status, body) is None, verdict(case, status, body)
    if status >= 400:
        assert upstream.counted == [] and upstream.asked == []  # refused before anything went upstream
    if name:  # forced from the first token: the named tool's call, and no other
        constraint = upstream.asked[0].grammar.fields
        assert constraint["grammar_lazy"] is False
        assert f'tool-name-{name} ::= "{name}"' in constraint["grammar"]
        assert [line for line in constraint["grammar"].splitlines() if line.startswith("tool-call ::=")] == [
            f"tool-call ::= call-{name}"]


def test_a_maximum_past_the_grammar_is_left_to_validation_and_said():
    """maxLength 10^12 was written as {0,1000000000000}: the grammar no longer claims it."""
    schema = {"type": "object", "properties": {"x": {"type": "string", "maxLength": 10**12}}, "required": ["x"]}
    upstream = Recording('<tool_call>\n{"name": "f", "arguments": {"x": "abc"}}\n</tool_call>')
    status, answer = send(upstream, {"messages": ASK, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": schema}}], "tool_choice": "required"})
    assert status == 200 and answer["tplparse"]["validation"] == []
    assert any("'maxLength'" in w and "not enforced by the grammar" in w for w in answer["tplparse"]["grammar_warnings"])
    if llama_check.available():
        ok, message = llama_check.checker().validate(upstream.asked[0].grammar.fields["grammar"])
        assert ok, message


# --- the corpus, against the real llama-server ----------------------------------------------

@pytest.fixture(scope="module")
def serving(llama_server, tmp_path_factory):
    server = start_tplparse_serve(SOURCE, llama_server.url, tmp_path_factory.mktemp("hostile") / "serve.log",
                                  "--model-name", MODEL)
    yield server
    server.stop()


@pytest.mark.e2e
def test_bad_requests_against_the_real_server(serving):
    """Every body of the corpus, one keep-alive connection: no 5xx, no answer slower than
    60 s, every 4xx naming its field, the served ones served (a named tool called whatever
    its name); the bridge is still up and serving at the end."""
    wrong, statuses, slowest = [], Counter(), (0.0, "")
    with httpx.Client(base_url=serving.url, timeout=60) as client:
        for case in CASES:
            content = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
            started = time.monotonic()
            try:
                response = client.post("/v1/chat/completions", content=content,
                                       headers={"content-type": "application/json"})
            except httpx.HTTPError as e:
                wrong.append(f"{case.name}: {type(e).__name__} {e}")
                continue
            took = time.monotonic() - started
            slowest = max(slowest, (took, case.name))
            statuses[response.status_code] += 1
            problem = verdict(case, response.status_code, response.json())
            if problem:
                wrong.append(f"{case.name}: {problem}")
        assert client.get("/health").status_code == 200
    print(f"\n{len(CASES)} bodies: " + ", ".join(f"{n} x {s}" for s, n in sorted(statuses.items()))
          + f"; slowest {slowest[0]:.1f} s ({slowest[1]})")
    assert wrong == []


@pytest.mark.e2e
def test_a_request_whose_checks_cost_seconds_stalls_no_other_client(serving):
    """A 300-byte request whose const is checked against a catastrophic pattern (Python's `re`
    held the interpreter for up to 123 s: every client waited) is refused within a second,
    and a bystander's GET /v1/models is answered meanwhile."""
    from bad_requests import prop, with_tool

    body = json.dumps(with_tool(prop({"const": "a" * 25 + "!", "pattern": "^(a|a)*$"}))).encode()
    waits: list[float] = []

    def bystander():
        with httpx.Client(base_url=serving.url, timeout=30) as client:
            for _ in range(10):
                started = time.monotonic()
                assert client.get("/v1/models").status_code == 200
                waits.append(time.monotonic() - started)
                time.sleep(0.05)

    thread = threading.Thread(target=bystander)
    with httpx.Client(base_url=serving.url, timeout=30) as client:
        thread.start()
        started = time.monotonic()
        response = client.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
        took = time.monotonic() - started
    thread.join()
    assert response.status_code == 400 and "takes more than" in response.json()["error"]["message"], response.text
    assert took < 1.5, took
    assert max(waits) < 1.0, waits


@pytest.mark.e2e
def test_a_request_of_five_thousand_properties_stalls_no_other_client(serving):
    """The checks of a 5,000-property schema (OpenAI's limit) take seconds: they run off the
    event loop, and a bystander's GET /v1/models is answered meanwhile."""
    from bad_requests import with_tool

    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}
    body = json.dumps({**with_tool(schema), "max_tokens": 1}).encode()
    waits: list[float] = []
    done = threading.Event()

    def bystander():
        with httpx.Client(base_url=serving.url, timeout=30) as client:
            while not done.is_set():
                started = time.monotonic()
                assert client.get("/v1/models").status_code == 200
                waits.append(time.monotonic() - started)
                time.sleep(0.05)

    thread = threading.Thread(target=bystander)
    thread.start()
    try:
        with httpx.Client(base_url=serving.url, timeout=120) as client:
            response = client.post("/v1/chat/completions", content=body,
                                   headers={"content-type": "application/json"})
    finally:
        done.set()
        thread.join()
    assert response.status_code < 500, response.text
    assert waits and max(waits) < 1.0, max(waits)


@pytest.mark.e2e
def test_grammars_for_what_requests_may_hold_are_read_by_llama_server(llama_server):
    """The grammars the issue saw refused (a tool name with a newline; bounds past 2000; a
    bounded string of escapes) posted to the real llama-server's /completion: each is read."""
    from tplparse.bridge import compile_in_memory
    from tplparse.emit.llama_request import llama_request
    from tplparse.grammar import GrammarOptions

    spec = compile_in_memory(TEMPLATE)[0]
    schemas = [{"type": "string", "maxLength": 10**12}, {"type": "array", "maxItems": 10**6},
               {"type": "string", "minLength": 700, "maxLength": 1900},
               {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}, "minItems": 2000}]
    tools = [[{"type": "function", "function": {"name": "get\nweather"}}]] + [
        [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"x": schema}, "required": ["x"]}}}] for schema in schemas]
    for offered in tools:
        fields = llama_request(spec, GrammarOptions(tools=offered, tool_choice="required"), TEMPLATE.special_tokens)
        response = httpx.post(llama_server.url + "/completion", timeout=120, json={
            "prompt": tplparse.prompt(TEMPLATE, ASK, tools=offered).text, "n_predict": 1, **fields})
        assert response.status_code == 200, (offered, response.text[:300])


# --- each bug that needs more than a body ------------------------------------------------------

class Broken(Recording):
    """An upstream whose first limits() fails as a bug would (not an UpstreamError)."""

    failed = False

    async def limits(self):
        if not self.failed:
            self.failed = True
            raise RuntimeError("a bug")
        return await super().limits()


class Serving:
    """The app on uvicorn in a thread, on a free port of 127.0.0.1."""

    def __init__(self, upstream: Upstream):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(TEMPLATE, upstream, MODEL), port=self.port,
                                                    log_level="critical"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


def test_a_bug_is_a_500_server_error_and_the_connection_stays_open():
    """A 500 was labelled upstream_error, and uvicorn, seeing the exception escape the app,
    closed the connection: the client's next request on it was reset."""
    with Serving(Broken()) as url:
        connection = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=10)
        body = json.dumps({"messages": ASK})
        connection.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        first = connection.getresponse()
        error = json.loads(first.read())["error"]
        assert first.status == 500 and error["type"] == "server_error" and "RuntimeError: a bug" in error["message"]
        socket = connection.sock
        connection.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        second = connection.getresponse()
        assert second.status == 200 and json.loads(second.read())["choices"][0]["message"]["content"] == "Sunny."
        assert connection.sock is socket  # the same connection
        connection.close()


class SlowCount(Recording):
    """Counting a prompt takes 30 s (a 6-million-character /tokenize); says if it was cancelled."""

    cancelled = False

    async def count_tokens(self, prompt):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return 20


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_gone_while_its_prompt_is_counted_cancels_the_count(stream):
    upstream = SlowCount()
    with Serving(upstream) as url:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/v1/chat/completions", json={"messages": ASK, "stream": stream}, timeout=1.0)
        deadline = time.monotonic() + 5
        while not upstream.cancelled and time.monotonic() < deadline:
            time.sleep(0.05)
        assert upstream.cancelled and upstream.asked == []


def test_a_prompt_far_beyond_the_context_is_refused_by_its_head():
    """A prompt of some 200,000 characters for a context of 100 tokens: counted in part (its
    first 800 characters, cut at a line break), not sent whole to /tokenize."""
    upstream = Recording(context=100, tokens=lambda text: len(text) // 4)
    lines = "\n".join(f"line {i} of a long paste" for i in range(8000))
    status, answer = send(upstream, {"messages": [{"role": "user", "content": lines}]})
    assert status == 400 and answer["error"]["param"] == "messages" and "no room" in answer["error"]["message"]
    assert upstream.counted and max(len(text) for text in upstream.counted) <= 100 * 8
    assert upstream.counted[0].endswith("\n")
    # a prompt that fits is counted whole, once
    upstream = Recording(context=100, tokens=lambda text: len(text) // 4)
    status, answer = send(upstream, {"messages": [{"role": "user", "content": "Hi"}]})
    assert status == 200 and len(upstream.counted) == 1


BOS_TEMPLATE = "{{ bos_token }}" + (EXAMPLES / "templates" / "chatml-think-tools.jinja").read_text()


def test_a_prompt_that_starts_with_bos_is_sent_without_it_to_an_upstream_that_adds_its_own(tmp_path):
    (tmp_path / "bos.jinja").write_text(BOS_TEMPLATE)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"}))
    template = tplparse.load(tmp_path / "bos.jinja")
    rendered = tplparse.prompt(template, ASK).text
    assert rendered.startswith("<|endoftext|><|im_start|>")

    async def run(upstream):
        transport = httpx.ASGITransport(app=create_app(template, upstream, MODEL))
        async with httpx.AsyncClient(transport=transport, base_url="http://tplparse") as client:
            return (await client.post("/v1/chat/completions", json={"messages": ASK})).json()

    adds = Recording(prefix="<|endoftext|>")
    answer = asyncio.run(run(adds))
    assert adds.asked[0].prompt == rendered[len("<|endoftext|>"):] and adds.counted == [adds.asked[0].prompt]
    assert any("left to the upstream" in note for note in answer["tplparse"]["notes"])
    keeps = Recording(prefix="")  # an upstream that adds nothing gets the prompt as rendered
    asyncio.run(run(keeps))
    assert keeps.asked[0].prompt == rendered


def _llama(handler) -> LlamaServer:
    return LlamaServer(ScriptedServer(handler).url)


def test_llama_server_says_what_it_puts_before_every_prompt():
    """/tokenize of an empty text, with the special tokens /completion adds: the model's BOS
    when its vocabulary asks for one; /detokenize gives its text."""
    def handler(adds_bos: bool):
        def answer(request):
            body = json.loads(request.content) if request.content else {}
            if request.path == "/props":
                return Answer(200, json={"default_generation_settings": {"n_ctx": 2048}, "model_path": "m.gguf"})
            if request.path == "/tokenize":
                return Answer(200, json={"tokens": ([1] if adds_bos and body["add_special"] else [])
                                                           + ([5, 6] if body["content"] else [])})
            assert request.path == "/detokenize" and body == {"tokens": [1]}
            return Answer(200, json={"content": "<s>"})
        return answer

    assert asyncio.run(_llama(handler(True)).limits()) == Limits(2048, "m.gguf", "<s>")
    assert asyncio.run(_llama(handler(True)).count_tokens("hi")) == 3  # the BOS is in the count, as in the context
    assert asyncio.run(_llama(handler(False)).limits()) == Limits(2048, "m.gguf", "")


@pytest.mark.parametrize("line", [
    b'error: {"code": 400, "message": "the request exceeds the available context size", "type": "invalid_request_error"}',
    b'error: {"error": {"code": 500, "message": "the request exceeds the available context size"}}',
])
def test_an_older_llama_server_error_line_is_said(line):
    """llama-server builds before late 2025 sent a failure mid-stream as an SSE `error:` line
    (then nothing, or `data: [DONE]`): its message was lost ('the stream ended before it
    said why')."""
    def handler(request):
        return Answer(200, content=b'data: {"content": "Hi", "stop": false}\n\n' + line + b"\n\ndata: [DONE]\n\n")

    async def drain():
        return [piece async for piece in _llama(handler).generate(Completion("p", 5))]

    with pytest.raises(UpstreamError) as caught:
        asyncio.run(drain())
    assert caught.value.status == 502 and "exceeds the available context size" in caught.value.message


@pytest.mark.e2e
def _logged(log, line: str, within: float = 15.0) -> bool:
    """Whether the server's log says `line` within `within` seconds (the server writes its log
    from its own thread: the line can come after the answer that caused it)."""
    deadline = time.monotonic() + within
    while line not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_no_double_bos_with_a_real_llama_server_that_adds_its_own(tmp_path):
    """SmolLM2's vocabulary adds no BOS; told to (llama.cpp's --override-kv), with
    <|endoftext|> as its BOS, llama-server puts one before every prompt, and logs a warning
    when the prompt starts with one too. A template that starts with {{ bos_token }}, served
    through tplparse serve: one BOS, and a note saying the template's was left out."""
    from conftest import SMOLLM2
    from servers import llama_server_binary, start_llama_server

    binary = llama_server_binary()
    if binary is None or not SMOLLM2.is_file():
        pytest.skip("llama-server or SmolLM2 is missing (.ci/llama-server.sh, tests/fetch_fixtures.py)")
    (tmp_path / "bos.jinja").write_text(BOS_TEMPLATE)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"}))
    log = tmp_path / "llama.log"
    upstream = start_llama_server(binary, SMOLLM2, log, None, "--override-kv", "tokenizer.ggml.add_bos_token=bool:true",
                                  "--override-kv", "tokenizer.ggml.bos_token_id=int:0")
    serve = start_tplparse_serve(tmp_path / "bos.jinja", upstream.url, tmp_path / "serve.log", "--model-name", MODEL)
    try:
        response = httpx.post(serve.url + "/v1/chat/completions", timeout=120,
                              json={"messages": ASK, "max_tokens": 2, "temperature": 0})
        assert response.status_code == 200, response.text
        assert any("left to the upstream" in note for note in response.json()["tplparse"]["notes"])
        assert "2 BOS tokens" not in log.read_text()
        # the check can see one: the prompt as the template renders it, counted as /completion counts it
        rendered = tplparse.prompt(tplparse.load(tmp_path / "bos.jinja"), ASK).text
        tokens = httpx.post(upstream.url + "/tokenize", timeout=30,
                            json={"content": rendered, "add_special": True, "parse_special": True}).json()["tokens"]
        assert tokens[:2] == [0, 0] and _logged(log, "2 BOS tokens")
        # (the log is in order: a warning of the served request would be before this one)
        assert log.read_text(errors="replace").count("2 BOS tokens") == 1
    finally:
        serve.stop()
        upstream.stop()
