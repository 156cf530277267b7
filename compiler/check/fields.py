"""The spec fields a turn that does not read back involves: where to look, and what an
override (`tplparse compile --override FILE`) would set.

Found from what differs between the message the turn must read back as and the message
the parser read (its reasoning, its content, its calls, their arguments), the errors the
parser reported, and the spec's own data (whether it has reasoning markers, a calls format,
which argument encoding, which value types); each is a dotted path into the spec's plain
data (ProtocolSpec.to_dict(), as `tplparse probe --json` prints it), the paths an override's
patch uses.
"""

from __future__ import annotations

from ..spec import ArgumentStyle, ProtocolSpec, json_type, turn_kind


def involved_fields(spec: ProtocolSpec, expected: dict, got: dict, errors: list[dict],
                    mode: str = "default", grammar_rejected: bool = False) -> list[str]:
    """The fields behind the differences between `expected` and `got` (both in the readable
    form of check.outputs: content, reasoning_content, tool_calls as (name, arguments)), the
    parser's errors (kind, message) and a rejection by the grammar, most telling first."""
    found: list[str] = []
    for error in errors:  # (what the parser says first: it says where)
        found += _error_fields(spec, error, expected, mode)
    reasoning, content = expected["reasoning_content"] or "", expected["content"] or ""
    read_reasoning, read_content = got["reasoning_content"] or "", got["content"] or ""
    if read_reasoning != reasoning or (reasoning and reasoning in read_content):
        ran_on = reasoning and read_reasoning.startswith(reasoning)  # (its end was not seen)
        found += _reasoning_fields(spec, mode, end_first=bool(ran_on))
    if read_content != content:
        found += _content_fields(spec, expected, got, mode)
    call_errors = any(e["kind"] in CALL_ERRORS for e in errors)  # (they say why a call is missing)
    if got["tool_calls"] != expected["tool_calls"] and not call_errors:
        found += _call_fields(spec, expected["tool_calls"], got["tool_calls"])
    if grammar_rejected:
        found += _grammar_fields(spec, expected, mode)
    return list(dict.fromkeys(found))


CALL_ERRORS = ("invalid_tool_call", "truncated_tool_call", "unknown_tool", "invalid_arguments")


def _reasoning_fields(spec: ProtocolSpec, mode: str, end_first: bool = False) -> list[str]:
    """Reasoning read wrong: its markers (or, without any, the reasoning part as a whole) and
    where the mode's prompt leaves the model."""
    if spec.reasoning is None:
        return ["reasoning", f"modes.{mode}.start"]
    markers = ["reasoning.end", "reasoning.start"] if end_first \
        else ["reasoning.start", "reasoning.end"]
    return markers + [f"modes.{mode}.start"]


def _content_fields(spec: ProtocolSpec, expected: dict, got: dict, mode: str) -> list[str]:
    content, read = expected["content"] or "", got["content"] or ""
    if content and content in (got["reasoning_content"] or ""):  # the content was read as reasoning
        return _reasoning_fields(spec, mode, end_first=True)
    found = []
    if any(name in read for name, _ in expected["tool_calls"]):  # a call was read as content
        found += _call_layout_fields(spec, len(expected["tool_calls"]))
    if read.startswith(content) and len(read) > len(content):
        # text after it was not seen to end it
        return found + ["content_end", "end_of_turn"]
    if read.endswith(content) and len(read) > len(content):
        # text before it was not seen to open it
        return found + ["content_start"] + (["reasoning.end"] if spec.reasoning is not None else [])
    return found + ["content_start", "content_end", "end_of_turn"]


def _call_fields(spec: ProtocolSpec, expected: list, got: list) -> list[str]:
    if spec.tool_calls is None:
        return ["tool_calls"]
    if [name for name, _ in expected] != [name for name, _ in got]:
        return _call_layout_fields(spec, len(expected))
    found = []
    for (_, want), (_, read) in zip(expected, got, strict=True):
        if want != read:
            found += _argument_fields(spec, want, read)
    return found


def _call_layout_fields(spec: ProtocolSpec, calls: int) -> list[str]:
    if spec.tool_calls is None:
        return ["tool_calls"]
    fields = ["tool_calls.section_start", "tool_calls.call", "tool_calls.section_end"]
    return fields + (["tool_calls.separator", "tool_calls.parallel"] if calls > 1 else [])


def _arguments_format_fields(spec: ProtocolSpec) -> list[str]:
    assert spec.tool_calls is not None  # (only asked about a call)
    if spec.tool_calls.arguments.style != ArgumentStyle.KV:
        return ["tool_calls.arguments.encoder"]
    return ["tool_calls.arguments.argument", "tool_calls.arguments.value_encoders",
            "tool_calls.arguments.separator"]


def _argument_fields(spec: ProtocolSpec, want, read) -> list[str]:
    """One call's arguments read wrong: the encoder of an object's arguments; for arguments
    written one by one, the layout and the value encoder of each value's JSON type that
    differs (the layout for strings where the type has none of its own)."""
    assert spec.tool_calls is not None  # (only asked about a call)
    arguments = spec.tool_calls.arguments
    if arguments.style != ArgumentStyle.KV:
        return ["tool_calls.arguments.encoder"]
    if not (isinstance(want, dict) and isinstance(read, dict)) or set(want) != set(read):
        return _arguments_format_fields(spec)
    found = []
    for key, value in want.items():
        if read[key] != value:
            kind = json_type(value)
            layout = kind if kind in arguments.argument else "string"
            found += [f"tool_calls.arguments.value_encoders.{kind}",
                      f"tool_calls.arguments.argument.{layout}"]
    return found


def _grammar_fields(spec: ProtocolSpec, expected: dict, mode: str) -> list[str]:
    """The grammar refuses a turn the parser reads: it is written from the turn's layout and
    the markers of the parts the turn has (the parser reads more forms than it writes)."""
    found = [f"turns.{turn_kind(expected)}"]
    if expected["reasoning_content"]:
        found += _reasoning_fields(spec, mode)
    if expected["content"]:
        found += ["content_start", "content_end"]
    if expected["tool_calls"]:
        found += _call_layout_fields(spec, len(expected["tool_calls"]))
        found += _arguments_format_fields(spec) if spec.tool_calls is not None else []
    return found + ["end_of_turn", f"modes.{mode}.start"]


def _error_fields(spec: ProtocolSpec, error: dict, expected: dict, mode: str) -> list[str]:
    """The fields behind an error the parser reported: by its kind, and for a call broken
    inside its arguments (the parser says "argument name", "argument value"), their format."""
    kind = error["kind"]
    if spec.tool_calls is not None and (kind == "invalid_arguments" or (
            kind in ("invalid_tool_call", "truncated_tool_call")
            and "argument" in error["message"])):
        return _arguments_format_fields(spec)
    if kind in CALL_ERRORS:
        return _call_layout_fields(spec, len(expected["tool_calls"]))
    if kind == "reasoning_truncated":
        return _reasoning_fields(spec, mode)
    if kind == "text_after_end_of_turn":
        return ["end_of_turn"]
    # (a message header, a channel: read from the turn's layout)
    return [f"turns.{turn_kind(expected)}"]


__all__ = ["involved_fields"]
