"""What one chat request becomes upstream: the prompt (rendered with the model's template,
thinking switched), the grammar (in the form the upstream takes: llama-server's fields with
their triggers, Lark, GBNF, or none), the stop strings, and the parser that reads the answer
from where the prompt leaves the model.

Synchronous and CPU-bound (template rendering, probing once per template, grammar building):
the app runs it in a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..bridge import Prompt, prompt_for
from ..bridge.grammar import GrammarForm, GrammarRequest, RequestGrammar, grammar_for
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
    # The tools are in the prompt whenever they are offered (with tool_choice "none" too: the
    # grammar, not the prompt, keeps the model from calling them).
    prompt = prompt_for(template, messages or request.messages, tools=request.tools,
                        thinking=request.thinking)
    spec = prompt.spec
    if request.tools and request.tool_choice.mode != "none" and spec.tool_calls is None:
        raise RequestError("tools", f"the model's template ({spec.family}) has no tool-call "
                                    "format: it cannot call tools")
    notes = list(prompt.notes)
    grammar = None
    if spec.tool_calls is not None and request.tools or request.schema is not None:
        if form is None:
            notes.append("no grammar: the upstream takes none, so tool_choice and "
                         "response_format are not enforced while generating (the answer is "
                         "still parsed and validated)")
        else:
            try:
                wanted = GrammarRequest(form, tools=request.tools, tool_choice=request.tool_choice,
                                        parallel=request.parallel_tool_calls, mode=prompt.mode,
                                        start=prompt.start, content_schema=request.schema,
                                        reasoning_closed=prompt.reasoning_closed)
                grammar = grammar_for(template, spec, wanted, check=False)
            except (ValueError, TypeError) as e:  # a schema the grammar cannot take
                raise RequestError("response_format" if request.schema is not None else "tools",
                                   str(e)) from e
            if grammar.fields.get("grammar_lazy"):
                notes.append("lazy grammar: free text until the call opener")
            else:
                notes.append("grammar from the first token"
                             + ("" if form == GrammarForm.LLAMA_REQUEST else f" ({form.value})"))
    stop = list(dict.fromkeys(prompt.stop + request.stop))
    return Plan(prompt, grammar, stop, request.tools, request.schema, request.tool_choice,
                request.calls, notes, list(grammar.warnings) if grammar is not None else [])
