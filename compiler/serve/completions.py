"""An OpenAI-style `/v1/completions` endpoint as the bridge's upstream: vLLM, SGLang, or any
other engine that completes a raw prompt (TGI's OpenAI route, a ring of workers, ...).

The protocol is the same for every engine; what differs is a `Dialect`, data not code:

    engine              grammar it takes           body field                       /tokenize
    vllm                Lark (llguidance)          structured_outputs.grammar       yes
    sglang              GBNF (its EBNF)            ebnf                             yes
    openai-completions  none (the bridge says so)  -                                no

Every dialect but the generic one asks the engine to keep special tokens in the text
(`skip_special_tokens: false`): a family's call markers are special tokens in many
vocabularies, and an engine that drops them hands the parser text with its markers cut out.
The context size comes from `/v1/models` (`max_model_len`, as vLLM and SGLang say it) or
from the caller (`context`, the `--context` flag); token counts from the engine's `usage`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import NamedTuple

from ..bridge.grammar import GrammarForm, RequestGrammar
from .upstream import (
    Completion,
    EngineKind,
    Finished,
    HttpUpstream,
    Limits,
    UpstreamError,
    decoded_json,
    token_count,
)


@dataclass(frozen=True)
class Dialect:
    """What one engine's /v1/completions takes beyond OpenAI's fields."""

    kind: EngineKind
    grammar_form: GrammarForm | None  # the grammar the engine reads; None: it is sent none
    grammar_path: tuple[str, ...] = ()  # where the grammar's text goes in the request body
    # body fields that keep the output as the model wrote it
    extra: dict = field(default_factory=dict)
    tokenize: bool = False  # the engine has vLLM's /tokenize and /detokenize

    def constraint(self, grammar: RequestGrammar | None) -> dict:
        """The body fields that carry `grammar` ({} when there is none to send)."""
        if grammar is None or not self.grammar_path:
            return {}
        fields: dict = {self.grammar_path[-1]: grammar.text}
        for key in reversed(self.grammar_path[:-1]):
            fields = {key: fields}
        return fields


# Special tokens kept in the text, and written without spaces between them (vLLM and SGLang
# put a space between two special tokens by default).
_RAW_TEXT = {"skip_special_tokens": False, "spaces_between_special_tokens": False}

DIALECTS = {
    EngineKind.VLLM: Dialect(EngineKind.VLLM, GrammarForm.LARK, ("structured_outputs", "grammar"),
                             _RAW_TEXT, True),
    EngineKind.SGLANG: Dialect(EngineKind.SGLANG, GrammarForm.GBNF, ("ebnf",), _RAW_TEXT, True),
    EngineKind.OPENAI_COMPLETIONS: Dialect(EngineKind.OPENAI_COMPLETIONS, None),
}

# OpenAI's finish reasons that end a completion as tplparse's parsers know ends.
FINISH_REASONS = {"stop": "stop", "length": "length"}


class OpenAICompletions(HttpUpstream):
    """An engine's OpenAI `/v1/completions` (streamed, with `stream_options.include_usage`),
    spoken in `dialect`; `context` (tokens) where `/v1/models` does not say it."""

    def __init__(self, url: str, dialect: Dialect, timeout: float = 120.0,
                 context: int | None = None):
        super().__init__(url, timeout)
        self.dialect, self._context = dialect, context
        self.grammar_form = dialect.grammar_form
        self._can_tokenize = dialect.tokenize

    async def limits(self) -> Limits:
        if self._limits is None:
            model, context = await self._served_model()
            context = self._context or context
            if context is None:
                raise UpstreamError(502, "the upstream's /v1/models does not say its context "
                                         f"size (max_model_len) for {model!r}: start tplparse "
                                         "serve with --context TOKENS")
            self._limits = Limits(context, model, await self._prefix(model))
        return self._limits

    async def _served_model(self) -> tuple[str, int | None]:
        """The first model /v1/models lists, and its max_model_len when it gives one."""
        listing = await self._json("GET", "/v1/models")
        data = listing.get("data")
        if not isinstance(data, list) or not data or not isinstance(data[0], dict) \
                or not isinstance(data[0].get("id"), str):
            raise UpstreamError(502, "the upstream's /v1/models lists no model")
        length = data[0].get("max_model_len")
        usable = isinstance(length, int) and not isinstance(length, bool) and length > 0
        return data[0]["id"], length if usable else None

    async def _prefix(self, model: str) -> str:
        """What the engine puts before every prompt (its tokenizer's BOS), as text: the tokens
        /tokenize gives an empty text, detokenized; "" for an engine that cannot say."""
        tokens = await self._tokens(model, "")
        if not tokens:
            return ""
        answer = await self._json("POST", "/detokenize", {"model": model, "tokens": tokens})
        text = answer.get("prompt", answer.get("text"))
        if not isinstance(text, str):
            raise UpstreamError(502, "the upstream's /detokenize answered no text")
        return text

    async def count_tokens(self, prompt: str) -> int | None:
        tokens = await self._tokens((await self.limits()).model, prompt)
        return None if tokens is None else len(tokens)

    async def _tokens(self, model: str, text: str) -> list | None:
        """`text` as the completions endpoint tokenizes a prompt (special tokens parsed, the
        tokenizer's BOS added); None when the engine has no /tokenize."""
        if not self._can_tokenize:
            return None
        response = await self._request("POST", "/tokenize", {"model": model, "prompt": text,
                                                             "add_special_tokens": True})
        if response.status == 404:
            # an engine without the route: counted by nobody, said in the notes
            self._can_tokenize = False
            return None
        tokens = decoded_json(response, "/tokenize", self.url).get("tokens")
        if not isinstance(tokens, list):
            raise UpstreamError(502, "the upstream's /tokenize answered no token list")
        return tokens

    async def healthy(self) -> bool:
        return await self._healthy("/v1/models")

    def body(self, completion: Completion, model: str) -> dict:
        """The request body for `completion`."""
        return {"model": model, "prompt": completion.prompt, "max_tokens": completion.max_tokens,
                "stream": True, "stream_options": {"include_usage": True}, "stop": completion.stop,
                **self.dialect.extra,
                **self.dialect.constraint(completion.grammar), **completion.sampling}

    async def generate(self, completion: Completion) -> AsyncGenerator[str | Finished, None]:
        body = self.body(completion, (await self.limits()).model)
        reason, usage = None, {}
        async with aclosing(self._events("/v1/completions", body)) as events:
            async for event in events:
                if isinstance(event.get("usage"), dict):
                    usage = event["usage"]
                for piece in _pieces(event):
                    if piece.text:
                        yield piece.text
                    if piece.finish is not None:
                        reason = piece.finish
        if reason is None:
            raise UpstreamError(502, "the upstream's stream ended before it said why it stopped")
        yield Finished(reason, token_count(usage, "prompt_tokens"),
                       token_count(usage, "completion_tokens"))


class Piece(NamedTuple):
    """What one streamed choice carries."""

    text: str
    finish: str | None  # "stop" or "length" on the choice that ends the completion


def _pieces(event: dict) -> list[Piece]:
    """The pieces an event's choices carry (none: the usage event)."""
    choices = event.get("choices")
    if not isinstance(choices, list):
        raise UpstreamError(502, "the upstream sent an event without choices")
    out = []
    for choice in choices:
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            raise UpstreamError(502, "the upstream sent a choice tplparse did not ask for "
                                     "(one completion is asked)")
        text = choice.get("text") or ""
        if not isinstance(text, str):
            raise UpstreamError(502, "the upstream sent a choice whose text is not text")
        finish = choice.get("finish_reason")
        if finish is not None and finish not in FINISH_REASONS:
            raise UpstreamError(502, "the upstream stopped for a reason tplparse "
                                     f"does not know: {finish!r}")
        out.append(Piece(text, FINISH_REASONS.get(finish) if finish is not None else None))
    return out
