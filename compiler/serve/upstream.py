"""The engine behind the bridge: the interface every upstream implements (`Upstream`), what
goes to it and comes back (`Completion`, `Finished`, `Limits`), and what the HTTP upstreams
share (`HttpUpstream`: one client, errors mapped to 502 / 504, SSE lines, checked JSON).

An upstream is handed a finished prompt and the grammar that constrains the output, in the
form it declares it takes (`grammar_form`); it applies no template. It streams text pieces
and ends with one `Finished`. Everything it answers is checked: an upstream that is down,
slow, or answers something that is not its protocol is an `UpstreamError` (HTTP 502 / 504
for the client), never a half-guess.

The engines: llama_server.py (llama-server's /completion), completions.py (an OpenAI
/v1/completions endpoint: vLLM, SGLang, any other).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..bridge.grammar import GrammarForm, RequestGrammar
from .http import Client, ConnectFailed, HttpError, Response, TimedOut, text_lines


class EngineKind(str, Enum):
    """The engines `tplparse serve --upstream-kind` speaks to."""

    LLAMA_SERVER = "llama-server"  # /completion, GBNF in its own fields (llama_server.py)
    VLLM = "vllm"  # /v1/completions, Lark for its guidance backend (completions.py)
    SGLANG = "sglang"  # /v1/completions, GBNF as `ebnf`
    OPENAI_COMPLETIONS = "openai-completions"  # /v1/completions, no grammar


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
    # None: as many as the context leaves (an upstream that cannot count tokens)
    max_tokens: int | None
    stop: list[str] = field(default_factory=list)
    # in the upstream's grammar_form; None: nothing constrains
    grammar: RequestGrammar | None = None
    # temperature, top_p, seed, frequency/presence_penalty
    sampling: dict = field(default_factory=dict)


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

    # The grammar form the engine takes (None: it takes no grammar, and the bridge says so).
    grammar_form: GrammarForm | None = None

    @abstractmethod
    async def limits(self) -> Limits: ...

    @abstractmethod
    async def count_tokens(self, prompt: str) -> int | None:
        """The tokens the upstream's context holds for `prompt` as it is sent (with what the
        upstream puts before it); None when the upstream has no way to count them."""

    @abstractmethod
    def generate(self, completion: Completion) -> AsyncGenerator[str | Finished, None]:
        """Text pieces as they are generated, then one Finished. Closing the iterator early
        (the client went away) cancels the generation upstream."""

    @abstractmethod
    async def healthy(self) -> bool: ...

    async def aclose(self) -> None:
        return None


class HttpUpstream(Upstream):
    """An upstream over HTTP (serve/http.py: kept-alive connections): a connection that fails
    is a 502, a timeout a 504, an answer that is not a JSON object a 502."""

    def __init__(self, url: str, timeout: float = 120.0):
        self.url = url.rstrip("/")
        # connect: the upstream is down; read: no token for `timeout` seconds (a long prompt
        # evaluates before the first one comes).
        self._client = Client(self.url, read_timeout=timeout, connect_timeout=5.0)
        self._limits: Limits | None = None

    async def _request(self, method: str, path: str, body: Any = None) -> Response:
        """The whole answer to a request (any status)."""
        try:
            return await self._client.request(method, path, body)
        except TimedOut as e:
            raise UpstreamError(504, f"the upstream {self.url} did not answer {path} in "
                                     f"time ({e})") from e
        except HttpError as e:
            raise UpstreamError(502, f"the upstream {self.url} cannot be reached: {e}") from e

    async def _json(self, method: str, path: str, body: Any = None) -> dict:
        return decoded_json(await self._request(method, path, body), path, self.url)

    async def _events(self, path: str, body: dict) -> AsyncGenerator[dict, None]:
        """The JSON events of a streamed POST (SSE `data:` lines), up to `data: [DONE]`."""
        try:
            async with self._client.stream("POST", path, body) as response:
                if response.status != 200:
                    await response.read()
                    decoded_json(response, path, self.url)  # raises with the upstream's message
                async for line in text_lines(response):
                    if line.startswith("error:"):
                        # llama-server before late 2025 sent its errors so
                        raise UpstreamError(502, "the upstream failed: "
                                                 f"{_error_message(_event(line[6:]))}")
                    if not line.strip() or not line.startswith("data:"):
                        continue  # SSE comments and the blank lines between events
                    if line[5:].strip() == "[DONE]":
                        return
                    event = _event(line[5:])
                    if isinstance(event.get("error"), dict):
                        raise UpstreamError(502, "the upstream failed: "
                                                 f"{event['error'].get('message')}")
                    yield event
        except TimedOut as e:
            raise UpstreamError(504, f"the upstream {self.url} stopped sending "
                                     f"tokens ({e})") from e
        except ConnectFailed as e:
            raise UpstreamError(502, f"the upstream {self.url} cannot be reached: {e}") from e
        except HttpError as e:
            raise UpstreamError(502, f"the upstream {self.url} failed mid-answer: {e}") from e

    async def _healthy(self, path: str) -> bool:
        try:
            response = await self._client.request("GET", path)
        except HttpError:
            return False
        return response.status == 200

    async def aclose(self) -> None:
        await self._client.aclose()


def decoded_json(response: Response, path: str, url: str) -> dict:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if response.status != 200:
        message = _message_of(body)
        raise UpstreamError(502, f"the upstream {url} answered {path} with HTTP "
                                 f"{response.status}"
                                 + (f": {message}" if message else ""))
    if not isinstance(body, dict):
        raise UpstreamError(502, f"the upstream {url} answered {path} with something "
                                 "that is not a JSON object")
    return body


def _message_of(body) -> str | None:
    """An error body's message: {"error": {"message": ...}} (OpenAI, llama-server),
    {"message": ...} or {"detail": ...} (FastAPI)."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if not isinstance(error, dict):
        error = body
    message = error.get("message", error.get("detail"))
    return message if isinstance(message, str) else None


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
    return _message_of(event) or json.dumps(event)[:500]


def token_count(event: dict, key: str) -> int:
    value = event.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
