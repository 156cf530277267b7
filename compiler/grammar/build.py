"""From a ProtocolSpec to the grammar IR of a model's whole turn.

The grammar says what the model may write after the generation prompt:

    root            form end-of-turn? (end)     one alternative per form
    form            the generic form: reasoning? body, or a rendered turn layout
                    (form-N) for shapes the generic form does not cover
    reasoning       reasoning-start reasoning-text reasoning-end   (no start when the
                    prompt left reasoning open; a call opener may end it, by policy)
    body            content-text (tool-calls content-text?)?        ("auto")
    tool-calls      section start, call-list, section end
    tool-call       the spec's call layout: tool-name, arguments, call-id, call-index
    arguments       a JSON / Python object, or argument (separator argument)*

Literals tolerate whitespace differences (a run of whitespace in the template matches
any whitespace, or none), since models and templates disagree on it. With `tools`, tool
names are exactly the offered names and arguments follow each tool's JSON Schema (kv
formats type each value by its schema); without, any name and any JSON. An object whose
schema lists `properties` takes no other unless `additionalProperties` allows it (llama.cpp's
and OpenAI strict mode's convention; `open_objects`: JSON Schema's, see json_schema).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .. import runtime
from ..probe.markers import first_marker
from ..probe.spans import Boundaries
from ..spec import (
    ArgumentFormat,
    ArgumentStyle,
    Parallel,
    ProtocolSpec,
    SpecError,
    Start,
    ToolCallFormat,
    kv_parts,
    slot,
    sorted_keys,
)
from ..spec.encodings import json_type
from . import json_schema
from .ir import (
    Alt,
    AnyChar,
    Chars,
    End,
    Grammar,
    Lit,
    Node,
    Not,
    Ref,
    Rep,
    Seq,
    StringUntil,
    TextUntil,
    alt,
    chars,
    covers,
    opt,
    seq,
)
from .json_values import add_json, add_python_literal, add_ws
from .reading import content_may_follow_calls, cut_at_end, end_of_turn_markers, reading_tables
from .schema_check import subschemas

NAME_CHARS = chars("A-Za-z0-9_.-")
ID_CHARS = chars("A-Za-z0-9_-")


MODES = ("auto", "required", "none")


class ToolChoice(NamedTuple):
    """What the model may call: a mode (auto: text, calls or both; required: calls; none: no
    call), or mode "function" and the one tool it must call."""

    mode: str
    name: str | None = None


def tool_choice_of(value, tools: list[dict] | None) -> ToolChoice:
    """A tool_choice as it is given: None (not said: auto); a `ToolChoice`; OpenAI's object
    `{"type": "function", "function": {"name": ...}}`, which always names a tool; or a bare
    string, a mode word or else a tool's name. A bare mode word when a tool of `tools` has
    that name is ambiguous (does `none` mean no call, or a call of `none`?): ValueError."""
    if value is None:
        return ToolChoice("auto")
    if isinstance(value, ToolChoice):
        choice = value
    elif isinstance(value, dict):
        function = value.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if value.get("type", "function") != "function" or not isinstance(name, str):
            raise ValueError('a named tool_choice is {"type": "function", '
                             '"function": {"name": ...}}')
        choice = ToolChoice("function", name)
    elif isinstance(value, str):
        if value in MODES and value in _tool_names(tools):
            raise ValueError(f"tool_choice {value!r} is ambiguous: it is a mode and the name of a "
                             "tool; name the tool as "
                             f'{{"type": "function", "function": {{"name": "{value}"}}}} '
                             "to force it, or leave tool_choice unsaid for auto")
        choice = ToolChoice(value) if value in MODES else ToolChoice("function", value)
    else:
        raise ValueError(f"tool_choice must be a mode ({', '.join(MODES)}), a tool's name or a "
                         f"named function, not {value!r}")
    if choice.mode not in MODES + ("function",) \
            or (choice.mode == "function") != isinstance(choice.name, str):
        raise ValueError(f"tool_choice {choice!r} is neither a mode nor a named function")
    if choice.mode == "function" and tools is not None and choice.name not in _tool_names(tools):
        raise ValueError(f"tool_choice names {choice.name!r}, which is not among the tools")
    return choice


def _tool_names(tools: list[dict] | None) -> set[str]:
    return {_tool_name(t) for t in tools or [] if isinstance(t, dict)}


@dataclass
class GrammarOptions:
    tools: list[dict] | None = None  # OpenAI tool definitions; None: any tool, any JSON
    # None (auto) | auto | required | none | a tool's name | {"type": "function", "function":
    # {"name": ...}} | ToolChoice; read as `choice` (tool_choice_of: a bare mode word that is
    # also an offered tool's name is refused as ambiguous)
    tool_choice: str | dict | ToolChoice | None = None
    parallel: bool = True
    mode: str = "default"  # which generation-prompt mode (its start state) the output follows
    start: Start | str | None = None  # override the mode's start state
    content_schema: dict | None = None  # structured output: the content is JSON of this schema
    trailing_text: bool = False  # accept (and mark) text after the end of turn: for parsing
    # The prompt ends with a closed reasoning block (thinking off, by the template's switch or
    # by a prefill): the turn has no reasoning, and the block's opener is not text. (Also
    # for mode "no_thinking" when its prompt closes the block.) Only for generation: a
    # parsing grammar still reads a block the model opens anyway.
    reasoning_closed: bool = False
    # JSON Schema's own rule for undeclared properties (allowed unless additionalProperties is
    # false) instead of llama.cpp's / OpenAI strict mode's (none where `properties` are listed)
    open_objects: bool = False
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self):
        tool_choice_of(self.tool_choice, self.tools)  # (refused here, not halfway through a build)

    @property
    def choice(self) -> ToolChoice:
        """`tool_choice`, read (`tool_choice_of`)."""
        return tool_choice_of(self.tool_choice, self.tools)


def tolerant(text: str, ws: Ref) -> Node:
    """A literal whose whitespace at either end matches any (bounded) whitespace, or none, and
    whose whitespace inside is the template's own, character by character (the parser reads
    other whitespace there in some places and not in others: `invoke name` written
    `invoke\\tname`, a segment's `<|im_end|>\\n<|im_start|>` with a tab; a grammar lets through
    only what its parser reads back). (Written as one-character classes, not merged into the
    words around it: a grammar engine's lexer then cuts the literal where it did before.)"""
    parts: list[Node] = []
    runs = list(re.finditer(r"\s+|\S+", text))
    for i, run in enumerate(runs):
        piece = run.group()
        if not piece.isspace():
            parts.append(Lit(piece))
        elif i == 0 or i == len(runs) - 1:
            parts.append(ws)
        else:
            parts.extend(Chars(((ch, ch),)) for ch in piece)
    return seq(*parts)


def build(spec: ProtocolSpec, options: GrammarOptions | None = None,
          special_tokens: tuple[str, ...] = ()) -> Grammar:
    options = options or GrammarOptions()
    # the questions the runtime asks too, answered once
    reading = reading_tables(spec, special_tokens)
    g = Grammar(root="root")
    g.header = [
        f"tplparse grammar for {spec.template_name} (family {spec.family})",
        f"template sha256 {spec.template_sha256}",
    ]
    ws = add_ws(g)
    # Calls of any tool (tools None) are the generic grammar's; a structured answer (a content
    # schema) without tools offered is that answer alone, not JSON followed by made-up calls.
    tools_allowed = (spec.tool_calls is not None and options.choice.mode != "none"
                     and not (options.content_schema is not None and options.tools is None))
    tool_calls = reading["tool_calls"]
    opener = tool_calls["opener"] if tools_allowed and tool_calls is not None else ""

    # End of turn.
    end_markers = reading["end_of_turn"]
    end = None
    if end_markers:
        end = g.add("end-of-turn", alt(*[Lit(m) for m in end_markers]),
                    "a marker that ends the turn")

    # Tool calls.
    calls = None
    if tools_allowed and spec.tool_calls is not None:
        calls = _add_tool_calls(g, spec.tool_calls, options, ws,
                                cut_at_end(spec.tool_calls.section_end, end_markers))

    # Content: text in which nothing the parser reads as something else occurs (the runtime's
    # own stops: the turn's end, a call's opener, bare too, a wrapper, a segment's end, ...),
    # so that what the grammar lets through is read back as the text it is.
    protocol = runtime.Protocol(reading)
    # (in a turn of headed messages, a body ends where the runtime ends one: its end, a call's
    # end, the next header)
    bodies = protocol.messages.body_stops if protocol.messages is not None else ()
    content_stops = list(dict.fromkeys((*protocol.content_stops, *bodies)))
    start_state, continued = _start_of(spec, options)
    closed = _reasoning_closed(spec, options, start_state) or (
        continued and start_state == Start.CONTENT and spec.reasoning is not None
        and bool(spec.reasoning.end))
    if closed and spec.reasoning is not None and spec.reasoning.start:
        # After a closed block, the block's opener is not text either: a model that writes it
        # anyway is thinking again, as content, until its budget is gone.
        content_stops.append(spec.reasoning.start)
    if options.content_schema is not None:
        value = json_schema.add_schema(g, options.content_schema, "content-json", options.warnings,
                                       open_objects=_objects_open(options))
        content = g.add("content-text", seq(ws, value, ws),
                        "the answer: JSON of the requested schema")
    else:
        content = g.add("content-text", TextUntil(tuple(content_stops)),
                        "visible text, up to a call or the end")
    answer_begun = continued and start_state == Start.CONTENT
    if answer_begun and spec.content_end:
        # (the prompt wrote the wrapper's opener, if any: the answer it began goes on inside it)
        content = g.add("content", seq(content, opt(tolerant(spec.content_end, ws))),
                        "the answer the prompt began, continued")
    elif spec.content_start and not answer_begun:
        wrapped = seq(tolerant(spec.content_start, ws), content,
                      opt(tolerant(spec.content_end, ws)) if spec.content_end else None)
        content = g.add("content", alt(wrapped, content),
                        "content, in its wrapper when the model writes one")

    body: Node
    if calls is None:
        body = content
    elif answer_begun and not opener:
        body = _continued_without_opener(g, reading, options, end_markers, calls)
    elif options.choice.mode == "auto" and opener:
        after = content if content_may_follow_calls(spec) else ws
        segment = reading["segments"]
        if segment and not segment["calls"]:
            # (or the calls in a segment of their own: the content's end marker, the next header)
            own = seq(Lit(segment["end"]), ws, Lit(segment["header"]), ws, calls)
            body = seq(content, opt(alt(seq(calls, after), seq(own, after))))
        else:
            body = seq(content, opt(seq(calls, after)))
    else:
        # required, or one named tool; or no marker opens a call: then the runtime reads a
        # turn that does not start with content's prefix ("all\n") as calls, so content
        # comes only in its rendered layouts (the forms below), never as free text here.
        body = seq(ws, calls, ws)
    g.add("body", body, "what follows the reasoning")

    # Reasoning.
    turn = Ref("body")
    r = spec.reasoning
    reasoning_stops: tuple[str, ...] = ()
    if r is not None and r.end:
        # (the runtime's own stops, as for content; and a call's opener, where calls are
        # offered: the runtime reads a call written inside reasoning, not text)
        openers = (protocol.opener, protocol.bare_opener) if calls is not None else ()
        reasoning_stops = tuple(dict.fromkeys(s for s in (*protocol.reasoning_stops, *openers,
                                                          *bodies) if s))
        text = g.add("reasoning-text", TextUntil(reasoning_stops),
                     "reasoning, up to its end marker")
        close = seq(ws, Lit(r.end), ws)
        ended = seq(text, close, Ref("body"))
        if opener and r.tool_call_ends_reasoning and calls is not None:
            # Policy: a call opener inside open reasoning ends the reasoning.
            ended = alt(ended, seq(text, calls, ws))
        if start_state == Start.REASONING:
            turn = g.add("reasoning", ended, "the prompt left reasoning open")
        elif closed:
            pass  # the prompt closed the block: the body alone
        elif r.start:
            opened = seq(ws, Lit(r.start), ws, ended)
            # (its end alone: an empty block, as a template that leaves thinking to the model
            # writes it)
            empty = seq(ws, Lit(r.end), ws, Ref("body"))
            turn = g.add("reasoning", alt(opened, empty, Ref("body")),
                         "optional reasoning (or its end alone), then the body")
    # The turn forms: the generic one first, then each rendered turn layout the forms before
    # it do not cover (content inside the section's markers, a prefix before content, calls
    # without an opener, ...). Each form runs to the end of the text. A layout a form already
    # covers is left out: an engine's sampler follows every alternative that matches so far,
    # and a duplicate doubles the work for every token (Mistral Small 3.2's `required`
    # grammar had the calls section four times over).
    forms = [turn]
    # (a prompt that began the answer: its layouts, which start a turn, are behind it)
    if options.content_schema is None and options.choice.mode != "none" and not answer_begun:
        # Layouts with more slots first: a content-only form would swallow a call as text.
        layouts = sorted(spec.turns.items(),
                         key=lambda item: -sum(isinstance(p, dict) for p in item[1]))
        for number, (kind, layout) in enumerate(layouts, 1):
            slots = {p["slot"] for p in layout if isinstance(p, dict)}
            if closed and "reasoning" in slots:
                continue  # the prompt closed the reasoning block
            if options.choice.mode != "auto" and ("content" in slots
                                                  or not slots & {"calls", "call_list"}):
                continue  # a required call: only layouts that are calls
            if any(isinstance(p, str) and any(m in p and not _goes_on(p, m, reading["segments"])
                                              for m in end_markers)
                   for p in layout[:-1]):
                continue  # the template renders two turns here; a model's turn ends at the marker
            form = _layout_form(g, spec, layout, number, start_state, options, content_stops,
                                end_markers, calls, ws, reasoning_stops)
            if form is not None and not any(covers(g, kept, form) for kept in forms):
                forms.append(g.add(f"form-{number}", form,
                                   f"a turn laid out as the template renders a {kind} turn"))
    if not opener and len(forms) > 1:
        # No marker opens a call: only the rendered layouts tell content from calls.
        forms = forms[1:] + forms[:1]
    ending = opt(end) if end is not None else None
    alternatives = [seq(form, ending, End()) for form in forms]
    if options.trailing_text and end is not None:
        after = g.add("after-end", TextUntil(()), "text after the end of turn "
                                                  "(reported, not parsed)")
        alternatives.append(seq(turn, end, after, End()))
    g.add("root", alt(*alternatives), "a whole assistant turn")
    if not options.trailing_text:
        _end_markers_end_the_text(g, end_markers)
        _no_value_forces_an_end_marker(options, end_markers)
    return g


def _no_value_forces_an_end_marker(options: GrammarOptions, end_markers: list[str]) -> None:
    """SchemaError where a value the grammar would force (a const, an enum value, a property
    name, a pattern's text: of an offered tool or of the answer's schema) holds an end-of-turn
    marker: the engine stops at the marker, so the value, and the call around it, could never
    be written whole."""
    markers = [m for m in end_markers if m.strip()]
    schemas = [_tool_schema(t) for t in options.tools or []] + [options.content_schema]
    for schema in schemas:
        if not isinstance(schema, dict) or not markers:
            continue
        for path, node in subschemas(schema):
            if not isinstance(node, dict):
                continue
            values = [node["const"]] if "const" in node else list(node.get("enum") or [])
            texts = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                     for v in values]
            texts += list(node.get("properties") or {}) if isinstance(node.get("properties"),
                                                                       dict) else []
            texts += [node["pattern"]] if isinstance(node.get("pattern"), str) else []
            for text in texts:
                held = next((m for m in markers if m in text), None)
                if held is not None:
                    raise json_schema.SchemaError(path, f"a value holds the end-of-turn marker "
                                                        f"{held!r} ({text[:60]!r}): the engine "
                                                        "stops at it, so the value could never "
                                                        "be written whole")


def _goes_on(literal: str, marker: str, segments: Mapping[str, Any] | None) -> bool:
    """Whether `literal` ends a segment with `marker` and opens the next one (the segments' end
    marker, then their header: see reading.segment_format): the turn goes on past the marker."""
    if not segments:
        return False
    return marker.strip() == segments["end"] \
        and literal.strip().startswith(segments["end"]) \
        and literal.strip()[len(segments["end"]):].lstrip().startswith(segments["header"])


def _end_markers_end_the_text(g: Grammar, end_markers: list[str]) -> None:
    """In a generation grammar, no free text (reasoning, content, a raw argument value) holds
    an end-of-turn marker: the engine stops on it wherever it comes (the bridge sends the
    markers as stop strings) and the parser ends the turn there, so a value that held one
    would come back cut, a call without its other arguments. (A grammar for parsing reads
    what the model wrote, and keeps such text.)"""
    for rule in g.rules.values():
        rule.body = _stopping_at(rule.body, tuple(end_markers))


def _stopping_at(node: Node, markers: tuple[str, ...]) -> Node:
    """`node` with every free text in it, and every unbounded run of a string's characters,
    also stopping at `markers`."""
    if isinstance(node, TextUntil):
        return TextUntil(tuple(dict.fromkeys(node.stops + markers)))
    if isinstance(node, (Seq, Alt)):
        return type(node)(tuple(_stopping_at(item, markers) for item in node.items))
    if isinstance(node, Rep):
        run = _string_run(node, markers)
        if run is not None:
            return run
        return Rep(_stopping_at(node.item, markers), node.min, node.max)
    if isinstance(node, Not):
        return Not(_stopping_at(node.item, markers))
    return node


def _string_run(node: Rep, markers: tuple[str, ...]) -> StringUntil | None:
    """An unbounded run of a string's characters (`[^"\\]` or any character, and escapes
    that start with a backslash) as a run in which no marker occurs, or None if `node` is no
    such run. A bounded run (a schema's maxLength) is left as it is: its count and the
    markers' prefixes would multiply into a grammar of their product.

    A marker is kept out only where the run's raw text is what decides it: not one that holds
    a backslash (an escape writes one), nor one that starts with a character an escape of
    several characters writes (JSON's `\\u0041` holds `u`, digits and letters)."""
    if (node.min, node.max) != (0, None):
        return None
    items = node.item.items if isinstance(node.item, Alt) else (node.item,)
    plain = [item for item in items if _is_plain(item)]
    escapes = [item for item in items if _is_escape(item)]
    if len(plain) != 1 or len(plain) + len(escapes) != len(items):
        return None
    written: set[str] | None = set()
    for escape in escapes:
        tail = escape.items[1] if len(escape.items) == 2 else Seq(escape.items[1:])
        if not _is_plain(tail):
            more = _characters_written(tail)
            written = None if written is None or more is None else written | more
    if written is None:
        return None
    kept = tuple(m for m in markers if m and "\\" not in m and m[0] not in written)
    return StringUntil(plain[0], tuple(escapes), kept) if kept else None


def _is_plain(node: Node) -> bool:
    """One character of a class that excludes some (`[^"\\]`), or any character."""
    return isinstance(node, AnyChar) or (isinstance(node, Chars) and node.negate)


def _is_escape(node: Node) -> bool:
    return isinstance(node, Seq) and len(node.items) >= 2 and node.items[0] == Lit("\\")


def _characters_written(node: Node) -> set[str] | None:
    """The characters `node` may write; None where that is any character, or too many to list."""
    if isinstance(node, Lit):
        return set(node.text)
    if isinstance(node, Chars) and not node.negate:
        if sum(ord(b) - ord(a) + 1 for a, b in node.ranges) > 1024:
            return None
        return {chr(c) for a, b in node.ranges for c in range(ord(a), ord(b) + 1)}
    if isinstance(node, (Seq, Alt)):
        found: set[str] = set()
        for item in node.items:
            more = _characters_written(item)
            if more is None:
                return None
            found |= more
        return found
    if isinstance(node, Rep):
        return _characters_written(node.item)
    return None


class StartState(NamedTuple):
    state: Start  # where the output starts: in reasoning or in content
    continued: bool  # inside an answer the prompt began (a prefill): no opener of its own


def _start_of(spec: ProtocolSpec, options: GrammarOptions) -> StartState:
    """Where the output starts: `options.start` (a Start, or a runtime start: "reasoning",
    "content", "content_continued", "reasoning_continued"), else the mode's."""
    start = options.start or spec.modes.get(options.mode, spec.modes["default"]).start
    continued = start in (runtime.CONTENT_CONTINUED, runtime.REASONING_CONTINUED)
    reasoning = start in (Start.REASONING, runtime.REASONING_CONTINUED)
    return StartState(Start.REASONING if reasoning else Start.CONTENT, continued)


def _continued_without_opener(g: Grammar, reading: runtime.ReadingTables, options: GrammarOptions,
                              end_markers: list[str], calls: Node) -> Node:
    """The body where no marker opens a call and the prompt began the answer: its text goes
    on (no content prefix of its own), up to the text that opens calls after content, if the
    family has one. ValueError for a required call the family cannot write after text."""
    table = reading["tool_calls"]
    inline = table["inline_opener"] if table is not None else ""
    stops = tuple(dict.fromkeys([*end_markers, *([inline] if inline else [])]))
    text = g.add("continued-text", TextUntil(stops), "the answer the prompt began, continued")
    if not inline:
        if options.choice.mode != "auto":
            raise ValueError("the prompt began the answer, and this family writes no call after "
                             "text: a required call cannot follow it")
        return text
    then_calls = seq(Lit(inline), calls)
    return seq(text, opt(then_calls)) if options.choice.mode == "auto" else seq(text, then_calls)


def _reasoning_closed(spec: ProtocolSpec, options: GrammarOptions, start_state) -> bool:
    """Whether the prompt left the model after a closed reasoning block (a generation grammar
    then has no reasoning: a model that opens a second block spends its budget there)."""
    r = spec.reasoning
    if options.trailing_text or start_state == Start.REASONING or r is None or not r.end:
        return False
    if options.reasoning_closed:
        return True
    # The thinking switch asked for by name, and its prompt closes the block. (Not the default
    # mode's prompt, even when it ends with a closed block: templates that do so still render
    # reasoning in their turns, and a model may think there.)
    mode = spec.modes.get(options.mode)
    return options.mode == "no_thinking" and mode is not None and r.end in mode.tail


def _layout_form(g: Grammar, spec: ProtocolSpec, layout, number: int, start_state: str,
                 options: GrammarOptions, content_stops: list[str], end_markers: list[str], calls,
                 ws: Ref, reasoning_stops: tuple[str, ...] = ()):
    """A turn layout as a grammar form, from where the generation prompt leaves the model."""
    pieces = list(layout)
    r = spec.reasoning
    tail = spec.modes.get(options.mode, spec.modes["default"]).tail.strip()
    if start_state == Start.REASONING:
        if r is None or not r.end:
            return None
        if slot("reasoning") in pieces:
            pieces = pieces[pieces.index(slot("reasoning")):]  # the prompt wrote what came before
        else:
            first = pieces[0] if pieces and isinstance(pieces[0], str) else ""
            pieces = [slot("reasoning")] + ([] if first.strip().startswith(r.end)
                                            else [r.end]) + pieces
    elif tail and pieces and isinstance(pieces[0], str) and pieces[0].strip() \
            and tail.endswith(pieces[0].strip()):
        pieces = pieces[1:]  # the prompt already wrote the layout's opening text
    # The end of turn is the root's business: cut the last literal at its first end marker.
    if pieces and isinstance(pieces[-1], str):
        pieces[-1] = cut_at_end(pieces[-1], end_markers)
    parts = []
    for i, piece in enumerate(pieces):
        if isinstance(piece, str):
            parts.append(tolerant(piece, ws))
            continue
        following = next((p for p in pieces[i + 1:] if isinstance(p, str) and p.strip()), "")
        stop = first_marker(following, Boundaries()) if following else ""
        name = piece["slot"]
        if name == "content":
            stops = tuple(dict.fromkeys(content_stops + ([stop] if stop else [])))
            parts.append(g.add(f"content-text-{number}", TextUntil(stops), "visible text"))
        elif name == "reasoning":
            stops = tuple(dict.fromkeys(([r.end] if r and r.end else []) + list(reasoning_stops)
                                        + ([stop] if stop else [])))
            parts.append(g.add(f"reasoning-text-{number}", TextUntil(stops), "reasoning"))
        elif name == "calls":
            if calls is None:
                return None
            parts.append(calls)
        elif name == "call_list":
            if calls is None:
                return None
            parts.append(Ref("call-list"))
    return seq(*parts)


def _add_tool_calls(g: Grammar, tc: ToolCallFormat, options: GrammarOptions, ws: Ref,
                    section_end: str) -> Ref:
    offered = _offered_rules(options)
    if offered is None:
        _add_arguments(g, tc.arguments, "arguments", None, ws, options.warnings,
                       _after_arguments(tc), parsing=options.trailing_text)
        g.add("tool-name", Rep(NAME_CHARS, 1), "a tool name")
        call = _add_calls_of(g, tc.call, None, ws, "")
    else:
        alternatives = []
        for tool, rule in offered:
            _add_arguments(g, tc.arguments, f"arguments-{rule}", _tool_schema(tool), ws,
                           options.warnings, _after_arguments(tc),
                           open_objects=_objects_open(options))
            g.add(f"tool-name-{rule}", Lit(_tool_name(tool)), f"the name {_tool_name(tool)}")
            alternatives.append(_add_call_of(g, tc.call, tool, rule, ws, ""))
        call = g.add("tool-call", alt(*alternatives), "one tool call, of an offered tool")
    g.add("call-id", Rep(ID_CHARS, 1), "a call id")
    g.add("call-index", Rep(chars("0-9"), 1), "a call's position")
    several = options.parallel and tc.parallel == Parallel.ALL
    calls = seq(call, Rep(seq(tolerant(tc.separator, ws), call))) if several else call
    listed = g.add("call-list", calls, "the calls, without the section's markers")
    body = seq(tolerant(tc.section_start, ws), listed, tolerant(section_end, ws))
    return g.add("tool-calls", body, "the calls section")


def _offered_rules(options: GrammarOptions) -> list[tuple[dict, str]] | None:
    """(tool, the suffix of its rules) of each tool a call may name; None: any tool."""
    tools = options.tools
    if tools is None:
        return None
    if options.choice.mode == "function":  # (tool_choice_of refused a name not among the tools)
        tools = [t for t in tools if _tool_name(t) == options.choice.name]
    rules: list[str] = []
    # (get-weather and get_weather are two tools: two rules)
    return [(tool, _unique(_rule_name(_tool_name(tool)), rules)) for tool in tools]


def _add_calls_of(g: Grammar, layout: list, offered: list[tuple[dict, str]] | None, ws: Ref,
                  prefix: str) -> Ref:
    """One call laid out as `layout`, of any tool (offered None) or of an offered one, over the
    name and arguments rules _add_tool_calls made; its rules' names start with `prefix`."""
    if offered is None:
        return g.add(f"{prefix}tool-call",
                     _call_body(layout, Ref("tool-name"), Ref("arguments"), ws), "one tool call")
    alternatives = [_add_call_of(g, layout, tool, rule, ws, prefix) for tool, rule in offered]
    return g.add(f"{prefix}tool-call", alt(*alternatives), "one tool call, of an offered tool")


def _add_call_of(g: Grammar, layout: list, tool: dict, rule: str, ws: Ref, prefix: str) -> Ref:
    body = _call_body(layout, Ref(f"tool-name-{rule}"), Ref(f"arguments-{rule}"), ws)
    return g.add(f"{prefix}call-{rule}", body, f"a call of {_tool_name(tool)}")


def calls_from_marker(g: Grammar, spec: ProtocolSpec, options: GrammarOptions, marker: str) -> Ref:
    """The calls section written from `marker`, the call's own marker inside the first call's
    opening text, as a model writes it that leaves out what comes before (`<function=…` of
    `<tool_call>\n<function=…`, `<invoke …` without `<minimax:tool_call>`): that call, then
    the section as it goes on. For a lazy grammar that a model writing the marker triggers
    (the runtime reads such a call: reading.calls_without_opener). `g` is build()'s grammar."""
    tc = spec.tool_calls
    assert tc is not None  # (a call's own marker: the template writes calls)
    first = tc.call[0]
    assert isinstance(first, str)  # (the marker is in the call's opening text)
    layout = [first[first.index(marker):]] + list(tc.call[1:])
    ws = Ref("ws")
    call: Node = _add_calls_of(g, layout, _offered_rules(options), ws, "own-marker-")
    if options.parallel and tc.parallel == Parallel.ALL:
        call = seq(call, Rep(seq(tolerant(tc.separator, ws), Ref("tool-call"))))
    section_end = cut_at_end(tc.section_end, end_of_turn_markers(spec))
    return g.add("tool-calls-from-own-marker", seq(call, tolerant(section_end, ws)),
                 "the calls section, from the first call's own marker on")


def _objects_open(options: GrammarOptions) -> bool:
    """Whether objects of a schema take properties it does not list (`extra_properties`):
    when asked, and in a grammar for parsing (trailing_text), which reads what the model
    wrote, as the runtime parser does, and leaves the schema to validation."""
    return options.open_objects or options.trailing_text


def _call_body(layout: list, name: Node, arguments: Ref, ws: Ref) -> Node:
    parts = []
    for piece in layout:
        if isinstance(piece, str):
            parts.append(tolerant(piece, ws))
        elif piece == slot("name"):
            parts.append(name)
        elif piece == slot("arguments"):
            parts.append(arguments)
        elif piece == slot("id"):
            parts.append(Ref("call-id"))
        elif piece["slot"] in ("index", "index1"):
            parts.append(Ref("call-index"))
    return seq(*parts)


def _tool_name(tool: dict) -> str:
    return (tool.get("function") or tool).get("name", "")


def _tool_schema(tool: dict) -> dict:
    return (tool.get("function") or tool).get("parameters") or {"type": "object"}


def _unique(rule: str, taken: list[str]) -> str:
    """`rule`, or `rule-2`, `rule-3`, ... when names that differ slug to the same rule; added to
    `taken`."""
    unique, n = rule, 1
    while unique in taken:
        n += 1
        unique = f"{rule}-{n}"
    taken.append(unique)
    return unique


def _rule_name(name: str) -> str:
    out = "".join(c if c.isascii() and c.isalnum() else "-" for c in name.lower())
    return "-".join(p for p in out.split("-") if p) or "tool"


def _after_arguments(tc: ToolCallFormat) -> str:
    """The call's literal right after its arguments, stripped (where the arguments end)."""
    pieces = tc.call[tc.call.index(slot("arguments")) + 1:] if slot("arguments") in tc.call else []
    return next((p for p in pieces if isinstance(p, str) and p.strip()), "").strip()


def _add_arguments(g: Grammar, fmt: ArgumentFormat, name: str, schema: dict | None, ws: Ref,
                   warnings, closing: str = "", parsing: bool = False,
                   open_objects: bool = False) -> Ref:
    if fmt.style == ArgumentStyle.OBJECT:
        if fmt.order == "sorted" and isinstance(schema, dict):
            # (the format writes every object's keys sorted: the properties in that order,
            # which an engine given the schema writes them in too)
            schema = sorted_keys(schema)
        if fmt.encoder == "python":
            if schema is None:
                add_python_literal(g)
                if parsing:
                    # (a model may write JSON where the template writes Python: the parser reads
                    # both)
                    add_json(g)
                    return g.add(name, alt(Ref("py-dict"), Ref("json-object")),
                                 "arguments, a Python dict or JSON")
                return g.add(name, Ref("py-dict"), "arguments, as a Python dict")
            value = json_schema.add_schema(g, schema, name + "-py", warnings, flavor="python",
                                           open_objects=open_objects)
            return g.add(name, value, "arguments, a Python dict by the tool's schema")
        if schema is not None:
            value = json_schema.add_schema(g, schema, name + "-json", warnings,
                                           open_objects=open_objects)
            return g.add(name, value, "arguments, by the tool's schema")
        add_json(g)
        return g.add(name, Ref("json-object"), "arguments, a JSON object")
    # (typed property by property: each property's schema whole, its $refs followed)
    whole = json_schema.inlined(schema, warnings) if isinstance(schema, dict) else schema
    return g.add(name, _kv_arguments(g, fmt, name, whole, ws, warnings, closing, open_objects),
                 "arguments, one per key")


def _kv_arguments(g: Grammar, fmt: ArgumentFormat, name: str, schema: dict | None, ws: Ref,
                  warnings, closing: str = "", open_objects: bool = False) -> Node:
    """argument (separator argument)*, each argument by the layout of its value's type."""
    # (a property whose schema is false is never written: it holds no value)
    properties = {k: v for k, v in ((schema or {}).get("properties") or {}).items()
                  if v is not False}
    if schema is None or not properties:
        one = _kv_argument_any(g, fmt, ws, closing)
        return opt(seq(one, Rep(seq(tolerant(fmt.separator, ws), one))))
    # Properties in the schema's order (sorted when the format sorts keys); required ones
    # present, optional ones present or not, the separator between those present.
    required = set(schema.get("required") or [])
    items = sorted(properties.items()) if fmt.order == "sorted" else list(properties.items())
    members = []
    for prop, prop_schema in items:
        kind = json_schema.primary_type(prop_schema)
        # (argument-TOOL-KEY)
        rule = f"argument-{name.removeprefix('arguments-')}-{_rule_name(prop)}"
        members.append((_kv_argument_typed(g, fmt, prop, kind, prop_schema, ws, warnings, rule,
                                           open_objects, closing),
                        prop in required))
    return _in_order(g, name, members, tolerant(fmt.separator, ws))


def _in_order(g: Grammar, name: str, members: Sequence[tuple[Node, bool]],
              separator: Node) -> Node:
    """Members in order, each required one present, each optional one present or not, the
    separator between those present (one named rule after each member: the size stays linear
    in the members)."""
    after: Node = Lit("")
    for i in range(len(members) - 1, -1, -1):
        member, is_required = members[i]
        with_it = seq(separator, member, after)
        after = g.add(f"{name}-after-{i}", with_it if is_required else alt(with_it, after))
    options = []
    for j, (member, is_required) in enumerate(members):
        options.append(seq(member, Ref(f"{name}-after-{j + 1}") if j + 1 < len(members) else None))
        if is_required:
            break
    listed = alt(*options)
    return listed if any(is_required for _, is_required in members) else opt(listed)


def _kv_layout_node(fmt: ArgumentFormat, kind: str, key: Node, value: Node, ws: Ref,
                    raw: bool = False) -> Node:
    """An argument as its layout writes it. Whitespace right before a value is the template's
    exactly (a raw value keeps its own); so is the whitespace right after a `raw` value (text
    read up to the layout's closing: more whitespace there is the value's own, which a value
    the schema constrains, an enum's, must not hold)."""
    layout = fmt.argument.get(kind) or fmt.argument["string"]
    before, middle, _ = kv_parts(layout)
    core = middle.rstrip()
    lead = middle[len(core):]
    # After the value: literals, and the key again where the layout names it there (</key>).
    pieces = layout[layout.index(slot("value")) + 1:]
    after = [tolerant(p, ws) if isinstance(p, str) else key for p in pieces]
    if raw and pieces and isinstance(pieces[0], str) and pieces[0][:1].isspace():
        rest = pieces[0].lstrip()
        after[0] = seq(Lit(pieces[0][:len(pieces[0]) - len(rest)]), tolerant(rest, ws))
    # (before a raw value its whitespace is written, not left out: left out, the value's own
    # first characters would be read as it)
    lead_node = (Lit(lead) if raw else opt(Lit(lead))) if lead else None
    return seq(tolerant(before, ws), key, tolerant(core, ws), lead_node, value, *after)


def _value_rule(g: Grammar, fmt: ArgumentFormat, kind: str, encoder: str, closing: str = "") -> Ref:
    """value-<encoder>: the rule name tells the reference parser how to decode the value."""
    if encoder == "raw-or-quoted":
        return g.add("optionally-quoted", alt(_value_rule(g, fmt, kind, "quoted"),
                                              _value_rule(g, fmt, kind, "raw", closing)),
                     "raw text, or text in the format's quotes")
    if encoder == "raw":
        layout = fmt.argument.get(kind) or fmt.argument["string"]
        after = layout[layout.index(slot("value")) + 1:]
        # (up to the closing text, or to its part before the key it names again)
        stop = (after[0] if after and isinstance(after[0], str) else "").strip() \
            or fmt.separator.strip()
        name = f"value-raw-{kind}" if kind in fmt.argument and kind != "string" else "value-raw"
        stops: tuple[str, ...] = (stop,) if stop else ()
        if _writes_nothing_after(after) and closing and closing not in stops:
            # (nothing after the value: the call's literal after the arguments ends it too)
            stops += (closing,)
        text = TextUntil(stops)
        if len(after) > 2 and after[1] == slot("key") and isinstance(after[2], str) \
                and after[2].strip():
            # The closing text names the key (</key>): nested elements close with other names,
            # which such a value may hold (an object or array written as XML elements).
            close = after[2][: after[2].index(">") + 1] if ">" in after[2] else after[2].strip()
            # (for PEG, which takes a repetition greedily: a closing of the argument itself is
            # followed by the next argument or by the call's next literal)
            before = kv_parts(layout)[0].strip()
            follows = [seq(Lit(before), NAME_CHARS) if before else None,
                       Lit(closing) if closing else None]
            own_close = seq(Lit(stop), Rep(NAME_CHARS, 1), tolerant(after[2], add_ws(g)),
                            alt(*[f for f in follows if f]))
            nested = seq(Not(own_close), Lit(stop), Rep(NAME_CHARS, 1), Lit(close), text)
            return g.add(name, seq(text, Rep(nested)),
                         "text up to the argument's closing text, nested elements closed")
        return g.add(name, text, "text up to the argument's closing text")
    if encoder == "quoted":
        return g.add("value-quoted", seq(Lit(fmt.quotes[0]), TextUntil((fmt.quotes[1],)),
                                         Lit(fmt.quotes[1])),
                     "a string between the format's quotes")
    if encoder in ("python", "jinja"):
        return g.add("value-python", add_python_literal(g), "a Python literal")
    if encoder == "native":
        return g.add("value-native", _add_native(g, fmt), "a value in the format's own notation")
    return g.add("value-json", add_json(g), "a JSON value")


def _kv_argument_any(g: Grammar, fmt: ArgumentFormat, ws: Ref, closing: str = "") -> Ref:
    """Without a schema: any key; each layout with the values its types are written in."""
    key = g.add("argument-key", Rep(NAME_CHARS, 1), "an argument name")
    alternatives = []
    for kind in ["string"] + [k for k in fmt.argument if k != "string"]:
        if len(fmt.argument) == 1 \
                and fmt.value_encoders.get("string") not in ("raw", "raw-or-quoted"):
            # One layout for every type, each type in its own encoding.
            encoders = list(dict.fromkeys(fmt.value_encoders.values()))
        else:
            # Raw text holds any value; else the layout's own type.
            encoders = [fmt.value_encoders.get(kind, "json")]
        value = alt(*[_value_rule(g, fmt, kind, e, closing) for e in encoders])
        if encoders == ["raw"] and len(fmt.argument) == 1 \
                and _writes_nothing_after(_after_value(fmt, kind)):
            # An object or array runs as its brackets balance, in the encoding the format gives
            # it; other text is a raw value, up to the separator or the call's next literal.
            stops = tuple(dict.fromkeys(s for s in (fmt.separator.strip(), closing) if s))
            first = chars("".join(dict.fromkeys("{[" + "".join(s[0] for s in stops))), negate=True)
            text = g.add("value-raw-text", opt(seq(first, TextUntil(stops))),
                         "raw text that opens no object or array, up to the separator or "
                         "the call's next literal")
            value = alt(_container_rule(g, fmt), text)
        alternatives.append(_kv_layout_node(fmt, kind, key, value, ws))
    return g.add("argument", alt(*alternatives), "one argument")


def _after_value(fmt: ArgumentFormat, kind: str) -> list:
    """What the layout of `kind` writes after a value."""
    layout = fmt.argument.get(kind) or fmt.argument["string"]
    return layout[layout.index(slot("value")) + 1:]


def _writes_nothing_after(after: list) -> bool:
    """Whether a layout writes nothing after a value (`key=value, key=value`): the value ends
    at the separator or at the call's literal after the arguments."""
    return not any(piece == slot("key") or isinstance(piece, str) and piece.strip()
                   for piece in after)


def _container_rule(g: Grammar, fmt: ArgumentFormat) -> Ref:
    """value-python-container / value-json-container: an object or an array, in the encoding
    the format gives objects."""
    if fmt.value_encoders.get("object", fmt.value_encoders.get("array")) in ("python", "jinja"):
        add_python_literal(g)
        return g.add("value-python-container", alt(Ref("py-dict"), Ref("py-list")),
                     "an object or array, a Python literal")
    add_json(g)
    return g.add("value-json-container", alt(Ref("json-object"), Ref("json-array")),
                 "an object or array, JSON")


# A key as the runtime's key/value reader reads one (runtime.text.NAME_CHARS, one or more).
_KV_KEY = re.compile(r"[A-Za-z0-9_.-]+")


def _warn(warnings: list[str], message: str) -> None:
    if message not in warnings:
        warnings.append(message)


def _raw_stops(fmt: ArgumentFormat, kind: str, closing: str = "") -> tuple[str, ...]:
    """What ends a raw value of a layout (the parser reads it up to the first of them): the
    text after it (`</arg_value>`), else the separator, and the call's literal after the
    arguments where the layout writes nothing after a value."""
    layout = fmt.argument.get(kind) or fmt.argument["string"]
    after = layout[layout.index(slot("value")) + 1:]
    stop = (after[0] if after and isinstance(after[0], str) else "").strip() \
        or fmt.separator.strip()
    stops: tuple[str, ...] = (stop,) if stop else ()
    if _writes_nothing_after(after) and closing and closing not in stops:
        stops += (closing,)
    return stops


def _kv_argument_typed(g, fmt: ArgumentFormat, prop: str, kind: str, schema: dict, ws, warnings,
                       name: str, open_objects: bool = False, closing: str = "") -> Ref:
    """One argument of a known property: its name, and a value its schema allows (an object
    value's undeclared properties as `json_schema.extra_properties` says). A name the format's
    parser does not read as a key is a SchemaError: the grammar would force a call that
    reads back as no call."""
    if not _KV_KEY.fullmatch(prop):
        raise json_schema.SchemaError(f"#/properties/{prop}", f"the property name {prop!r}: this "
                                      "family's key/value notation writes a key as one or more "
                                      "letters, digits, '_', '.' or '-', and its parser reads "
                                      "no other")
    layout_kind = kind if kind in fmt.argument else "string"
    encoder = fmt.value_encoders.get(kind) or fmt.value_encoders.get("string", "json")
    strings = fmt.value_encoders.get("string")
    if strings in ("raw", "raw-or-quoted") and len(fmt.argument) == 1:
        encoder = "raw"  # this format writes every value as raw text
    layout = fmt.argument.get(layout_kind) or fmt.argument["string"]
    after = layout[layout.index(slot("value")) + 1:]
    named = after[2] if len(after) > 2 else None
    if encoder == "raw" and len(after) > 2 and after[1] == slot("key") \
            and isinstance(named, str):
        # The closing text names the key (</amount>): the value is the text up to it, which
        # may hold nested elements of other names (an object or array as XML elements).
        before = after[0]
        assert isinstance(before, str)  # (the text before the key it names again)
        close = named[: named.index(">") + 1] if ">" in named else named.strip()
        text: Node = TextUntil((before.strip() + prop + close,))
        if kind != "string" or _constrains_string(schema):
            # typed by the schema; an object or array may also be XML elements, as the
            # template writes one where it has no encoder for it (MiniMax-M3), which this
            # grammar does not type: said, and left to validation
            flavor = "python" if fmt.value_encoders.get(kind) in ("python", "jinja") else "json"
            typed = json_schema.add_raw_value(g, schema, name, warnings, flavor, open_objects,
                                              stops=(before.strip() + prop + close,))
            text = alt(typed, text) if kind in ("object", "array") else typed
            if kind in ("object", "array") and kind not in fmt.value_encoders:
                _warn(warnings, f"the {kind} argument {prop!r}: this family writes an {kind} "
                                "as XML elements, which the grammar does not type (left to "
                                "validation)")
        value = g.add(f"value-raw-{name}", text, f"the value of {prop}, up to its closing")
        key = g.add(f"argument-key-{name.removeprefix('argument-')}", Lit(prop),
                    "the argument's name")
        return g.add(name, _kv_layout_node(fmt, layout_kind, key, value, ws,
                                           raw=kind != "string" or _constrains_string(schema)),
                     f"the {prop} argument")
    if encoder in ("raw", "raw-or-quoted"):
        if kind == "string" and not _constrains_string(schema):
            value = _value_rule(g, fmt, layout_kind,
                                strings if strings == "raw-or-quoted" else "raw", closing)
        else:
            flavor = "python" if fmt.value_encoders.get(kind) in ("python", "jinja") else "json"
            value = g.add(f"{name}-raw",
                          json_schema.add_raw_value(g, schema, name, warnings, flavor,
                                                    open_objects,
                                                    stops=_raw_stops(fmt, layout_kind, closing)),
                          "raw text that reads as a value of the schema")
    elif ("anyOf" in schema or "oneOf" in schema) and encoder not in ("json", "python"):
        # (each option as the format writes a value of its type)
        value = g.add(f"{name}-options", _native_typed(g, fmt, schema, name, ws, warnings,
                                                       f"#/properties/{prop}", open_objects),
                      "a value of one of the options, as the format writes its type")
    elif encoder == "quoted" and kind == "string" and ("enum" in schema or "const" in schema):
        # (each value as the format writes a value of its type: a string quoted, 3 as 3)
        value = g.add(f"{name}-values", _written_values(fmt, schema, f"#/properties/{prop}"),
                      "one of the values, each as the format writes it")
    elif encoder == "quoted" and kind == "string":
        inner = json_schema.add_string_content(g, schema, name + "-text", warnings,
                                               stops=(fmt.quotes[1],)) \
            if _constrains_string(schema) else TextUntil((fmt.quotes[1],))
        value = g.add("value-quoted" if not _constrains_string(schema) else f"{name}-quoted",
                      seq(Lit(fmt.quotes[0]), inner, Lit(fmt.quotes[1])),
                      "a string between the format's quotes")
    elif encoder.startswith("json"):
        value = g.add(f"{name}-json",
                      json_schema.add_schema(g, schema, name + "-schema", warnings,
                                             open_objects=open_objects),
                      "a JSON value of the schema")
    elif encoder == "python":
        value = g.add(f"{name}-py",
                      json_schema.add_schema(g, schema, name + "-py-schema", warnings,
                                             flavor="python",
                                                           open_objects=open_objects),
                      "a Python literal of the schema")
    elif encoder == "native":
        value = g.add(f"{name}-native", _native_typed(g, fmt, schema, name, ws, warnings,
                                                      f"#/properties/{prop}", open_objects),
                      "a value of the schema in the format's own notation")
    else:
        value = _value_rule(g, fmt, layout_kind, encoder)
    key = g.add(f"argument-key-{name.removeprefix('argument-')}", Lit(prop), "the argument's name")
    # (a typed raw value's whitespace around it is the layout's exactly: the parser strips
    # only that; free text keeps any, and reads as the string it is)
    typed_raw = encoder in ("raw", "raw-or-quoted") and (kind != "string"
                                                         or _constrains_string(schema))
    return g.add(name, _kv_layout_node(fmt, layout_kind, key, value, ws, raw=typed_raw),
                 f"the {prop} argument")


def _native_typed(g: Grammar, fmt: ArgumentFormat, schema, name: str, ws: Ref, warnings,
                  path: str, open_objects: bool = False) -> Node:
    """A value of `schema` in the format's own notation (Gemma 4's `{k:<|"|>v<|"|>}`, `[...]`):
    objects and arrays in its brackets, their members and items typed by the schema, scalars
    through their types' encoders. (Untyped, the notation let an array be written as `{}`.)"""
    if schema is True or schema == {} or not isinstance(schema, dict):
        return _add_native(g, fmt)
    if "const" in schema or "enum" in schema:
        return _written_values(fmt, schema, path)
    for keyword in ("anyOf", "oneOf"):
        if isinstance(schema.get(keyword), list):
            options = [_native_typed(g, fmt, option, f"{name}-{i}", ws, warnings,
                                     f"{path}/{keyword}/{i}", open_objects)
                       for i, option in enumerate(schema[keyword]) if option is not False]
            return alt(*options)
    kind = json_schema.primary_type(schema)
    if kind == "object" and "object" in fmt.brackets:
        return _native_object(g, fmt, schema, name, ws, warnings, path, open_objects)
    if kind == "array" and "array" in fmt.brackets:
        open_, close = fmt.brackets["array"]
        items = schema.get("items", {})
        if items is False:
            return seq(Lit(open_), Lit(close))
        item = g.add(f"{name}-item", _native_typed(g, fmt, items, f"{name}-item", ws, warnings,
                                                   f"{path}/items", open_objects),
                     "an item of the array")
        low = json_schema._count(schema, "minItems", path) or 0
        high = json_schema._count(schema, "maxItems", path)
        if high == 0:
            return seq(Lit(open_), Lit(close))
        more = Rep(seq(Lit(fmt.separator), item), max(low - 1, 0),
                   None if high is None else high - 1)
        listed = seq(item, more)
        return seq(Lit(open_), listed if low else opt(listed), Lit(close))
    encoder = fmt.value_encoders.get(kind) or fmt.value_encoders.get("string", "json")
    if encoder == "quoted" and kind == "string":
        inner = json_schema.add_string_content(g, schema, name + "-text", warnings,
                                               stops=(fmt.quotes[1],)) \
            if _constrains_string(schema) else TextUntil((fmt.quotes[1],))
        return seq(Lit(fmt.quotes[0]), inner, Lit(fmt.quotes[1]))
    if encoder in ("python", "jinja"):
        return json_schema.add_schema(g, schema, name + "-py", warnings, flavor="python",
                                      open_objects=open_objects)
    if encoder.startswith("json"):
        return json_schema.add_schema(g, schema, name + "-json", warnings,
                                      open_objects=open_objects)
    return _add_native(g, fmt)


def _written_values(fmt: ArgumentFormat, schema: dict, path: str) -> Node:
    """An enum's values (or the const) each as the format writes a value of its type; a value
    it has no way to write, or a quote of its own inside a quoted string, is a SchemaError."""
    values = [schema["const"]] if "const" in schema else schema["enum"]
    texts = []
    for value in values:
        encoder = fmt.value_encoders.get(json_type(value), "json")
        if encoder == "quoted" and isinstance(value, str) and fmt.quotes[1] in value:
            raise json_schema.SchemaError(path, f"the value {value!r} holds {fmt.quotes[1]!r}, "
                                                "which ends a string in this notation")
        try:
            texts.append(fmt.encode_value(encoder, value))
        except SpecError as e:
            raise json_schema.SchemaError(path, f"a value this notation cannot write: "
                                                f"{e}") from None
    return alt(*[Lit(t) for t in texts])


def _native_object(g: Grammar, fmt: ArgumentFormat, schema: dict, name: str, ws: Ref, warnings,
                   path: str, open_objects: bool) -> Node:
    """An object in the format's brackets, its declared properties in order (each required
    one present), undeclared ones as `json_schema.extra_properties` says."""
    open_, close = fmt.brackets["object"]
    properties = {k: v for k, v in (schema.get("properties") or {}).items() if v is not False}
    required = set(schema.get("required") or [])
    members: list[tuple[Node, bool]] = []
    for prop, sub in properties.items():
        if not _KV_KEY.fullmatch(prop):
            raise json_schema.SchemaError(f"{path}/properties/{prop}", f"the property name "
                                          f"{prop!r}: this family's notation writes a key as "
                                          "letters, digits, '_', '.' or '-'")
        rule = f"{name}-{_rule_name(prop)}"
        value = g.add(rule, _native_typed(g, fmt, sub, rule, ws, warnings,
                                          f"{path}/properties/{prop}", open_objects))
        members.append((_native_member(fmt, Lit(prop), value, ws), prop in required))
    separator = Lit(fmt.separator)
    extra = json_schema.extra_properties(schema, open_objects)
    pair = _native_member(fmt, Rep(NAME_CHARS, 1), _add_native(g, fmt), ws) \
        if extra is not False else None
    extras = Rep(seq(separator, pair)) if pair is not None else None
    if not members:
        body: Node = opt(seq(pair, extras)) if pair is not None else Lit("")
    else:
        listed = _in_order(g, f"{name}-members", members, separator)
        if any(is_required for _, is_required in members) or pair is None:
            body = seq(listed, extras)
        else:  # (all optional: the declared ones, or undeclared ones alone)
            body = alt(seq(listed, extras), seq(pair, extras))
    return seq(Lit(open_), body, Lit(close))


def _native_member(fmt: ArgumentFormat, key: Node, value: Node, ws: Ref) -> Node:
    """`key: value` as the notation writes an object's member (its argument layout)."""
    return _kv_layout_node(fmt, "string", key, value, ws) if len(fmt.argument) == 1 \
        else seq(key, Lit(":"), value)


def _constrains_string(schema: dict) -> bool:
    """Whether a value of `schema` is anything short of any text: it says more than its type
    is a string (an enum, a pattern, a length, options of other types, ...)."""
    return any(k not in json_schema.ANNOTATIONS and not (k == "type" and v == "string")
               for k, v in schema.items())


def _add_native(g: Grammar, fmt: ArgumentFormat) -> Ref:
    """The format's own notation for nested values (objects as argument lists, arrays as item
    lists)."""
    if g.has("native-value"):
        return Ref("native-value")
    ws = add_ws(g)
    add_json(g)
    alternatives: list[Node] = []
    for kind in ("string", "integer", "number", "boolean", "null"):
        encoder = fmt.value_encoders.get(kind)
        if encoder and encoder != "native":
            alternatives.append(_value_rule(g, fmt, kind, encoder))
    key = Rep(NAME_CHARS, 1)
    if "object" in fmt.brackets:
        open_, close = fmt.brackets["object"]
        member = _kv_layout_node(fmt, "string", key, Ref("native-value"), ws) \
            if len(fmt.argument) == 1 else seq(key, Lit(":"), Ref("native-value"))
        members = seq(member, Rep(seq(Lit(fmt.separator), member)))
        alternatives.insert(0, seq(Lit(open_), opt(members), Lit(close)))
    if "array" in fmt.brackets:
        open_, close = fmt.brackets["array"]
        items = seq(Ref("native-value"), Rep(seq(Lit(fmt.separator), Ref("native-value"))))
        alternatives.insert(0, seq(Lit(open_), opt(items), Lit(close)))
    return g.add("native-value", alt(*alternatives), "a value in the format's own notation")


__all__ = ["GrammarOptions", "build", "tolerant"]
