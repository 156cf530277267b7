"""The upstream for an engine kind: what `tplparse serve --upstream-kind KIND --upstream URL`
talks to."""

from __future__ import annotations

from .completions import DIALECTS, OpenAICompletions
from .llama_server import LlamaServer
from .upstream import EngineKind, Upstream


def upstream_for(kind: EngineKind | str, url: str, timeout: float = 120.0,
                 context: int | None = None) -> Upstream:
    """The upstream of engine `kind` at `url`; `context` (tokens) where the engine does not
    say its own (llama-server always does: its /props)."""
    kind = EngineKind(kind)
    if kind == EngineKind.LLAMA_SERVER:
        return LlamaServer(url, timeout=timeout)
    return OpenAICompletions(url, DIALECTS[kind], timeout=timeout, context=context)
