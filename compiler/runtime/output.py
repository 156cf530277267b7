"""The output layer: content and reasoning as fields, OpenAI-style deltas, the calls, the
errors, and the final message. Nothing emitted is retracted: text goes out once it cannot
change, a call's header once its name is settled, its arguments once the call is read."""

from __future__ import annotations

###{standalone
import json
from collections.abc import Callable
from typing import Any

# OpenAI-style JSON objects, as the parser gives them out: a delta ({"content": …},
# {"tool_calls": [{"index": …, …}]}, {"tool_call_error": {…}}), a call of the message, an
# error of the message ({"kind", "message", "offset"}), the message itself.
Delta = dict[str, Any]
ToolCall = dict[str, Any]
ErrorEntry = dict[str, Any]
Message = dict[str, Any]
# The dispatch stream's check: (tool name, decoded arguments) -> None, or what is wrong.
Validator = Callable[[str, Any], "str | None"]


class TextField:
    """Content or reasoning as emitted so far: its parts, and the whitespace held at its edges."""

    __slots__ = ("key", "parts", "pending", "started")

    def __init__(self, key: str) -> None:
        self.key = key  # its delta key: "content" or "reasoning_content"
        self.parts: list[str] = []
        # Whitespace at the end so far, emitted only if more text follows it: its pieces (a
        # list, not one growing string: a model looping on whitespace must cost linear time).
        self.pending: list[str] = []
        self.started = False  # until then, whitespace at the very start is dropped


class OpenCall:
    """A call in flight: what the rules have read of it so far, and whether its header went out."""

    __slots__ = ("index", "name", "id", "arguments", "bad", "announced", "pending", "object_at",
                 "id_absent")

    def __init__(self, index: int) -> None:
        self.index = index  # its place among the output's calls (the deltas' index)
        self.name: str | None = None
        self.id: str | None = None
        self.arguments: str | None = None  # the arguments as canonical JSON text, once read
        self.bad: str | None = None  # why the arguments do not read (the call is dropped)
        self.announced = False  # its header went out (its id and name)
        # a key/value reader that must wait (the waiting steps go on from it)
        self.pending: Any = None
        self.object_at: int | None = None  # where a call written as a JSON object starts
        self.id_absent = False  # the layout's id was left out, with the literals around it


def error_entry(kind: str, message: str, offset: int) -> ErrorEntry:
    return {"kind": kind, "message": message, "offset": offset}


# The two streams one parse gives (StreamParser's `calls`): for a UI, a call's header once its
# name is settled, its arguments as they are read, and a `tool_call_error` delta that voids a
# call found broken later; for code that executes tools, each call once, whole, when it is
# complete and its arguments validate, and never anything to take back.
DELTAS = "deltas"
COMPLETE = "complete"


class Dispatched(dict[str, Any]):
    """A delta of the dispatch stream (a complete, valid call): how it is told from the UI
    stream's call deltas, which that stream leaves out."""

    __slots__ = ()


def dispatch_only(deltas: list[Delta]) -> list[Delta]:
    """The dispatch stream's deltas of what the UI stream gives: its text deltas, and the
    complete calls as plain dicts; no call header, argument or void delta."""
    for delta in deltas:
        if "tool_calls" in delta or "tool_call_error" in delta:
            break
    else:
        return deltas  # (text only, or nothing: as it is)
    return [dict(d) if type(d) is Dispatched else d for d in deltas
            if type(d) is Dispatched or ("tool_calls" not in d and "tool_call_error" not in d)]


class Output:
    """Deltas and the message, written by the rules (and by the input's fast paths, which
    give out text that cannot move the parse without a step of the rules)."""

    __slots__ = ("deltas", "content", "reasoning", "calls", "invalid_calls", "errors",
                 "_validate", "whole")

    def __init__(self, validate: Validator | None) -> None:
        """The state this layer owns: the deltas not yet returned, the fields, the calls and
        errors of the message; `validate`: the dispatch stream's check (None: the UI stream)."""
        self.deltas: list[Delta] = []
        # True for an output read whole (read_all): its message is wanted, not its deltas, and
        # a call's header and argument deltas are not made
        self.whole = False
        self.content = TextField("content")
        self.reasoning = TextField("reasoning_content")
        self.calls: list[ToolCall] = []
        # complete calls dropped for their arguments (they keep their index)
        self.invalid_calls = 0
        self.errors: list[ErrorEntry] = []
        self._validate = validate

    def emit_text(self, field: TextField, text: str) -> None:
        """Emit reasoning or content, without the whitespace at its very start; whitespace at
        its end is held until more of the field follows (or what ends the field shows it is
        the field's own: keep_trailing_space)."""
        if not text:
            return
        if not field.started:
            text = text.lstrip()
            if not text:
                return
            field.started = True
        body = text.rstrip()
        if not body:
            field.pending.append(text)
            return
        out = "".join(field.pending) + body if field.pending else body
        field.pending = [text[len(body):]] if len(body) < len(text) else []
        field.parts.append(out)
        self.deltas.append({field.key: out})

    def keep_trailing_space(self, field: TextField, written: str) -> None:
        """The whitespace the field ends with is its own, less its last run of the characters
        in `written` (the whitespace the template writes before what ends it here: "\n" and
        "\n\n" are its newlines, a space before them is the model's). That goes out; the
        template's run stays held (it goes out only if more of the field follows)."""
        if field.pending:
            space = "".join(field.pending)
            own = space.rstrip(written) if written else space
            field.pending = [space[len(own):]] if len(own) < len(space) else []
            space = own
            if space:
                field.parts.append(space)
                self.deltas.append({field.key: space})

    def announce(self, index: int, call: OpenCall) -> None:
        """A call's header: its id and name (the arguments follow in later deltas)."""
        if self.whole:
            return
        self.deltas.append({"tool_calls": [{"index": index, "id": call.id or f"call_{index}",
                                             "type": "function",
                                             "function": {"name": call.name, "arguments": ""}}]})

    def arguments_delta(self, index: int, piece: str) -> None:
        if self.whole:
            return
        self.deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})

    def complete_call(self, index: int, call: OpenCall, offset: int, streamed: str = "") -> None:
        """The call is complete and its arguments (now JSON text) read: its last delta (what
        the argument deltas so far, `streamed`, did not give), and the call (`offset`: where
        the output is, for an error)."""
        arguments = call.arguments
        assert arguments is not None, "a complete call has its arguments read"
        rest = arguments[len(streamed):] if streamed else arguments
        if rest:
            self.arguments_delta(index, rest)
        entry = {"id": call.id or f"call_{index}", "type": "function",
                 "function": {"name": call.name, "arguments": arguments}}
        validate = self._validate
        if validate is not None and not self._dispatched(validate, index, entry, offset):
            return
        self.calls.append(entry)

    def _dispatched(self, validate: Validator, index: int, entry: ToolCall, offset: int) -> bool:
        """The dispatch stream: a complete call whose arguments validate against its tool's
        schema goes out whole, as one delta, numbered as it is in the message; one that does
        not is dropped (its error in the message; its index stays taken, so the ids of the
        calls after it are the UI stream's)."""
        function = entry["function"]
        problem = validate(function["name"], json.loads(function["arguments"]))
        if problem is not None:
            self.error("invalid_arguments",
                        f"call {index} ({function['name']}): the arguments do not validate "
                        f"against the tool's schema: {problem}", offset)
            self.invalid_calls += 1
            return False
        self.deltas.append(Dispatched({"tool_calls": [{"index": len(self.calls), **entry}]}))
        return True

    def drop_call(self, index: int, kind: str, message: str) -> None:
        """A call whose header went out is not a call after all: a delta says so (its
        argument deltas, if any, are void), with the error of the message."""
        self.deltas.append({"tool_call_error": {"index": index, "kind": kind, "message": message}})

    def error(self, kind: str, message: str, offset: int) -> None:
        self.errors.append(error_entry(kind, message, offset))

    def message(self, finish: str | None) -> Message:
        """The assistant message (once the input ended, for `finish`): content, reasoning,
        the calls, the errors."""
        if finish is None:
            raise ValueError("the message is complete only after end()")
        content = "".join(self.content.parts)
        reasoning = "".join(self.reasoning.parts)
        return {
            "role": "assistant",
            "content": content or None,
            "reasoning_content": reasoning or None,
            "tool_calls": [dict(c) for c in self.calls],
            "errors": list(self.errors),
            "finish_reason": finish,
        }


###}
