"""llama.cpp's llama-server as the bridge's upstream: POST /completion (streamed as SSE) with
the grammar as llama-server's own request fields (GBNF, lazy with its triggers for `auto`),
/tokenize and /detokenize to count tokens, /props for the context size, /health."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from ..bridge.grammar import GrammarForm
from .upstream import Completion, Finished, HttpUpstream, Limits, UpstreamError, token_count

# llama-server's stop types (server-task.cpp: "eos", "word", "limit"): the two that end
# by themselves are a "stop", the token limit a "length".
STOP_TYPES = {"eos": "stop", "word": "stop", "limit": "length"}


class LlamaServer(HttpUpstream):
    """llama.cpp's llama-server: POST /completion (streamed as SSE), /tokenize, /props, /health."""

    grammar_form = GrammarForm.LLAMA_REQUEST

    async def limits(self) -> Limits:
        if self._limits is None:
            props = await self._json("GET", "/props")
            try:
                context = int(props["default_generation_settings"]["n_ctx"])
                model = str(props.get("model_alias") or props.get("model_path")
                            or "llama-server").rsplit("/", 1)[-1]
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
        answer = await self._json("POST", "/detokenize", {"tokens": tokens})
        text = answer.get("content")
        if not isinstance(text, str):
            raise UpstreamError(502, "the upstream's /detokenize answered no text")
        return text

    async def count_tokens(self, prompt: str) -> int:
        return len(await self._tokens(prompt))

    async def _tokens(self, text: str) -> list:
        # As /completion tokenizes a prompt: special tokens parsed, the model's BOS added
        # when its vocabulary asks for one.
        answer = await self._json("POST", "/tokenize",
                                  {"content": text, "add_special": True, "parse_special": True})
        tokens = answer.get("tokens")
        if not isinstance(tokens, list):
            raise UpstreamError(502, "the upstream's /tokenize answered no token list")
        return tokens

    async def healthy(self) -> bool:
        return await self._healthy("/health")

    async def generate(self, completion: Completion) -> AsyncGenerator[str | Finished, None]:
        constraint = completion.grammar.fields if completion.grammar is not None else {}
        n_predict = -1 if completion.max_tokens is None else completion.max_tokens
        body = {"prompt": completion.prompt, "n_predict": n_predict, "stream": True,
                "cache_prompt": True, "stop": completion.stop, **constraint,
                **completion.sampling}
        async with aclosing(self._events("/completion", body)) as events:
            async for event in events:
                text = event.get("content", "")
                if not isinstance(text, str):
                    raise UpstreamError(502, "the upstream sent an event whose content is not text")
                if text:
                    yield text
                if event.get("stop") is True:
                    stop_type = event.get("stop_type")
                    reason = STOP_TYPES.get(stop_type) if isinstance(stop_type, str) else None
                    if reason is None:
                        raise UpstreamError(502, "the upstream stopped for an unknown reason "
                                                 f"{event.get('stop_type')!r}")
                    yield Finished(reason, token_count(event, "tokens_evaluated"),
                                   token_count(event, "tokens_predicted"))
                    return
        raise UpstreamError(502, "the upstream's stream ended before it said why it stopped")
