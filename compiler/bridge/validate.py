"""Check a parsed message before acting on it: the offered tools' JSON Schemas, or a
response schema. Errors are a list (each names the call, the JSON path and what was
expected), never an exception. Parsing, validation and authorization are separate steps:
nothing here executes a tool."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jsonschema

from ..grammar import patterns


@dataclass
class ToolCallError:
    call_index: int | None  # None: an error about the message, not one call
    kind: str  # unknown_tool, invalid_json, schema, parse, tool_choice
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
        schema = error.schema
        listed = schema.get("properties") if isinstance(schema, Mapping) else None
        return "no properties beyond " + ", ".join(sorted(listed or {}))
    return f"{error.validator} {json.dumps(error.validator_value)}"[:120]


def _schema_errors(value, schema, call_index) -> list[ToolCallError]:
    """The value's errors under the schema (jsonschema, its patterns searched within a time
    bound: grammar.patterns). A pattern that takes too long to check is an error too: what
    was not checked is not valid."""
    try:
        found = patterns.iter_errors(schema, value)
    except patterns.PatternTooCostly as e:
        return [ToolCallError(call_index, "schema", "$", f"not checked: {e}", "a value that can "
                              "be checked against the schema's patterns in time")]
    return [ToolCallError(call_index, "schema", _json_path(e), e.message, _expected(e))
            for e in sorted(found, key=lambda e: list(map(str, e.absolute_path)))]


def _offered(tools: list | None) -> dict:
    """name -> parameters (a JSON Schema) of the offered tools."""
    offered = {}
    for tool in tools or []:
        function = tool.get("function") or tool
        offered[function.get("name")] = function.get("parameters") or {"type": "object"}
    return offered


def dispatch_check(tools: list | None) -> Callable[[str, object], str | None]:
    """`validate(name, arguments)` for a parser's dispatch stream (`calls="complete"`), by
    jsonschema (every keyword, draft 2020-12): None when the arguments are valid under the
    tool's schema, else the first error and where. A schema jsonschema cannot apply (a $ref
    to nowhere, ...) fails the call: nothing unchecked is dispatched."""
    schemas = _offered(tools)

    def validate(name: str, arguments: object) -> str | None:
        if name not in schemas:
            return None
        try:
            errors = sorted(patterns.iter_errors(schemas[name], arguments),
                            key=lambda e: list(map(str, e.absolute_path)))
        except Exception as e:
            # (a $ref to nowhere, a bad pattern, a schema too deep: the schema's fault, not
            # dispatched)
            reason = str(e).splitlines()[0][:200] if str(e) else ""
            return f"the tool's schema cannot be checked ({type(e).__name__}: {reason})"
        return f"{_json_path(errors[0])}: {errors[0].message}" if errors else None

    return validate


def validate_tool_calls(message: dict, tools: list) -> list[ToolCallError]:
    """Each call: an offered tool, arguments that are JSON, and valid under its schema."""
    offered = _offered(tools)
    errors: list[ToolCallError] = [
        ToolCallError(None, "parse", "$", f"{e.get('kind')}: {e.get('message')}")
        for e in message.get("errors") or []
    ]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        name = function.get("name")
        if name not in offered:
            errors.append(ToolCallError(index, "unknown_tool", "$",
                                        f"{name!r} is not an offered tool",
                                        "one of " + ", ".join(sorted(map(str, offered)))))
            continue
        try:
            arguments = json.loads(function.get("arguments") or "")
        except json.JSONDecodeError as e:
            errors.append(ToolCallError(index, "invalid_json", "$",
                                        f"the arguments are not JSON: {e.msg}", "a JSON object"))
            continue
        except RecursionError:
            errors.append(ToolCallError(index, "invalid_json", "$",
                                        "the arguments are nested too deeply to read",
                                        "a JSON object"))
            continue
        except ValueError:  # (an integer longer than Python reads from text)
            errors.append(ToolCallError(index, "invalid_json", "$",
                                        "the arguments hold an integer too long to read",
                                        "a JSON object"))
            continue
        errors += _schema_errors(arguments, offered[name], index)
    return errors


def validate_content(message: dict, schema: dict) -> list[ToolCallError]:
    """The reply's content is JSON (exactly: no prose around it) and valid under `schema`."""
    content = message.get("content")
    if content is None:
        return [ToolCallError(None, "invalid_json", "$", "the reply has no content",
                              "a JSON value")]
    try:
        value = json.loads(content)
    except json.JSONDecodeError as e:
        return [ToolCallError(None, "invalid_json", "$",
                              f"the reply is not JSON ({e.msg} at character {e.pos})",
                              "only a JSON value, with no text around it")]
    except RecursionError:
        return [ToolCallError(None, "invalid_json", "$", "the reply is nested too deeply to read",
                              "a JSON value")]
    except ValueError:  # (an integer longer than Python reads from text)
        return [ToolCallError(None, "invalid_json", "$",
                              "the reply holds an integer too long to read", "a JSON value")]
    return _schema_errors(value, schema, None)
