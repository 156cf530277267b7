"""What one chat request becomes upstream: the prompt (rendered with the model's template,
thinking switched), the grammar (in the form the upstream takes: llama-server's fields with
their triggers, Lark, GBNF, or none), the stop strings, and the parser that reads the answer
from where the prompt leaves the model.

Synchronous and CPU-bound (template rendering, probing once per template, grammar building).
A `Planner` plans for one served template in steps the app can run where they cost least: the
prompt (quick for a short conversation), then the grammar, which takes milliseconds to build
(4 to 12 for five tools) and is remembered, since an agent sends the same tools every turn.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from ..bridge import Prompt, compile_in_memory, prompt_for
from ..bridge.grammar import GrammarForm, GrammarRequest, RequestGrammar, grammar_for
from ..errors import InputError
from ..grammar import ToolChoice
from ..source import ChatTemplate
from .requests import ChatRequest, RequestError


@dataclass
class Plan:
    prompt: Prompt
    # in the upstream's form (None when nothing constrains the output)
    grammar: RequestGrammar | None
    stop: list[str]
    tools: list[dict] | None
    schema: dict | None
    # the request's tool_choice (checked after generation; the grammar enforces it where there is
    # one)
    choice: ToolChoice
    calls: str = "deltas"  # the parser's stream of calls (the request's `calls`)
    notes: list[str] = field(default_factory=list)
    # schema keywords the grammar does not enforce
    warnings: list[str] = field(default_factory=list)
    # counted by the upstream before generating (set by the app; 0 where the prompt surely fits)
    prompt_tokens: int = 0
    # the upstream's name for its model (set by the app, for transcripts)
    upstream_model: str | None = None


def plan(template: ChatTemplate, request: ChatRequest, messages: list[dict] | None = None,
         form: GrammarForm | None = GrammarForm.LLAMA_REQUEST) -> Plan:
    """The plan for `request` (for `messages` instead of its own, on a retry), its grammar in
    `form` (None: the upstream takes no grammar; what it would have enforced is said in the
    notes, and checked after generation as always)."""
    return Planner(template, form).plan(request, messages)


# Grammars a planner remembers: tool sets and schemas in use at once, with room to spare.
REMEMBERED_GRAMMARS = 64

# A conversation of at most this many characters renders in about 2 ms here (rendering costs
# about 0.35 ms per thousand characters): planned on the event loop, when its grammar is built.
QUICK_CHARACTERS = 6000


class Planner:
    """The plans for one template and one upstream's grammar form, in steps: `prompt`,
    `wanted` (the grammar the request needs, if any), `remembered` or `build` (the grammar),
    `finish`; `plan` runs them all. Safe to share between threads (a lock keeps the
    remembered grammars)."""

    def __init__(self, template: ChatTemplate, form: GrammarForm | None = GrammarForm.LLAMA_REQUEST,
                 remembered: int = REMEMBERED_GRAMMARS):
        self.template = template
        self.form = form
        self._grammars: OrderedDict[str, RequestGrammar] = OrderedDict()
        self._size = remembered
        self._lock = threading.Lock()

    def plan(self, request: ChatRequest, messages: list[dict] | None = None) -> Plan:
        """The whole plan (see `plan`)."""
        prompt = self.prompt(request, messages)
        wanted = self.wanted(request, prompt)
        grammar = None if wanted is None else self.remembered(wanted) or self.build(wanted)
        return self.finish(request, prompt, grammar)

    def prompt(self, request: ChatRequest, messages: list[dict] | None = None) -> Prompt:
        """The rendered prompt. The tools are in it whenever they are offered (with tool_choice
        "none" too: the grammar, not the prompt, keeps the model from calling them)."""
        try:
            prompt = prompt_for(self.template, messages or request.messages, tools=request.tools,
                                thinking=request.thinking,
                                continue_final_message=request.continue_final_message)
        except InputError as e:  # (a final message that cannot be continued)
            raise RequestError("messages", str(e)) from None
        if request.tools and request.tool_choice.mode != "none" and prompt.spec.tool_calls is None:
            raise RequestError("tools", f"the model's template ({prompt.spec.family}) has no "
                                        "tool-call format: it cannot call tools")
        return prompt

    def wanted(self, request: ChatRequest, prompt: Prompt) -> GrammarRequest | None:
        """The grammar the request needs (None: nothing to constrain, or an upstream that takes
        no grammar). A tool_choice the grammar cannot take is a RequestError."""
        if self.form is None or not (prompt.spec.tool_calls is not None and request.tools
                                     or request.schema is not None):
            return None
        try:
            return GrammarRequest(self.form, tools=request.tools, tool_choice=request.tool_choice,
                                  parallel=request.parallel_tool_calls, mode=prompt.mode,
                                  start=prompt.parser_start, content_schema=request.schema,
                                  reasoning_closed=prompt.reasoning_closed)
        except (ValueError, TypeError) as e:  # a tool_choice the grammar cannot take
            raise _refused(request.schema is not None, e) from e

    def remembered(self, wanted: GrammarRequest) -> RequestGrammar | None:
        """The grammar built before for an equal request (None: not built, or forgotten)."""
        key = _key(wanted)
        with self._lock:
            grammar = self._grammars.get(key)
            if grammar is not None:
                self._grammars.move_to_end(key)
        return grammar

    def build(self, wanted: GrammarRequest) -> RequestGrammar:
        """The grammar for `wanted`, built and remembered (a schema the grammar cannot take is
        a RequestError)."""
        spec, _ = compile_in_memory(self.template)
        try:  # (unchecked: the engine reads it anyway, and refuses what it cannot take)
            grammar = grammar_for(self.template, spec, wanted, check=False)
        except (ValueError, TypeError) as e:  # a schema the grammar cannot take
            raise _refused(wanted.content_schema is not None, e) from e
        with self._lock:
            self._grammars[_key(wanted)] = grammar
            while len(self._grammars) > self._size:
                self._grammars.popitem(last=False)
        return grammar

    def finish(self, request: ChatRequest, prompt: Prompt, grammar: RequestGrammar | None) -> Plan:
        """The plan from its prompt and grammar: the notes, and the stop strings."""
        notes = list(prompt.notes)
        if self.form is None and (prompt.spec.tool_calls is not None and request.tools
                                  or request.schema is not None):
            notes.append("no grammar: the upstream takes none, so tool_choice and "
                         "response_format are not enforced while generating (the answer is "
                         "still parsed and validated)")
        elif grammar is not None and grammar.fields.get("grammar_lazy"):
            notes.append("lazy grammar: free text until the call opener")
        elif grammar is not None:
            notes.append("grammar from the first token"
                         + ("" if self.form == GrammarForm.LLAMA_REQUEST
                            else f" ({grammar.form.value})"))
        stop = list(dict.fromkeys(prompt.stop + request.stop))
        return Plan(prompt, grammar, stop, request.tools, request.schema, request.tool_choice,
                    request.calls, notes, list(grammar.warnings) if grammar is not None else [])


def _key(wanted: GrammarRequest) -> str:
    """Equal for equal grammar requests: the fields' repr (JSON-shaped data, its key order
    kept, since the order of a schema's properties is the order the grammar writes them)."""
    return repr((wanted.form, wanted.tools, wanted.tool_choice, wanted.parallel,
                 wanted.content_schema, wanted.open_objects, wanted.mode, wanted.start,
                 wanted.reasoning_closed))


def _refused(schema: bool, error: Exception) -> RequestError:
    return RequestError("response_format" if schema else "tools", str(error))


def quick(messages: list[dict]) -> bool:
    """Whether a conversation renders in about 2 ms here (QUICK_CHARACTERS)."""
    return _characters(messages, QUICK_CHARACTERS) <= QUICK_CHARACTERS


def _characters(value: object, limit: int) -> int:
    """The characters of the strings in `value` (JSON-shaped), counted up to past `limit`."""
    if isinstance(value, str):
        return len(value)
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    total = 0
    for item in items:
        total += _characters(item, limit - total)
        if total > limit:
            break
    return total
