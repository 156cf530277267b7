"""The reference parser: a complete model output parsed with the family's PEG grammar.

`ReferenceParser` parses with parsimonious (the grammar `emit.peg` prints from the same IR
the GBNF comes from) and maps the tree to the normalized assistant message. It is the
semantic reference the streaming parsers are tested against, so it is written to be plain
rather than fast; values are typed by the runtime's own value rules, so both parsers agree
on what a value is.
"""

from __future__ import annotations

import json
from typing import Any

from parsimonious.exceptions import ParseError
from parsimonious.grammar import Grammar as ParsimoniousGrammar
from parsimonious.nodes import Node as ParseNode

from .. import runtime
from ..emit.peg import emit_peg
from ..grammar import GrammarOptions, build
from ..spec import ArgumentFormat, ArgumentStyle, ProtocolSpec, kv_parts


def _error(kind: str, message: str, offset: int) -> dict:
    return {"kind": kind, "message": message, "offset": offset}


class ReferenceParser:
    """Parse a complete model output into the normalized assistant message."""

    def __init__(self, spec: ProtocolSpec, tools: list[dict] | None = None,
                 start: str | None = None, special_tokens: tuple[str, ...] = ()):
        self.spec = spec
        self.tools = {(_function(t)["name"]): _function(t) for t in tools or []}
        # A format whose closing tags name the key (<amount>…</amount>) can be matched only
        # knowing the keys (PEG has no back-references): then the grammar of the tools.
        options = GrammarOptions(tools=tools if tools and _names_the_key_again(spec) else None,
                                 start=start, trailing_text=True)
        self.ir = build(spec, options, special_tokens)
        self.grammar = ParsimoniousGrammar(emit_peg(self.ir))

    def parse(self, text: str, finish_reason: str = "stop") -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": None, "reasoning_content": None,
                                   "tool_calls": [], "errors": [], "finish_reason": finish_reason}
        try:
            tree = self.grammar.parse(text)
        except ParseError as e:
            message["errors"].append(_error("invalid_output",
                                            f"the output does not follow the format: {e}", e.pos))
            return message
        except RecursionError:  # parsimonious recurses once per nesting level of a value
            message["errors"].append(_error(
                "invalid_output", "the output nests too deeply for the reference parser", 0))
            return message
        found: dict[str, Any] = {"reasoning": [], "content": [], "calls": [], "after": None}
        self._walk(tree, found)
        reasoning = "".join(found["reasoning"]).strip()
        content = "".join(found["content"]).strip()
        message["reasoning_content"] = reasoning or None
        message["content"] = content or None
        for index, call in enumerate(found["calls"]):
            try:
                parsed = self._call(index, call)
                if self.tools and parsed["function"]["name"] not in self.tools:
                    message["errors"].append(_error(
                        "unknown_tool", f"call {index} names {parsed['function']['name']!r}, which "
                                        "is not an offered tool",
                        call.end))
                    continue
                message["tool_calls"].append(parsed)
            except ValueError as e:
                message["errors"].append(_error("invalid_arguments", str(e), call.start))
            except RecursionError:
                message["errors"].append(_error("invalid_arguments",
                                                "the arguments are nested too deeply to read",
                                                call.start))
        if found["after"] is not None and found["after"].text.strip():
            node = found["after"]
            message["errors"].append(_error("text_after_end_of_turn",
                                            f"ignored: {node.text[:80]!r}", node.start))
        return message

    # The tree walk: rule names say what each node is.
    def _walk(self, node: ParseNode, found: dict) -> None:
        name = node.expr_name
        if name.startswith("reasoning_text"):
            found["reasoning"].append(node.text)
            return
        if name.startswith("content_text"):
            found["content"].append(node.text)
            return
        if name == "tool_call":
            found["calls"].append(node)
            return
        if name == "after_end":
            found["after"] = node
            return
        for child in node.children or []:
            self._walk(child, found)

    def _call(self, index: int, node: ParseNode) -> dict:
        parts: dict[str, Any] = {"name": None, "id": None, "arguments": None, "argument_pairs": []}
        self._walk_call(node, parts)
        name = parts["name"]
        assert self.spec.tool_calls is not None  # (a call was read)
        fmt = self.spec.tool_calls.arguments
        schema = (self.tools.get(name) or {}).get("parameters") or {}
        if fmt.style == ArgumentStyle.OBJECT:
            if parts["arguments"] is None:
                raise ValueError("the call has no arguments")
            arguments = _decode_object(parts["arguments"], fmt)
        else:
            arguments = {}
            for key, value_node in parts["argument_pairs"]:
                arguments[key] = _decode_value(value_node, fmt,
                                               (schema.get("properties") or {}).get(key))
        return {
            "id": parts["id"] or f"call_{index}",
            "type": "function",
            "function": {"name": name, "arguments": _arguments_json(arguments)},
        }

    def _walk_call(self, node: ParseNode, parts: dict) -> None:
        name = node.expr_name
        if name.startswith("tool_name"):  # (tool_name; tool_name_<tool> in a grammar of the tools)
            parts["name"] = node.text
            return
        if name == "call_id":
            parts["id"] = node.text
            return
        if name == "arguments" and self.spec.tool_calls is not None \
                and self.spec.tool_calls.arguments.style == ArgumentStyle.OBJECT:
            parts["arguments"] = node.text
            return
        if name == "argument" or (name.startswith("argument_")
                                  and not name.startswith("argument_key")):
            pair = {"key": None, "value": None}
            self._walk_argument(node, pair)
            if pair["key"] is not None and pair["value"] is not None:
                parts["argument_pairs"].append((pair["key"], pair["value"]))
            return
        for child in node.children or []:
            self._walk_call(child, parts)

    def _walk_argument(self, node: ParseNode, out: dict) -> None:
        name = node.expr_name
        if name.startswith("argument_key"):
            out["key"] = node.text
            return
        if name.startswith("value_"):
            out["value"] = node
            return
        for child in node.children or []:
            self._walk_argument(child, out)


def _names_the_key_again(spec: ProtocolSpec) -> bool:
    tc = spec.tool_calls
    if tc is None or tc.arguments.style == ArgumentStyle.OBJECT:
        return False
    return any(layout[layout.index({"slot": "value"}):].count({"slot": "key"})
               for layout in tc.arguments.argument.values())


def _function(tool: dict) -> dict:
    return tool.get("function") or tool


def _arguments_json(arguments: dict) -> str:
    """The JSON text of a call's arguments, as the generated parsers write it."""
    try:
        return runtime.arguments_json(arguments)
    except runtime.BadArguments as e:
        raise ValueError(str(e)) from None


def _decode_object(text: str, fmt: ArgumentFormat) -> dict:
    try:
        value = runtime.object_value(text, fmt.encoder == "python")
    except (ValueError, SyntaxError) as e:
        raise ValueError("arguments are not valid "
                         f"{'Python' if fmt.encoder == 'python' else 'JSON'}: {e}") from None
    if not isinstance(value, dict):
        raise ValueError("arguments are not an object")
    return value


def _decode_value(node: ParseNode, fmt: ArgumentFormat, schema: dict | None) -> Any:
    """A value node's text, decoded as its rule says (value_raw_<type> uses that type's layout)."""
    kind = node.expr_name
    text = node.text
    if kind.startswith("value_raw"):
        layout_kind = kind[len("value_raw_"):] or "string"
        return _typed_raw(_strip_layout_ws(text, fmt, layout_kind), schema,
                          runtime.format_fillers(fmt.argument.values()))
    if kind == "value_quoted":
        return _typed_raw(text[len(fmt.quotes[0]):len(text) - len(fmt.quotes[1])], schema)
    if kind in ("value_python", "value_python_container"):
        return runtime.python_value(text)
    if kind == "value_native":
        return decode_native(text, fmt)
    return json.loads(text)


def _strip_layout_ws(text: str, fmt: ArgumentFormat, layout_kind: str) -> str:
    """Drop the whitespace the layout puts between a raw value and its closing text."""
    _, _, after = kv_parts(fmt.argument.get(layout_kind) or fmt.argument["string"])
    lead = after[: len(after) - len(after.lstrip())]
    return text[: len(text) - len(lead)] if lead and text.endswith(lead) else text


def _typed_raw(text: str, schema: dict | None, fillers: tuple = ()) -> Any:
    """A raw value typed by its schema: the same rule the streaming parsers follow."""
    try:
        return runtime.typed_raw(text, schema, fillers)
    except runtime.BadArguments as e:
        raise ValueError(str(e)) from None


def decode_native(text: str, fmt: ArgumentFormat) -> Any:
    """A value in a format's own notation (see ArgumentFormat.encode_value)."""
    try:
        return runtime.decode_native(text, {"quotes": fmt.quotes, "brackets": fmt.brackets,
                                                    "separator": fmt.separator})
    except (runtime.InvalidOutput, runtime.BadArguments) as e:
        raise ValueError(str(e)) from None


__all__ = ["ReferenceParser", "decode_native"]
