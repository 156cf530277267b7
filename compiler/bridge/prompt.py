"""A prompt for generation, tied to the parser that reads its answer.

`prompt_for(template, messages, tools, thinking)` (also `tplparse.prompt`) renders the prompt
and returns a `Prompt` whose `.parser()` starts in the state the prompt leaves the model
in, so a bridge cannot put the two out of step. With `continue_final_message=True` the last
message is an assistant's answer begun by the client (a prefill): the prompt ends inside it,
as transformers' `continue_final_message` writes it, and the parser starts where its text
leaves the model (inside reasoning, or in content), reading only what the model adds.
`parser_for(template)` is the family's streaming parser in process (the runtime and tables a
generated module carries, from `compile_in_memory`, without writing or importing any file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .. import runtime
from ..errors import InputError, TemplateError
from ..grammar.reading import reading_tables
from ..probe import probe
from ..probe.conversations import in_shape, with_empty_content
from ..probe.spans import common_prefix_length
from ..source import ChatTemplate
from ..spec import ProtocolSpec, Start
from .validate import dispatch_check

_PROTOCOLS: dict = {}


def compile_in_memory(template: ChatTemplate) -> tuple[ProtocolSpec, runtime.Protocol]:
    """The template's spec and its prepared reading tables, once per template text and tokens."""
    key = (template.sha256, template.family, tuple(sorted(template.named_tokens.items())),
           tuple(sorted(template.token_lists.items())),
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
    # continue_final_message: the final message's text the prompt ends with (the model's output
    # continues it; the parser reads only what the model adds)
    prefill: str | None = None

    def parser(self, calls: str = runtime.DELTAS) -> runtime.StreamParser:
        """The family's streaming parser, set to this prompt's start state (inside a prefilled
        answer: "continued"); `calls`: "deltas" (the UI stream) or "complete" (the dispatch
        stream, checked by jsonschema)."""
        assert self.protocol is not None  # (prompt_for gives every prompt its family's tables)
        return runtime.StreamParser(self.protocol, tools=self.tools, start=self.parser_start,
                                    calls=calls, validate=_check_for(calls, self.tools))

    @property
    def parser_start(self) -> str:
        """The parser's start: the prompt's start state, continued where the prompt ends inside
        an answer the client began (no opener or content prefix follows, and the whitespace the
        output starts with is the answer's)."""
        if self.prefill is not None:
            return runtime.REASONING_CONTINUED if self.start == Start.REASONING \
                else runtime.CONTENT_CONTINUED
        return self.start.value


def prompt_for(template: ChatTemplate, messages: list, tools: list | None = None,
               thinking: bool | None = None, continue_final_message: bool = False,
               **variables: Any) -> Prompt:
    """The prompt for `messages` (see the module's doc). `continue_final_message`: the last
    message is an assistant's answer to continue (its `content`, or its `reasoning_content`
    when it has no content: the model goes on thinking); InputError where the template does
    not write that text into the turn, or where it holds a call's opener."""
    spec, protocol = compile_in_memory(template)
    prefill, prefill_field = _prefill_of(messages, protocol) if continue_final_message \
        else (None, None)
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
    if prefill is not None:
        text, generation_prompt, prefill = _continued(template, spec, messages, tools, variables,
                                                      notes, prefill)
        # (the runtime's rule, as `parser_for(generation_prompt=text)` applies it)
        state = protocol.start_state(text, None)
        in_reasoning = state in (runtime.REASONING, runtime.REASONING_CONTINUED)
        if (prefill_field == "reasoning_content" and not in_reasoning
                and spec.reasoning is not None and spec.reasoning.end
                and spec.reasoning.end not in generation_prompt):
            # The template writes the block without its opener here, so the text alone cannot
            # tell reasoning from an answer: the client's field does.
            in_reasoning = True
        start = Start.REASONING if in_reasoning else Start.CONTENT
        if thinking is False and start == Start.REASONING:
            raise InputError("the final message ends inside a reasoning block, and thinking is "
                             "off: continue its content, or leave thinking on")
        eos = [template.eos_token] if template.eos_token else []
        return Prompt(text=text, generation_prompt=generation_prompt,
                      stop=list(dict.fromkeys(spec.end_of_turn + eos)), start=start, spec=spec,
                      tools=tools, notes=notes, mode=mode_name,
                      # (content was written: the model does not open a reasoning block now)
                      reasoning_closed=start == Start.CONTENT and spec.reasoning is not None,
                      protocol=protocol, prefill=prefill)
    text, history = _rendered(template, spec, messages, tools, variables, notes)
    generation_prompt = text[common_prefix_length(text, history):]
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


class Prefill(NamedTuple):
    text: str  # what the final message ends with
    field: str  # "content" or "reasoning_content": where the client wrote it


class ContinuedCut(NamedTuple):
    prompt: str  # the conversation's render, up to the final message's text
    turn: str  # the final turn's text in it
    prefill: str  # the final message's text as the prompt ends with it
    trimmed: bool  # the template wrote that text stripped of the whitespace around it


def cut_in_final_turn(full: str, before: str, prefill: str) -> ContinuedCut:
    """`full` (a conversation rendered whole, no generation prompt) cut right after `prefill`,
    its final message's text, in the turn that `before` (the conversation without that message)
    does not write; InputError where that turn does not hold the text."""
    turn_at = common_prefix_length(full, before)
    turn = full[turn_at:]
    key = prefill
    if key not in turn:
        key = prefill.strip()
        if not key or key not in turn:
            raise InputError("continue_final_message: the template does not write the final "
                             "message's text into its turn as given (it drops or changes it), "
                             "so the prompt cannot end inside it")
    cut = turn_at + turn.rindex(key) + len(key)
    return ContinuedCut(full[:cut], full[turn_at:cut], key, key != prefill)


def continued_render(template: ChatTemplate, messages: list, tools: list | None = None,
                     **variables: Any) -> str:
    """The conversation rendered as given (no probe, no reshaping: `tplparse render`), cut right
    after its final message's text: transformers' `continue_final_message`."""
    text = final_message_text(messages).text
    full = template.render(messages, tools=tools, add_generation_prompt=False, **variables)
    before = template.render(messages[:-1], tools=tools, add_generation_prompt=False, **variables)
    return cut_in_final_turn(full, before, text).prompt


def final_message_text(messages: list) -> Prefill:
    """The text a continued final message ends with: its content, else its reasoning_content;
    InputError for a conversation that does not end with such a message."""
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        raise InputError("continue_final_message: the last message must be the assistant's "
                         "answer to continue")
    if last.get("tool_calls"):
        raise InputError("continue_final_message: the final message has tool_calls; a prefill "
                         "continues text or reasoning, not a call")
    for field_name in ("content", "reasoning_content"):
        text = last.get(field_name)
        if isinstance(text, list):  # (OpenAI's text parts)
            text = "".join(part.get("text", "") for part in text if isinstance(part, dict))
        if text is not None and not isinstance(text, str):
            raise InputError(f"continue_final_message: the final message's {field_name} must be "
                             "text")
        if text:
            return Prefill(text, field_name)
    raise InputError("continue_final_message: the final message has no text to continue (give "
                     "its content or reasoning_content, or leave it out to open a new answer)")


def _prefill_of(messages: list, protocol: runtime.Protocol) -> Prefill:
    """The text a continued final message ends with (final_message_text), which must not hold
    the call opener."""
    prefill = final_message_text(messages)
    opener = protocol.opener
    if opener and opener.strip() and opener.strip() in prefill.text:
        raise InputError(f"continue_final_message: the final message's {prefill.field} holds "
                         f"the call opener {opener.strip()!r}; a prefill continues text "
                         "or reasoning, not a call")
    return prefill


def _continued(template: ChatTemplate, spec: ProtocolSpec, messages: list, tools: list | None,
               variables: dict[str, Any], notes: list[str], prefill: str) -> tuple[str, str, str]:
    """(the prompt, the final turn's text in it, the prefill as the prompt ends with it): the
    conversation rendered whole without a generation prompt, cut after the final message's
    text, as transformers' `continue_final_message` cuts it (there, only the stripped text; here
    the text as given where the template writes it so). InputError where the final turn does
    not hold that text."""
    full, _ = _rendered(template, spec, messages, tools, variables, notes, generation=False)
    before, _ = _rendered(template, spec, messages[:-1], tools, variables, notes, generation=False)
    cut = cut_in_final_turn(full, before, prefill)
    if cut.trimmed:
        notes.append("the template trims the final message: the prompt ends with its text "
                     "stripped of the whitespace around it")
    return cut.prompt, cut.turn, cut.prefill


def _rendered(template: ChatTemplate, spec: ProtocolSpec, messages: list, tools: list | None,
              variables: dict[str, Any], notes: list[str],
              generation: bool = True) -> tuple[str, str]:
    """(the prompt, the history without the generation prompt), the conversation written down
    as the template reads one (probe.conversations.in_shape: a call's arguments as an object
    or as JSON text, tools with or without their wrapper, ...). A template that fails on a past
    call turn's null content is given "" there (as the probe's "empty content" shape), and a
    note says so."""
    messages, shaped_tools, shape_variables = in_shape(messages, tools, spec.shape)
    variables = {**shape_variables, **variables}

    def render(conversation: list) -> tuple[str, str]:
        history = template.render(conversation, tools=shaped_tools, add_generation_prompt=False,
                                  **variables)
        if not generation:
            return history, history
        return (template.render(conversation, tools=shaped_tools, add_generation_prompt=True,
                                **variables), history)

    try:
        return render(messages)
    except TemplateError as e:
        emptied = with_empty_content(messages)
        if e.limit or emptied == messages:
            raise
        rendered = render(emptied)
        note = ("a call turn's null content given to the template as \"\" (it reads that "
                "content as text)")
        if note not in notes:
            notes.append(note)
        return rendered


def _with_system_flag(messages: list, flag: str) -> list:
    if messages and isinstance(messages[0], dict) and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content') or ''}\n{flag}".strip()
        return [first] + messages[1:]
    return [{"role": "system", "content": flag}] + messages
