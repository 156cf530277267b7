"""The grammar of one request: the one place the CLI (`tplparse gbnf` / `grammar`), `tplparse
serve` and the build get a grammar from, with its checks.

    grammar_for(template, spec, options, form)   the grammar IR built for the request's options,
                                                 emitted in `form`, checked, with its warnings
    spec_grammar(spec, options, form, tokens)    the same from a spec and the model's tokens
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

from ..check import llama as llama_check
from ..check import llguidance as llguidance_check
from ..check.gbnf_lark import parse_gbnf
from ..emit.gbnf import emit_gbnf
from ..emit.lark import emit_lark, lark_warnings
from ..emit.llama_request import llama_request
from ..grammar import GrammarOptions, build
from ..source.template import ChatTemplate
from ..spec import ProtocolSpec


class GrammarForm(str, Enum):
    """What the grammar is written as."""

    GBNF = "gbnf"  # llama.cpp's GBNF
    LARK = "lark"  # llguidance's Lark (vLLM, SGLang, llama.cpp's %llguidance)
    LLAMA_REQUEST = "llama-request"  # llama-server's request fields around a GBNF grammar


class GrammarRefused(ValueError):
    """A grammar the engine's own checker refuses (a tplparse bug, or a schema it cannot take)."""


@dataclass(frozen=True)
class RequestGrammar:
    """One request's grammar, as written and checked."""

    form: GrammarForm
    text: str  # the grammar
    fields: dict = field(default_factory=dict)  # llama-server's request fields (LLAMA_REQUEST), else {}
    warnings: tuple[str, ...] = ()  # what the grammar cannot hold of the request (schema keywords, …)


def grammar_for(template: ChatTemplate, spec: ProtocolSpec, options: GrammarOptions,
                form: GrammarForm = GrammarForm.GBNF, check: bool = True) -> RequestGrammar:
    """The grammar for a request with `options` on `template`'s `spec`, in `form`; with `check`,
    checked by the engine's own grammar reader where it is installed. A request the grammar
    cannot be built for is the builder's ValueError; a refused grammar is GrammarRefused."""
    return spec_grammar(spec, options, form, template.special_tokens, template.control_tokens, check)


def spec_grammar(spec: ProtocolSpec, options: GrammarOptions, form: GrammarForm = GrammarForm.GBNF,
                 special_tokens: tuple[str, ...] = (), control_tokens: tuple[str, ...] = (),
                 check: bool = True) -> RequestGrammar:
    """`grammar_for` from a spec and the model's special and control tokens alone (what it
    reads of the template)."""
    form = GrammarForm(form)
    if form == GrammarForm.LLAMA_REQUEST:
        fields = llama_request(spec, options, special_tokens)
        text, warnings = fields["grammar"], tuple(options.warnings)
    else:
        grammar = build(spec, options, special_tokens)
        fields = {}
        if form == GrammarForm.LARK:
            text, warnings = emit_lark(grammar, control_tokens), tuple(lark_warnings(grammar, options.warnings))
        else:
            text, warnings = emit_gbnf(grammar), tuple(options.warnings)
    grammar = RequestGrammar(form, text, fields, warnings)
    if check:
        checked(grammar, control_tokens)
    return grammar


def checked(grammar: RequestGrammar, control_tokens: tuple[str, ...] = ()) -> RequestGrammar:
    """`grammar`, once the engine's own reader of its form accepts it (GrammarRefused if not)."""
    if grammar.form == GrammarForm.LARK:
        check_lark(grammar.text, control_tokens)
    else:
        check_gbnf(grammar.text)
    return grammar


def check_gbnf(text: str) -> None:
    """llama.cpp's grammar parser accepts `text` (where llama-cpp-python is installed; tplparse's
    own GBNF reader always)."""
    parse_gbnf(text)
    if llama_check.available():
        ok, message = llama_check.checker().validate(text)
        if not ok:
            raise GrammarRefused(f"llama.cpp rejected the generated grammar (a tplparse bug, please report it): {message}")


def check_lark(text: str, control_tokens: tuple[str, ...] = ()) -> None:
    """llguidance compiles `text` (where it is installed)."""
    if llguidance_check.available():
        ok, message = llguidance_check.LarkChecker(control_tokens).validate(text)
        if not ok:
            raise GrammarRefused(f"llguidance rejects the grammar: {message} (a JSON Schema llguidance cannot compile, "
                                 "such as a dangling $ref or an unsupported pattern, is one cause; else a tplparse bug, "
                                 "please report it)")


__all__ = ["GrammarForm", "GrammarRefused", "RequestGrammar", "check_gbnf", "check_lark", "checked", "grammar_for", "spec_grammar"]
