"""An OpenAI chat-completions request body, checked field by field into a `ChatRequest`.

Everything a client sends is untrusted input: a field of the wrong type or value is a
`RequestError` naming the field (HTTP 400 in OpenAI's error shape), never a guess and never
dropped silently. Fields this bridge does not implement are refused by name, so a client
never believes it got a behaviour it did not get. A request is held to `LIMITS` (each named
in docs/serving.md), so that no request makes the bridge or its upstream work without bound.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import NamedTuple

import jsonschema

from ..grammar import ToolChoice
from ..grammar.ir import Grammar
from ..grammar.json_schema import SchemaError, add_schema
from ..grammar.schema_check import SchemaLimits, check_schema

# Accepted and ignored, because they do not change what is generated here (metadata, or
# options whose only value this bridge implements), each of OpenAI's type.
IGNORED = {"user": str, "metadata": dict, "store": bool, "service_tier": str, "n": int,
           "logit_bias": dict, "stream_options": dict, "prompt_cache_key": str,
           "safety_identifier": str}
# (continue_final_message and add_generation_prompt: vLLM's names, for a prefilled answer)
EXTENSIONS = {"thinking", "chat_template_kwargs", "max_attempts", "calls", "continue_final_message",
              "add_generation_prompt"}
KNOWN = {"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "response_format",
         "max_tokens", "max_completion_tokens", "stream", "temperature", "top_p", "seed", "stop",
         "frequency_penalty",
         "presence_penalty"} | set(IGNORED) | EXTENSIONS
ROLES = {"system", "developer", "user", "assistant", "tool"}
# What a message may hold, by role (a field sent as null is a field not sent). An assistant
# message that a client echoes back from OpenAI carries `refusal`, `annotations`, `audio` and
# `function_call` as null or empty: taken, since they say nothing; any of them with a value is
# refused by name, as every other field is: nothing a client sends is silently ignored.
MESSAGE_FIELDS = {"role", "content", "name"}
ROLE_FIELDS = {"assistant": {"tool_calls", "reasoning_content"}, "tool": {"tool_call_id"}}
EMPTY_ECHOES = {"refusal", "annotations", "audio", "function_call"}
TOOL_FIELDS = {"type", "function"}
FUNCTION_FIELDS = {"name", "description", "parameters", "strict"}
CALL_FIELDS = {"id", "type", "function"}
CALL_FUNCTION_FIELDS = {"name", "arguments"}
MODES = ("auto", "required", "none")
# A tool's name: OpenAI's letters, digits, _ and - (and the dot some templates' tools use),
# which every call format writes as it is.
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class RequestLimits:
    """What one request may hold (docs/serving.md: the limits a request is held to)."""

    body_bytes: int = 2 * 1024 * 1024  # the body, as sent (a larger one is a 413)
    depth: int = 64  # how deeply the body's JSON nests
    messages: int = 4096
    tools: int = 128  # OpenAI's
    # one schema's size: its properties, its enums' values and patterns' alternatives (OpenAI's,
    # for structured outputs), a pattern's length
    schema: SchemaLimits = SchemaLimits()
    # what an engine's token count holds (llama.cpp's n_predict is 32-bit)
    max_tokens: int = 2**31 - 1
    stops: int = 4  # OpenAI's


LIMITS = RequestLimits()


class RequestError(ValueError):
    """A request field that cannot be served as given (HTTP 400, or `status`)."""

    def __init__(self, param: str, message: str, status: int = 400):
        super().__init__(message)
        self.param = param
        self.message = message
        self.status = status


@dataclass
class ChatRequest:
    messages: list[dict]
    model: str | None = None
    tools: list[dict] | None = None
    tool_choice: ToolChoice = ToolChoice("auto")  # a mode, or ToolChoice("function", name)
    parallel_tool_calls: bool = True
    schema: dict | None = None  # response_format json_schema: the content is JSON of it
    max_tokens: int | None = None
    stream: bool = False
    sampling: dict = field(default_factory=dict)  # temperature, top_p, seed, penalties (as given)
    stop: list[str] = field(default_factory=list)  # the client's stop strings, besides the family's
    thinking: bool | None = None  # None: the template's default
    max_attempts: int = 1  # > 1: retry with the validation errors fed back (non-streaming only)
    # the stream of calls: "deltas" (for a UI: headers, argument pieces, a void delta for a call
    # found broken) or "complete" (for code that executes tools: each call once, whole and valid)
    calls: str = "deltas"
    # the last message is an assistant's answer begun by the client: the model continues it
    # (the response holds what the model adds)
    continue_final_message: bool = False


# --- the body: JSON, and every value in it ------------------------------------------------

class _BadNumber(NamedTuple):
    """A number the body writes that no field can hold: the parse keeps it, so that the walk
    (`_check_values`) can name the field it is in."""

    text: str
    why: str


def _int(text: str):
    try:
        return int(text)
    except ValueError:  # past Python's 4,300 digits
        return _BadNumber(text, f"an integer of {len(text.lstrip('-'))} digits")


def _float(text: str):
    value = float(text)
    if value in (float("inf"), float("-inf")):
        return _BadNumber(text, f"{text[:20]} is too large a number")
    return value


def _constant(text: str):
    return _BadNumber(text, f"{text} is not JSON")


def parse_body(raw: bytes, limits: RequestLimits = LIMITS):
    """The body's JSON (UTF-8, or UTF-16 / UTF-32 as JSON allows), each value checked: every
    string is Unicode text (no lone surrogate: nothing could send it on), every number one
    that a field can hold, the nesting within `limits.depth`."""
    try:
        body = json.loads(raw, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError("", f"the request body is not JSON: {e}") from e
    except RecursionError as e:
        raise RequestError("", "the request body is nested too deeply") from e
    _check_values(body, "", 0, limits.depth)
    return body


def _check_values(value, where: str, depth: int, limit: int) -> None:
    if isinstance(value, str):
        _check_text(value, where)
    elif isinstance(value, _BadNumber):
        raise RequestError(where, f"{where or 'the request body'}: {value.why}")
    elif isinstance(value, (dict, list)):
        if depth >= limit:
            raise RequestError(where, f"{where}: the request body nests more "
                                      f"than {limit} levels deep")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            shown = _escaped(key) if isinstance(key, str) else key
            inner = f"{where}[{shown}]" if isinstance(value, list) \
                else f"{where}.{shown}" if where else str(shown)
            if isinstance(key, str):
                _check_text(key, inner)
            _check_values(item, inner, depth + 1, limit)


def _escaped(key: str) -> str:
    """A key as a field's name in an error: a lone surrogate in it written as its escape (the
    name must be text an answer can carry)."""
    return key.encode("utf-8", "backslashreplace").decode("utf-8") if _SURROGATES.search(key) \
        else key


_SURROGATES = re.compile("[\ud800-\udfff]")


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise RequestError(where, f"{where or 'the request body'}: a lone surrogate "
                                  f"(\\u{ord(text[e.start]):04x}) at character "
                                  f"{e.start} is not text") from None


# --- the fields -------------------------------------------------------------------------

def parse_request(body, limits: RequestLimits = LIMITS) -> ChatRequest:
    if not isinstance(body, dict):
        raise RequestError("", "the request body must be a JSON object")
    # A field sent as null is a field not sent (SDKs write explicit nulls); so are logprobs
    # not asked for.
    body = {k: v for k, v in body.items() if v is not None and not (k == "logprobs" and v is False)}
    unknown = sorted(set(body) - KNOWN)
    if unknown:
        raise RequestError(unknown[0], f"unsupported field {unknown[0]!r}")
    _ignored(body)
    messages = _messages(body.get("messages"), limits)
    tools = _tools(body.get("tools"), limits)
    tool_choice = _tool_choice(body.get("tool_choice"), tools)
    request = ChatRequest(messages=messages, tools=tools, tool_choice=tool_choice)
    request.model = _optional(body, "model", str)
    request.parallel_tool_calls = _optional(body, "parallel_tool_calls", bool, True)
    request.schema = _response_format(body.get("response_format"), limits)
    if request.schema is not None and tool_choice.mode not in ("auto", "none"):
        raise RequestError("response_format", "a json_schema response and a required tool call "
                                              "cannot both be asked for")
    request.max_tokens = _max_tokens(body, limits)
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
        if not -2**63 <= seed < 2**63:
            raise RequestError("seed", "the sampling seed must be a 64-bit integer")
        request.sampling["seed"] = seed
    request.stop = _stop(body.get("stop"), limits)
    request.thinking = _thinking(body)
    attempts = _optional(body, "max_attempts", int, 1)
    if not 1 <= attempts <= 10:
        raise RequestError("max_attempts", "max_attempts must be between 1 and 10")
    if attempts > 1 and request.stream:
        raise RequestError("max_attempts", "retries are for non-streaming requests: a streamed "
                                           "attempt cannot be taken back")
    request.max_attempts = attempts
    request.continue_final_message = _continued(body, messages)
    if request.continue_final_message and attempts > 1:
        raise RequestError("max_attempts", "retries feed the errors back as a new turn; a "
                                           "continued answer is one attempt")
    request.calls = _optional(body, "calls", str, "deltas")
    if request.calls not in ("deltas", "complete"):
        raise RequestError("calls", "calls must be 'deltas' (a call's arguments as they are "
                                    "generated) or 'complete' (each call once, when complete and "
                                    "valid against its tool's schema)")
    return request


def _optional(body, name, kind, default=None, where: str | None = None):
    value = body.get(name)
    if value is None:
        return default
    where = where or name
    # (bool is an int in Python: an int field does not take true / false)
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        names = {str: "a string", bool: "true or false", int: "an integer", dict: "an object",
                 list: "a list"}
        wanted = names.get(kind, "a number")
        raise RequestError(where, f"{where} must be {wanted}")
    return value


def _ignored(body) -> None:
    """The fields accepted and ignored: of their type, and with the one value served."""
    for name, kind in IGNORED.items():
        _optional(body, name, kind)
    if body.get("n", 1) != 1:
        raise RequestError("n", "only n=1 is served")
    if body.get("logit_bias"):
        raise RequestError("logit_bias", "logit_bias is not served (it would "
                                         "change what is generated)")
    metadata = body.get("metadata") or {}
    for key in metadata:
        _optional(metadata, key, str, where=f"metadata.{key}")
    options = body.get("stream_options") or {}
    for key in options:
        if key not in ("include_usage", "include_obfuscation"):
            raise RequestError(f"stream_options.{key}", f"unsupported field stream_options.{key}")
        _optional(options, key, bool, where=f"stream_options.{key}")


def _max_tokens(body, limits: RequestLimits) -> int | None:
    values = {name: _optional(body, name, int) for name in ("max_completion_tokens", "max_tokens")}
    given = {name: value for name, value in values.items() if value is not None}
    if len(given) == 2 and values["max_tokens"] != values["max_completion_tokens"]:
        raise RequestError("max_tokens", "max_tokens and max_completion_tokens disagree (give one)")
    for name, value in given.items():
        if not 1 <= value <= limits.max_tokens:
            raise RequestError(name, f"{name} must be between 1 and {limits.max_tokens}")
        return value
    return None


def _messages(messages, limits: RequestLimits) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages", "messages must be a non-empty list")
    if len(messages) > limits.messages:
        raise RequestError("messages", f"messages holds {len(messages)} messages; the "
                                       f"limit is {limits.messages}")
    for i, message in enumerate(messages):
        _message(message, f"messages[{i}]")
    # Text parts are one text, as OpenAI reads them (templates that expect a string would
    # print the list, or drop it).
    return [{**m, "content": "".join(part["text"] for part in m["content"])}
            if isinstance(m.get("content"), list) else m
            for m in messages]


def _message(message, where: str) -> None:
    if not isinstance(message, dict):
        raise RequestError(where, f"{where} must be an object")
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise RequestError(f"{where}.role", f"{where}.role must be one of "
                           + ", ".join(sorted(ROLES)))
    _unknown_fields(message, MESSAGE_FIELDS | ROLE_FIELDS.get(role, set()), where,
                    empty_ok=EMPTY_ECHOES if role == "assistant" else set())
    content = message.get("content")
    if isinstance(content, list):  # content parts: text only
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise RequestError(f"{where}.content[{j}]",
                                   f"{where}.content[{j}]: only text parts are served")
    elif content is not None and not isinstance(content, str):
        raise RequestError(f"{where}.content", f"{where}.content must be a string "
                                               "or a list of text parts")
    for key in ("name", "tool_call_id", "reasoning_content"):
        _optional(message, key, str, where=f"{where}.{key}")
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise RequestError(f"{where}.tool_calls", f"{where}.tool_calls must be a list")
    for j, call in enumerate(calls or []):
        _past_call(call, f"{where}.tool_calls[{j}]")


def _unknown_fields(value: dict, known: set[str], where: str,
                    empty_ok: frozenset[str] | set[str] = frozenset()) -> None:
    """A 400 naming the first field of `value` this bridge does not serve (one sent as null is
    not sent; those in `empty_ok` may also be empty)."""
    for key, item in value.items():
        if key in known or item is None or key in empty_ok and item in ("", [], {}):
            continue
        if key == "function_call":
            raise RequestError(f"{where}.function_call", f"{where}.function_call: the legacy "
                               "function_call is not served; send the call as tool_calls")
        raise RequestError(f"{where}.{key}", f"unsupported field {where}.{key}")


def _past_call(call, where: str) -> None:
    """A call in the history, as OpenAI takes it: its arguments are the JSON text the model
    wrote (a string), not an object."""
    if not isinstance(call, dict):
        raise RequestError(where, f"{where} must be an object")
    _unknown_fields(call, CALL_FIELDS, where)
    if isinstance(call.get("function"), dict):
        _unknown_fields(call["function"], CALL_FUNCTION_FIELDS, f"{where}.function")
    _optional(call, "id", str, where=f"{where}.id")
    if call.get("type", "function") != "function":
        raise RequestError(f"{where}.type", f"{where}.type must be function")
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RequestError(where, f"{where} must have a function name")
    if not isinstance(function.get("arguments"), str):
        raise RequestError(f"{where}.function.arguments",
                           f"{where}.function.arguments must be a string (the call's "
                           "arguments as JSON text)")


def _tools(tools, limits: RequestLimits) -> list[dict] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RequestError("tools", "tools must be a list")
    if len(tools) > limits.tools:
        raise RequestError("tools", f"tools holds {len(tools)} tools; the limit is {limits.tools}")
    names = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") \
            if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) \
                or not function["name"]:
            raise RequestError(f"tools[{i}]", f"tools[{i}] must be a function with a name")
        _unknown_fields(tool, TOOL_FIELDS, f"tools[{i}]")
        where = f"tools[{i}].function"
        _unknown_fields(function, FUNCTION_FIELDS, where)
        if not TOOL_NAME.fullmatch(function["name"]):
            raise RequestError(f"{where}.name", f"{where}.name must be 1 to 64 letters, digits, "
                                                f"'_', '-' or '.', not {function['name']!r}")
        _optional(function, "description", str, where=f"{where}.description")
        _optional(function, "strict", bool, where=f"{where}.strict")
        if function.get("parameters") is not None:
            _schema(function["parameters"], f"{where}.parameters", limits)
        if function["name"] in names:
            raise RequestError(f"tools[{i}]", f"tools[{i}]: {function['name']!r} is offered twice")
        names.add(function["name"])
    return tools or None


def _tool_choice(choice, tools) -> ToolChoice:
    """OpenAI's tool_choice: a mode string, or an object that names a function, always a tool
    (a tool may be named auto or none: the object is not ambiguous)."""
    if choice is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(choice, str):
        if choice not in MODES:
            raise RequestError("tool_choice", "tool_choice must be auto, required, "
                                              "none or a named function")
        if choice != "none" and not tools:
            raise RequestError("tool_choice", f"tool_choice {choice!r} needs tools")
        return ToolChoice(choice)
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or choice.get("type", "function") != "function":
        raise RequestError("tool_choice", "a named tool_choice is {\"type\": \"function\", "
                                          "\"function\": {\"name\": ...}}")
    assert isinstance(choice, dict) and isinstance(function, dict)  # (a name was found in them)
    _unknown_fields(choice, {"type", "function"}, "tool_choice")
    _unknown_fields(function, {"name"}, "tool_choice.function")
    if name not in {t["function"]["name"] for t in tools or []}:
        raise RequestError("tool_choice", f"tool_choice names {name!r}, which "
                                          "is not among the tools")
    return ToolChoice("function", name)


def _response_format(value, limits: RequestLimits) -> dict | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in ("text", "json_object", "json_schema"):
        _unknown_fields(value, {"type"} | ({"json_schema"} if kind == "json_schema" else set()),
                        "response_format")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        inner = value.get("json_schema")
        where = "response_format.json_schema"
        if not isinstance(inner, dict):
            raise RequestError(f"{where}.schema", f"{where} must be an object holding the schema")
        _unknown_fields(inner, {"name", "description", "schema", "strict"}, where)
        for key, kind in (("name", str), ("description", str), ("strict", bool)):
            _optional(inner, key, kind, where=f"{where}.{key}")
        return _schema(inner.get("schema"), f"{where}.schema", limits)
    raise RequestError("response_format", "response_format.type must be text, "
                                          "json_object or json_schema")


def _schema(schema, param: str, limits: RequestLimits) -> dict:
    """A JSON Schema (Draft 2020-12) that is one, that a grammar can be written for and some
    value satisfies, within the limits (grammar.schema_check): checked before anything is
    generated."""
    if not isinstance(schema, dict):
        raise RequestError(param, f"{param} must be a JSON Schema object")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
        check_schema(schema, limits.schema)
        grammar = Grammar(root="value")
        # (what the plan builds again, with the turn around it)
        add_schema(grammar, schema, "value", [])
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        raise RequestError(param, f"{param} is not a valid JSON Schema: {e.message}"
                           + (f" (at {where})" if where else "")) from e
    except SchemaError as e:
        raise RequestError(param, f"{param}: {e.reason} (at {e.path})") from e
    except RecursionError as e:
        raise RequestError(param, f"{param} is nested too deeply") from e
    return schema


def _stop(stop, limits: RequestLimits) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) \
            or len(stops) > limits.stops:
        raise RequestError("stop", "stop must be a non-empty string or a list of up to "
                                   f"{limits.stops} of them")
    return stops


def _continued(body, messages: list[dict]) -> bool:
    """`continue_final_message` (with `add_generation_prompt` false, or unsaid), as vLLM takes
    them: the last message, an assistant's, is continued instead of answered."""
    continued = _optional(body, "continue_final_message", bool, False)
    generation = _optional(body, "add_generation_prompt", bool, not continued)
    if continued and generation:
        raise RequestError("add_generation_prompt", "continue_final_message continues the last "
                                                    "message: add_generation_prompt must be false")
    if not continued and not generation:
        raise RequestError("add_generation_prompt", "add_generation_prompt false is served with "
                                                    "continue_final_message true (a prefill) only")
    if continued and messages[-1].get("role") != "assistant":
        raise RequestError("messages", "continue_final_message: the last message must be the "
                                       "assistant's answer to continue")
    return continued


def _thinking(body) -> bool | None:
    """`thinking` (true / false), or `chat_template_kwargs.enable_thinking` as vLLM and
    llama-server take it; the template's own switch (or a closed block) does the rest."""
    thinking = _optional(body, "thinking", bool)
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict) or set(kwargs) - {"enable_thinking"}:
            raise RequestError("chat_template_kwargs",
                               "chat_template_kwargs takes only enable_thinking here")
        enable = kwargs.get("enable_thinking")
        if enable is not None and not isinstance(enable, bool):
            raise RequestError("chat_template_kwargs.enable_thinking",
                               "enable_thinking must be true or false")
        if thinking is not None and enable is not None and thinking != enable:
            raise RequestError("thinking", "thinking and "
                                           "chat_template_kwargs.enable_thinking disagree")
        thinking = enable if thinking is None else thinking
    return thinking
