"""Serving: an OpenAI-compatible chat endpoint in front of an engine that only completes text.

    requests   an OpenAI request body, checked field by field (ChatRequest, RequestError)
    plan       request -> prompt, grammar fields, stop strings, parser (Plan)
    upstream   the engine: the Upstream interface, llama-server's /completion (LlamaServer)
    responses  OpenAI's response, chunk and error shapes
    app        the ASGI app (Starlette) that runs a request through the above

Needs the `serve` extra (Starlette, uvicorn, httpx): `pip install 'tplparse[serve]'`.
"""

from .app import create_app
from .requests import ChatRequest, RequestError, parse_request
from .upstream import Completion, Finished, Limits, LlamaServer, Upstream, UpstreamError

__all__ = ["ChatRequest", "Completion", "Finished", "Limits", "LlamaServer", "RequestError", "Upstream", "UpstreamError",
           "create_app", "parse_request"]
