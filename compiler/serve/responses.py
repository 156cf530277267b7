"""OpenAI's response shapes, from the parser's deltas and message.

The parser's deltas are already OpenAI's (`content`, `reasoning_content`, `tool_calls` with
index, id, name, then argument pieces); a chunk wraps one of them. What OpenAI has no field
for (parse errors, validation errors, a call dropped after its header went out, notes on how
thinking was switched, the attempts of a retried request) goes in a `tplparse` field, on
the last chunk or the completion, so that a client is never told less than the parser knows.
"""

from __future__ import annotations

import json
import time
import uuid


def completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex


def finish_reason(message: dict, upstream_reason: str) -> str:
    """length when the token limit cut the answer; tool_calls when calls came; else stop."""
    if upstream_reason == "length":
        return "length"
    return "tool_calls" if message.get("tool_calls") else "stop"


def chunk(cid: str, model: str, created: int, delta: dict, finish: str | None = None,
          extra: dict | None = None) -> dict:
    body = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if extra:
        body["tplparse"] = extra
    return body


def stream_delta(delta: dict) -> tuple[dict, dict | None]:
    """A parser delta as a chunk's delta, and what it says that OpenAI's delta cannot (a
    dropped call: `tool_call_error`)."""
    if "tool_call_error" in delta:
        return {}, delta["tool_call_error"]
    return delta, None


def assistant_message(message: dict) -> dict:
    """The parsed message in OpenAI's shape (no tool_calls key when there are none)."""
    out = {"role": "assistant", "content": message.get("content")}
    if message.get("reasoning_content") is not None:
        out["reasoning_content"] = message["reasoning_content"]
    if message.get("tool_calls"):
        out["tool_calls"] = [dict(call) for call in message["tool_calls"]]
    return out


def completion(cid: str, model: str, message: dict, finish: str, usage: dict, extra: dict) -> dict:
    return {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": assistant_message(message),
                         "finish_reason": finish}],
            "usage": usage, "tplparse": extra}


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def error_body(status: int, message: str, param: str | None = None) -> dict:
    """OpenAI's error shape."""
    kind = {400: "invalid_request_error", 404: "not_found_error", 408: "invalid_request_error",
            413: "invalid_request_error", 500: "server_error"}.get(
        status, "upstream_error" if status > 500 else "error")
    return {"error": {"message": message, "type": kind, "param": param or None, "code": status}}


def sse(data: dict | str) -> bytes:
    text = data if isinstance(data, str) \
        else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # JSON may hold U+2028 / U+2029 / U+0085 raw; readers that split lines at every Unicode
    # line break would cut the event there, so they go escaped (the same JSON value).
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029") \
        .replace("\u0085", "\\u0085")
    return f"data: {text}\n\n".encode()
