"""The serving-bridge side: a prompt tied to its parser, validation before acting, retries.

- `prompt_for(template, messages, tools, thinking)` (also `ChatTemplate.prompt`) renders the
  prompt for generation and returns a `Prompt` whose `.parser()` starts in the state the
  prompt leaves the model in, so a bridge cannot put the two out of step.
- `validate_tool_calls` / `validate_content` check a parsed message against the offered
  tools' JSON Schemas / a response schema; errors are a list, never an exception.
- `feedback_messages` states the errors for a second attempt; `with_retries` drives
  attempt -> parse -> validate -> feedback and gives up with every attempt on record.

Parsing, validation and authorization are separate steps: nothing here executes a tool.
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import jsonschema

from .errors import InputError
from .parser_gen import generate_module
from .probe import probe
from .spec import ProtocolSpec
from .template import ChatTemplate


_SPECS: dict = {}


def _spec_for(template: ChatTemplate) -> ProtocolSpec:
    """The template's spec, probed once per template text and tokens."""
    key = (template.sha256, template.family, tuple(sorted(template.named_tokens.items())), template.special_tokens)
    if key not in _SPECS:
        _SPECS[key] = probe(template)
    return _SPECS[key]


@lru_cache(maxsize=32)
def _module_for(spec_json: str) -> types.ModuleType:
    spec = ProtocolSpec.from_json(spec_json)
    module = types.ModuleType(f"tplparse_generated_{spec.family.replace('-', '_')}")
    exec(compile(generate_module(spec), f"<generated {spec.family}>", "exec"), module.__dict__)  # noqa: S102
    return module


@dataclass
class Prompt:
    """A prompt for generation and the parser that matches it."""

    text: str  # what to send to the engine
    generation_prompt: str  # what the template added to open the assistant turn (and any prefill)
    stop: list[str]  # end-of-turn strings that should stop generation
    start: str  # "reasoning" or "content": where the model's output begins
    spec: ProtocolSpec
    tools: list[dict] | None = None
    notes: list[str] = field(default_factory=list)  # how thinking was switched

    def parser(self):
        """A StreamParser of the family's generated module, set to this prompt's start state."""
        module = _module_for(self.spec.to_json())
        return module.StreamParser(tools=self.tools, start=self.start)


def prompt_for(template: ChatTemplate, messages: list, tools: list | None = None, thinking: bool | None = None,
               **variables: Any) -> Prompt:
    spec = _spec_for(template)
    notes: list[str] = []
    mode_name = "default"
    if thinking is True and "thinking" in spec.modes:
        mode_name = "thinking"
    elif thinking is False and "no_thinking" in spec.modes:
        mode_name = "no_thinking"
    mode = spec.modes[mode_name]
    variables = {**mode.variables, **variables}
    messages = list(messages)
    if mode.system_flag:
        messages = _with_system_flag(messages, mode.system_flag)
        notes.append(f"thinking switched by the system flag {mode.system_flag!r}")
    elif mode.variables:
        notes.append("thinking switched by " + ", ".join(f"{k}={v!r}" for k, v in mode.variables.items()))
    text = template.render(messages, tools=tools, add_generation_prompt=True, **variables)
    history = template.render(messages, tools=tools, add_generation_prompt=False, **variables)
    i = 0
    while i < min(len(text), len(history)) and text[i] == history[i]:
        i += 1
    generation_prompt = text[i:]
    start = mode.start
    if thinking is False and mode_name != "no_thinking" and spec.reasoning and spec.reasoning.end:
        # No switch: open (if needed) and close the reasoning block, so the model answers
        # directly and the parser starts in content (no closing tag will come).
        opening = "" if start == "reasoning" or not spec.reasoning.start else spec.reasoning.start + "\n"
        prefill = opening + spec.reasoning.end + "\n\n"
        text += prefill
        generation_prompt += prefill
        start = "content"
        notes.append(f"no thinking switch: the prompt ends with an empty reasoning block {prefill!r}")
    elif thinking is False and mode_name != "no_thinking":
        notes.append("no thinking switch and no reasoning markers: the prompt is unchanged")
    stop = list(dict.fromkeys(spec.end_of_turn + ([template.eos_token] if template.eos_token else [])))
    return Prompt(text=text, generation_prompt=generation_prompt, stop=stop, start=start, spec=spec,
                  tools=tools, notes=notes)


def _with_system_flag(messages: list, flag: str) -> list:
    if messages and isinstance(messages[0], dict) and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content') or ''}\n{flag}".strip()
        return [first] + messages[1:]
    return [{"role": "system", "content": flag}] + messages


# ---------------------------------------------------------------------------
# Validation


@dataclass
class ToolCallError:
    call_index: int | None  # None: an error about the message, not one call
    kind: str  # unknown_tool, invalid_json, schema, parse
    path: str  # JSON path inside the arguments ("$" is the whole object)
    message: str
    expected: str = ""

    def describe(self) -> str:
        where = f"tool call {self.call_index}" if self.call_index is not None else "the reply"
        text = f"{where}: {self.message}"
        if self.path and self.path != "$":
            text += f" (at {self.path})"
        if self.expected:
            text += f"; expected {self.expected}"
        return text


def _json_path(error: jsonschema.ValidationError) -> str:
    path = "$"
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _expected(error: jsonschema.ValidationError) -> str:
    if error.validator == "required":
        return f"property {error.message.split(' ')[0]}"
    if error.validator in ("type", "enum", "const"):
        return f"{error.validator} {json.dumps(error.validator_value)}"
    if error.validator == "additionalProperties":
        return "no properties beyond " + ", ".join(sorted((error.schema.get("properties") or {})))
    return f"{error.validator} {json.dumps(error.validator_value)}"[:120]


def _schema_errors(value, schema, call_index) -> list[ToolCallError]:
    validator = jsonschema.Draft202012Validator(schema)
    return [
        ToolCallError(call_index, "schema", _json_path(e), e.message, _expected(e))
        for e in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    ]


def validate_tool_calls(message: dict, tools: list) -> list[ToolCallError]:
    """Each call: an offered tool, arguments that are JSON, and valid under its schema."""
    offered = {}
    for tool in tools or []:
        function = tool.get("function") or tool
        offered[function.get("name")] = function.get("parameters") or {"type": "object"}
    errors: list[ToolCallError] = [
        ToolCallError(None, "parse", "$", f"{e.get('kind')}: {e.get('message')}") for e in message.get("errors") or []
    ]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        name = function.get("name")
        if name not in offered:
            errors.append(ToolCallError(index, "unknown_tool", "$", f"{name!r} is not an offered tool",
                                        "one of " + ", ".join(sorted(map(str, offered)))))
            continue
        try:
            arguments = json.loads(function.get("arguments") or "")
        except json.JSONDecodeError as e:
            errors.append(ToolCallError(index, "invalid_json", "$", f"the arguments are not JSON: {e.msg}", "a JSON object"))
            continue
        except RecursionError:
            errors.append(ToolCallError(index, "invalid_json", "$", "the arguments are nested too deeply to read",
                                        "a JSON object"))
            continue
        errors += _schema_errors(arguments, offered[name], index)
    return errors


def validate_content(message: dict, schema: dict) -> list[ToolCallError]:
    """The reply's content is JSON (exactly: no prose around it) and valid under `schema`."""
    content = message.get("content")
    if content is None:
        return [ToolCallError(None, "invalid_json", "$", "the reply has no content", "a JSON value")]
    try:
        value = json.loads(content)
    except json.JSONDecodeError as e:
        return [ToolCallError(None, "invalid_json", "$", f"the reply is not JSON ({e.msg} at character {e.pos})",
                              "only a JSON value, with no text around it")]
    except RecursionError:
        return [ToolCallError(None, "invalid_json", "$", "the reply is nested too deeply to read", "a JSON value")]
    return _schema_errors(value, schema, None)


# ---------------------------------------------------------------------------
# Feedback and retries


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


def with_retries(generate: Callable[[list], tuple[str, dict]], messages: list, *, tools: list | None = None,
                 schema: dict | None = None, max_attempts: int = 3) -> Success | GaveUp:
    """attempt -> parse -> validate -> feedback, up to `max_attempts`.

    `generate(messages)` runs the model and returns (raw output, parsed message).
    """
    if max_attempts < 1:
        raise InputError("max_attempts must be at least 1")
    conversation = list(messages)
    attempts: list[Attempt] = []
    for _ in range(max_attempts):
        raw, message = generate(conversation)
        errors: list[ToolCallError] = []
        if tools is not None and message.get("tool_calls"):
            errors += validate_tool_calls(message, tools)
        elif message.get("errors"):
            errors += [ToolCallError(None, "parse", "$", f"{e['kind']}: {e['message']}") for e in message["errors"]]
        if schema is not None and not message.get("tool_calls"):
            errors += validate_content(message, schema)
        attempts.append(Attempt(raw, message, errors))
        if not errors:
            return Success(message, attempts)
        conversation = conversation + feedback_messages(message, errors)
    return GaveUp(attempts)
