"""What llama.cpp's server takes for one request: grammar, laziness, triggers, preserved tokens.

With `tool_choice="auto"` the grammar is lazy: the model writes freely until it writes the
call opener (the trigger), and from there on the grammar holds it to the calls section.
A format without an opener marker (bare JSON calls) gets a pattern trigger on the start of
a call instead. With "required" or a tool name, the grammar is strict from the first token;
so is it with "auto" where nothing opens the calls (the turn's first word is a call's name
unless it is content's prefix, `all\n`): the parser reads free text there as calls.

The fields are in llama-server's own format, to be posted unchanged: a trigger's type is the
number of llama.cpp's `common_grammar_trigger_type` (the server refuses a name), and a trigger
word is among `preserved_tokens` (the server refuses a word that is one token of the model's
vocabulary and not preserved; an ordinary token there only changes how it is detokenized).
"""

from __future__ import annotations

import re

from ..grammar import GrammarOptions, build
from ..grammar.build import calls_from_marker
from ..grammar.ir import Alt, Lit, Ref, Seq, Visitor, alt, children, covers, opt, seq
from ..grammar.json_values import add_ws
from ..grammar.reading import (
    call_opener,
    calls_without_opener,
    content_may_follow_calls,
    section_with_content,
)
from ..probe.spans import Boundaries
from ..spec import ProtocolSpec
from .gbnf import emit_gbnf

# llama.cpp's common_grammar_trigger_type (common/common.h): TOKEN 0, WORD 1, PATTERN 2,
# PATTERN_FULL 3. A word or a pattern (searched anywhere in the output) is what a lazy
# grammar takes over at; the grammar then reads from the start of the match.
TRIGGER_WORD = 1
TRIGGER_PATTERN = 2


def lazy_grammar(spec: ProtocolSpec, options: GrammarOptions, special_tokens: tuple[str, ...] = ()):
    """The grammar from a trigger on: the calls section, then the end of turn. Each way the
    parser starts reading calls is a trigger, and a way on from it here: the call opener; a
    call's own marker where the parser reads a call written without the opener
    (`<function=…` for `<tool_call>\n<function=…`), the section then as the template writes it;
    a marker the template writes in front of another kind of call (`<|python_tag|>`), a
    call of this format after it. (Free text that starts a call the parser reads but no
    trigger caught would be read as a broken call, not as content.)"""
    assert spec.tool_calls is not None  # (a lazy grammar waits for calls)
    g = build(spec, options, special_tokens)
    ws = add_ws(g)
    end = Ref("end-of-turn") if g.has("end-of-turn") else None
    after = Ref("content-text") if content_may_follow_calls(spec) and g.has("content-text") else ws
    ending = opt(end) if end is not None else None
    forms = [seq(Ref("tool-calls"), after, ending)]
    # A rendered layout that starts with the opener and holds calls (text inside the
    # section's markers, say) is a way on from the trigger too; one that starts elsewhere
    # (with reasoning text, or `</think>`) is not: from the opener, its free text would
    # take any call the model writes.
    boundaries = Boundaries(special_tokens)
    opener = call_opener(spec, boundaries).strip()
    forms += [seq(Ref(name), ending) for name, rule in g.rules.items()
              if name.startswith("form-") and _holds_calls(g, rule.body)
              and _opens_with(g, rule.body, opener)]
    marker = _own_marker(spec, boundaries)
    if marker:
        forms.append(seq(calls_from_marker(g, spec, options, marker), after, ending))
    forms += [seq(Lit(wrapper), ws, Ref("tool-calls"), after, ending)
              for wrapper in spec.tool_calls.wrappers]
    kept: list = []
    for form in forms:  # (each once: a form another covers only adds work to the sampler)
        if not any(covers(g, other, form) for other in kept):
            kept.append(form)
    g.add("root", alt(*kept), "from the trigger on")
    return g


def _own_marker(spec: ProtocolSpec, boundaries: Boundaries) -> str:
    """The call's own marker, where the parser reads a call written without the opener ("" if
    none)."""
    bare = calls_without_opener(spec, boundaries, call_opener(spec, boundaries))
    return bare["opener"] if bare else ""


class _HoldsCalls(Visitor):
    """Whether a node refers to the calls (the calls section, or the calls without it) directly."""

    def visit_Ref(self, node: Ref) -> bool:
        return node.name in ("tool-calls", "call-list")

    def generic_visit(self, node) -> bool:
        return any(self.visit(child) for child in children(node))


def _holds_calls(g, node) -> bool:
    return _HoldsCalls().visit(node)


def _opens_with(g, node, opener: str) -> bool:
    """Whether every text of `node` starts with `opener` (whitespace before it aside): its
    first item is the calls section, or a literal that starts the opener or that it starts."""
    if isinstance(node, Seq):
        items = [item for item in node.items if item != Ref("ws")]
        return bool(items) and _opens_with(g, items[0], opener)
    if isinstance(node, Alt):
        return all(_opens_with(g, item, opener) for item in node.items)
    if isinstance(node, Ref):
        return node.name in ("tool-calls", "call-list") \
            or (g.has(node.name) and _opens_with(g, g.rules[node.name].body, opener))
    if isinstance(node, Lit):
        text = node.text.strip()
        return bool(text) and (text.startswith(opener) or opener.startswith(text))
    return False


def llama_request(spec: ProtocolSpec, options: GrammarOptions,
                  special_tokens: tuple[str, ...] = ()) -> dict:
    if spec.tool_calls is None and options.content_schema is None:
        raise ValueError("this template has no tool-call format and no JSON schema was "
                         "given: nothing to constrain")
    boundaries = Boundaries(special_tokens)
    request: dict = {}
    lazy = is_lazy(spec, options, boundaries)
    preserved = preserved_tokens(spec, special_tokens)
    if lazy:
        grammar = lazy_grammar(spec, options, special_tokens)
        triggers = _triggers(spec, options, boundaries)
        request["grammar_triggers"] = triggers
        # (the trigger words, and an opener a pattern triggers on: kept as the text it is)
        words = [t["value"] for t in triggers if t["type"] == TRIGGER_WORD]
        opener = call_opener(spec, boundaries)
        if not opener.startswith(("{", "[")):
            words.append(opener)
        preserved += [w for w in dict.fromkeys(words) if w not in preserved]
    else:
        grammar = build(spec, options, special_tokens)
    return {
        "grammar": emit_gbnf(grammar),
        "grammar_lazy": lazy,
        **request,
        "preserved_tokens": preserved,
    }


def is_lazy(spec: ProtocolSpec, options: GrammarOptions, boundaries: Boundaries) -> bool:
    """Whether `tool_choice=auto` gets a lazy grammar: only where a marker opens the calls, so
    that the free text before it reads as content. Without one (the turn's first word is a
    call's name unless it is content's prefix, `all\n`), the parser reads free text as calls,
    and the grammar holds the whole turn from the first token."""
    return (spec.tool_calls is not None and options.choice.mode == "auto"
            and options.content_schema is None
            and bool(call_opener(spec, boundaries)))


def _triggers(spec: ProtocolSpec, options: GrammarOptions, boundaries: Boundaries) -> list[dict]:
    """Where the lazy grammar takes over: wherever the parser starts reading calls
    (lazy_grammar)."""
    assert spec.tool_calls is not None  # (a lazy grammar waits for calls)
    markers = [_own_marker(spec, boundaries), *spec.tool_calls.wrappers]
    return [_trigger(spec, options, boundaries)] + [_word_or_pattern(m.strip()) for m in markers
                                                    if m.strip()]


def _word_or_pattern(text: str) -> dict:
    """A trigger on `text`: a word, or a pattern for text that opens a JSON value (a word there
    would have to be a preserved token: `{` and `[` are single tokens of most vocabularies)."""
    if text.startswith(("{", "[")):
        return {"type": TRIGGER_PATTERN, "value": re.escape(text)}
    return {"type": TRIGGER_WORD, "value": text}


def _trigger(spec: ProtocolSpec, options: GrammarOptions, boundaries: Boundaries) -> dict:
    """Where the lazy grammar takes over: the call opener, or the start of a call."""
    tc = spec.tool_calls
    assert tc is not None  # (a lazy grammar waits for calls)
    if tc.section_start.strip():
        opener = call_opener(spec, boundaries)
        if not opener.lstrip().startswith(("{", "[")):
            return _opener_trigger(opener, _text_after(spec, opener), boundaries)
        return {"type": TRIGGER_PATTERN, "value": re.escape(tc.section_start.lstrip())}
    first = tc.call[0] if tc.call else ""
    if isinstance(first, str) and first.strip():
        opener = call_opener(spec, boundaries)
        if not opener.lstrip().startswith(("{", "[")):
            return _opener_trigger(opener, _text_after(spec, opener), boundaries)
        return {"type": TRIGGER_PATTERN, "value": re.escape(first.lstrip())}
    # The call starts with the tool's name: trigger on an offered name and what follows it.
    names = [(t.get("function") or t)["name"] for t in options.tools or []]
    following = next((p for p in tc.call[1:] if isinstance(p, str)), "")
    names_pattern = "|".join(re.escape(n) for n in names) if names else "[A-Za-z0-9_.-]+"
    return {"type": TRIGGER_PATTERN, "value": f"(?:{names_pattern}){re.escape(following)}"}


def _text_after(spec: ProtocolSpec, opener: str) -> str:
    """The fixed text the calls section writes right after its opener, up to its first slot
    (`\n[` after Falcon 3's `<tool_call>`; "" where a slot follows, `<function=NAME`, or
    content may, Llama 4's `<|python_start|>content<|python_end|>`)."""
    tc = spec.tool_calls
    assert tc is not None  # (a lazy grammar waits for calls)
    if section_with_content(spec) is not None:
        return ""
    written = ""
    for piece in [tc.section_start, *tc.call]:
        if not isinstance(piece, str):
            break
        written += piece
    written = written.lstrip()
    return written[len(opener):] if written.startswith(opener) else ""


def _opener_trigger(opener: str, after: str, boundaries: Boundaries) -> dict:
    r"""A trigger on the call opener. llama.cpp hands the grammar the rest of the token that
    completes a trigger too: an opener the model spells in pieces (no special token of its)
    may be completed by a token that goes on with other text, where the model only mentions
    the marker (`<tool_call` then `></`, copying a prompt's `<tool_call></tool_call>`), and
    the server fails the request. Such an opener triggers only with what the section writes
    after it, as written (the grammar takes exactly that): the whitespace, then its JSON
    value's first character or its next word (`<tool_call>\n\[`, `<tool_call>\n<function=`),
    as llama.cpp's own handlers trigger on `<tool_call>\s*{"name"`; a special token, or an
    opener a slot follows, is the word."""
    words = after.split()
    # (a JSON value's first character, or the next word: `<function=`, not its `<`, which
    # would also start the section's own closing tag)
    following = "" if not words else words[0][:1] if words[0][0] in "{[" else words[0]
    if opener in boundaries.special_tokens or not following:
        return {"type": TRIGGER_WORD, "value": opener}
    written = after[: after.index(following) + len(following)]
    return {"type": TRIGGER_PATTERN, "value": _literal_pattern(opener + written)}


# What a pattern trigger writes for a character that is not itself (ECMAScript's syntax, which
# llama.cpp's std::regex reads, and Python's alike): regex syntax escaped, control whitespace
# by name (not a backslash before a raw line break).
_PATTERN_CHARACTERS = {**{c: "\\" + c for c in "\\^$.|?*+()[]{}/"},
                       "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _literal_pattern(text: str) -> str:
    """A regex that matches `text` exactly."""
    return "".join(_PATTERN_CHARACTERS.get(c, c) for c in text)


def preserved_tokens(spec: ProtocolSpec, special_tokens: tuple[str, ...]) -> list[str]:
    """The format's markers that are special tokens (kept as text in the server's output)."""
    texts = [spec.content_start, spec.content_end, *spec.end_of_turn]
    if spec.reasoning:
        texts += [spec.reasoning.start, spec.reasoning.end]
    if spec.tool_calls:
        tc = spec.tool_calls
        texts += [tc.section_start, tc.section_end, tc.separator] \
            + [p for p in tc.call if isinstance(p, str)]
    found = []
    for token in special_tokens:
        if token.strip() and any(token in t for t in texts if t) and token not in found:
            found.append(token)
    return found


__all__ = ["TRIGGER_PATTERN", "TRIGGER_WORD", "llama_request", "lazy_grammar", "preserved_tokens"]
