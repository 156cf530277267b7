"""The conversations the probe renders, and the equivalent shapes it retries them in.

A probe message is an abstract assistant turn (reasoning, content, tool calls with
arguments); `Sentinels` fill it with recognisable values. Templates disagree on how the
same turn must be written down (arguments as an object or a JSON string, `content: ""`
or absent, tools with or without the `{type, function}` wrapper, ...), so `ShapedRenderer`
tries each equivalent shape in order and keeps the first one the template accepts.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import TemplateError
from ..source.template import ChatTemplate
from .spans import common_suffix_length


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict
    id: str


@dataclass(frozen=True)
class Turn:
    """An assistant turn, abstractly."""

    content: str | None = None
    reasoning: str | None = None
    calls: tuple[Call, ...] = ()


@dataclass(frozen=True)
class Sentinels:
    """Recognisable values for one probe run. Two independent sets must agree."""

    user: str
    content: str
    content2: str
    reasoning: str
    names: tuple[str, str, str]  # three tool names
    ids: tuple[str, str]  # 9-character alphanumeric (some templates insist)
    key1: str  # key1 sorts after key2, so a template that sorts keys shows it
    key2: str
    value1: str
    value2: str


SENTINEL_SETS = (
    Sentinels(
        user="What is the weather in Paris?",
        content="Sunny, 18 degrees in Paris.",
        content2="Checking the forecast now.",
        reasoning="The user wants the forecast.",
        names=("get_weather", "get_time", "search_docs"),
        ids=("a1b2c3d4e", "f5g6h7i8j"),
        key1="query",
        key2="limit",
        value1="Paris",
        value2="Lyon",
    ),
    Sentinels(
        user="Please look up the order status.",
        content="Shipped on Monday.",
        content2="Looking up order A-1042.",
        reasoning="I should call the order tool first.",
        names=("lookup_order", "send_email", "list_items"),
        ids=("k9l8m7n6o", "p5q4r3s2t"),
        key1="order_id",
        key2="channel",
        value1="A-1042",
        value2="B-2077",
    ),
)

# Values never used while probing: the re-rendering check uses these.
FRESH = Sentinels(
    user="Can you convert 12 euros to dollars?",
    content="Twelve euros is about thirteen dollars.",
    content2="Converting the amount.",
    reasoning="A currency conversion is needed.",
    names=("convert_currency", "get_rate", "fetch_news"),
    ids=("u1v2w3x4y", "z9y8x7w6v"),
    key1="amount",
    key2="target",
    value1="EUR 12",
    value2="USD",
)


def tool_definition(name: str, keys: list[str] | None = None) -> dict:
    """An OpenAI-style function definition for `name` (its parameters are loosely typed)."""
    keys = keys or []
    return {
        "name": name,
        "description": f"The {name} tool",
        "parameters": {
            "type": "object",
            "properties": {k: {"type": "string", "description": f"The {k}"} for k in keys},
            "required": keys[:1],
        },
    }


@dataclass(frozen=True)
class Shape:
    """One way of writing the same conversation down."""

    label: str
    arguments_as_string: bool = False
    empty_content: bool = False  # "" instead of no content on a turn with calls
    bare_tools: bool = False  # tools without the {type, function} wrapper
    bare_calls: bool = False  # tool calls without the {type, function} wrapper
    # tools as {name, description, parameter_definitions} (Command R style)
    parameter_definition_tools: bool = False
    functions_variable: bool = False  # tools passed as a `functions` JSON string as well


SHAPES = (
    Shape("openai"),
    Shape("empty content", empty_content=True),
    Shape("arguments as JSON string", arguments_as_string=True),
    Shape("arguments as JSON string, empty content", arguments_as_string=True, empty_content=True),
    Shape("bare tools", bare_tools=True),
    Shape("bare tools, arguments as JSON string", bare_tools=True, arguments_as_string=True),
    Shape("bare tools and calls, arguments as JSON string", bare_tools=True, bare_calls=True,
          arguments_as_string=True),
    Shape("tools with parameter_definitions", parameter_definition_tools=True),
    Shape("functions variable", functions_variable=True),
    Shape("functions variable, arguments as JSON string", functions_variable=True,
          arguments_as_string=True),
)


def _tools_in_shape(tools: list[dict], shape: Shape) -> list[dict]:
    if shape.parameter_definition_tools:
        return [
            {
                "name": t["name"],
                "description": t["description"],
                "parameter_definitions": {
                    k: {"description": v.get("description", k), "type": "str",
                        "required": k in t["parameters"].get("required", [])}
                    for k, v in t["parameters"]["properties"].items()
                },
            }
            for t in tools
        ]
    if shape.bare_tools:
        return [dict(t) for t in tools]
    return [{"type": "function", "function": dict(t)} for t in tools]


def shape_named(label: str) -> Shape:
    """The shape a spec names (`spec.shape`, as `ShapedRenderer.shape_label` wrote it)."""
    label = label.partition(_IDS_LABEL)[0].removesuffix(_BLOCKS_LABEL)
    return next((s for s in SHAPES if s.label == label), SHAPES[0])


def in_shape(messages: list, tools: list | None, label: str) -> tuple[list, list | None, dict]:
    """A conversation in OpenAI's shape (tools `{"type": "function", "function": ...}`, a
    call's arguments as JSON text) written down as the template reads it (`label`: the spec's
    shape): (messages, tools, the extra variables). A call's arguments become the object the
    JSON text holds for a template that reads an object (one that iterates them; a string
    that holds no JSON object stays as given, for the template to refuse), or JSON text for
    one that reads text; tools and calls lose their wrapper, or tools become Command R's
    parameter_definitions, or also come as a `functions` string, as the shape says. What a
    conversation already gives in the template's form is kept."""
    shape = shape_named(label)
    messages = [_message_in_shape(m, shape) if isinstance(m, dict) and m.get("tool_calls")
                else m for m in messages]
    variables: dict[str, Any] = {}
    if tools is None:
        return messages, None, variables
    functions = [t["function"] if isinstance(t, dict) and isinstance(t.get("function"), dict)
                 else t for t in tools]
    if shape.functions_variable:
        # (the variables such templates read beside their `functions` string: Firefunction's
        # `datetime`, today's date)
        variables["functions"] = json.dumps(functions, ensure_ascii=False)
        variables["datetime"] = datetime.date.today().isoformat()
    if shape.parameter_definition_tools:
        return messages, [_parameter_definitions(f) for f in functions], variables
    if shape.bare_tools:
        return messages, functions, variables
    return messages, tools, variables


def with_empty_content(messages: list) -> list:
    """The conversation with each call turn's null content given as "" (the "empty content"
    shape: a template that reads a past call turn's content as text, and fails on null)."""
    return [{**m, "content": ""} if isinstance(m, dict) and m.get("tool_calls")
            and m.get("content") is None else m for m in messages]


def _message_in_shape(message: dict, shape: Shape) -> dict:
    calls = []
    for call in message["tool_calls"]:
        if not isinstance(call, dict):
            calls.append(call)
            continue
        function = dict(call.get("function") or {k: call[k] for k in ("name", "arguments")
                                                 if k in call})
        function["arguments"] = _arguments_in_shape(function.get("arguments"), shape)
        calls.append({"id": call.get("id"), **function} if shape.bare_calls
                     else {**call, "function": function})
    out = {**message, "tool_calls": calls}
    if shape.empty_content and out.get("content") is None:
        out["content"] = ""
    return out


def _arguments_in_shape(arguments: Any, shape: Shape) -> Any:
    if shape.arguments_as_string and not isinstance(arguments, str):
        return json.dumps(arguments, ensure_ascii=False)
    if not shape.arguments_as_string and isinstance(arguments, str):
        try:
            decoded = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
        return decoded if isinstance(decoded, dict) else arguments
    return arguments


def _parameter_definitions(function: dict) -> dict:
    """A tool as Command R's templates read it: {name, description, parameter_definitions}."""
    parameters = function.get("parameters")
    parameters = parameters if isinstance(parameters, dict) else {}
    properties = parameters.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = parameters.get("required") or []
    return {"name": function.get("name"), "description": function.get("description", ""),
            "parameter_definitions": {
                k: {"description": v.get("description", k) if isinstance(v, dict) else k,
                    "type": "str", "required": k in required}
                for k, v in properties.items()}}


# Call ids that carry the call's name, tried when a template writes a call's id where its name
# goes (Kimi's `functions.NAME:INDEX`, which its models write as the call's header).
ID_FORMS = ("functions.{name}:{index}",)
_BLOCKS_LABEL = ", reasoning as thinking blocks"
_IDS_LABEL = ", call ids as "


def _turn_message(turn: Turn, shape: Shape, reasoning_blocks: bool = False,
                  id_form: str = "") -> dict:
    message: dict[str, Any] = {"role": "assistant"}
    if turn.reasoning is not None and reasoning_blocks:
        # Reasoning as a content block ({"type": "thinking"}), as some templates read it.
        blocks = [{"type": "thinking", "thinking": turn.reasoning}]
        if turn.content:
            blocks.append({"type": "text", "text": turn.content})
        message["content"] = blocks
    elif turn.reasoning is not None:
        message["reasoning_content"] = turn.reasoning
    if "content" not in message:
        if turn.content is not None:
            message["content"] = turn.content
        elif shape.empty_content or not turn.calls:
            message["content"] = ""  # a turn with calls gets "" only in the shape that needs it
    if turn.calls:
        calls = []
        for index, call in enumerate(turn.calls):
            arguments = json.dumps(call.arguments, ensure_ascii=False) \
                if shape.arguments_as_string else call.arguments
            function = {"name": call.name, "arguments": arguments}
            call_id = id_form.format(name=call.name, index=index) if id_form else call.id
            calls.append({"id": call_id, **function} if shape.bare_calls
                         else {"id": call_id, "type": "function", "function": function})
        message["tool_calls"] = calls
    return message


# The user message that follows a turn whose template writes its calls only when another
# message follows it (ShapedRenderer._calls_written_when_followed).
FOLLOW_UP = "And what comes next?"


@dataclass
class Rendered:
    """The three renders a probe compares for one assistant turn."""

    prompt: str  # history + generation prompt
    full: str  # history + the assistant turn, no generation prompt
    history: str  # history alone, no generation prompt


@dataclass
class ShapedRenderer:
    """Renders probe conversations, in the first shape the template accepts."""

    template: ChatTemplate
    tools: list[dict]
    shape: Shape | None = None
    # Reasoning as a {"type": "thinking"} content block: None until a reasoning turn tells.
    reasoning_blocks: bool | None = None
    id_form: str = ""  # call ids written in this form (ID_FORMS), not as the sentinel ids
    errors: list[str] = field(default_factory=list)

    @property
    def shape_label(self) -> str:
        label = self.shape.label if self.shape else SHAPES[0].label
        return label + (_BLOCKS_LABEL if self.reasoning_blocks else "") \
            + (_IDS_LABEL + self.id_form if self.id_form else "")

    @classmethod
    def for_label(cls, template: ChatTemplate, tools: list[dict], label: str) -> ShapedRenderer:
        """A renderer in the shape a spec names (its `shape`: `shape_label` of the probe's
        renderer)."""
        label, _, id_form = label.partition(_IDS_LABEL)
        blocks = label.endswith(_BLOCKS_LABEL)
        label = label.removesuffix(_BLOCKS_LABEL)
        return cls(template, tools, shape=next((s for s in SHAPES if s.label == label), None),
                   reasoning_blocks=blocks, id_form=id_form)

    def _render(self, shape: Shape, messages: list[dict], add_generation_prompt: bool,
                variables: dict) -> str:
        tools = _tools_in_shape(self.tools, shape) if self.tools else None
        extra = dict(variables)
        if shape.functions_variable and self.tools:
            extra.setdefault("functions", json.dumps(self.tools, ensure_ascii=False))
            extra.setdefault("datetime", "2026-01-01")
        return self.template.render(messages, tools=tools,
                                    add_generation_prompt=add_generation_prompt, **extra)

    def render_followed(self, user: str, turn: Turn, user2: str) -> str | None:
        """[user, turn, user2] rendered without a generation prompt (None if it does not render)."""
        shape = self.shape or SHAPES[0]
        messages = [{"role": "user", "content": user},
                    _turn_message(turn, shape, bool(self.reasoning_blocks), self.id_form),
                    {"role": "user", "content": user2}]
        try:
            return self._render(shape, messages, False, {})
        except TemplateError as e:
            if e.limit:
                raise
            return None

    def _calls_written_when_followed(self, shape: Shape, history: list[dict], message: dict,
                                     variables: dict, user: str, bare: str,
                                     names: list[str]) -> str | None:
        """A template that renders a last assistant message as a prefill (what the model is to
        continue: its calls dropped) writes the turn's calls only when another message follows
        it (vLLM's Nemotron JSON template): that render, cut where the next user turn opens
        (what comes before the user's text in history). None when that does not show them."""
        try:
            followed = self._render(
                shape, history + [message, {"role": "user", "content": FOLLOW_UP}], False,
                variables)
        except TemplateError as e:
            if e.limit:
                raise
            return None  # (a template that refuses a user message after calls)
        at, mine = followed.rfind(FOLLOW_UP), bare.rfind(user)
        if at == -1 or mine == -1 or not followed.startswith(bare[: mine + len(user)]):
            return None
        before = followed[:at]
        turn = before[: len(before) - common_suffix_length(before, bare[:mine])]
        written = turn[mine + len(user):]  # (the names are in the tools the prompt declares)
        return turn if all(name in written for name in names) else None

    def render_turn(self, user: str, turn: Turn, variables: dict | None = None,
                    system: str | None = None) -> Rendered | None:
        """Render [system?, user] + turn; None when no shape renders it."""
        variables = variables or {}
        history = ([{"role": "system", "content": system}] if system else []) \
            + [{"role": "user", "content": user}]
        shapes = [self.shape] if self.shape else list(SHAPES)
        for shape in shapes:
            try:
                message = _turn_message(turn, shape, bool(self.reasoning_blocks), self.id_form)
                full = self._render(shape, history + [message], False, variables)
                prompt = self._render(shape, history, True, variables)
                bare = self._render(shape, history, False, variables)
            except TemplateError as e:
                if e.limit:
                    # time, memory or size: another shape will not do better; the probe stops
                    raise
                self.errors.append(f"{shape.label}: {e.reason}")
                continue
            if self.shape is None:
                self.shape = shape  # the first shape that renders is kept for every later render
            names = [c.name for c in turn.calls]
            if names and user in full and not any(n in full[full.rindex(user):] for n in names):
                full = self._calls_written_when_followed(shape, history, message, variables,
                                                         user, bare, names) or full
            if turn.reasoning and self.reasoning_blocks is None:
                self.reasoning_blocks = False
                if turn.reasoning not in full:
                    try:
                        with_blocks = _turn_message(turn, shape, True, self.id_form)
                        blocks = self._render(shape, history + [with_blocks], False, variables)
                    except TemplateError as e:
                        if e.limit:
                            raise
                        blocks = ""
                    # The blocks must be read, not printed whole (a Python repr shows the keys).
                    if turn.reasoning in blocks and "'thinking'" not in blocks \
                            and '"thinking"' not in blocks:
                        self.reasoning_blocks, full = True, blocks
            return Rendered(prompt=prompt, full=full, history=bare)
        return None
