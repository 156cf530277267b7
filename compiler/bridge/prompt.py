"""A prompt for generation, tied to the parser that reads its answer.

`prompt_for(template, messages, tools, thinking)` (also `tplparse.prompt`) renders the prompt
and returns a `Prompt` whose `.parser()` starts in the state the prompt leaves the model
in, so a bridge cannot put the two out of step. `parser_for(template)` is the family's
streaming parser in process (the runtime and tables a generated module carries, from
`compile_in_memory`, without writing or importing any file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import runtime
from ..errors import TemplateError
from ..grammar.reading import reading_tables
from ..probe import probe
from ..probe.conversations import in_shape, with_empty_content
from ..source import ChatTemplate
from ..spec import ProtocolSpec, Start
from .validate import dispatch_check

_PROTOCOLS: dict = {}


def compile_in_memory(template: ChatTemplate) -> tuple[ProtocolSpec, runtime.Protocol]:
    """The template's spec and its prepared reading tables, once per template text and tokens."""
    key = (template.sha256, template.family, tuple(sorted(template.named_tokens.items())),
           template.special_tokens)
    if key not in _PROTOCOLS:
        spec = probe(template)
        _PROTOCOLS[key] = (spec, runtime.Protocol(reading_tables(spec, template.special_tokens)))
    return _PROTOCOLS[key]


def parser_for(template: ChatTemplate, tools: list | None = None,
               generation_prompt: str | None = None, start: str | None = None,
               calls: str = runtime.DELTAS) -> runtime.StreamParser:
    """The family's streaming parser for `template`, probed (once) in process; `calls`:
    "deltas" (the UI stream) or "complete" (the dispatch stream, checked by jsonschema)."""
    return runtime.StreamParser(compile_in_memory(template)[1], tools=tools,
                                generation_prompt=generation_prompt, start=start, calls=calls,
                                validate=_check_for(calls, tools))


def _check_for(calls: str, tools: list | None):
    """The dispatch stream's check: jsonschema's, every keyword (None for the UI stream)."""
    return dispatch_check(tools) if calls == runtime.COMPLETE else None


@dataclass
class Prompt:
    """A prompt for generation and the parser that matches it."""

    text: str  # what to send to the engine
    generation_prompt: str  # what the template added to open the assistant turn (and any prefill)
    stop: list[str]  # end-of-turn strings that should stop generation
    start: Start  # where the model's output begins
    spec: ProtocolSpec
    tools: list[dict] | None = None
    notes: list[str] = field(default_factory=list)  # how thinking was switched
    mode: str = "default"  # the spec's mode the prompt is in (default, thinking, no_thinking)
    # the prompt ends with an empty reasoning block it wrote (no switch)
    reasoning_closed: bool = False
    # the family's reading tables
    protocol: runtime.Protocol | None = field(default=None, repr=False)

    def parser(self, calls: str = runtime.DELTAS) -> runtime.StreamParser:
        """The family's streaming parser, set to this prompt's start state; `calls`: "deltas"
        (the UI stream) or "complete" (the dispatch stream, checked by jsonschema)."""
        assert self.protocol is not None  # (prompt_for gives every prompt its family's tables)
        return runtime.StreamParser(self.protocol, tools=self.tools, start=self.start, calls=calls,
                                    validate=_check_for(calls, self.tools))


def prompt_for(template: ChatTemplate, messages: list, tools: list | None = None,
               thinking: bool | None = None, **variables: Any) -> Prompt:
    spec, protocol = compile_in_memory(template)
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
        notes.append("thinking switched by "
                     + ", ".join(f"{k}={v!r}" for k, v in mode.variables.items()))
    text, history = _rendered(template, spec, messages, tools, variables, notes)
    i = 0
    while i < min(len(text), len(history)) and text[i] == history[i]:
        i += 1
    generation_prompt = text[i:]
    start = mode.start
    closed = False
    if thinking is False and mode_name != "no_thinking" and spec.reasoning and spec.reasoning.end:
        # No switch: open (if needed) and close the reasoning block, so the model answers
        # directly and the parser starts in content (no closing tag will come).
        opening = "" if start == Start.REASONING or not spec.reasoning.start \
            else spec.reasoning.start + "\n"
        prefill = opening + spec.reasoning.end + "\n\n"
        text += prefill
        generation_prompt += prefill
        start = Start.CONTENT
        closed = True
        notes.append("no thinking switch: the prompt ends with an empty "
                     f"reasoning block {prefill!r}")
    elif thinking is False and mode_name != "no_thinking":
        notes.append("no thinking switch and no reasoning markers: the prompt is unchanged")
    eos = [template.eos_token] if template.eos_token else []
    stop = list(dict.fromkeys(spec.end_of_turn + eos))
    return Prompt(text=text, generation_prompt=generation_prompt, stop=stop, start=start, spec=spec,
                  tools=tools, notes=notes, mode=mode_name, reasoning_closed=closed,
                  protocol=protocol)


def _rendered(template: ChatTemplate, spec: ProtocolSpec, messages: list, tools: list | None,
              variables: dict[str, Any], notes: list[str]) -> tuple[str, str]:
    """(the prompt, the history without the generation prompt), the conversation written down
    as the template reads one (probe.conversations.in_shape: a call's arguments as an object
    or as JSON text, tools with or without their wrapper, ...). A template that fails on a past
    call turn's null content is given "" there (as the probe's "empty content" shape), and a
    note says so."""
    messages, shaped_tools, shape_variables = in_shape(messages, tools, spec.shape)
    variables = {**shape_variables, **variables}

    def render(conversation: list) -> tuple[str, str]:
        return (template.render(conversation, tools=shaped_tools, add_generation_prompt=True,
                                **variables),
                template.render(conversation, tools=shaped_tools, add_generation_prompt=False,
                                **variables))

    try:
        return render(messages)
    except TemplateError as e:
        emptied = with_empty_content(messages)
        if e.limit or emptied == messages:
            raise
        rendered = render(emptied)
        notes.append("a call turn's null content given to the template as \"\" (it reads "
                     "that content as text)")
        return rendered


def _with_system_flag(messages: list, flag: str) -> list:
    if messages and isinstance(messages[0], dict) and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content') or ''}\n{flag}".strip()
        return [first] + messages[1:]
    return [{"role": "system", "content": flag}] + messages
