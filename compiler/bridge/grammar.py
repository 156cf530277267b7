"""The grammar of one request: the one place the CLI (`tplparse gbnf` / `grammar`), `tplparse
serve` and the build get a grammar from, with its checks.

    GrammarRequest(form, tools, tool_choice, …)  what the grammar is for, named (frozen)
    grammar_for(template, spec, request)         the grammar IR built for the request, written
                                                 in its form, checked, with its warnings
    spec_grammar(spec, request, tokens)          the same from a spec and the model's tokens
    checked(grammar, control_tokens)             the same checks, on a grammar built unchecked
    check_gbnf(text)                             llama.cpp's own grammar parser accepts it
                                                 (tplparse's GBNF reader where llama.cpp is not
                                                 installed)
    check_lark(text, control_tokens)             llguidance compiles it (where installed)

A grammar a checker refuses is a `GrammarRefused`, naming the checker and what it said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..check import llama as llama_check
from ..check import llguidance as llguidance_check
from ..check.gbnf_lark import parse_gbnf
from ..emit.gbnf import emit_gbnf
from ..emit.lark import emit_lark, lark_warnings
from ..emit.llama_request import llama_request
from ..emit.peg import emit_peg
from ..grammar import GrammarOptions, ToolChoice, build
from ..source.template import ChatTemplate
from ..spec import ProtocolSpec, Start


class GrammarForm(str, Enum):
    """What the grammar is written as."""

    GBNF = "gbnf"  # llama.cpp's GBNF
    LARK = "lark"  # llguidance's Lark (vLLM, SGLang, llama.cpp's %llguidance)
    LLAMA_REQUEST = "llama-request"  # llama-server's request fields around a GBNF grammar
    PEG = "peg"  # tplparse's own PEG (grammars/<family>.peg; no engine reads it)


class GrammarRefused(ValueError):
    """A grammar the engine's own checker refuses (a tplparse bug, or a schema it cannot take)."""


@dataclass(frozen=True)
class GrammarRequest:
    """What a request's grammar is for, and the form it is written in: the one options object
    of the CLI's grammar commands, serve's plan and the build. Frozen: each build reads it
    into fresh GrammarOptions (`options()`), which collect that build's warnings. A
    tool_choice that is not one (tool_choice_of) is a ValueError here, before any build."""

    form: GrammarForm = GrammarForm.GBNF
    tools: list[dict] | None = None  # OpenAI tool definitions; None: any tool, any JSON
    tool_choice: str | dict | ToolChoice | None = None  # as GrammarOptions takes it
    parallel: bool = True  # several calls in one turn
    content_schema: dict | None = None  # structured output: the content is JSON of this schema
    open_objects: bool = False  # JSON Schema's own rule for undeclared properties
    mode: str = "default"  # the generation-prompt mode whose start state the output follows
    start: Start | str | None = None  # the start state, when the prompt says it (not the mode's)
    reasoning_closed: bool = False  # the prompt ends with a closed reasoning block

    def __post_init__(self) -> None:
        object.__setattr__(self, "form", GrammarForm(self.form))
        self.options()  # (a tool_choice GrammarOptions refuses is refused here)

    def options(self) -> GrammarOptions:
        """The grammar builder's options for one build."""
        return GrammarOptions(
            tools=self.tools, tool_choice=self.tool_choice, parallel=self.parallel, mode=self.mode,
            start=self.start, content_schema=self.content_schema,
            reasoning_closed=self.reasoning_closed, open_objects=self.open_objects)


@dataclass(frozen=True)
class RequestGrammar:
    """One request's grammar, as written and checked."""

    form: GrammarForm
    text: str  # the grammar
    # llama-server's request fields (LLAMA_REQUEST), else {}
    fields: dict[str, Any] = field(default_factory=dict)
    # what the grammar cannot hold of the request (schema keywords, …)
    warnings: tuple[str, ...] = ()


def grammar_for(template: ChatTemplate, spec: ProtocolSpec, request: GrammarRequest,
                check: bool = True) -> RequestGrammar:
    """The grammar for `request` on `template`'s `spec`; with `check`, checked by the engine's
    own grammar reader where it is installed. A request the grammar cannot be built for is
    the builder's ValueError; a refused grammar is GrammarRefused."""
    return spec_grammar(spec, request, template.special_tokens, template.control_tokens, check)


def spec_grammar(spec: ProtocolSpec, request: GrammarRequest, special_tokens: tuple[str, ...] = (),
                 control_tokens: tuple[str, ...] = (), check: bool = True) -> RequestGrammar:
    """`grammar_for` from a spec and the model's special and control tokens alone (what it
    reads of the template)."""
    options = request.options()
    fields: dict[str, Any] = {}
    if request.form == GrammarForm.LLAMA_REQUEST:
        fields = llama_request(spec, options, special_tokens)
        text, warnings = fields["grammar"], tuple(options.warnings)
    else:
        ir = build(spec, options, special_tokens)
        if request.form == GrammarForm.LARK:
            text = emit_lark(ir, control_tokens)
            warnings = tuple(lark_warnings(ir, options.warnings))
        elif request.form == GrammarForm.PEG:
            text, warnings = emit_peg(ir), tuple(options.warnings)
        else:
            text, warnings = emit_gbnf(ir), tuple(options.warnings)
    grammar = RequestGrammar(request.form, text, fields, warnings)
    if check:
        checked(grammar, control_tokens)
    return grammar


def checked(grammar: RequestGrammar, control_tokens: tuple[str, ...] = ()) -> RequestGrammar:
    """`grammar`, once the engine's own reader of its form accepts it (GrammarRefused if not;
    a PEG has no engine of its own: the proof reads it)."""
    if grammar.form == GrammarForm.LARK:
        check_lark(grammar.text, control_tokens)
    elif grammar.form != GrammarForm.PEG:
        check_gbnf(grammar.text)
    return grammar


def check_gbnf(text: str) -> None:
    """llama.cpp's grammar parser accepts `text` (where llama-cpp-python is installed; tplparse's
    own GBNF reader always)."""
    parse_gbnf(text)
    if llama_check.available():
        ok, message = llama_check.checker().validate(text)
        if not ok:
            raise GrammarRefused("llama.cpp rejected the generated grammar (a tplparse bug, please "
                                 f"report it): {message}")


def check_lark(text: str, control_tokens: tuple[str, ...] = ()) -> None:
    """llguidance compiles `text` (where it is installed)."""
    if llguidance_check.available():
        ok, message = llguidance_check.LarkChecker(control_tokens).validate(text)
        if not ok:
            raise GrammarRefused(f"llguidance rejects the grammar: {message} (a JSON Schema "
                                 "llguidance cannot compile, such as a dangling $ref or an "
                                 "unsupported pattern, is one cause; else a tplparse bug, please "
                                 "report it)")


__all__ = ["GrammarForm", "GrammarRefused", "GrammarRequest", "RequestGrammar", "check_gbnf",
           "check_lark", "checked", "grammar_for", "spec_grammar"]
