"""Generation-prompt modes: the default one, and thinking on / off when a switch exists.

A switch is a template variable the template reads (found by parsing it, never by reading
it as text) or a system-message flag, whose two values change the generation prompt.
"""

from __future__ import annotations

from jinja2 import meta as jinja_meta

from ..source.render import parse_template
from ..source.template import ChatTemplate
from ..spec import PromptMode, Start
from .conversations import ShapedRenderer, Turn
from .renders import _prompt_addition
from .spans import Boundaries

# Variables that commonly switch thinking on and off, with their (on, off) values, tried
# when the template reads them. The template's own variables are found by parsing it.
# Variables that commonly switch thinking on and off, with their (on, off) values, tried
# when the template reads them. The template's own variables are found by parsing it.
# System-message flags some templates read to switch thinking ("/think", "/no_think").
SYSTEM_FLAGS = (("/think", "/no_think"),)

THINKING_SWITCHES = (
    ("enable_thinking", True, False),
    ("thinking", True, False),
    ("reasoning", True, False),
    ("reasoning_effort", "high", "none"),
    ("thinking_budget", -1, 0),
)


def _template_variables(template: ChatTemplate) -> set[str]:
    return set(jinja_meta.find_undeclared_variables(parse_template(template.source, template.limits)))


def find_modes(renderer: ShapedRenderer, user: str, tail: str, header: str) -> tuple[dict[str, PromptMode], dict | None]:
    """The default mode, and thinking on / off when a variable or a system flag switches it.

    Variables are tried only when the template reads them (found by parsing it, not by
    reading it as text); a switch is one whose two values change the prompt. Returns the
    modes and the switch (None: no switch).
    """
    modes = {"default": PromptMode(variables={}, tail=tail, start=Start.CONTENT)}
    boundaries = Boundaries(renderer.template.special_tokens)
    read = _template_variables(renderer.template)
    candidates = [
        ({"variable": name, "on": on, "off": off}, ({name: on}, ""), ({name: off}, ""))
        for name, on, off in THINKING_SWITCHES if name in read
    ] + [
        ({"system_flag": True, "on": on, "off": off}, ({}, on), ({}, off))
        for on, off in SYSTEM_FLAGS
    ]
    # Some templates ignore the switch when tools are declared: try without tools too.
    toolless = ShapedRenderer(renderer.template, [], shape=renderer.shape, reasoning_blocks=renderer.reasoning_blocks)
    for (switch, (on_vars, on_flag), (off_vars, off_flag)), current in (
        [(c, renderer) for c in candidates] + [(c, toolless) for c in candidates]
    ):
        rendered = {
            label: current.render_turn(user, Turn(content="x"), variables, system=flag or None)
            for label, (variables, flag) in (("thinking", (on_vars, on_flag)), ("no_thinking", (off_vars, off_flag)))
        }
        if None in rendered.values() or rendered["thinking"].prompt == rendered["no_thinking"].prompt:
            continue
        tails = {}
        for label, r in rendered.items():
            added = _prompt_addition(r.history, r.prompt, boundaries)
            tails[label] = added[len(header):] if added.startswith(header) else None
        on, off = rendered["thinking"], rendered["no_thinking"]
        if header and on.prompt == on.history and off.prompt == off.history:
            # The template writes its generation prompt whatever add_generation_prompt says:
            # the two prompts agree up to the assistant header, and their trailers differ.
            agree = boundaries.split_common_prefix(on.history, off.history)
            at = on.history.rfind(header, 0, agree + 1)
            if at != -1 and at + len(header) <= agree:
                tails = {label: r.history[at + len(header):] for label, r in rendered.items()}
        if None in tails.values():
            continue
        if "system_flag" in switch and tails["thinking"] == tails["no_thinking"]:
            continue  # the flag only shows up as text in the system message
        modes["thinking"] = PromptMode(variables=on_vars, tail=tails["thinking"], start=Start.CONTENT, system_flag=on_flag)
        modes["no_thinking"] = PromptMode(variables=off_vars, tail=tails["no_thinking"], start=Start.CONTENT, system_flag=off_flag)
        return modes, switch
    return modes, None
