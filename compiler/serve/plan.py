"""What one chat request becomes upstream: the prompt (rendered with the model's template,
thinking switched), the constraint (grammar and triggers, in llama-server's fields), the stop
strings, and the parser that reads the answer from where the prompt leaves the model.

Synchronous and CPU-bound (template rendering, probing once per template, grammar building):
the app runs it in a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..bridge import Prompt, prompt_for
from ..bridge.grammar import GrammarForm, grammar_for
from ..grammar import GrammarOptions
from ..source import ChatTemplate
from .requests import ChatRequest, RequestError


@dataclass
class Plan:
    prompt: Prompt
    constraint: dict  # llama-server's grammar fields ({} when nothing constrains the output)
    stop: list[str]
    tools: list[dict] | None
    schema: dict | None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # schema keywords the grammar does not enforce
    prompt_tokens: int = 0  # counted by the upstream before generating (set by the app; 0 where the prompt surely fits)


def plan(template: ChatTemplate, request: ChatRequest, messages: list[dict] | None = None) -> Plan:
    """The plan for `request` (for `messages` instead of its own, on a retry)."""
    # The tools are in the prompt whenever they are offered (with tool_choice "none" too: the
    # grammar, not the prompt, keeps the model from calling them).
    prompt = prompt_for(template, messages or request.messages, tools=request.tools, thinking=request.thinking)
    spec = prompt.spec
    if request.tools and request.tool_choice.mode != "none" and spec.tool_calls is None:
        raise RequestError("tools", f"the model's template ({spec.family}) has no tool-call format: it cannot call tools")
    notes = list(prompt.notes)
    options = GrammarOptions(tools=request.tools, tool_choice=request.tool_choice, parallel=request.parallel_tool_calls,
                             mode=prompt.mode, start=prompt.start, content_schema=request.schema,
                             reasoning_closed=prompt.reasoning_closed)
    constraint: dict = {}
    if spec.tool_calls is not None and request.tools or request.schema is not None:
        try:
            constraint = grammar_for(template, spec, options, GrammarForm.LLAMA_REQUEST, check=False).fields
        except (ValueError, TypeError) as e:  # a schema the grammar cannot take
            raise RequestError("response_format" if request.schema is not None else "tools", str(e)) from e
        notes.append("lazy grammar: free text until the call opener" if constraint.get("grammar_lazy")
                     else "grammar from the first token")
    stop = list(dict.fromkeys(prompt.stop + request.stop))
    return Plan(prompt, constraint, stop, request.tools, request.schema, notes, list(options.warnings))
