"""An OpenAI chat-completions request body, checked field by field into a `ChatRequest`.

Everything a client sends is untrusted input: a field of the wrong type or value is a
`RequestError` naming the field (HTTP 400 in OpenAI's error shape), never a guess and never
dropped silently. Fields this bridge does not implement are refused by name, so a client
never believes it got a behaviour it did not get.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jsonschema

# Accepted and ignored, because they do not change what is generated here (metadata, or
# options whose only value this bridge implements).
IGNORED = {"user", "metadata", "store", "service_tier", "n", "logit_bias", "stream_options", "prompt_cache_key",
           "safety_identifier"}
EXTENSIONS = {"thinking", "chat_template_kwargs", "max_attempts"}
KNOWN = {"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "response_format", "max_tokens",
         "max_completion_tokens", "stream", "temperature", "top_p", "seed", "stop", "frequency_penalty",
         "presence_penalty"} | IGNORED | EXTENSIONS
ROLES = {"system", "developer", "user", "assistant", "tool"}


class RequestError(ValueError):
    """A request field that cannot be served as given (HTTP 400)."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param
        self.message = message


@dataclass
class ChatRequest:
    messages: list[dict]
    model: str | None = None
    tools: list[dict] | None = None
    tool_choice: str = "auto"  # auto | required | none | a tool's name
    parallel_tool_calls: bool = True
    schema: dict | None = None  # response_format json_schema: the content is JSON of it
    max_tokens: int | None = None
    stream: bool = False
    sampling: dict = field(default_factory=dict)  # temperature, top_p, seed, penalties (as given)
    stop: list[str] = field(default_factory=list)  # the client's stop strings, besides the family's
    thinking: bool | None = None  # None: the template's default
    max_attempts: int = 1  # > 1: retry with the validation errors fed back (non-streaming only)


def parse_request(body) -> ChatRequest:
    if not isinstance(body, dict):
        raise RequestError("", "the request body must be a JSON object")
    # A field sent as null is a field not sent (SDKs write explicit nulls); so are logprobs
    # not asked for.
    body = {k: v for k, v in body.items() if v is not None and not (k == "logprobs" and v is False)}
    unknown = sorted(set(body) - KNOWN)
    if unknown:
        raise RequestError(unknown[0], f"unsupported field {unknown[0]!r}")
    if body.get("n", 1) != 1:
        raise RequestError("n", "only n=1 is served")
    messages = _messages(body.get("messages"))
    tools = _tools(body.get("tools"))
    tool_choice = _tool_choice(body.get("tool_choice"), tools)
    request = ChatRequest(messages=messages, tools=tools, tool_choice=tool_choice)
    request.model = _optional(body, "model", str)
    request.parallel_tool_calls = _optional(body, "parallel_tool_calls", bool, True)
    request.schema = _response_format(body.get("response_format"))
    if request.schema is not None and tool_choice not in ("auto", "none"):
        raise RequestError("response_format", "a json_schema response and a required tool call cannot both be asked for")
    limit_field = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    limit = _optional(body, limit_field, int)
    if limit is not None and limit < 1:
        raise RequestError(limit_field, f"{limit_field} must be at least 1")
    request.max_tokens = limit
    request.stream = _optional(body, "stream", bool, False)
    for name, low, high in (("temperature", 0, 2), ("top_p", 0, 1), ("frequency_penalty", -2, 2),
                            ("presence_penalty", -2, 2)):
        value = _optional(body, name, (int, float))
        if value is not None:
            if not low <= value <= high:
                raise RequestError(name, f"{name} must be between {low} and {high}")
            request.sampling[name] = value
    seed = _optional(body, "seed", int)
    if seed is not None:
        request.sampling["seed"] = seed
    request.stop = _stop(body.get("stop"))
    request.thinking = _thinking(body)
    attempts = _optional(body, "max_attempts", int, 1)
    if not 1 <= attempts <= 10:
        raise RequestError("max_attempts", "max_attempts must be between 1 and 10")
    if attempts > 1 and request.stream:
        raise RequestError("max_attempts", "retries are for non-streaming requests: a streamed attempt cannot be taken back")
    request.max_attempts = attempts
    return request


def _optional(body, name, kind, default=None):
    value = body.get(name)
    if value is None:
        return default
    # (bool is an int in Python: an int field does not take true / false)
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        wanted = {str: "a string", bool: "true or false", int: "an integer"}.get(kind, "a number")
        raise RequestError(name, f"{name} must be {wanted}")
    return value


def _messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages", "messages must be a non-empty list")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise RequestError(where, f"{where} must be an object")
        if message.get("role") not in ROLES:
            raise RequestError(f"{where}.role", f"{where}.role must be one of " + ", ".join(sorted(ROLES)))
        content = message.get("content")
        if isinstance(content, list):  # content parts: text only
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise RequestError(f"{where}.content", f"{where}.content: only text parts are served")
        elif content is not None and not isinstance(content, str):
            raise RequestError(f"{where}.content", f"{where}.content must be a string or a list of text parts")
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise RequestError(f"{where}.tool_calls", f"{where}.tool_calls must be a list")
        for j, call in enumerate(calls or []):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise RequestError(f"{where}.tool_calls[{j}]", f"{where}.tool_calls[{j}] must have a function name")
    # Text parts are one text, as OpenAI reads them (templates that expect a string would
    # print the list, or drop it).
    return [{**m, "content": "".join(part["text"] for part in m["content"])} if isinstance(m.get("content"), list) else m
            for m in messages]


def _tools(tools) -> list[dict] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RequestError("tools", "tools must be a list")
    names = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise RequestError(f"tools[{i}]", f"tools[{i}] must be a function with a name")
        if function.get("parameters") is not None:
            _schema(function["parameters"], f"tools[{i}].function.parameters")
        if function["name"] in names:
            raise RequestError(f"tools[{i}]", f"tools[{i}]: {function['name']!r} is offered twice")
        names.add(function["name"])
    return tools or None


def _tool_choice(choice, tools) -> str:
    if choice is None:
        return "auto" if tools else "none"
    if isinstance(choice, str):
        if choice not in ("auto", "required", "none"):
            raise RequestError("tool_choice", "tool_choice must be auto, required, none or a named function")
        if choice != "none" and not tools:
            raise RequestError("tool_choice", f"tool_choice {choice!r} needs tools")
        return choice
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise RequestError("tool_choice", "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}")
    if name not in {t["function"]["name"] for t in tools or []}:
        raise RequestError("tool_choice", f"tool_choice names {name!r}, which is not among the tools")
    return name


def _response_format(value) -> dict | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        inner = value.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, dict) else None
        return _schema(schema, "response_format.json_schema.schema")
    raise RequestError("response_format", "response_format.type must be text, json_object or json_schema")


def _schema(schema, param: str) -> dict:
    """A JSON Schema (Draft 2020-12) that is one: checked before anything is generated."""
    if not isinstance(schema, dict):
        raise RequestError(param, f"{param} must be a JSON Schema object")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        raise RequestError(param, f"{param} is not a valid JSON Schema: {e.message}" + (f" (at {where})" if where else "")) from e
    except RecursionError as e:
        raise RequestError(param, f"{param} is nested too deeply") from e
    return schema


def _stop(stop) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise RequestError("stop", "stop must be a non-empty string or a list of up to 4 of them")
    return stops


def _thinking(body) -> bool | None:
    """`thinking` (true / false), or `chat_template_kwargs.enable_thinking` as vLLM and
    llama-server take it; the template's own switch (or a closed block) does the rest."""
    thinking = _optional(body, "thinking", bool)
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict) or set(kwargs) - {"enable_thinking"}:
            raise RequestError("chat_template_kwargs", "chat_template_kwargs takes only enable_thinking here")
        enable = kwargs.get("enable_thinking")
        if enable is not None and not isinstance(enable, bool):
            raise RequestError("chat_template_kwargs.enable_thinking", "enable_thinking must be true or false")
        if thinking is not None and enable is not None and thinking != enable:
            raise RequestError("thinking", "thinking and chat_template_kwargs.enable_thinking disagree")
        thinking = enable if thinking is None else thinking
    return thinking
