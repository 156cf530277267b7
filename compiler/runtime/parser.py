"""StreamParser: the input, rules and output layers over one family's Protocol, wired.

    parser = StreamParser(protocol, tools=tools, generation_prompt=prompt)
    for chunk in stream: deltas = parser.feed(chunk)   # OpenAI-style deltas
    deltas = parser.end(finish_reason); message = parser.message

or parse(protocol, text, ...) for a whole output at once (the same result).
"""

from __future__ import annotations

from .input import Input
from .messages import Messages
from .output import COMPLETE, DELTAS, Delta, Dispatched, Message, Output, Validator, dispatch_only
from .protocol import AFTER_REASONING, CONTENT_CONTINUED, REASONING_CONTINUED, STARTS, Protocol
from .schema import SchemaError, resolve_ref, schema_validator
from .tables import ReadingTables

# isort: split
###{standalone
from typing import Any

# What StreamParser is given: OpenAI-style tool definitions; a chunk of output.
Tool = dict[str, Any]
Chunk = str | bytes | bytearray


class StreamParser:
    """Feed a model's output in chunks (str or bytes); get OpenAI-style deltas back.

    `protocol`: the family's Protocol (or its tables); `tools`: the offered tools (their
    schemas type key/value and pythonic arguments); `generation_prompt` (or its tail) and
    `start` ("reasoning" / "content") decide whether the output starts inside reasoning;
    "after_reasoning": the output is what follows a reasoning block that another reader read
    (content, with no reasoning block of its own: see `reasoning_ended_at`);
    "content_continued" / "reasoning_continued": the prompt ends inside an answer it began (a
    prefill), which the output continues (its leading whitespace is the answer's own).
    Text that may start a marker is held back until it cannot; nothing emitted is retracted.

    `calls` picks the stream: "deltas" (for a UI: a call's header, then its arguments as they
    are read, and a `tool_call_error` delta voiding a call that turned out broken) or
    "complete" (for code that executes tools: each call once, whole, when it is complete and
    its arguments validate against its tool's schema; nothing to take back; a call that does
    not validate is not in the message, its error is). `validate(name, arguments)` -> None or
    what is wrong: the check of "complete" (default: the runtime's own, runtime/schema.py,
    which refuses a tool schema with a keyword it does not check).
    """

    def __init__(self, protocol: Protocol | ReadingTables, tools: list[Tool] | None = None,
                 generation_prompt: str | None = None, start: str | None = None,
                 calls: str = DELTAS, validate: Validator | None = None) -> None:
        if not isinstance(protocol, (Protocol, dict)):
            raise TypeError("protocol must be a Protocol or its tables (a dict), not "
                            f"{type(protocol).__name__}")
        p = protocol if isinstance(protocol, Protocol) else Protocol(protocol)
        # (a dict that is not the tables: Protocol says which version it has, if any)
        offered = _offered_tools(tools)  # name -> its arguments' schemas
        if generation_prompt is not None and not isinstance(generation_prompt, str):
            raise TypeError("generation_prompt must be a str or None, not "
                            f"{type(generation_prompt).__name__}")
        if start is not None and start not in STARTS:
            raise ValueError(f"start must be one of {', '.join(map(repr, STARTS))} or None, not "
                             f"{start!r}")
        if calls not in (DELTAS, COMPLETE):
            raise ValueError(f"calls must be {DELTAS!r} or {COMPLETE!r}, not {calls!r}")
        if validate is not None and not callable(validate):
            raise TypeError("validate must be a function (name, arguments) -> None or a problem, "
                            f"not {type(validate).__name__}")
        state = p.start_state(generation_prompt, start)
        self._started = AFTER_REASONING if start == AFTER_REASONING else state
        # The layers: the output (fields, deltas, the message), the input (the buffer, feed's
        # fast paths, the readers) writing to it, and the rules reading the one and writing the
        # other (Messages: the rules, with a turn of messages where the family writes them).
        self._out = Output((validate or schema_validator(tools)) if calls == COMPLETE else None)
        self._in = Input(self._out)
        self._rules = Messages(p, offered, self._in, self._out, state,
                               0 if start == AFTER_REASONING or state in (CONTENT_CONTINUED,
                                                                          REASONING_CONTINUED)
                               else None)
        # (set on the instance: a chunk costs no call on the way to the input's feed)
        self.feed, self.end = self._in.feed, self._in.end  # type: ignore[method-assign]
        if calls == COMPLETE:
            self.feed, self.end = self._feed_complete, self._end_complete  # type: ignore[method-assign]

    def feed(self, chunk: Chunk) -> list[Delta]:
        """Read the next chunk of output (str, or bytes that may split UTF-8 sequences); return
        the deltas it settles. ValueError after end(). (Replaced on the instance by the input's
        own feed, or the dispatch stream's.)"""
        return self._in.feed(chunk)

    def end(self, finish_reason: str = "stop") -> list[Delta]:
        """The output is complete ("stop") or was cut ("length", or the engine's other reason):
        the last deltas. A second end() returns []. (Replaced on the instance as feed is.)"""
        return self._in.end(finish_reason)

    @property
    def message(self) -> Message:
        """The assistant message (after end()): content, reasoning, the calls, the errors."""
        return self._out.message(self._in.finish)

    def _feed_complete(self, chunk: Chunk) -> list[Delta]:
        """feed() of the dispatch stream (set on the instance: the UI stream's feed is
        untouched)."""
        deltas = self._in.feed(chunk)
        if len(deltas) == 1:  # (most chunks: one delta, or none)
            delta = deltas[0]
            if type(delta) is Dispatched:
                return [dict(delta)]
            return [] if "tool_calls" in delta or "tool_call_error" in delta else deltas
        return dispatch_only(deltas) if deltas else deltas

    def _end_complete(self, finish_reason: str = "stop") -> list[Delta]:
        """end() of the dispatch stream."""
        return dispatch_only(self._in.end(finish_reason))

    @property
    def start_state(self) -> str:
        """Where the output started: "reasoning", "content", or either "_continued" (as `start`
        or the generation prompt decided), or "after_reasoning" when it was given."""
        return self._started

    @property
    def reasoning_ended_at(self) -> int | None:
        """The offset (characters of the output) where what follows its reasoning begins:
        after the reasoning's end marker, at a call that ended it, or where the output's first
        text begins when it opened no reasoning; None while the parse is in reasoning or cannot
        tell yet. A parser started "after_reasoning" on the output from there reads what this
        one reads after its reasoning (vLLM's reasoning-then-tools split:
        `tplparse export vllm`)."""
        return self._rules.reasoning_ended_at


def _offered_tools(tools: object) -> dict[str, dict[str, dict[str, Any]]]:
    """name -> the properties of its parameters (the schema of each argument: what types a
    key/value or pythonic argument), from OpenAI-style tool definitions
    ({"type": "function", "function": {...}} or the function alone); TypeError naming the tool
    that is not one. (Read on every parser's construction: the tools' own dicts, no copy but
    where a boolean schema, which types nothing, stands for an argument.)"""
    if tools is None:
        return {}
    if not isinstance(tools, (list, tuple)):
        raise TypeError(f"tools must be a list of tool definitions, not {type(tools).__name__}")
    offered: dict[str, dict[str, dict[str, Any]]] = {}
    for i, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise TypeError(f"tools[{i}] must be a tool definition with a function name, "
                            f"not {tool!r:.60}")
        parameters = function.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise TypeError(f"tools[{i}] ({function['name']}): parameters must be a JSON Schema "
                            f"object, not {type(parameters).__name__}")
        properties = parameters.get("properties")
        if properties is None:
            properties = {}
        elif not isinstance(properties, dict):
            raise TypeError(f"tools[{i}] ({function['name']}): parameters.properties must be "
                            f"an object, not {type(properties).__name__}")
        booleans = False
        for key, schema in properties.items():
            if not isinstance(schema, dict):
                if not isinstance(schema, bool):
                    raise TypeError(f"tools[{i}] ({function['name']}): the schema of {key!r} "
                                    f"must be an object, not {type(schema).__name__}")
                booleans = True
        if booleans:
            properties = {k: v if isinstance(v, dict) else {} for k, v in properties.items()}
        if any(isinstance(v, dict) and _refers(v) for v in properties.values()):
            properties = {k: _followed(v, parameters) for k, v in properties.items()}
        offered[function["name"]] = properties
    return offered


def _refers(schema: dict[str, Any]) -> bool:
    """Whether a property's schema, or an option of its anyOf / oneOf, is a `$ref`."""
    options = schema.get("anyOf") or schema.get("oneOf") or []
    return "$ref" in schema or any(isinstance(o, dict) and "$ref" in o for o in options)


def _followed(schema: Any, root: dict[str, Any], hops: int = 0) -> Any:
    """A property's schema with its `$ref` (and its anyOf / oneOf options') followed to what
    they point to in the tool's parameters ("#/$defs/x"), so that its values are typed as the
    grammar types them; a reference that points to nothing types nothing."""
    if not isinstance(schema, dict) or hops > 16:
        return schema
    if isinstance(schema.get("$ref"), str):
        try:
            node: Any = resolve_ref(schema["$ref"], root)
        except SchemaError:
            node = None
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return _followed({**node, **rest} if isinstance(node, dict) else rest, root, hops + 1)
    for keyword in ("anyOf", "oneOf"):
        if isinstance(schema.get(keyword), list):
            return {**schema, keyword: [_followed(o, root, hops + 1) for o in schema[keyword]]}
    return schema


def read_all(parser: StreamParser, text: Chunk, finish_reason: str = "stop") -> Message:
    """Give a whole output to `parser` at once, with its end; its message (the same as
    streaming it)."""
    parser._out.whole = True  # (its deltas are not wanted: the message is)
    parser._in.end(finish_reason, text)
    return parser.message


def parse(protocol: Protocol | ReadingTables, text: Chunk, tools: list[Tool] | None = None,
          generation_prompt: str | None = None, start: str | None = None,
          finish_reason: str = "stop", calls: str = DELTAS,
          validate: Validator | None = None) -> Message:
    """Parse a whole output at once: the same result as streaming it."""
    return read_all(StreamParser(protocol, tools=tools, generation_prompt=generation_prompt,
                                 start=start, calls=calls, validate=validate),
                    text, finish_reason)


###}
