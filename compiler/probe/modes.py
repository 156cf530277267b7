"""Generation-prompt modes: the default one, and every other one the template can be asked for.

A switch is a variable the template reads that no render passes anyway (found by parsing the
template: its undeclared names, less the inputs), tried with the values the template's code
compares it to (its literals), and with true and false; a value that changes what the
generation prompt writes after the assistant header makes a mode. A system-message flag
("/think", "/no_think") is a switch too. Nothing here knows a variable by its name, but
for naming: a switch whose name and values say "thinking on / off" (enable_thinking, …)
gives the modes `thinking` and `no_thinking`; any other gives `NAME=VALUE` modes, and once
the reasoning markers are known (`name_thinking_modes`) the pair of one variable's modes of
which one leaves the model inside reasoning and one does not is named the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from jinja2 import meta as jinja_meta
from jinja2 import nodes

from ..source.render import parse_template
from ..source.template import ChatTemplate
from ..spec import PromptMode, Start
from .conversations import ShapedRenderer, Turn
from .renders import _prompt_addition
from .spans import Boundaries

# System-message flags some templates read to switch thinking ("/think", "/no_think").
SYSTEM_FLAGS = (("/think", "/no_think"),)

# Switches whose names say what their values mean: (name, on, off). Used to name the modes
# `thinking` / `no_thinking` (and to try these values first); any other variable the template
# reads is found and tried all the same.
THINKING_SWITCHES = (
    ("enable_thinking", True, False),
    ("thinking", True, False),
    ("reasoning", True, False),
    ("reasoning_effort", "high", "none"),
    ("thinking_budget", -1, 0),
)

# What every render passes (the renderer's inputs, transformers' globals and the sandbox's
# own): not switches.
INPUTS = frozenset({
    "messages", "tools", "add_generation_prompt", "documents", "bos_token", "eos_token",
    "pad_token", "unk_token", "raise_exception", "strftime_now", "namespace", "dict", "range",
    "lipsum", "cycler", "joiner", "functions",
    "datetime", "custom_tools", "builtin_tools", "tools_in_user_message", "date_string", "loop",
    "none", "true", "false", "True", "False", "None",
})
MAX_VALUES = 6  # values tried per variable (its literals first)
MAX_TRIES = 40  # (variable, value) pairs tried per template


@dataclass(frozen=True)
class Switch:
    """A variable the template reads, and the values to try it with."""

    variable: str
    values: tuple


def template_switches(template: ChatTemplate) -> list[Switch]:
    """The variables the template reads that are not inputs, each with the values its code
    compares it to (and true, false): the known thinking switches first, then by name."""
    ast = parse_template(template.source, template.limits)
    read = set(jinja_meta.find_undeclared_variables(ast)) - INPUTS - set(template.named_tokens) \
        - set(template.token_lists)
    literals: dict[str, list] = {name: [] for name in read}
    for compare in ast.find_all(nodes.Compare):
        for name, value in _compared(compare):
            if name in literals:
                literals[name].append(value)
    known = {name: (on, off) for name, on, off in THINKING_SWITCHES}
    switches = []
    for name in sorted(read, key=lambda n: (n not in known, n)):
        values = list(known.get(name, ())) + literals[name] + [True, False]
        unique: list = []
        for value in values:
            if not any(value == u and type(value) is type(u) for u in unique):
                unique.append(value)
        switches.append(Switch(name, tuple(unique[:MAX_VALUES])))
    return switches


def _compared(compare: nodes.Compare):
    """(variable, literal) for each side of a comparison that is a plain variable compared with
    a constant (or a list of constants: `x in ['low', 'high']`)."""
    sides = [compare.expr] + [operand.expr for operand in compare.ops]
    names = [side.name for side in sides if isinstance(side, nodes.Name)]
    for side in sides:
        for value in _constants(side):
            for name in names:
                yield name, value


def _constants(node) -> list:
    if isinstance(node, nodes.Const) and isinstance(node.value, (str, int, float, bool)):
        return [node.value]
    if isinstance(node, (nodes.List, nodes.Tuple)):
        return [item.value for item in node.items
                if isinstance(item, nodes.Const)
                and isinstance(item.value, (str, int, float, bool))]
    return []


def find_modes(renderer: ShapedRenderer, user: str, tail: str,
               header: str) -> tuple[dict[str, PromptMode], dict | None]:
    """The default mode, and each mode a switch selects (see the module docstring). Returns the
    modes and the thinking switch, when one with a known meaning was found (None: not yet)."""
    modes = {"default": PromptMode(variables={}, tail=tail, start=Start.CONTENT, header=header)}
    boundaries = Boundaries(renderer.template.special_tokens)
    # Some templates ignore a switch when tools are declared: try without tools too.
    toolless = ShapedRenderer(renderer.template, [], shape=renderer.shape,
                              reasoning_blocks=renderer.reasoning_blocks)
    switch = None
    for current in (renderer, toolless):
        switch = _known_switch(current, user, header, boundaries, modes)
        if switch is not None:
            break
    known_tails = {_Prompt(mode.header, mode.tail) for mode in modes.values()}
    tries = 0
    for candidate in template_switches(renderer.template):
        if switch is not None and switch.get("variable") == candidate.variable:
            continue
        tails: dict[_Prompt, object] = {}  # (header, tail) -> the first value that writes it
        for value in candidate.values[: max(0, MAX_TRIES - tries)]:
            tries += 1
            found = _tail(renderer, user, header, boundaries, {candidate.variable: value}, "")
            if found is not None:
                tails.setdefault(found, value)
        if not set(tails) - known_tails:
            continue  # (no value of it changes the generation prompt)
        # Each prompt it writes, that one of the default's included (its other values: a pair).
        for found, value in tails.items():
            modes[f"{candidate.variable}={value!r}"] = PromptMode(
                variables={candidate.variable: value}, tail=found.tail, start=Start.CONTENT,
                header=found.header)
        known_tails |= set(tails)
    return modes, switch


def _known_switch(current: ShapedRenderer, user: str, header: str, boundaries: Boundaries,
                  modes: dict[str, PromptMode]) -> dict | None:
    """A switch whose name says thinking on / off (or a system flag): the modes `thinking` and
    `no_thinking` added to `modes`, and the switch; None when none changes the prompt."""
    parsed = parse_template(current.template.source, current.template.limits)
    read = set(jinja_meta.find_undeclared_variables(parsed))
    candidates = [
        ({"variable": name, "on": on, "off": off}, ({name: on}, ""), ({name: off}, ""))
        for name, on, off in THINKING_SWITCHES if name in read
    ] + [
        ({"system_flag": True, "on": on, "off": off}, ({}, on), ({}, off))
        for on, off in SYSTEM_FLAGS
    ]
    for switch, (on_vars, on_flag), (off_vars, off_flag) in candidates:
        rendered = {
            label: current.render_turn(user, Turn(content="x"), variables, system=flag or None)
            for label, (variables, flag) in (("thinking", (on_vars, on_flag)),
                                             ("no_thinking", (off_vars, off_flag)))
        }
        on, off = rendered["thinking"], rendered["no_thinking"]
        if on is None or off is None or on.prompt == off.prompt:
            continue
        renders = {"thinking": on, "no_thinking": off}
        tails: dict[str, str | None] = {}
        headers: dict[str, str] = {}
        for label, r in renders.items():
            found = _after_the_header(_prompt_addition(r.history, r.prompt, boundaries), header,
                                      boundaries)
            tails[label], headers[label] = (found.tail, found.header) if found else (None, header)
        if header and on.prompt == on.history and off.prompt == off.history:
            # The template writes its generation prompt whatever add_generation_prompt says:
            # the two prompts agree up to the assistant header, and their trailers differ.
            agree = boundaries.split_common_prefix(on.history, off.history)
            at = on.history.rfind(header, 0, agree + 1)
            if at != -1 and at + len(header) <= agree:
                tails = {label: r.history[at + len(header):] for label, r in renders.items()}
        on_tail, off_tail = tails["thinking"], tails["no_thinking"]
        if on_tail is None or off_tail is None:
            continue
        if "system_flag" in switch and on_tail == off_tail:
            continue  # the flag only shows up as text in the system message
        modes["thinking"] = PromptMode(variables=on_vars, tail=on_tail,
                                       start=Start.CONTENT, system_flag=on_flag,
                                       header=headers["thinking"])
        modes["no_thinking"] = PromptMode(variables=off_vars, tail=off_tail,
                                          start=Start.CONTENT, system_flag=off_flag,
                                          header=headers["no_thinking"])
        return switch
    return None


class _Prompt(NamedTuple):
    """A mode's generation prompt: the assistant header it writes, and what it writes after it."""

    header: str
    tail: str


def _tail(renderer: ShapedRenderer, user: str, header: str, boundaries: Boundaries, variables: dict,
          flag: str) -> _Prompt | None:
    """What the generation prompt writes with `variables` set (None: it does not render, or
    it writes no part of the assistant header)."""
    rendered = renderer.render_turn(user, Turn(content="x"), variables, system=flag or None)
    if rendered is None:
        return None
    return _after_the_header(_prompt_addition(rendered.history, rendered.prompt, boundaries),
                             header, boundaries)


def _after_the_header(added: str, header: str, boundaries: Boundaries) -> _Prompt | None:
    """`added`, a generation prompt, as the assistant header and what follows it. A prompt may
    end the header otherwise than the history's turns do: DeepSeek V4's turns (thinking off)
    start `<｜Assistant｜></think>`, and with thinking on its prompt is
    `<｜Assistant｜><think>`: the header is then the part both write (up to a marker's end), the
    rest is the tail, where both go on with a marker there. None when it writes no part of the
    header, or goes on with other text (a role header of its own)."""
    if added.startswith(header):
        return _Prompt(header, added[len(header):])
    shared = boundaries.split_common_prefix(added, header)
    if not header or shared == 0 or not added[:shared].strip():
        return None
    if not (_opens_a_marker(header[shared:], boundaries)
            and _opens_a_marker(added[shared:], boundaries)):
        return None  # (a role header written otherwise, `assistant "citations"`: not this header)
    return _Prompt(header[:shared], added[shared:])


def _opens_a_marker(text: str, boundaries: Boundaries) -> bool:
    """Whether `text` starts (after whitespace) with a special token or a tag-like marker."""
    text = text.lstrip()
    return any(token.strip() and text.startswith(token) for token in boundaries.special_tokens) or \
        (len(text) > 1 and text[0] in "<[" and not text[1].isspace())


def name_thinking_modes(modes: dict[str, PromptMode], switch: dict | None,
                        reasoning_end: str) -> dict | None:
    """Once each mode's start state is known: when no switch with a known meaning was found,
    the two modes of one variable of which one leaves the model inside reasoning and the other
    closes the block are `thinking` and `no_thinking`; returns the switch. Other modes that
    ask for what the default asks (the same prompt, the same state) are left out."""
    switch = _thinking_pair(modes, switch, reasoning_end)
    default = modes["default"]
    for name in [n for n in modes if n not in ("default", "thinking", "no_thinking")]:
        if (modes[name].tail, modes[name].start) == (default.tail, default.start):
            del modes[name]
    return switch


def _thinking_pair(modes: dict[str, PromptMode], switch: dict | None,
                   reasoning_end: str) -> dict | None:
    if switch is not None or "thinking" in modes or not reasoning_end:
        return switch
    by_variable: dict[str, list[str]] = {}
    for name, mode in modes.items():
        if len(mode.variables) == 1:
            by_variable.setdefault(next(iter(mode.variables)), []).append(name)
    for variable, names in by_variable.items():
        on = next((n for n in names if modes[n].start == Start.REASONING), None)
        # (the end marker in the prompt after the role: its tail, or the header's last marker)
        off = next((n for n in names if modes[n].start == Start.CONTENT
                    and reasoning_end in modes[n].header + modes[n].tail), None)
        if on is None or off is None:
            continue
        modes["thinking"], modes["no_thinking"] = modes.pop(on), modes.pop(off)
        return {"variable": variable, "on": modes["thinking"].variables[variable],
                "off": modes["no_thinking"].variables[variable]}
    return None
