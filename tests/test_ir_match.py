"""The IR matcher (tplparse.check.ir_match), the proof's grammar check where llama.cpp is not
installed, agrees with the two readings of the emitted GBNF: lark's (gbnf_lark) and the real
llama.cpp's (issue #32: a fast proof, kept honest).

Each case is a grammar and a text, accepted or refused; all three must say the same, and
say what the case expects. The cases: each IR construct alone (hand-written grammars), and,
on every proved corpus template, its own renders of the standard turns (accepted) and the
same renders broken (a marker cut short, a character dropped, text after the end, a tool
name changed: refused, or accepted, as the two GBNF readers say).
"""

from __future__ import annotations

import pytest

import tplparse
from tplparse.check import ir_match
from tplparse.check import llama as llama_check
from tplparse.check.gbnf_lark import GbnfAcceptor
from tplparse.check.outputs import mode_outputs
from tplparse.emit.gbnf import emit_gbnf
from tplparse.grammar import GrammarOptions, build
from tplparse.grammar.ir import (AnyChar, End, Grammar, Lit, Not, Ref, Rep, StringUntil, TextUntil, alt, chars, opt,
                                 seq)
from tplparse.probe import PLACEHOLDER_TOKENS

from conftest import CORPUS, needs_corpus, proved_corpus_stems
from tplparse.bridge import compile_in_memory


def readers():
    """(name, accepts(grammar IR, text)) for each reader here: the IR matcher, lark, llama.cpp."""
    found = [("ir", ir_match.accepts), ("lark", lambda g, text: GbnfAcceptor(emit_gbnf(g)).accepts(text))]
    if llama_check.available():
        found.append(("llama.cpp", lambda g, text: llama_check.checker().accepts(emit_gbnf(g), text)))
    return found


def grammar(body, **rules) -> Grammar:
    g = Grammar("root")
    for name, rule in rules.items():
        g.add(name.replace("_", "-"), rule)
    g.add("root", body)
    return g


STRING = StringUntil(chars('"\\\x00-\x1f', negate=True), (seq(Lit("\\"), alt(chars('"\\/bfnrt'), seq(
    Lit("u"), *[chars("0-9a-fA-F")] * 4))),), ("<|end|>",))
PYTHON_STRING = StringUntil(chars("'\\", negate=True), (seq(Lit("\\"), AnyChar()),), ("<|end|>",))
CASES = [
    # (grammar, text, accepted)
    (grammar(Lit("abc")), "abc", True),
    (grammar(Lit("abc")), "ab", False),
    (grammar(Lit("abc")), "abcd", False),
    (grammar(seq(Rep(chars("a-c"), 2, 3), Lit("x"))), "abx", True),
    (grammar(seq(Rep(chars("a-c"), 2, 3), Lit("x"))), "ax", False),
    (grammar(seq(Rep(chars("a-c"), 2, 3), Lit("x"))), "abcax", False),
    (grammar(seq(Rep(opt(Lit("a")), 0, 3), Lit("b"))), "aab", True),  # (an item that may be empty)
    (grammar(seq(Rep(chars("a-z", negate=True)), Lit("!"))), "12!", True),
    (grammar(seq(Rep(chars("a-z", negate=True)), Lit("!"))), "1a!", False),
    (grammar(alt(seq(Lit("a"), Lit("b")), seq(Lit("ab"), Lit("c")))), "abc", True),  # (not PEG's first choice)
    (grammar(seq(Rep(Lit("a")), Lit("a"))), "aaa", True),  # (a repetition gives back: not PEG's)
    (grammar(seq(TextUntil(("</t>",)), Lit("</t>"))), "x < y </ t</t>", True),
    (grammar(seq(TextUntil(("</t>",)), Lit("</t>"))), "x</t>y</t>", False),
    (grammar(seq(TextUntil(("</t>",)), Lit("</t"))), "ab</t", True),  # (a stop's prefix ends the text)
    (grammar(seq(TextUntil(()), End())), "anything at all", True),
    (grammar(seq(Not(Lit("a")), Lit("a"))), "a", True),  # (GBNF writes no lookahead: accepted)
    (grammar(seq(Lit("a"), End(), opt(Lit("b")))), "ab", True),  # (GBNF writes End as nothing: the builder puts it last)
    (grammar(seq(Lit("{"), Ref("item"), Rep(seq(Lit(","), Ref("item"))), Lit("}")), item=chars("0-9")), "{1,2,3}", True),
    (grammar(seq(Lit("{"), Ref("item"), Rep(seq(Lit(","), Ref("item"))), Lit("}")), item=chars("0-9")), "{1,,3}", False),
    (grammar(seq(Lit("("), opt(Ref("root")), Lit(")"))), "((()))", True),  # (a rule within itself)
    (grammar(seq(Lit("("), opt(Ref("root")), Lit(")"))), "(()", False),
    (grammar(seq(Lit('"'), STRING, Lit('"'))), '"a <b> \\u003c|end|> \\"q\\""', True),
    (grammar(seq(Lit('"'), STRING, Lit('"'))), '"a<|end|>b"', False),
    (grammar(seq(Lit('"'), STRING, Lit('"'))), '"a<|end|"', True),
    (grammar(seq(Lit('"'), STRING, Lit('"'))), '"tab\there"', False),  # (a raw control character)
    (grammar(seq(Lit("'"), PYTHON_STRING, Lit("'"))), "'\\<|end|>'", False),  # (a backslash, then the stop)
    (grammar(seq(Lit("'"), PYTHON_STRING, Lit("'"))), "'\\<|end|'", True),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_each_construct_reads_the_same_in_the_ir_lark_and_llama_cpp(case):
    g, text, expected = CASES[case]
    said = {name: accepts(g, text) for name, accepts in readers()}
    assert said == dict.fromkeys(said, expected), (emit_gbnf(g), text)


def broken(text: str, marker_edges: list[int]) -> list[str]:
    """A render broken as a model or a cut breaks it: the last character dropped, a marker's
    character dropped, text after the end, the tool's name changed."""
    forms = [text[:-1], text + "}x"]
    forms += [text[:edge] + text[edge + 1:] for edge in marker_edges[:3]]
    if "get_weather" in text:
        forms.append(text.replace("get_weather", "get_weathe", 1))
    return [form for form in forms if form != text]


@needs_corpus
@pytest.mark.parametrize("stem", proved_corpus_stems())
def test_the_ir_matcher_reads_a_corpus_family_as_llama_cpp_does(stem):
    """Against llama.cpp where it is installed (CI), else lark's reading of the GBNF (its
    Earley parser takes seconds where llama.cpp and the IR matcher take milliseconds)."""
    template = tplparse.load(CORPUS / f"{stem}.jinja")
    template = template.with_tokens(**{k: v for k, v in PLACEHOLDER_TOKENS.items() if k not in template.named_tokens})
    spec, _ = compile_in_memory(template)
    grammars = {}
    for output in mode_outputs(template, spec):
        if output.start not in grammars:
            g = build(spec, GrammarOptions(start=output.start), template.special_tokens)
            gbnf = emit_gbnf(g)
            grammars[output.start] = (g, (lambda text, gbnf=gbnf: llama_check.checker().accepts(gbnf, text))
                                      if llama_check.available() else GbnfAcceptor(gbnf).accepts)
        g, gbnf_accepts = grammars[output.start]
        assert ir_match.accepts(g, output.text) and gbnf_accepts(output.text), output.label
        edges = [i for i, ch in enumerate(output.text) if ch in "<>[]|"]
        for text in broken(output.text, edges):
            assert ir_match.accepts(g, text) == gbnf_accepts(text), (output.label, text)
