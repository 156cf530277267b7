"""`ProtocolSpec`: how a model family writes an assistant turn, as plain data.

The probe derives it from renders of the chat template; the grammar emitters read it.
It is bidirectional: `spec.format(turn)` writes an assistant turn the way the template
does, which is how the probe proves that the spec describes the template.

Layouts are lists of pieces: a literal string, or a slot `{"slot": NAME}` that a value
fills. Turn layouts (one per kind of turn: content only, reasoning + content, calls, ...)
have slots `reasoning`, `content` and `calls` (the calls section) or `call_list` (the
calls without the section markers, for turns that put other text inside the section); the
call layout has `name`, `arguments`, `id`, `index` (0-based) and `index1` (1-based); an
argument layout has `key` and `value`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from ..display import json_text
from ..errors import TplparseError
from ..runtime import Slot
from .encodings import encode, json_type

SPEC_VERSION = 1

Piece = str | Slot  # "literal" or {"slot": "name"} (the runtime reads layouts of these)


class SpecError(TplparseError):
    """The spec cannot do what was asked (a turn kind or value type it has no layout for)."""


class _Word(str, Enum):
    """A value of a closed set that crosses stages: compares equal to its string, and is
    written as that string (JSON, f-strings, the reading tables)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Start(_Word):
    """Where the model's output starts, after the generation prompt."""

    CONTENT = "content"
    REASONING = "reasoning"


class Parallel(_Word):
    """More than one call in a turn: all rendered, only the first rendered (the template
    drops the others), or refused (the template raises)."""

    ALL = "all"
    FIRST = "first"
    REFUSED = "refused"


class ArgumentStyle(_Word):
    """A call's arguments: one encoded object, or one layout per argument (key/value)."""

    OBJECT = "object"
    KV = "kv"


def slot(name: str) -> Slot:
    return {"slot": name}


def fill(layout: list[Piece], values: dict[str, str]) -> str:
    out = []
    for piece in layout:
        if isinstance(piece, str):
            out.append(piece)
        else:
            out.append(values[piece["slot"]])
    return "".join(out)


def kv_parts(layout: list[Piece]) -> tuple[str, str, str]:
    """An argument layout's literal text: before the key, between key and value, after the
    value (without the key where it is written again there: see kv_after)."""
    k, v = layout.index(slot("key")), layout.index(slot("value"))

    def text(pieces):
        return "".join(p for p in pieces if isinstance(p, str))

    return text(layout[:k]), text(layout[k + 1:v]), text(layout[v + 1:])


def kv_after(layout: list[Piece], key: str) -> str:
    """What an argument layout writes after the value of `key` (some write the key again:
    </key>)."""
    v = layout.index(slot("value"))
    return "".join(p if isinstance(p, str) else key for p in layout[v + 1:])


@dataclass
class ArgumentFormat:
    """How a call's arguments are written.

    style "object": the whole arguments object through one encoder (`encoder`: json,
    python, ...). style "kv": one layout per argument (by the value's JSON type; "string"
    is the fallback), joined by `separator`; values through `value_encoders` (by JSON
    type): an encoder of `encodings.ENCODERS`, "raw" (the string as is), "quoted" (the
    string between `quotes`), "raw-or-quoted" (as is, or between `quotes` when it holds one
    of `quote_when`: an XML CDATA block) or "native" (the format's own notation, see
    encode_value).
    """

    style: ArgumentStyle
    encoder: str = "json"
    order: str = "given"  # "given" or "sorted" (by key)
    argument: dict[str, list[Piece]] = field(default_factory=dict)
    value_encoders: dict[str, str] = field(default_factory=dict)
    separator: str = ""
    quotes: list[str] = field(default_factory=lambda: ["", ""])  # encoder "quoted": around a string
    # encoder "native": {"object": ["{", "}"], ...}
    brackets: dict[str, list[str]] = field(default_factory=dict)
    # encoder "raw-or-quoted": the characters that make the template quote a string
    quote_when: str = ""
    line_indent: str = ""  # style object: added after each line break (the object sits indented)

    def __post_init__(self):
        self.style = ArgumentStyle(self.style)

    def format(self, arguments: dict) -> str:
        items = sorted(arguments.items()) if self.order == "sorted" else list(arguments.items())
        if self.style == ArgumentStyle.OBJECT:
            # (an object written with its keys sorted has every object in it so: json.dumps's
            # sort_keys, and the canonical JSON macros templates write)
            text = encode(self.encoder, sorted_keys(arguments) if self.order == "sorted"
                          else dict(items))
            return text.replace("\n", "\n" + self.line_indent) if self.line_indent else text
        parts = []
        for key, value in items:
            kind = json_type(value)
            layout = self.argument.get(kind) or self.argument.get("string")
            encoder = self.value_encoders.get(kind)
            if layout is None or encoder is None:
                raise SpecError(f"no known way to write a {kind} argument in this format")
            parts.append(fill(layout, {"key": key, "value": self.encode_value(encoder, value)}))
        return self.separator.join(parts)

    def encode_value(self, encoder: str, value: Any) -> str:
        if encoder in ("raw", "quoted", "raw-or-quoted"):
            if not isinstance(value, str):
                raise SpecError(f"{encoder} encoding holds strings only")
            quoted = encoder == "quoted" or (encoder == "raw-or-quoted"
                                             and any(c in value for c in self.quote_when))
            return self.quotes[0] + value + self.quotes[1] if quoted else value
        if encoder == "native":
            # The format's own notation, recursively: objects as argument lists, arrays as
            # item lists, each value through its type's encoder.
            kind = json_type(value)
            if kind not in self.brackets:
                raise SpecError(f"no native notation for a {kind} value")
            open_, close = self.brackets[kind]
            if kind == "object":
                return open_ + self.format(value) + close
            items = [self.encode_value(self.value_encoders.get(json_type(v), "json"), v)
                     for v in value]
            return open_ + self.separator.join(items) + close
        return encode(encoder, value)


def sorted_keys(value: Any) -> Any:
    """`value` with the keys of every object in it sorted (lists keep their order)."""
    if isinstance(value, dict):
        return {k: sorted_keys(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [sorted_keys(v) for v in value]
    return value


@dataclass
class ToolCallFormat:
    section_start: str
    section_end: str
    call: list[Piece]
    separator: str
    arguments: ArgumentFormat
    parallel: Parallel = Parallel.ALL
    # Markers the template writes in front of some kinds of call only (`<|python_tag|>`),
    # which models write in front of the others too: the parser reads past them.
    wrappers: list[str] = field(default_factory=list)
    # What the template's own tool instructions tell the model to write where its history
    # renders otherwise (probe/instructions.py): the calls without the section's markers
    # (`{"name": …, "parameters": …}` for `<|python_start|><|python_end|>{"name": …}`), and
    # a separator between calls (`; ` where history writes none).
    instructed_bare: bool = False
    instructed_separators: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.parallel = Parallel(self.parallel)

    def format(self, calls: list[dict]) -> str:
        """The calls section: section start, the calls, section end."""
        return self.section_start + self.format_list(calls) + self.section_end

    def format_list(self, calls: list[dict]) -> str:
        """The calls alone, joined by the separator (some turns put text inside the section)."""
        if len(calls) > 1 and self.parallel == Parallel.REFUSED:
            raise SpecError("this template refuses more than one tool call per turn")
        if self.parallel == Parallel.FIRST:
            calls = calls[:1]
        texts = []
        for index, call in enumerate(calls):
            texts.append(fill(self.call, {
                "name": call["name"],
                "arguments": self.arguments.format(call["arguments"]),
                "id": call.get("id") or "",
                "index": str(index),
                "index1": str(index + 1),
            }))
        return self.separator.join(texts)


@dataclass
class Reasoning:
    """Reasoning markers, as text (whitespace around them is not significant)."""

    start: str  # "" when the generation prompt writes it and renders never show it
    end: str
    in_history: bool = True  # the template renders a turn's reasoning
    tool_call_ends_reasoning: bool = True  # policy: a tool-call opener closes open reasoning


@dataclass
class PromptMode:
    """One way of asking for a turn: the variables, and the state the model starts in."""

    variables: dict
    tail: str  # what the generation prompt writes after the assistant header
    start: Start
    system_flag: str = ""  # text the system message carries in this mode ("/no_think")
    header: str = ""  # the assistant header the generation prompt writes before the tail

    def __post_init__(self):
        self.start = Start(self.start)


TURN_KINDS = ("content", "reasoning+content", "calls", "content+calls", "reasoning+calls",
              "reasoning+content+calls")


def turn_kind(message: dict) -> str:
    parts = []
    if message.get("reasoning_content"):
        parts.append("reasoning")
    if message.get("content"):
        parts.append("content")
    if message.get("tool_calls"):
        parts.append("calls")
    if parts == ["reasoning"]:
        parts.append("content")
    return "+".join(parts) or "content"


@dataclass
class ProtocolSpec:
    template_name: str
    template_sha256: str
    family: str
    modes: dict[str, PromptMode]
    turns: dict[str, list[Piece]]  # kind -> layout (slots reasoning, content, calls)
    reasoning: Reasoning | None = None
    tool_calls: ToolCallFormat | None = None
    content_start: str = ""  # a wrapper around content (e.g. <|START_RESPONSE|>), as text
    content_end: str = ""
    end_of_turn: list[str] = field(default_factory=list)
    thinking_switch: dict | None = None  # {"variable": ..., "on": ..., "off": ...}
    shape: str = "openai"  # the input shape the template needed (see conversations.SHAPES)
    evidence: dict[str, str] = field(default_factory=dict)  # why each marker is believed
    overrides: list[str] = field(default_factory=list)  # declarative patches applied, with reasons
    warnings: list[str] = field(default_factory=list)
    # turns the parser did not read back (compile --allow-partial)
    unproved: list[str] = field(default_factory=list)
    version: int = SPEC_VERSION

    # --- writing a turn ------------------------------------------------------------

    def format(self, message: dict) -> str:
        """Write an OpenAI-style assistant message the way the template renders it."""
        kind = turn_kind(message)
        layout = self.turns.get(kind)
        if layout is None:
            raise SpecError(f"the template's layout for a {kind} turn is not known")
        calls_text = call_list = ""
        if message.get("tool_calls") and (slot("calls") in layout or slot("call_list") in layout):
            if self.tool_calls is None:
                raise SpecError("this template does not render tool calls")
            calls = [
                {
                    "name": c["function"]["name"],
                    "arguments": _arguments_object(c["function"]["arguments"]),
                    "id": c.get("id"),
                }
                for c in message["tool_calls"]
            ]
            call_list = self.tool_calls.format_list(calls)
            calls_text = self.tool_calls.section_start + call_list + self.tool_calls.section_end
        return fill(layout, {
            "reasoning": message.get("reasoning_content") or "",
            "content": message.get("content") or "",
            "calls": calls_text,
            "call_list": call_list,
        })

    # --- JSON ------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """Plain data (the enums as their strings)."""
        return json.loads(json.dumps(asdict(self)))

    def to_json(self) -> str:
        return json_text(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict) -> ProtocolSpec:
        if data.get("version") != SPEC_VERSION:
            raise SpecError(f"spec version {data.get('version')!r} is not supported "
                            f"(expected {SPEC_VERSION})")
        data = dict(data)
        data["modes"] = {k: PromptMode(**v) for k, v in data["modes"].items()}
        if data.get("reasoning"):
            data["reasoning"] = Reasoning(**data["reasoning"])
        if data.get("tool_calls"):
            tc = dict(data["tool_calls"])
            tc["arguments"] = ArgumentFormat(**tc["arguments"])
            data["tool_calls"] = ToolCallFormat(**tc)
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> ProtocolSpec:
        return cls.from_dict(json.loads(text))


def _arguments_object(arguments) -> dict:
    if isinstance(arguments, str):
        return json.loads(arguments)
    return arguments
