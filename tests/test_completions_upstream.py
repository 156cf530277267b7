"""The OpenAI /v1/completions upstream (serve/completions.py), against a scripted HTTP
server (tests/scripted_http.py, over sockets): what each engine's dialect sends (its grammar's form and field, the special
tokens kept), how the stream, its finish reason and its usage are read, and the errors an
engine that does not keep the protocol is answered with. The real vLLM is in
tests/test_vllm_serve.py."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("httpx", reason="the serve extra is not installed: pip install 'tplparse[serve]'")
import httpx  # noqa: E402

import tplparse  # noqa: E402
from conftest import EXAMPLES, run_cli  # noqa: E402
from scripted_http import Answer, Request, ScriptedServer  # noqa: E402
from tplparse.bridge import reply_errors  # noqa: E402
from tplparse.bridge.grammar import GrammarForm, RequestGrammar  # noqa: E402
from tplparse.grammar import ToolChoice  # noqa: E402
from tplparse.serve import (DIALECTS, Completion, EngineKind, Finished, OpenAICompletions, UpstreamError,  # noqa: E402
                            create_app, upstream_for)

MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]}


def _sse(*events) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)


def _chunk(text="", finish=None):
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


USAGE = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}


class Engine:
    """A scripted engine: /v1/models, /tokenize (or 404), and a streamed /v1/completions."""

    def __init__(self, stream: bytes, models=MODELS, tokenize=True):
        self.stream, self.models, self.tokenize = stream, models, tokenize
        self.bodies: list[dict] = []

    def __call__(self, request: Request) -> Answer:
        if request.path == "/v1/models":
            return Answer(200, json=self.models)
        if request.path == "/tokenize":
            if not self.tokenize:
                return Answer(404, json={"detail": "Not Found"})
            prompt = json.loads(request.content)["prompt"]
            return Answer(200, json={"tokens": list(range(len(prompt.split()))), "count": 0})
        if request.path == "/v1/completions":
            self.bodies.append(json.loads(request.content))
            return Answer(200, content=self.stream, headers={"content-type": "text/event-stream"})
        return Answer(404)


def _upstream(engine: Engine, kind=EngineKind.VLLM, context=None) -> OpenAICompletions:
    return OpenAICompletions(ScriptedServer(engine).url, DIALECTS[kind], context=context)


def _generate(upstream, completion):
    async def run():
        return [piece async for piece in upstream.generate(completion)]
    return asyncio.run(run())


GRAMMAR = RequestGrammar(GrammarForm.LARK, "start: \"x\"")


@pytest.mark.parametrize("kind, field", [(EngineKind.VLLM, {"structured_outputs": {"grammar": GRAMMAR.text}}),
                                         (EngineKind.SGLANG, {"ebnf": GRAMMAR.text}),
                                         (EngineKind.OPENAI_COMPLETIONS, {})])
def test_each_dialect_sends_its_grammar_where_its_engine_reads_it(kind, field):
    engine = Engine(_sse(_chunk("Hel"), _chunk("lo", "stop"), USAGE, b"[DONE]"))
    pieces = _generate(_upstream(engine, kind), Completion("p", 5, ["</s>"], GRAMMAR, {"temperature": 0}))
    assert pieces == ["Hel", "lo", Finished("stop", 7, 3)]
    body = engine.bodies[0]
    assert {k: body[k] for k in field} == field
    assert not {"structured_outputs", "ebnf"} - set(field) & set(body)  # no other grammar field
    assert body["model"] == "m" and body["prompt"] == "p" and body["max_tokens"] == 5 and body["stop"] == ["</s>"]
    assert body["temperature"] == 0 and body["stream"] is True and body["stream_options"] == {"include_usage": True}
    # special tokens kept in the text (a family's markers), except where the engine is unknown
    assert body.get("skip_special_tokens") is (None if kind == EngineKind.OPENAI_COMPLETIONS else False)


def test_the_grammar_form_is_the_engines():
    assert [DIALECTS[k].grammar_form for k in (EngineKind.VLLM, EngineKind.SGLANG, EngineKind.OPENAI_COMPLETIONS)] == [
        GrammarForm.LARK, GrammarForm.GBNF, None]
    assert upstream_for("llama-server", "http://x").grammar_form == GrammarForm.LLAMA_REQUEST
    assert upstream_for("vllm", "http://x").grammar_form == GrammarForm.LARK


def test_the_length_finish_and_no_usage():
    engine = Engine(_sse(_chunk("a"), _chunk("b", "length"), b"[DONE]"))
    assert _generate(_upstream(engine), Completion("p", 2)) == ["a", "b", Finished("length", 0, 0)]


@pytest.mark.parametrize("stream, said", [
    (_sse(_chunk("a"), b"[DONE]"), "ended before it said why it stopped"),
    (_sse(_chunk("a", "abort")), "a reason tplparse does not know: 'abort'"),
    (_sse({"object": "x"}), "an event without choices"),
    (_sse({"choices": [{"index": 1, "text": "a"}]}), "did not ask for"),
    (_sse({"error": {"message": "grammar failed"}}), "grammar failed"),
    (b"data: {not json\n\n", "not JSON"),
])
def test_an_engine_that_breaks_the_protocol_is_a_502(stream, said):
    with pytest.raises(UpstreamError) as caught:
        _generate(_upstream(Engine(stream)), Completion("p", 5))
    assert caught.value.status == 502 and said in caught.value.message


def test_the_context_comes_from_v1_models_or_the_flag():
    models = {"data": [{"id": "m"}]}
    with pytest.raises(UpstreamError, match="--context TOKENS"):
        asyncio.run(_upstream(Engine(b"", models)).limits())
    assert asyncio.run(_upstream(Engine(b"", models), context=1000).limits()).context == 1000
    assert asyncio.run(_upstream(Engine(b"")).limits()).context == 4096


def _chat(upstream, body):
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")

    async def run():
        transport = httpx.ASGITransport(app=create_app(template, upstream, "m"))
        async with httpx.AsyncClient(transport=transport, base_url="http://tplparse") as client:
            return await client.post("/v1/chat/completions", json=body)
    return asyncio.run(run())


def test_an_engine_without_tokenize_is_sent_what_its_context_surely_leaves_and_the_notes_say_so():
    engine = Engine(_sse(_chunk("Sunny.", "stop"), b"[DONE]"), tokenize=False)
    answer = _chat(_upstream(engine, EngineKind.SGLANG), {"messages": [{"role": "user", "content": "Hi"}]})
    assert answer.status_code == 200, answer.text
    sent = engine.bodies[0]["max_tokens"]
    prompt = engine.bodies[0]["prompt"]
    assert 0 < sent <= 4096 - len(prompt.encode())  # every token holds a byte: this surely fits
    assert any("cannot count tokens" in note for note in answer.json()["tplparse"]["notes"])


def test_a_generic_engine_gets_no_grammar_and_the_answer_says_so():
    engine = Engine(_sse(_chunk("Sunny.", "stop"), b"[DONE]"), tokenize=False)
    tools = json.loads((EXAMPLES / "tools.json").read_text())
    answer = _chat(_upstream(engine, EngineKind.OPENAI_COMPLETIONS),
                   {"messages": [{"role": "user", "content": "Hi"}], "tools": tools, "tool_choice": "required"})
    assert answer.status_code == 200, answer.text
    assert "structured_outputs" not in engine.bodies[0] and "ebnf" not in engine.bodies[0]
    assert any(note.startswith("no grammar: the upstream takes none") for note in answer.json()["tplparse"]["notes"])
    # and the reply without the required call is said to be one
    assert answer.json()["tplparse"]["validation"]


def test_context_is_refused_for_llama_server():
    result = run_cli("serve", str(EXAMPLES / "chatml-think-tools.gguf"), "--upstream", "http://127.0.0.1:9",
                     "--context", "100")
    assert result.returncode == 2 and "--context is for an OpenAI-compatible upstream" in result.stderr
    assert "Traceback" not in result.stderr


def _call(name):
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": "{}"}}


@pytest.mark.parametrize("choice, calls, said", [
    (ToolChoice("required"), [], "asks for one"),
    (ToolChoice("none"), ["get_weather"], "allows no call"),
    (ToolChoice("function", "get_weather"), [], "asks for a call of 'get_weather'"),
    (ToolChoice("function", "get_weather"), ["get_weather", "get_time"], "a call of 'get_time'"),
])
def test_a_reply_the_tool_choice_does_not_allow_is_an_error(choice, calls, said):
    """Without a grammar (a generic engine), tool_choice is checked on the reply: each way to
    break it is a `tool_choice` error, and a reply that keeps it is none."""
    message = {"role": "assistant", "content": "ok" if not calls else None,
               "tool_calls": [_call(name) for name in calls] or None}
    errors = reply_errors(message, None, None, choice)
    assert [e.kind for e in errors] == ["tool_choice"] and said in errors[0].message, errors
    kept = {"required": ["get_time"], "none": [], "function": ["get_weather"]}[choice.mode]
    assert reply_errors({"role": "assistant", "content": "ok", "tool_calls": [_call(n) for n in kept] or None},
                        None, None, choice) == []
