"""A corpus of malformed and hostile request bodies for `tplparse serve` (issue #28): each
class the issue found, and a wrong value for each field of OpenAI's chat-completions request.

Each `Case` says what the bridge must answer: a 4xx naming the field (`param`; None only for
what is wrong with the body as a whole, whose message then says "the request body"), or a
200 (`OK`), or a 200 whose call is of a named tool (`CALLS`). tests/test_serve_hostile.py
runs it against the app in process and against the real llama-server."""

from __future__ import annotations

import json
from typing import NamedTuple

OK = "ok"
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# What a request that is served asks of the model: next to nothing (a real server is slow).
SHORT = {"max_tokens": 2, "temperature": 0}


class Case(NamedTuple):
    name: str
    body: dict | bytes  # bytes: sent as they are
    status: int | str  # a 4xx, OK, or CALLS + a tool's name
    param: str | None = None


def calls(name: str) -> str:
    return f"calls:{name}"


def tool(name: str = "get_weather", parameters=None, **function) -> dict:
    parameters = parameters if parameters is not None else {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    return {"type": "function", "function": {"name": name, "parameters": parameters, **function}}


def with_tool(parameters=None, **fields) -> dict:
    return {"messages": ASK, "tools": [tool("f", parameters)], "tool_choice": "required", **SHORT, **fields}


def prop(schema: dict) -> dict:
    return {"type": "object", "properties": {"x": schema}, "required": ["x"]}


def history(call: dict) -> list:
    return [{"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}]


def past_call(**changes) -> dict:
    call = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    function = {**call["function"], **changes.pop("function", {})}
    return {**call, **changes, "function": {k: v for k, v in function.items() if v is not ...}}


def raw(text: str, encoding: str = "utf-8") -> bytes:
    return text.encode(encoding)


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


TOOLS = [tool()]
BIG_BODY = {"messages": [{"role": "user", "content": "hello"}] * 200_000}  # some 5 MB
MESSAGES = "messages[1].tool_calls[0]"


def issue_cases() -> list[Case]:
    """The 18 the issue found (and the 3 OpenAI accepts), by class."""
    return [
        # hangs
        Case("5 MB of messages", BIG_BODY, 413),
        Case("past arguments an object", {"messages": history(past_call(function={"arguments": {"city": "Paris"}})),
                                          "tools": TOOLS, **SHORT}, 400, f"{MESSAGES}.function.arguments"),
        Case("a 100,000-value enum", with_tool(prop({"enum": [f"v{i}" for i in range(100_000)]})), 400,
             "tools[0].function.parameters"),
        Case("max_tokens 10^30", {"messages": ASK, "max_tokens": 10**30}, 400, "max_tokens"),
        # 500s
        Case("a lone surrogate in a message", raw('{"messages": [{"role": "user", "content": "a\\ud800b"}]}'), 400,
             "messages[0].content"),
        Case("a surrogate in a tool name", raw('{"messages": [{"role": "user", "content": "a"}], "tools": [{"type": '
                                               '"function", "function": {"name": "f\\udc00"}}]}'), 400,
             "tools[0].function.name"),
        Case("an integer of 5000 digits", raw('{"messages": [{"role": "user", "content": "a"}], "seed": ' + "9" * 5000 + "}"),
             400, "seed"),
        Case("a role that is a list", {"messages": [{"role": ["user"], "content": "hi"}]}, 400, "messages[0].role"),
        # 502s the request is at fault for
        Case("a tool name with a newline", {"messages": ASK, "tools": [tool("get\nweather")], **SHORT}, 400,
             "tools[0].function.name"),
        Case("a $ref loop", with_tool({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                                       **prop({"$ref": "#/$defs/a"})}), 400, "tools[0].function.parameters"),
        Case("minItems of a million", with_tool(prop({"type": "array", "minItems": 1_000_000})), 400,
             "tools[0].function.parameters"),
        Case("maxLength of 10^12 (left to validation)", with_tool(prop({"type": "string", "maxLength": 10**12})), OK),
        Case("an empty enum", with_tool(prop({"enum": []})), 400, "tools[0].function.parameters"),
        # 200s for malformed requests
        Case("past arguments an integer", {"messages": history(past_call(function={"arguments": 5})), **SHORT}, 400,
             f"{MESSAGES}.function.arguments"),
        Case("a $ref to nothing", with_tool(prop({"$ref": "#/$defs/missing"})), 400, "tools[0].function.parameters"),
        Case("a $ref to a URL", with_tool(prop({"$ref": "http://127.0.0.1:9/schema.json"})), 400,
             "tools[0].function.parameters"),
        # a named tool_choice, whatever the name
        Case("a tool named auto, named", {"messages": ASK, "tools": [tool("auto")],
                                          "tool_choice": {"type": "function", "function": {"name": "auto"}},
                                          "max_tokens": 16, "temperature": 0}, calls("auto")),
        Case("a tool named none beside another, named", {"messages": ASK, "tools": [tool("none"), tool()],
                                                         "tool_choice": {"type": "function", "function": {"name": "none"}},
                                                         "max_tokens": 16, "temperature": 0}, calls("none")),
        # accepted, as OpenAI accepts them
        Case("a UTF-16 body", raw(json.dumps({"messages": ASK, **SHORT}), "utf-16"), OK),
        Case("a string stop", {"messages": ASK, "stop": "\n", **SHORT}, OK),
        Case("an empty stop list", {"messages": ASK, "stop": [], **SHORT}, OK),
    ]


def field_cases() -> list[Case]:
    """A wrong value for each field of OpenAI's request (and of this bridge's extensions)."""
    bad = [
        # the body as a whole
        ("not JSON", raw("{not json"), None), ("a list", raw("[]"), None), ("a string", raw('"hi"'), None),
        ("not UTF-8", b'{"messages": "\xff"}', None), ("NaN", raw('{"messages": [], "temperature": NaN}'), "temperature"),
        ("1e999", raw('{"messages": [{"role": "user", "content": "a"}], "temperature": 1e999}'), "temperature"),
        ("nested 100 deep", {"messages": ASK, "metadata": _nested(100)}, "metadata" + ".a" * 63),
        ("unknown field", {"messages": ASK, "functions": []}, "functions"),
        # model, messages
        ("model", {"messages": ASK, "model": 5}, "model"),
        ("messages a string", {"messages": "hi"}, "messages"), ("messages empty", {"messages": []}, "messages"),
        ("messages an object", {"messages": {"role": "user"}}, "messages"),
        ("messages[0] a number", {"messages": [5]}, "messages[0]"),
        ("4097 messages", {"messages": [{"role": "user", "content": "a"}] * 4097}, "messages"),
        ("role unknown", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ("role a number", {"messages": [{"role": 5, "content": "hi"}]}, "messages[0].role"),
        ("role missing", {"messages": [{"content": "hi"}]}, "messages[0].role"),
        ("content a number", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ("content an object", {"messages": [{"role": "user", "content": {"text": "hi"}}]}, "messages[0].content"),
        ("content an image part", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/x.png"}}]}]}, "messages[0].content[0]"),
        ("content a part without text", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
         "messages[0].content[0]"),
        ("name", {"messages": [{"role": "user", "content": "hi", "name": 5}]}, "messages[0].name"),
        ("tool_call_id", {"messages": [{"role": "tool", "content": "x", "tool_call_id": 5}]}, "messages[0].tool_call_id"),
        ("reasoning_content", {"messages": [{"role": "assistant", "content": "x", "reasoning_content": 5}]},
         "messages[0].reasoning_content"),
        ("tool_calls a number", {"messages": [{"role": "assistant", "content": "", "tool_calls": 5}]},
         "messages[0].tool_calls"),
        ("a past call a number", {"messages": history(5)}, MESSAGES),
        ("a past call's id", {"messages": history(past_call(id=5))}, f"{MESSAGES}.id"),
        ("a past call's type", {"messages": history(past_call(type="magic"))}, f"{MESSAGES}.type"),
        ("a past call without a function", {"messages": history({"id": "call_0", "type": "function"})}, MESSAGES),
        ("a past call's name", {"messages": history(past_call(function={"name": 5}))}, MESSAGES),
        ("a past call without arguments", {"messages": history(past_call(function={"arguments": ...}))},
         f"{MESSAGES}.function.arguments"),
        ("a past call's arguments a list", {"messages": history(past_call(function={"arguments": ["Paris"]}))},
         f"{MESSAGES}.function.arguments"),
        # tools
        ("tools a string", {"messages": ASK, "tools": "get_weather"}, "tools"),
        ("tools[0] a number", {"messages": ASK, "tools": [5]}, "tools[0]"),
        ("a tool's type", {"messages": ASK, "tools": [{"type": "retrieval", "function": tool()["function"]}]}, "tools[0]"),
        ("a tool without a function", {"messages": ASK, "tools": [{"type": "function"}]}, "tools[0]"),
        ("a tool's name a number", {"messages": ASK, "tools": [{"type": "function", "function": {"name": 5}}]}, "tools[0]"),
        ("a tool's name empty", {"messages": ASK, "tools": [tool("")]}, "tools[0]"),
        ("a tool's name with a space", {"messages": ASK, "tools": [tool("get weather")]}, "tools[0].function.name"),
        ("a tool's name with a quote", {"messages": ASK, "tools": [tool('get"weather')]}, "tools[0].function.name"),
        ("a tool's name of 65 characters", {"messages": ASK, "tools": [tool("f" * 65)]}, "tools[0].function.name"),
        ("a tool's description", {"messages": ASK, "tools": [tool(description=5)]}, "tools[0].function.description"),
        ("a tool's strict", {"messages": ASK, "tools": [tool(strict="yes")]}, "tools[0].function.strict"),
        ("parameters a number", {"messages": ASK, "tools": [tool(parameters=5)]}, "tools[0].function.parameters"),
        ("parameters of an unknown type", {"messages": ASK, "tools": [tool(parameters={"type": "strng"})]},
         "tools[0].function.parameters"),
        ("parameters' minItems a string", {"messages": ASK, "tools": [tool(parameters=prop({"minItems": "3"}))]},
         "tools[0].function.parameters"),
        ("a $ref to itself", with_tool({"$ref": "#"}), "tools[0].function.parameters"),
        ("a minLength past the grammar", with_tool(prop({"type": "string", "minLength": 5000})),
         "tools[0].function.parameters"),
        ("1,001 enum values", with_tool(prop({"enum": list(range(1001))})), "tools[0].function.parameters"),
        ("a tool offered twice", {"messages": ASK, "tools": [tool(), tool()]}, "tools[1]"),
        ("129 tools", {"messages": ASK, "tools": [tool(f"t{i}") for i in range(129)]}, "tools"),
        # tool_choice, parallel_tool_calls
        ("tool_choice a number", {"messages": ASK, "tools": TOOLS, "tool_choice": 5}, "tool_choice"),
        ("tool_choice unknown", {"messages": ASK, "tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        ("tool_choice without a name", {"messages": ASK, "tools": TOOLS, "tool_choice": {"type": "function"}},
         "tool_choice"),
        ("tool_choice of another type", {"messages": ASK, "tools": TOOLS, "tool_choice": {
            "type": "custom", "function": {"name": "get_weather"}}}, "tool_choice"),
        ("tool_choice naming no tool", {"messages": ASK, "tools": TOOLS, "tool_choice": {
            "type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ("tool_choice required without tools", {"messages": ASK, "tool_choice": "required"}, "tool_choice"),
        ("parallel_tool_calls", {"messages": ASK, "tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        # response_format
        ("response_format a string", {"messages": ASK, "response_format": "json"}, "response_format"),
        ("response_format's type", {"messages": ASK, "response_format": {"type": "xml"}}, "response_format"),
        ("json_schema missing", {"messages": ASK, "response_format": {"type": "json_schema"}},
         "response_format.json_schema.schema"),
        ("json_schema's name", {"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {
            "name": 5, "schema": {"type": "object"}}}}, "response_format.json_schema.name"),
        ("json_schema's strict", {"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {
            "name": "w", "strict": "yes", "schema": {"type": "object"}}}}, "response_format.json_schema.strict"),
        ("json_schema's schema a number", {"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {
            "name": "w", "schema": 3}}}, "response_format.json_schema.schema"),
        ("json_schema's schema, a $ref to nothing", {"messages": ASK, "response_format": {
            "type": "json_schema", "json_schema": {"name": "w", "schema": {"$ref": "#/$defs/x"}}}},
         "response_format.json_schema.schema"),
        ("json_schema and a required call", {"messages": ASK, "tools": TOOLS, "tool_choice": "required",
                                             "response_format": {"type": "json_object"}}, "response_format"),
        # token limits, sampling
        ("max_tokens a string", {"messages": ASK, "max_tokens": "10"}, "max_tokens"),
        ("max_tokens 0", {"messages": ASK, "max_tokens": 0}, "max_tokens"),
        ("max_tokens negative", {"messages": ASK, "max_tokens": -1}, "max_tokens"),
        ("max_tokens a fraction", {"messages": ASK, "max_tokens": 1.5}, "max_tokens"),
        ("max_tokens true", {"messages": ASK, "max_tokens": True}, "max_tokens"),
        ("max_tokens 2^31", {"messages": ASK, "max_tokens": 2**31}, "max_tokens"),
        ("max_completion_tokens 0", {"messages": ASK, "max_completion_tokens": 0}, "max_completion_tokens"),
        ("max_tokens and max_completion_tokens disagree", {"messages": ASK, "max_tokens": 5, "max_completion_tokens": 6},
         "max_tokens"),
        ("stream", {"messages": ASK, "stream": "yes"}, "stream"),
        ("temperature a string", {"messages": ASK, "temperature": "hot"}, "temperature"),
        ("temperature 3", {"messages": ASK, "temperature": 3}, "temperature"),
        ("temperature true", {"messages": ASK, "temperature": True}, "temperature"),
        ("top_p 2", {"messages": ASK, "top_p": 2}, "top_p"),
        ("frequency_penalty", {"messages": ASK, "frequency_penalty": "x"}, "frequency_penalty"),
        ("presence_penalty 5", {"messages": ASK, "presence_penalty": 5}, "presence_penalty"),
        ("seed a string", {"messages": ASK, "seed": "x"}, "seed"),
        ("seed a fraction", {"messages": ASK, "seed": 1.5}, "seed"),
        ("seed past 64 bits", {"messages": ASK, "seed": 2**64}, "seed"),
        ("stop a number", {"messages": ASK, "stop": 5}, "stop"),
        ("stop an empty string", {"messages": ASK, "stop": [""]}, "stop"),
        ("five stops", {"messages": ASK, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ("n 2", {"messages": ASK, "n": 2}, "n"),
        ("n a string", {"messages": ASK, "n": "1"}, "n"),
        ("n true", {"messages": ASK, "n": True}, "n"),
        ("logprobs", {"messages": ASK, "logprobs": True}, "logprobs"),
        ("top_logprobs", {"messages": ASK, "top_logprobs": 3}, "top_logprobs"),
        ("logit_bias", {"messages": ASK, "logit_bias": {"50256": -100}}, "logit_bias"),
        ("logit_bias a string", {"messages": ASK, "logit_bias": "x"}, "logit_bias"),
        ("user", {"messages": ASK, "user": 5}, "user"),
        ("metadata a string", {"messages": ASK, "metadata": "x"}, "metadata"),
        ("metadata's value", {"messages": ASK, "metadata": {"k": 5}}, "metadata.k"),
        ("store", {"messages": ASK, "store": "x"}, "store"),
        ("service_tier", {"messages": ASK, "service_tier": 5}, "service_tier"),
        ("stream_options a string", {"messages": ASK, "stream_options": "x"}, "stream_options"),
        ("stream_options' include_usage", {"messages": ASK, "stream_options": {"include_usage": "yes"}},
         "stream_options.include_usage"),
        ("prompt_cache_key", {"messages": ASK, "prompt_cache_key": 5}, "prompt_cache_key"),
        # this bridge's extensions
        ("thinking", {"messages": ASK, "thinking": "no"}, "thinking"),
        ("chat_template_kwargs", {"messages": ASK, "chat_template_kwargs": {"x": 1}}, "chat_template_kwargs"),
        ("enable_thinking", {"messages": ASK, "chat_template_kwargs": {"enable_thinking": "no"}},
         "chat_template_kwargs.enable_thinking"),
        ("max_attempts 0", {"messages": ASK, "max_attempts": 0}, "max_attempts"),
        ("max_attempts 11", {"messages": ASK, "max_attempts": 11}, "max_attempts"),
        ("max_attempts a string", {"messages": ASK, "max_attempts": "2"}, "max_attempts"),
    ]
    return [Case(name, body, 400, param) for name, body, param in bad] + [
        Case("a model not served", {"messages": ASK, "model": "gpt-9"}, 404, "model"),
        Case("nulls are fields not sent", {"messages": ASK, "tools": None, "temperature": None, "logprobs": False,
                                           **SHORT}, OK),
        Case("text parts", {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], **SHORT}, OK),
        Case("a past call, well formed", {"messages": history(past_call()), "tools": TOOLS, **SHORT}, OK),
    ]


def round3_cases() -> list[Case]:
    """Issue #52's classes: 500s, fields silently ignored, schemas no value satisfies."""
    echoed = {"role": "assistant", "content": "Sunny.", "refusal": None, "annotations": [], "audio": None,
              "function_call": None}
    return [
        # a 500: the error's own param held the key's lone surrogate
        Case("a lone surrogate in a key", raw('{"messages": [{"role": "user", "content": "x", "\\ud800": 1}]}'), 400,
             "messages[0].\\ud800"),
        # fields that were taken and ignored
        Case("a legacy function_call", {"messages": [ASK[0], {"role": "assistant", "content": None, "function_call": {
            "name": "get_weather", "arguments": "{}"}}], **SHORT}, 400, "messages[1].function_call"),
        Case("an audio part of a message", {"messages": [{**ASK[0], "audio": {"id": "a1"}}], **SHORT}, 400,
             "messages[0].audio"),
        Case("a tool_call_id on a user message", {"messages": [{**ASK[0], "tool_call_id": "x"}], **SHORT}, 400,
             "messages[0].tool_call_id"),
        Case("an extra key in response_format", {"messages": ASK, "response_format": {"type": "json_object",
                                                                                     "schema": {}}, **SHORT}, 400,
             "response_format.schema"),
        Case("an extra key in json_schema", {"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {
            "name": "w", "schema": {"type": "object"}, "strictly": True}}, **SHORT}, 400,
             "response_format.json_schema.strictly"),
        Case("an unknown key in a tool", {"messages": ASK, "tools": [{**tool(), "cache_control": {"type": "x"}}], **SHORT},
             400, "tools[0].cache_control"),
        Case("an unknown key in a tool's function", {"messages": ASK, "tools": [tool(examples=[1])], **SHORT}, 400,
             "tools[0].function.examples"),
        Case("an unknown key in a named tool_choice", {"messages": ASK, "tools": TOOLS, "tool_choice": {
            "type": "function", "function": {"name": "get_weather"}, "strict": True}, **SHORT}, 400, "tool_choice.strict"),
        Case("an unknown key in a past call", {"messages": history({**past_call(), "index": 0}), **SHORT}, 400,
             f"{MESSAGES}.index"),
        # 500s from schemas: loops, references nothing follows, sizes
        Case("a $ref loop through allOf", with_tool({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}},
                                                    **prop({"$ref": "#/$defs/a"})}), 400,
             "tools[0].function.parameters"),
        Case("a $dynamicRef", with_tool(prop({"$dynamicRef": "#meta"})), 400, "tools[0].function.parameters"),
        Case("a nested $id that rebases a $ref", with_tool({**prop({"$id": "http://127.0.0.1:9/x", "$ref": "#/$defs/q"}),
                                                            "$defs": {"q": {"type": "string"}}}), 400,
             "tools[0].function.parameters"),
        Case("10,000 properties", with_tool({"type": "object", "properties": {f"p{i}": {"type": "string"}
                                                                              for i in range(10_000)}}), 400,
             "tools[0].function.parameters"),
        Case("170 optional properties", with_tool({"type": "object", "properties": {f"p{i}": {"type": "string"}
                                                                                    for i in range(170)}}), OK),
        Case("a false optional property", with_tool({"type": "object", "properties": {"city": {"type": "string"},
                                                                                      "never": False}}), OK),
        # schemas no value satisfies
        Case("a required property whose schema is false", with_tool(prop(False)), 400, "tools[0].function.parameters"),
        Case("items false and minItems 1", with_tool(prop({"type": "array", "items": False, "minItems": 1})), 400,
             "tools[0].function.parameters"),
        Case("minLength above maxLength", with_tool(prop({"type": "string", "minLength": 5, "maxLength": 2})), 400,
             "tools[0].function.parameters"),
        Case("a const its pattern refuses", with_tool(prop({"const": "abc", "pattern": "^[0-9]+$"})), 400,
             "tools[0].function.parameters"),
        Case("an enum its type refuses", with_tool(prop({"type": "integer", "enum": ["a", "b"]})), 400,
             "tools[0].function.parameters"),
        Case("anyOf of falses", with_tool(prop({"anyOf": [False, False]})), 400, "tools[0].function.parameters"),
        # size-dependent work, bounded or refused
        Case("a const against a catastrophic pattern", with_tool(prop({"const": "a" * 40 + "!", "pattern": "^(a|aa)+$"})),
             400, "tools[0].function.parameters"),
        Case("a pattern of 20,000 alternatives", with_tool(prop({"type": "string", "pattern": "^(" + "|".join(
            f"w{i}" for i in range(20_000)) + ")$"})), 400, "tools[0].function.parameters"),
        Case("a pattern of 1,001 characters", with_tool(prop({"type": "string", "pattern": "^" + "a" * 999 + "$"})),
             400, "tools[0].function.parameters"),
        # accepted on purpose (docs/serving.md): what OpenAI's own answers carry, echoed back empty
        Case("an assistant message echoed back from OpenAI", {"messages": [ASK[0], echoed, ASK[0]], **SHORT}, OK),
        Case("a refusal echoed back with a value", {"messages": [ASK[0], {**echoed, "refusal": "No."}, ASK[0]],
                                                    **SHORT}, 400, "messages[1].refusal"),
    ]


CASES = issue_cases() + field_cases() + round3_cases()
