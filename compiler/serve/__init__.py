"""Serving: an OpenAI-compatible chat endpoint in front of an engine that only completes text.

    requests      an OpenAI request body, checked field by field (ChatRequest, RequestError)
    plan          request -> prompt, grammar (in the upstream's form), stop strings, parser (Plan)
    upstream      the engine: the Upstream interface, what goes to it and comes back
    llama_server  llama-server's /completion (LlamaServer)
    completions   an OpenAI /v1/completions: vLLM, SGLang, any other (OpenAICompletions, Dialect)
    engines       the upstream for an engine kind (upstream_for)
    responses     OpenAI's response, chunk and error shapes
    app           the ASGI app (Starlette) that runs a request through the above
    http          the HTTP/1.1 client the upstreams speak through (asyncio streams)

Needs the `serve` extra (Starlette, uvicorn): `pip install 'tplparse[serve]'`.
"""

from .app import create_app
from .completions import DIALECTS, Dialect, OpenAICompletions
from .engines import upstream_for
from .llama_server import LlamaServer
from .requests import ChatRequest, RequestError, parse_request
from .upstream import Completion, EngineKind, Finished, Limits, Upstream, UpstreamError

__all__ = ["DIALECTS", "ChatRequest", "Completion", "Dialect", "EngineKind", "Finished", "Limits",
           "LlamaServer", "OpenAICompletions", "RequestError", "Upstream", "UpstreamError",
           "create_app", "parse_request", "upstream_for"]
