"""Renders that break their own notation: what a template writes that the notation it writes
in does not (a model trained on the notation writes it otherwise), said by name when a compile
is refused, with the ways forward: an override that states the notation, or a template
corrected to write it. With such an override the proof reads each call turn as the notation
writes it (RestatedNotation): the turn's calls, written as the template writes them, found in
its render and written again with the override's value.

One rule, driven by the spec's data: calls written as Python calls (`name(` arguments `)`,
each argument `key=value`) join their keyword arguments with `,` (and a space, as Python's
own repr writes it); a render that joins them otherwise (`amount="EUR 12"count=3`) breaks the
notation, and its keyword arguments cannot be told apart where a value is written bare.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import NamedTuple

from ..probe import probe, standard_turns
from ..probe.overrides import Override, patched_paths
from ..source.template import ChatTemplate
from ..spec import ArgumentStyle, ProtocolSpec, ToolCallFormat, slot
from .outputs import ModelOutput

# What Python's call notation writes between keyword arguments.
PYTHON_ARGUMENT_SEPARATOR = ", "


class NotationDefect(NamedTuple):
    field: str  # the spec field whose value the render breaks the notation with
    notation: str  # what the notation writes there
    written: str  # what the render writes
    what: str  # where, in words
    example: str  # two arguments as the render writes them

    def message(self) -> str:
        """The defect and the ways forward, in one sentence (no line break)."""
        patch = {"patch": _patch(self.field, self.notation)}
        return (f"the render breaks its own notation: {self.what} it writes {self.written!r} "
                f"({self.example}) where the notation writes {self.notation!r}; if the model "
                f"writes the notation, state it: compile --override FILE with "
                f"{json.dumps(patch)} (docs/overrides.md), or compile the template corrected "
                "to write it")


def notation_defects(spec: ProtocolSpec) -> list[NotationDefect]:
    """What the spec's renders write against their own notation (none where they keep it)."""
    tc = spec.tool_calls
    if tc is None or not _python_call(spec):
        return []
    args = tc.arguments
    if args.separator.strip() == PYTHON_ARGUMENT_SEPARATOR.strip():
        return []
    example = args.format({"city": "Paris", "days": 3})
    return [NotationDefect("tool_calls.arguments.separator", PYTHON_ARGUMENT_SEPARATOR,
                           args.separator, "between a Python call's keyword arguments",
                           f"get_weather({example})")]


def _python_call(spec: ProtocolSpec) -> bool:
    """Whether the calls are Python calls with keyword arguments: `name(` arguments `)`, each
    argument `key=value` (whitespace around the literals aside)."""
    tc = spec.tool_calls
    assert tc is not None  # (asked for a family with calls only)
    call = [p.strip() if isinstance(p, str) else p for p in tc.call]
    if call != [slot("name"), "(", slot("arguments"), ")"] \
            or tc.arguments.style != ArgumentStyle.KV:
        return False
    layouts = tc.arguments.argument.values()
    return bool(layouts) and all(
        [p.strip() if isinstance(p, str) else p for p in layout]
        == [slot("key"), "=", slot("value")] for layout in layouts)


def _patch(path: str, value: str) -> dict:
    """The override patch that sets `path` (dotted) to `value`."""
    patch: dict = {}
    node = patch
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return patch


# --- an override that states the notation ----------------------------------------------------

class RestatedNotation(NamedTuple):
    """A notation a user's override states where the template's renders break it."""

    render: ToolCallFormat  # the calls as the template writes them (probed without the override)
    field: str  # the spec field the override restates

    def note(self, spec: ProtocolSpec) -> str:
        """What the proof reads instead of the renders, in one line."""
        assert spec.tool_calls is not None  # (a notation of calls)
        return (f"calls read as the notation writes them: the override states {self.field} "
                f"{spec.tool_calls.arguments.separator!r}, the template writes "
                f"{self.render.arguments.separator!r}")

    def in_notation(self, output: ModelOutput, spec: ProtocolSpec) -> ModelOutput:
        """`output` with its turn's calls written as the notation writes them, and read as
        all of its arguments (the notation loses none); unchanged where the render does not
        hold the calls as the template writes them."""
        assert spec.tool_calls is not None  # (a notation of calls)
        turn = standard_turns().get(output.turn)
        if turn is None or not turn.calls:
            return output
        written = [{"name": c.name, "arguments": c.arguments} for c in turn.calls]
        section = self.render.format(written)
        at = output.text.find(section)
        if at == -1:
            return output
        restated = replace(self.render, arguments=spec.tool_calls.arguments).format(written)
        return replace(output, text=output.text[:at] + restated + output.text[at + len(section):],
                       expected={**output.expected,
                                 "tool_calls": [(c.name, c.arguments) for c in turn.calls]},
                       lossy=[note for note in output.lossy
                              if not note.startswith("the template drops the argument")])


def restated_notation(template: ChatTemplate, spec: ProtocolSpec,
                      override: Override | None) -> RestatedNotation | None:
    """The notation `override` (a user's) states where the template's renders break it: a
    defect of the template probed without it, in a field it sets, that the spec no longer
    has. None otherwise (the proof reads the renders as they are)."""
    if override is None or not override.user or spec.tool_calls is None or notation_defects(spec):
        return None
    paths = patched_paths(override.patch)
    probed = probe(template)
    for defect in notation_defects(probed):
        if probed.tool_calls is not None and any(
                defect.field == path or defect.field.startswith(path + ".") for path in paths):
            return RestatedNotation(probed.tool_calls, defect.field)
    return None

