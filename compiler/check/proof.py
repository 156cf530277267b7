"""The proof: a compiled parser reads back what its own template renders.

Each standard turn as a model would write it after the generation prompt of each mode the
template has (outputs.mode_outputs: the span of the template's render after that prompt, and
the message that render preserves) is fed to the family's parser, given that real prompt
(the parser decides from it where the output starts), one-shot and one character at a time,
and checked against the family's GBNF grammar for the mode's start state (llama.cpp when
llama-cpp-python is installed, else the IR matcher, check/ir_match.py); a turn is proved when
all of them agree. The deviated forms of each proved turn (deviations: what models and engines
write instead) are read back too, and reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .. import runtime
from ..emit.gbnf import emit_gbnf
from ..grammar import GrammarOptions, build
from ..grammar.ir import Grammar
from ..grammar.reading import reading_tables
from ..probe.overrides import Override
from ..source.loader import NAMED_TOKENS, TOKEN_LISTS
from ..source.template import ChatTemplate
from ..spec import ProtocolSpec
from . import ir_match
from . import llama as llama_check
from .deviations import deviations
from .fields import involved_fields
from .notation import notation_defects, restated_notation
from .outputs import STANDARD_TOOLS, ModelOutput, difference, mode_outputs, readable

# --- the proof --------------------------------------------------------------------------


@dataclass
class TurnProof:
    turn: str
    proved: bool
    detail: str = ""  # why not; or, when proved, what the template loses ("lossy: ...")
    text: str = ""
    # not proved: the spec fields involved (check.fields)
    fields: list[str] = field(default_factory=list)


@dataclass
class Proof:
    family: str
    turns: list[TurnProof]
    grammar_checker: str  # "llama.cpp", or "the IR matcher" where llama-cpp-python is not installed
    error: str = ""  # the template renders nothing to prove
    # deviated forms of the proved turns (tplparse.check.deviations) read back as their render
    tolerated: int = 0
    # those that were not: rule, turn, what differed
    not_tolerated: list[str] = field(default_factory=list)
    # not proved: what the renders write against their own notation, with the way forward
    # (check.notation)
    defects: list[str] = field(default_factory=list)
    # the call turns read as a user's override states their notation (check.notation), or ""
    restated: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.turns) and all(t.proved for t in self.turns)

    @property
    def unproved(self) -> list[TurnProof]:
        return [t for t in self.turns if not t.proved]

    def table(self) -> str:
        lines = [f"proof of {self.family}: each standard turn the template renders, read back by "
                 "the parser (one-shot and one character at a time) and accepted by the GBNF "
                 f"grammar ({self.grammar_checker})"]
        if self.error:
            lines.append(f"  {self.error}")
        width = max([len(t.turn) for t in self.turns] + [4]) + 2
        if self.turns:
            lines.append(f"  {'turn':<{width}}result")
        for t in self.turns:
            result = ("proved" + (f" (lossy: {t.detail})" if t.detail else "")) if t.proved \
                else f"NOT PROVED: {t.detail}"
            result += f" [spec fields: {', '.join(t.fields)}]" if t.fields else ""
            lines.append(f"  {t.turn:<{width}}{result}")
        total = self.tolerated + len(self.not_tolerated)
        if total:
            lines.append(f"  tolerance: {self.tolerated} of {total} deviated forms of these "
                         "turns (what models and engines write instead: docs/tolerance.md) "
                         "read back as their render")
            lines += [f"    not read back: {problem}" for problem in self.not_tolerated]
        lines += [f"  {defect}" for defect in self.defects]
        lines += [f"  {self.restated}"] if self.restated else []
        return "\n".join(lines) + "\n"


def _grammar_acceptor():
    """(the checker's name, accepts(grammar, text)): llama.cpp's own grammar engine on the
    emitted GBNF where it is installed, else the IR matcher on the grammar it was emitted from."""
    if llama_check.available():
        emitted: dict[int, tuple[Grammar, str]] = {}

        def accepts(grammar: Grammar, text: str) -> bool:
            if id(grammar) not in emitted:
                # (the grammar kept: its id stays its own)
                emitted[id(grammar)] = (grammar, emit_gbnf(grammar))
            return llama_check.checker().accepts(emitted[id(grammar)][1], text)

        return "llama.cpp", accepts
    return "the IR matcher", ir_match.accepts


def _stream_one_character(protocol, text: str, start=None, finish_reason: str = "stop",
                          prompt=None) -> dict:
    parser = runtime.StreamParser(protocol, tools=STANDARD_TOOLS, start=start,
                                  generation_prompt=prompt)
    for ch in text:
        parser.feed(ch)
    parser.end(finish_reason)
    return parser.message


def prove(template: ChatTemplate, spec: ProtocolSpec, grammars: bool = True,
          override: Override | None = None) -> Proof:
    """Render the standard turns and read each back (see the module docstring). `override`:
    the user's, applied to `spec`; where it states a notation the renders break
    (check.notation), the call turns are read as the notation writes them."""
    protocol = runtime.Protocol(reading_tables(spec, template.special_tokens))
    checker, accepts = _grammar_acceptor() if grammars else ("not checked", None)
    outputs = mode_outputs(template, spec)
    nothing = nothing_to_prove(spec, outputs)
    if nothing:
        return Proof(spec.family, [], checker, error=nothing)
    restated = restated_notation(template, spec, override)
    if restated is not None:
        outputs = [restated.in_notation(output, spec) for output in outputs]
    grammars_by_start: dict = {}
    results = []
    tolerance: list[str] = []
    for output in outputs:
        one_shot = runtime.parse(protocol, output.text, tools=STANDARD_TOOLS,
                                 generation_prompt=output.prompt)
        problems = []
        rejected = False
        if one_shot["errors"]:
            problems.append("the parser reports "
                            + "; ".join(f"{e['kind']}: {e['message']}" for e in one_shot["errors"]))
        elif readable(one_shot) != output.expected:
            problems.append("the parser reads " + difference(output.expected, readable(one_shot)))
        if not problems and _stream_one_character(protocol, output.text,
                                                  prompt=output.prompt) != one_shot:
            problems.append("fed one character at a time, the parser reads a different message")
        if not problems and accepts is not None:
            if output.start not in grammars_by_start:
                grammars_by_start[output.start] = build(spec, GrammarOptions(start=output.start),
                                                        template.special_tokens)
            rejected = not accepts(grammars_by_start[output.start], output.text)
            if rejected:
                problems.append(f"the GBNF grammar ({checker}) does not accept it")
        detail = "; ".join(problems) if problems else "; ".join(output.lossy)
        fields = involved_fields(spec, output.expected, readable(one_shot), one_shot["errors"],
                                 output.mode, rejected) if problems else []
        results.append(TurnProof(output.label, not problems, detail, output.text, fields))
        if not problems:
            tolerance.extend(_deviations_read_back(protocol, output, spec, one_shot))
    failed = [problem for problem in tolerance if problem]
    proved = all(t.proved for t in results)
    return Proof(spec.family, results, checker, tolerated=len(tolerance) - len(failed),
                 not_tolerated=failed,
                 defects=[] if proved else [d.message() for d in notation_defects(spec)],
                 restated=restated.note(spec) if restated is not None else "")


# The probe's warning that says why no conversation rendered (probe/derive.py).
_NO_RENDER_WARNING = "no probe turn renders: "


def nothing_to_prove(spec: ProtocolSpec, outputs: list[ModelOutput]) -> str:
    """Why the template's renders leave nothing to prove a parser on, with the cause the
    probe saw (what each render raised: the sandbox's refusal, the template's exception, the
    variable it lacks); "" when there is something. The one gate of compile, probe, export
    and build: they refuse alike, for the same words."""
    if not outputs:
        causes = [w[len(_NO_RENDER_WARNING):] for w in spec.warnings
                  if w.startswith(_NO_RENDER_WARNING)]
        return "the template renders none of the standard turns" + \
            (f" ({causes[0]}{_way_forward(causes[0])})" if causes and causes[0] else "")
    if not any(_holds_words(o.expected) for o in outputs):
        return ("the template renders no assistant turn (no render holds the assistant's words: "
                "its content, reasoning or calls; the template writes no assistant message, or "
                "writes it only as something else)")
    return ""


# Jinja's words for a variable the render was not given.
_UNDEFINED = re.compile(r"'(\w+)' is undefined")


def _way_forward(cause: str) -> str:
    """What to give where the renders lack a variable that a model's tokenizer supplies (a
    bare .jinja gives none: `additional_special_tokens[1]`, `unk_token`): "" for other causes.
    (bos_token and eos_token are never lacking: the probe gives stand-ins.)"""
    lacking = [name for name in dict.fromkeys(_UNDEFINED.findall(cause))
               if name in TOKEN_LISTS or name in NAMED_TOKENS]
    if not lacking:
        return ""
    names = " and ".join(lacking)
    return (f"; it reads {names} from the model's tokenizer, which a bare template does not "
            "give: compile the model's tokenizer_config.json or its folder, which sets it as "
            "transformers 4 did")


def _holds_words(expected: dict) -> bool:
    """Whether a turn's expected message keeps any of what the assistant wrote."""
    return bool(expected["content"] or expected["reasoning_content"] or expected["tool_calls"])


def _deviations_read_back(protocol, output: ModelOutput, spec: ProtocolSpec,
                          canonical: dict) -> list[str]:
    """For each deviated form of a proved turn: "" when it reads back as the render does (one-
    shot and one character at a time), else what differed."""
    found = []
    for deviation in deviations(output, spec):
        message = runtime.parse(protocol, deviation.text, tools=STANDARD_TOOLS,
                                start=deviation.start, finish_reason=deviation.finish_reason)
        got: object
        want: object
        got, want = (message, canonical) if deviation.same_ids \
            else (_without_ids(message), _without_ids(canonical))
        if deviation.expected != output.expected:
            # (a deviation that adds to the turn: a preamble, a call)
            got, want = (readable(message), message["errors"]), (deviation.expected, [])
        what = f"{deviation.rule} ({', '.join(deviation.eaten)}), {output.label}"
        if got != want:
            errors = "; ".join(f"{e['kind']}: {e['message']}" for e in message["errors"])
            found.append(f"{what}: "
                         + (errors or difference(readable(canonical), readable(message))))
        elif _stream_one_character(protocol, deviation.text, deviation.start,
                                   deviation.finish_reason) != message:
            found.append(f"{what}: fed one character at a time, the parser "
                         "reads a different message")
        else:
            found.append("")
    return found


def _without_ids(message: dict) -> dict:
    return {**message, "tool_calls": [{**c, "id": None} for c in message["tool_calls"]]}


__all__ = ["Proof", "TurnProof", "nothing_to_prove", "prove"]
