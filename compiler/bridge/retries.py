"""A second attempt when a reply does not validate: `feedback_messages` states the errors,
`with_retries` drives attempt -> parse -> validate -> feedback and gives up with every
attempt on record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import InputError
from ..grammar import ToolChoice
from .validate import ToolCallError, validate_content, validate_tool_calls


def feedback_messages(message: dict, errors: list[ToolCallError]) -> list[dict]:
    """The assistant turn as given, then a user turn that states each error, for a new attempt."""
    turn: dict = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        turn["tool_calls"] = [
            {"id": c.get("id"), "type": "function", "function": dict(c.get("function") or {})}
            for c in message["tool_calls"]
        ]
    lines = ["Your reply could not be used:"] + [f"- {e.describe()}" for e in errors]
    lines.append("Please answer again, correcting these errors.")
    return [turn, {"role": "user", "content": "\n".join(lines)}]


def reply_errors(message: dict, tools: list | None = None, schema: dict | None = None,
                 choice: ToolChoice | None = None) -> list[ToolCallError]:
    """What keeps a parsed reply from being used: parse errors, calls that do not validate
    against the offered tools, content that does not validate against `schema`, calls that
    `choice` (the request's tool_choice) does not allow or a call it asks for and is not
    there (a grammar enforces these where the engine takes one; an engine without grammars
    does not)."""
    errors: list[ToolCallError] = _choice_errors(message, choice) if choice is not None else []
    if tools is not None and message.get("tool_calls"):
        errors += validate_tool_calls(message, tools)
    elif message.get("errors"):
        errors += [ToolCallError(None, "parse", "$", f"{e['kind']}: {e['message']}")
                   for e in message["errors"]]
    if schema is not None and not message.get("tool_calls"):
        errors += validate_content(message, schema)
    return errors


def _choice_errors(message: dict, choice: ToolChoice) -> list[ToolCallError]:
    calls = message.get("tool_calls") or []
    if choice.mode == "required" and not calls:
        return [ToolCallError(None, "tool_choice", "$",
                              "the reply has no tool call, and tool_choice "
                              "'required' asks for one")]
    if choice.mode == "none" and calls:
        return [ToolCallError(None, "tool_choice", "$",
                              "the reply calls a tool, and tool_choice 'none' allows no call")]
    if choice.mode == "function":
        if not calls:
            return [ToolCallError(None, "tool_choice", "$",
                                  "the reply has no tool call, and tool_choice asks for a "
                                  f"call of {choice.name!r}")]
        names = [(call.get("function") or {}).get("name") for call in calls]
        return [ToolCallError(i, "tool_choice", "$",
                              f"a call of {name!r}, and tool_choice asks for {choice.name!r}")
                for i, name in enumerate(names) if name != choice.name]
    return []


@dataclass
class Attempt:
    raw: str
    message: dict
    errors: list[ToolCallError]


@dataclass
class GaveUp:
    """Every attempt failed validation; a human takes over from here."""

    attempts: list[Attempt]

    @property
    def last(self) -> Attempt:
        return self.attempts[-1]


@dataclass
class Success:
    message: dict
    attempts: list[Attempt]


def with_retries(generate: Callable[[list], tuple[str, dict]], messages: list, *,
                 tools: list | None = None, schema: dict | None = None,
                 max_attempts: int = 3) -> Success | GaveUp:
    """attempt -> parse -> validate -> feedback, up to `max_attempts`.

    `generate(messages)` runs the model and returns (raw output, parsed message).
    """
    if max_attempts < 1:
        raise InputError("max_attempts must be at least 1")
    conversation = list(messages)
    attempts: list[Attempt] = []
    for _ in range(max_attempts):
        raw, message = generate(conversation)
        errors = reply_errors(message, tools, schema)
        attempts.append(Attempt(raw, message, errors))
        if not errors:
            return Success(message, attempts)
        conversation = conversation + feedback_messages(message, errors)
    return GaveUp(attempts)
