"""The call format a template's own tool instructions tell the model to write.

Some templates instruct, in the system or user text they render around the tools, an output
format other than the one they render past calls in: Llama 4's template renders a past call
as `<|python_start|><|python_end|>{"name": "f", "parameters": {…}}` and tells the model
'Respond in the format {"name": function name, "parameters": dictionary of argument name and
its value}' (the bare object, no markers); another revision renders calls back to back and
tells the model 'Separate multiple function calls by "; "'. A model follows its
instructions, so the parser reads both: the history format, and the instructed variant.

The instructions are text the template writes with the sentinel tools in it; they are read
from the rendered prompt by two rules, both driven by the call layout the probe found:

    calls without the section   the layout's JSON call object is spelled out in the prompt
                                (`{"KEY": …, "KEY": …}` with the layout's name and arguments
                                keys, in its order; placeholders, not a sentinel tool) and the
                                section's opening markers are not written right before it
                                (whitespace, and a brace or two between them, aside); for a
                                call that is its JSON object, no marker of its own before it
    a separator between calls   where history writes calls back to back (no separator), a
                                quoted run of `;`, `,` or `|` (with spaces) in the same
                                instructions, after the call's spelled-out object
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..runtime import json_call_object
from ..spec import ProtocolSpec

# How near before the spelled-out call the section's opener counts as written with it (a
# brace or two between them: `<TOOLCALL>[{{"name": …`).
_NEAR = 4
# How far after the spelled-out call the instructions may name a separator.
_SEPARATOR_REACH = 400
# A quoted separator: one of ; , | with spaces around it, in straight or typographic quotes.
_QUOTED_SEPARATOR = re.compile(r"""["'“‘]( ?[;,|] ?)["'”’]""")


@dataclass(frozen=True)
class Instructed:
    """What the instructions tell the model to write, where history renders otherwise."""

    bare: bool = False  # calls without the section's markers
    separators: tuple[str, ...] = ()  # between calls, where history writes none
    evidence: str = ""  # the instruction text that says so


def instructed_calls(prompt: str, spec: ProtocolSpec, tool_names: tuple[str, ...]) -> Instructed:
    """Read the instructed call format from `prompt`, a generation prompt rendered with the
    tools named `tool_names` (sentinels: their definitions are not instructions)."""
    tc = spec.tool_calls
    if tc is None:
        return Instructed()
    json_call = json_call_object(tc.call)
    if json_call is None or json_call.first != 0 or json_call.before.strip():
        # (no call object, or markers of the call's own before it: not read bare)
        return Instructed()
    keys = json_call.keys
    if len(keys["name"]) > 1 or len(keys["arguments"]) > 1:
        return Instructed()  # (a nested call object is not spelled out bare in a prompt)
    spelled = _spelled_out_call(prompt, keys["name"][0], keys["arguments"][0], tool_names)
    if spelled is None:
        return Instructed()
    opener = _squeezed(tc.section_start)
    before = _squeezed(prompt[: spelled.start()])[-(len(opener) + _NEAR):]
    bare = bool(opener) and opener not in before
    separators: tuple[str, ...] = ()
    if not tc.separator.strip():
        window = prompt[spelled.end(): spelled.end() + _SEPARATOR_REACH]
        separators = tuple(dict.fromkeys(m.group(1) for m in _QUOTED_SEPARATOR.finditer(window)))
    if not bare and not separators:
        return Instructed()
    return Instructed(bare, separators,
                      _sentence_around(prompt, spelled.start(), spelled.end() + _SEPARATOR_REACH))


def _spelled_out_call(prompt: str, name_key: str, arguments_key: str, tool_names: tuple[str, ...]):
    """The first `{"NAME_KEY": …, "ARGUMENTS_KEY": …}` in the prompt whose values are not a tool
    definition's (no sentinel tool name in them, no nested object before the arguments key)."""
    pattern = re.compile(r'\{\s*"' + re.escape(name_key) + r'"\s*:([^{}]{1,120}?),\s*"'
                         + re.escape(arguments_key)
                         + r'"\s*:([^{}\n]{1,120}?)\}')
    for match in pattern.finditer(prompt):
        if not any(name in match.group(0) for name in tool_names):
            return match
    return None


def _squeezed(text: str) -> str:
    """`text` without its whitespace (an instruction may break a line where a render does not)."""
    return "".join(text.split())


def _sentence_around(prompt: str, start: int, end: int) -> str:
    """The instruction text from the start of the line that spells the call out, to `end`
    or the end of its paragraph, on one line."""
    line_start = prompt.rfind("\n", 0, start) + 1
    paragraph_end = prompt.find("\n\n", start)
    stop = min(end, paragraph_end) if paragraph_end != -1 else end
    return " ".join(prompt[line_start:stop].split())


__all__ = ["Instructed", "instructed_calls"]
