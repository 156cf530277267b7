"""Renders that break their own notation: what a template writes that the notation it writes
in does not (a model trained on the notation writes it otherwise), said by name when a compile
is refused, with the way forward: a template corrected to write the notation proves a parser
that reads what the model writes.

One rule, driven by the spec's data: calls written as Python calls (`name(` arguments `)`,
each argument `key=value`) join their keyword arguments with `,` (and a space, as Python's
own repr writes it); a render that joins them otherwise (`amount="EUR 12"count=3`) breaks the
notation, and its keyword arguments cannot be told apart where a value is written bare.
"""

from __future__ import annotations

from typing import NamedTuple

from ..spec import ArgumentStyle, ProtocolSpec, slot

# What Python's call notation writes between keyword arguments.
PYTHON_ARGUMENT_SEPARATOR = ", "


class NotationDefect(NamedTuple):
    field: str  # the spec field whose value the render breaks the notation with
    notation: str  # what the notation writes there
    written: str  # what the render writes
    what: str  # where, in words
    example: str  # two arguments as the render writes them

    def message(self) -> str:
        """The defect and the way forward, in one sentence (no line break)."""
        return (f"the render breaks its own notation: {self.what} it writes {self.written!r} "
                f"({self.example}) where the notation writes {self.notation!r}; a model writes "
                f"the notation: compile the template corrected to write {self.notation!r} there "
                f"(the spec's {self.field})")


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
