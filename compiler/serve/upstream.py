"""The engine behind the bridge: an interface (`Upstream`) and llama-server's raw completion
endpoint behind it (`LlamaServer`).

An upstream is handed a finished prompt and the fields that constrain the output (grammar,
laziness, triggers, preserved tokens: what `tplparse gbnf --llama-request` prints); it
applies no template. It streams text pieces and ends with one `Finished`. Everything it
answers is checked: an upstream that is down, slow, or answers something that is not its
protocol is an `UpstreamError` (HTTP 502 / 504 for the client), never a half-guess.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import AsyncIterator

import httpx


class UpstreamError(Exception):
    """The upstream failed: `status` is what the bridge answers (502 bad gateway, 504 timeout)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Completion:
    """One generation: the prompt as the template rendered it, and what constrains it."""

    prompt: str
    max_tokens: int
    stop: list[str] = field(default_factory=list)
    constraint: dict = field(default_factory=dict)  # grammar, grammar_lazy, grammar_triggers, preserved_tokens
    sampling: dict = field(default_factory=dict)  # temperature, top_p, seed, frequency/presence_penalty


@dataclass
class Finished:
    reason: str  # "stop" (end of turn, a stop string) or "length" (max_tokens)
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Limits:
    context: int  # tokens one request may use, prompt and answer together
    model: str  # the upstream's name for its model
    # What the upstream puts before every prompt it is sent (its model's BOS token, as text),
    # "" when nothing: a prompt that starts with it already would start with it twice.
    prefix: str = ""


class Upstream(ABC):
    """An engine that completes raw text."""

    @abstractmethod
    async def limits(self) -> Limits: ...

    @abstractmethod
    async def count_tokens(self, prompt: str) -> int:
        """The tokens the upstream's context holds for `prompt` as it is sent (with what the
        upstream puts before it)."""

    @abstractmethod
    def generate(self, completion: Completion) -> AsyncIterator[str | Finished]:
        """Text pieces as they are generated, then one Finished. Closing the iterator early
        (the client went away) cancels the generation upstream."""

    @abstractmethod
    async def healthy(self) -> bool: ...

    async def aclose(self) -> None:
        return None


# llama-server's stop types (server-task.cpp: "eos", "word", "limit"): the two that end
# by themselves are a "stop", the token limit a "length".
STOP_TYPES = {"eos": "stop", "word": "stop", "limit": "length"}


class LlamaServer(Upstream):
    """llama.cpp's llama-server: POST /completion (streamed as SSE), /tokenize, /props, /health."""

    def __init__(self, url: str, timeout: float = 120.0, client: httpx.AsyncClient | None = None):
        self.url = url.rstrip("/")
        # connect: the upstream is down; read: no token for `timeout` seconds (a long prompt
        # evaluates before the first one comes).
        self._client = client or httpx.AsyncClient(base_url=self.url, timeout=httpx.Timeout(timeout, connect=5.0))
        self._limits: Limits | None = None

    async def _json(self, method: str, path: str, **kwargs) -> dict:
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.TimeoutException as e:
            raise UpstreamError(504, f"the upstream {self.url} did not answer {path} in time ({type(e).__name__})") from e
        except httpx.HTTPError as e:
            raise UpstreamError(502, f"the upstream {self.url} cannot be reached: {e}") from e
        return _decoded(response, path, self.url)

    async def limits(self) -> Limits:
        if self._limits is None:
            props = await self._json("GET", "/props")
            try:
                context = int(props["default_generation_settings"]["n_ctx"])
                model = str(props.get("model_alias") or props.get("model_path") or "llama-server").rsplit("/", 1)[-1]
            except (KeyError, TypeError, ValueError) as e:
                raise UpstreamError(502, f"the upstream's /props has no context size ({e})") from e
            self._limits = Limits(context, model, await self._prefix())
        return self._limits

    async def _prefix(self) -> str:
        """What /completion puts before every prompt: the tokens it adds to an empty text (the
        BOS token, for a model whose vocabulary asks for one), as text."""
        tokens = await self._tokens("")
        if not tokens:
            return ""
        answer = await self._json("POST", "/detokenize", json={"tokens": tokens})
        text = answer.get("content")
        if not isinstance(text, str):
            raise UpstreamError(502, "the upstream's /detokenize answered no text")
        return text

    async def count_tokens(self, prompt: str) -> int:
        return len(await self._tokens(prompt))

    async def _tokens(self, text: str) -> list:
        # As /completion tokenizes a prompt: special tokens parsed, the model's BOS added
        # when its vocabulary asks for one.
        answer = await self._json("POST", "/tokenize", json={"content": text, "add_special": True, "parse_special": True})
        tokens = answer.get("tokens")
        if not isinstance(tokens, list):
            raise UpstreamError(502, "the upstream's /tokenize answered no token list")
        return tokens

    async def healthy(self) -> bool:
        try:
            response = await self._client.get("/health")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def generate(self, completion: Completion) -> AsyncIterator[str | Finished]:
        body = {"prompt": completion.prompt, "n_predict": completion.max_tokens, "stream": True,
                "cache_prompt": True, "stop": completion.stop, **completion.constraint, **completion.sampling}
        try:
            async with self._client.stream("POST", "/completion", json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    _decoded(response, "/completion", self.url)  # raises with the upstream's message
                async for line in _lines(response):
                    if line.startswith("error:"):  # llama-server before late 2025 sent its errors so
                        raise UpstreamError(502, f"the upstream failed: {_error_message(_event(line[6:]))}")
                    if not line.strip() or not line.startswith("data:"):
                        continue  # SSE comments and the blank lines between events
                    event = _event(line[5:])
                    if isinstance(event.get("error"), dict):
                        raise UpstreamError(502, f"the upstream failed: {event['error'].get('message')}")
                    text = event.get("content", "")
                    if not isinstance(text, str):
                        raise UpstreamError(502, "the upstream sent an event whose content is not text")
                    if text:
                        yield text
                    if event.get("stop") is True:
                        reason = STOP_TYPES.get(event.get("stop_type"))
                        if reason is None:
                            raise UpstreamError(502, f"the upstream stopped for an unknown reason {event.get('stop_type')!r}")
                        yield Finished(reason, _count(event, "tokens_evaluated"), _count(event, "tokens_predicted"))
                        return
        except httpx.TimeoutException as e:
            raise UpstreamError(504, f"the upstream {self.url} stopped sending tokens ({type(e).__name__})") from e
        except httpx.HTTPError as e:
            raise UpstreamError(502, f"the upstream {self.url} failed mid-answer: {e}") from e
        raise UpstreamError(502, "the upstream's stream ended before it said why it stopped")

    async def aclose(self) -> None:
        await self._client.aclose()


async def _lines(response: httpx.Response):
    """The SSE lines, split at \n only: llama-server writes U+2028, U+2029 and U+0085 raw in
    its JSON, and a split at every Unicode line break (httpx's aiter_lines) cuts an event."""
    pending = ""
    async for text in response.aiter_text():
        pending += text
        *lines, pending = pending.split("\n")
        for line in lines:
            yield line.rstrip("\r")
    if pending:
        yield pending


def _decoded(response: httpx.Response, path: str, url: str) -> dict:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if response.status_code != 200:
        message = body.get("error", {}).get("message") if isinstance(body, dict) and isinstance(body.get("error"), dict) else None
        raise UpstreamError(502, f"the upstream {url} answered {path} with HTTP {response.status_code}"
                                 + (f": {message}" if message else ""))
    if not isinstance(body, dict):
        raise UpstreamError(502, f"the upstream {url} answered {path} with something that is not a JSON object")
    return body


def _event(data: str) -> dict:
    try:
        event = json.loads(data)
    except json.JSONDecodeError as e:
        raise UpstreamError(502, f"the upstream sent an event that is not JSON ({e.msg})") from e
    if not isinstance(event, dict):
        raise UpstreamError(502, "the upstream sent an event that is not a JSON object")
    return event


def _error_message(event: dict) -> str:
    """The message of an error event: {"message": ...} or {"error": {"message": ...}}."""
    error = event.get("error") if isinstance(event.get("error"), dict) else event
    message = error.get("message")
    return message if isinstance(message, str) else json.dumps(event)[:500]


def _count(event: dict, key: str) -> int:
    value = event.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
