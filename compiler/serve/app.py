"""`tplparse serve`: an OpenAI-compatible chat endpoint in front of an engine that only
completes text (an ASGI app: Starlette, run by uvicorn).

Per request: check the body (`requests`), plan the prompt, grammar and parser (`plan`: on the
event loop when that is quick, else in a worker thread), cap max_tokens to what the upstream's
context leaves, generate (`upstream`), feed each piece to the family's streaming parser, and
answer in OpenAI's shapes (`responses`): SSE chunks ending in `data: [DONE]`, or one
completion, after validation (and retries with the errors fed back, when the request asks for
them). A client that goes away cancels its upstream work (counting its prompt's tokens, or
generating); an upstream that fails is a 502 / 504, or an error event in a stream that already
started; a bug of the bridge's own is a 500 `server_error` (logged), and the connection stays
open; the server goes on serving.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable
from contextlib import aclosing
from typing import TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..bridge import Attempt, compile_in_memory, feedback_messages, reply_errors
from ..bridge.transcripts import Identity, Recorder, TranscriptFolder
from ..errors import TplparseError
from ..runtime import StreamParser
from ..source import ChatTemplate
from . import responses
from .guard import HTTP_LIMITS, HttpLimits
from .plan import Plan, Planner, quick
from .requests import LIMITS, ChatRequest, RequestError, parse_body, parse_request
from .upstream import Completion, Finished, Limits, Upstream, UpstreamError

log = logging.getLogger("tplparse.serve")

# A body up to this size is checked on the event loop (a 5,000-property schema's checks took
# 2 s: in a worker thread, the loop serves the other clients meanwhile).
QUICK_BODY_BYTES = 16 * 1024

# A prompt longer than this many characters per token of the upstream's context is first
# counted in part: its first `context * PROBE_CHARS_PER_TOKEN` characters alone, when they
# are already more tokens than the context holds, refuse it without tokenizing it whole (a
# 6-million-character prompt kept llama-server's /tokenize busy for minutes).
PROBE_CHARS_PER_TOKEN = 8


def create_app(template: ChatTemplate, upstream: Upstream, model_name: str,
               record: TranscriptFolder | None = None,
               http_limits: HttpLimits = HTTP_LIMITS) -> Starlette:
    """The app serving `template`'s model through `upstream` under the name `model_name`;
    with `record`, a transcript of every generation goes into that folder; a request's body
    read within `http_limits.body_seconds` between its pieces. The template is probed here
    (a TplparseError when it cannot be), not on the first request."""
    compile_in_memory(template)
    planner = Planner(template, upstream.grammar_form)

    async def chat_completions(request: Request):
        try:
            return await _chat_completions(request, planner, upstream, model_name, record,
                                           http_limits.body_seconds)
        except RequestError as e:
            return _error(e.status, e.message, e.param)
        except UpstreamError as e:
            return _error(e.status, e.message)
        except Exception as e:  # a bug of the bridge's own: said, logged, and the connection kept
            log.exception("unexpected error")
            return _error(500, f"internal error: {type(e).__name__}: {e}")

    async def models(request: Request):
        return JSONResponse({"object": "list",
                             "data": [{"id": model_name, "object": "model", "created": 0,
                                                         "owned_by": "tplparse"}]})

    async def health(request: Request):
        if await upstream.healthy():
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "upstream unavailable"}, status_code=503)

    async def unexpected(request: Request, exc: Exception):
        log.exception("unexpected error")
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    app = Starlette(routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"]),
                            Route("/v1/models", models, methods=["GET"]),
                            Route("/health", health, methods=["GET"])],
                    exception_handlers={Exception: unexpected})
    app.state.upstream = upstream
    return app


async def _chat_completions(request: Request, planner: Planner, upstream: Upstream,
                            model_name: str, record: TranscriptFolder | None,
                            body_seconds: float = HTTP_LIMITS.body_seconds):
    """One request: the body read and checked, then planned and generated while the client
    waits (a client that goes away cancels what is left)."""
    raw = await _body(request, idle=body_seconds)
    # (the checks of a large body's schemas take time: off the event loop, so that no other
    # client waits for them; a small one is checked here, without a thread's hand-off)
    chat = parse_request(parse_body(raw)) if len(raw) <= QUICK_BODY_BYTES \
        else await run_in_threadpool(lambda: parse_request(parse_body(raw)))
    if chat.model is not None and chat.model != model_name:
        raise RequestError("model", f"model {chat.model!r} is not served here "
                                    f"(this is {model_name!r})", 404)
    if chat.stream:
        prepared = await _cancelled_on_disconnect(
            request, _prepared(planner, upstream, chat, chat.messages))
        if prepared is None:
            return _error(499, "the client closed the request")
        return StreamingResponse(_events(upstream, model_name, *prepared, record),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    answer = await _cancelled_on_disconnect(request,
                                            _served(planner, upstream, model_name, chat, record))
    if answer is None:  # the client went away: its work was cancelled, nobody reads this
        return _error(499, "the client closed the request")
    return JSONResponse(answer)


async def _body(request: Request, limit: int = LIMITS.body_bytes,
                idle: float = HTTP_LIMITS.body_seconds) -> bytes:
    """The request body, read no further than `limit` bytes (413 past it), each piece within
    `idle` seconds of the one before (408: a client that stops sending, or declares a chunk
    of 2^64 bytes and sends none, is not waited for)."""
    too_large = RequestError("", f"the request body is more than {limit} bytes (the limit)", 413)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    pieces = request.stream()
    while True:
        try:
            chunk = await asyncio.wait_for(pieces.__anext__(), idle)
        except StopAsyncIteration:
            break
        except asyncio.TimeoutError:
            raise RequestError("", f"the request body stopped arriving: nothing for {idle:g} s",
                               408) from None
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, message: str, param: str | None = None) -> Response:
    """An error in OpenAI's shape. Its JSON is written ASCII-only: a message or a field's
    name quotes what the client sent, which may hold what no UTF-8 encodes (a lone
    surrogate in a key), and an error must always be sendable."""
    body = json.dumps(responses.error_body(status, message, param), ensure_ascii=True)
    return Response(body, status_code=status, media_type="application/json")


async def _served(planner: Planner, upstream: Upstream, model: str, chat: ChatRequest,
                  record: TranscriptFolder | None) -> dict:
    planned, completion = await _prepared(planner, upstream, chat, chat.messages)
    return await _answer(planner, upstream, model, chat, planned, completion, record)


async def _prepared(planner: Planner, upstream: Upstream, chat: ChatRequest,
                    messages: list) -> tuple[Plan, Completion]:
    """The plan and the upstream request, max_tokens capped to what the context leaves after
    the prompt (a shorter answer beats an engine error)."""
    try:
        planned = await _plan(planner, chat, messages)
    except TplparseError as e:  # the template refused the conversation (roles, content, ...)
        raise RequestError("messages",
                           f"the chat template cannot render this conversation: {e}") from e
    limits = await upstream.limits()
    planned.upstream_model = limits.model
    text = _sent_prompt(planned, limits)
    if chat.max_tokens is not None and _surely_fits(text, chat.max_tokens, limits):
        # No count before generating (a round trip that made each of 16 concurrent requests
        # wait for the others' /tokenize): the usage takes the upstream's own count.
        return planned, Completion(text, chat.max_tokens, planned.stop, planned.grammar,
                                   chat.sampling)
    await _probe_length(upstream, text, limits)
    prompt_tokens = await upstream.count_tokens(text)
    if prompt_tokens is None:
        return planned, Completion(text,
                                   _uncounted_max_tokens(planned, text, chat.max_tokens, limits),
                                   planned.stop, planned.grammar, chat.sampling)
    room = limits.context - prompt_tokens
    if room < 1:
        raise RequestError("messages", f"the prompt is {prompt_tokens} tokens and the upstream's "
                                       f"context is {limits.context}: no room for an answer")
    max_tokens = room if chat.max_tokens is None else min(chat.max_tokens, room)
    if chat.max_tokens is not None and chat.max_tokens > room:
        planned.notes.append(f"max_tokens {chat.max_tokens} capped to {room}: the "
                             f"upstream's context is {limits.context} tokens and the "
                             f"prompt takes {prompt_tokens}")
    planned.prompt_tokens = prompt_tokens
    return planned, Completion(text, max_tokens, planned.stop, planned.grammar, chat.sampling)


async def _plan(planner: Planner, chat: ChatRequest, messages: list) -> Plan:
    """The plan, made on the event loop when that is quick (a short conversation whose
    grammar, if it needs one, is built already), else in a worker thread. A thread's hand-off
    costs more than a quick plan: it spread 16 concurrent requests' arrival at llama-server
    over milliseconds, and llama-server started them in different decoding steps, the first
    token later for most (docs/benchmarks.md, the bridge)."""
    if not quick(messages):
        return await run_in_threadpool(planner.plan, chat, messages)
    prompt = planner.prompt(chat, messages)
    wanted = planner.wanted(chat, prompt)
    grammar = None
    if wanted is not None:
        grammar = planner.remembered(wanted) or await run_in_threadpool(planner.build, wanted)
    return planner.finish(chat, prompt, grammar)


# Tokens a tokenizer may make beyond one per byte of the text: SentencePiece's space before
# the first word (and after each special token, which is itself one token of several bytes).
SPARE_TOKENS = 8


def _surely_fits(text: str, max_tokens: int, limits: Limits) -> bool:
    """Whether the prompt and `max_tokens` fit the context whatever the tokenizer makes of the
    prompt: every token holds at least one byte of it, so it is at most its UTF-8 length (and
    the upstream's prefix) in tokens."""
    bound = len(text.encode("utf-8", "surrogatepass")) + len(limits.prefix.encode("utf-8")) \
        + SPARE_TOKENS
    return bound + max_tokens <= limits.context


def _uncounted_max_tokens(planned: Plan, text: str, max_tokens: int | None,
                          limits: Limits) -> int | None:
    """max_tokens for an upstream that cannot count the prompt's tokens: as asked; when not
    asked, what the context surely leaves (every token holds a byte), else None (the engine
    decides, and refuses a prompt too long for its context itself)."""
    if max_tokens is not None:
        planned.notes.append("the upstream cannot count tokens: max_tokens is sent as asked, "
                             "not capped to the context")
        return max_tokens
    bound = len(text.encode("utf-8", "surrogatepass")) + len(limits.prefix.encode("utf-8")) \
        + SPARE_TOKENS
    if limits.context - bound >= 1:
        planned.notes.append("the upstream cannot count tokens: max_tokens set to "
                             f"{limits.context - bound}, what its context of {limits.context} "
                             f"surely leaves after the prompt's {bound} bytes")
        return limits.context - bound
    planned.notes.append("the upstream cannot count tokens: no max_tokens is sent (the "
                         "engine's own limit holds)")
    return None


def _sent_prompt(planned: Plan, limits: Limits) -> str:
    """The prompt as it is sent: without its leading BOS when the upstream puts its own
    before every prompt (one BOS, not two, as the template meant)."""
    text = planned.prompt.text
    if limits.prefix and text.startswith(limits.prefix):
        planned.notes.append(f"the prompt's leading {limits.prefix!r} is left to the upstream, "
                             "which puts its own before every prompt (one, not two)")
        return text[len(limits.prefix):]
    return text


async def _probe_length(upstream: Upstream, text: str, limits: Limits) -> None:
    """Refuse a prompt far beyond the context by counting its head only (see
    PROBE_CHARS_PER_TOKEN). The head is cut after a line break, where tokenizers split
    anyway; a margin covers what a cut may still change."""
    size = limits.context * PROBE_CHARS_PER_TOKEN
    if len(text) <= size:
        return
    cut = text.rfind("\n", size // 2, size) + 1 or size
    head_tokens = await upstream.count_tokens(text[:cut])
    if head_tokens is not None and head_tokens > limits.context + 64:
        raise RequestError("messages", f"the prompt is {len(text)} characters, and its first {cut} "
                                       f"alone are {head_tokens} tokens; the upstream's context is "
                                       f"{limits.context}: no room for an answer")


def _extra(planned: Plan, raw: str, message: dict, errors: list,
           dropped: list | None = None) -> dict:
    """What OpenAI's shapes have no field for: how the prompt was made, the parser's errors,
    the validation's, the model's raw output (what the message was read from)."""
    extra = {"notes": planned.notes, "errors": message.get("errors") or [],
             "validation": [e.describe() for e in errors], "raw": raw}
    if planned.warnings:
        extra["grammar_warnings"] = planned.warnings
    if dropped:
        extra["dropped_tool_calls"] = dropped
    return extra


class _Reading:
    """One generation read by the family's parser as it streams: `deltas()` yields the
    parser's deltas piece by piece (closing it closes the upstream generation); `end(reason)`
    the parser's last ones (and, with a transcript folder, writes the transcript, named
    `name`); then `raw` holds the model's text and `finished` how the upstream stopped."""

    def __init__(self, upstream: Upstream, planned: Plan, completion: Completion,
                 record: TranscriptFolder | None = None, name: str = ""):
        self._upstream, self._completion = upstream, completion
        self._record, self._name = record, name
        self.parser: StreamParser | Recorder = planned.prompt.parser(planned.calls)
        self._recorder: Recorder | None = None
        if record is not None:
            spec = planned.prompt.spec
            identity = Identity(spec.template_sha256, spec.template_name, spec.family,
                                planned.upstream_model)
            self.parser = self._recorder = Recorder(
                self.parser, identity, tools=planned.tools,
                generation_prompt=planned.prompt.generation_prompt, writer="serve")
        self.raw: list[str] = []
        self.finished: Finished | None = None

    def end(self, reason: str) -> list[dict]:
        deltas = self.parser.end(reason)
        if self._record is not None and self._recorder is not None:
            try:
                self._record.write(self._recorder.transcript(), self._name)
            except OSError as e:
                # the answer goes out all the same; the operator reads why in the log
                log.warning("cannot write a transcript into %s: %s", self._record.path, e)
        return deltas

    async def deltas(self):
        async with aclosing(self._upstream.generate(self._completion)) as pieces:
            async for piece in pieces:
                if isinstance(piece, Finished):
                    self.finished = piece
                    return
                self.raw.append(piece)
                for delta in self.parser.feed(piece):
                    yield delta


async def _events(upstream: Upstream, model: str, planned: Plan, completion: Completion,
                  record: TranscriptFolder | None = None):
    """The SSE stream: a role chunk, a chunk per parser delta, a last chunk with the finish
    reason (and what OpenAI has no field for), `data: [DONE]`."""
    cid, created = responses.completion_id(), int(time.time())
    reading = _Reading(upstream, planned, completion, record, cid)
    yield responses.sse(responses.chunk(cid, model, created, {"role": "assistant", "content": ""}))
    dropped: list = []
    try:
        async with aclosing(reading.deltas()) as deltas:
            async for delta in deltas:
                yield _chunk_of(delta, cid, model, created, dropped)
    except UpstreamError as e:
        # The stream has started (HTTP 200 is sent): what the parser held goes out (a call
        # not complete stays out: the parser drops a cut call), then the error as an event,
        # as OpenAI sends one.
        for delta in reading.end("error"):
            yield _chunk_of(delta, cid, model, created, dropped)
        yield responses.sse(responses.error_body(e.status, e.message))
        yield responses.sse("[DONE]")
        return
    except Exception as e:
        # a bug of the bridge's own: said as an event, and the stream ends as streams do
        log.exception("unexpected error in a stream")
        yield responses.sse(responses.error_body(500, f"internal error: {type(e).__name__}: {e}"))
        yield responses.sse("[DONE]")
        return
    try:
        last = await _last_chunk(reading, planned, cid, model, created, dropped)
    except Exception as e:
        log.exception("unexpected error in a stream")
        yield responses.sse(responses.error_body(500, f"internal error: {type(e).__name__}: {e}"))
    else:
        for chunk in last:
            yield chunk
    yield responses.sse("[DONE]")


async def _last_chunk(reading: _Reading, planned: Plan, cid: str, model: str, created: int,
                      dropped: list) -> list[bytes]:
    """What the parser held at the end, then the chunk with the finish reason, the usage and
    what OpenAI has no field for."""
    parser, finished = reading.parser, reading.finished
    assert finished is not None  # (an upstream's generation ends with one, or raises)
    out = [_chunk_of(delta, cid, model, created, dropped) for delta in reading.end(finished.reason)]
    message = parser.message
    errors = await run_in_threadpool(reply_errors, message, planned.tools, planned.schema,
                                     planned.choice)  # (regexes may be slow)
    last = responses.chunk(cid, model, created, {},
                           responses.finish_reason(message, finished.reason),
                           _extra(planned, "".join(reading.raw), message, errors, dropped))
    last["usage"] = responses.usage(planned.prompt_tokens or finished.prompt_tokens,
                                    finished.completion_tokens)
    out.append(responses.sse(last))
    return out


def _chunk_of(delta: dict, cid: str, model: str, created: int, dropped: list) -> bytes:
    """A parser delta as an SSE chunk. A call dropped after its header went out (its
    arguments turned out invalid, or it was cut) is said at once, in the chunk's `tplparse`
    field (`tool_call_error`: index, kind, message), and again on the last chunk."""
    out, drop = responses.stream_delta(delta)
    if drop is not None:
        dropped.append(drop)
        return responses.sse(responses.chunk(cid, model, created, {},
                                             extra={"tool_call_error": drop}))
    return responses.sse(responses.chunk(cid, model, created, out))


async def _generated(upstream: Upstream, planned: Plan, completion: Completion,
                     record: TranscriptFolder | None = None,
                     name: str = "") -> tuple[str, dict, Finished]:
    """One whole generation, read by the family's parser as it streams."""
    reading = _Reading(upstream, planned, completion, record, name)
    async with aclosing(reading.deltas()) as deltas:
        async for _ in deltas:
            pass
    finished = reading.finished
    assert finished is not None  # (an upstream's generation ends with one, or raises)
    reading.end(finished.reason)
    return "".join(reading.raw), reading.parser.message, finished


async def _answer(planner: Planner, upstream: Upstream, model: str, chat: ChatRequest,
                  planned: Plan, completion: Completion,
                  record: TranscriptFolder | None = None) -> dict:
    """A non-streamed completion: attempt -> parse -> validate, and, when the request allows
    more attempts, again with the errors fed back; the attempts come back when it gives up."""
    attempts: list[Attempt] = []
    conversation = chat.messages
    cid = responses.completion_id()
    prompt_tokens = completion_tokens = 0
    while True:
        raw, message, finished = await _generated(upstream, planned, completion, record,
                                                  f"{cid}-{len(attempts) + 1}")
        completion_tokens += finished.completion_tokens
        prompt_tokens += planned.prompt_tokens or finished.prompt_tokens
        errors = await run_in_threadpool(reply_errors, message, planned.tools, planned.schema,
                                         planned.choice)
        attempts.append(Attempt(raw, message, errors))
        if not errors or len(attempts) >= chat.max_attempts:
            break
        conversation = conversation + feedback_messages(message, errors)
        try:
            next_plan = await _prepared(planner, upstream, chat, conversation)
        except RequestError as e:  # the feedback leaves no room: give up with what there is
            planned.notes.append(f"no further attempt: {e.message}")
            break
        planned, completion = next_plan
    extra = _extra(planned, raw, message, errors)
    if chat.max_attempts > 1:
        extra["attempts"] = [{"raw": a.raw, "message": responses.assistant_message(a.message),
                              "errors": [e.describe() for e in a.errors]} for a in attempts]
        extra["gave_up"] = bool(errors)
    return responses.completion(cid, model, message,
                                responses.finish_reason(message, finished.reason),
                                responses.usage(prompt_tokens, completion_tokens), extra)


_T = TypeVar("_T")


async def _cancelled_on_disconnect(request: Request, work: Awaitable[_T]) -> _T | None:
    """Run `work`; cancel it (and with it the upstream generation) if the client goes away
    (then None)."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.25)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                return None
    finally:
        if not task.done():
            task.cancel()
