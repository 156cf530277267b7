"""Deviations: what models and engines write instead of the template's own render.

A template renders one canonical form of each turn; real outputs deviate from it in a few
recurring ways that are not the model's mistake (docs/tolerance.md's table names them).
`deviations(output, spec)` builds, from one of the proof's model outputs, the forms each
such rule makes of it, from the spec's data alone (markers, layouts), each with the message
it must still read back as: the original's. Tests feed them to the family's parser; a rule
the parser does not read is a failing test, not a silent reading.

    rule                          what it does to the render
    reasoning opener repeated     the prompt opened the reasoning block and the model writes
                                  the block's opener again at the start of its output; or
                                  the model opens the block itself and writes its opener twice
    closing markers eaten         the engine stopped on the turn's last markers (end of turn,
                                  end of the calls section, the call's closing tag) and left
                                  them out; finish_reason "stop"
    value closing tags missing    key/value arguments written without their values' closing
                                  tag (`</parameter>`): all of them, or the last one
    call object by key            a call written as a JSON object, not in the layout's byte
                                  order: keys reversed, "parameters" for "arguments" (or the
                                  other way), an extra "type": "function", arguments as a
                                  JSON string, no id
    call id left out              a call layout's id, with the literal that opens it, left
                                  out ([TOOL_CALLS]name[ARGS]{…} for …[CALL_ID]id[ARGS]{…})
    empty calls section           a turn without calls that opens the calls section (a marker)
                                  and closes it at once, after its content
    whitespace around markers     a space where a call's layout has a marker next to other text
                                  (`functions.f:0 <|tool_call_argument_begin|> {…}`); a space
                                  after the content, before what the template writes between
                                  it and a call (the content keeps it: the model wrote it)
    calls opener left out         a call written without the marker that opens the calls, where
                                  the call has a marker of its own after it (`<function=f>…
                                  </function>` for
                                  `<tool_call>\n<function=f>…</function>\n</tool_call>`,
                                  `<invoke name="f">…` without `<minimax:tool_call>`): its pair
                                  (or the section's end) left out too, or kept
    calls list without wrapper    a pythonic list of calls that is the whole output, without the
                                  marker tokens around it (`[f(a=1)]` for
                                  `<|tool_call_start|>[f(a=1)]<|tool_call_end|>`)
    wrapper of another call kind  a marker the template writes only in front of another kind
                                  of call (`<|python_tag|>`: spec tool_calls.wrappers) written
                                  in front of the calls
    the instructed form           a turn of calls written as the template's tool instructions
                                  tell the model (spec tool_calls.instructed_*): without the
                                  section's markers, and/or joined by the instructed separator
    strings as literals           (key/value arguments whose strings the template writes raw,
                                  in a literal notation: `f(a=1, b=[2], c=text)`) each string
                                  value written as a string literal, in double quotes (JSON's
                                  escapes) or single quotes (Python's)
    values without quotes         (key/value arguments whose every value the layout quotes, in
                                  a literal notation: `f(a="1", b="text")`) each value written
                                  as the Python literal it is, without the layout's quotes
    message header variants       (a turn written as messages with headers) a call's recipient
                                  moved from the role header to the channel header; its content
                                  type left out; the call on the reasoning channel; its message
                                  ended by a message end; a built-in-style recipient (no
                                  namespace) for an offered tool; a visible preamble message
                                  before it; a second call message after it
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from ..grammar.reading import arguments_table, message_format
from ..probe.spans import Boundaries
from ..runtime import (
    ARGUMENTS_ALIASES,
    CLOSES_A_VALUE,
    MARKER_BOUNDARY,
    KeyPath,
    KeyValueFormat,
    json_call_object,
    stoppable_word,
    value_at,
)
from ..spec import (
    ArgumentFormat,
    ArgumentStyle,
    ProtocolSpec,
    SpecError,
    Start,
    ToolCallFormat,
    kv_parts,
    slot,
)
from .outputs import ModelOutput

OPENER_REPEATED = "reasoning opener repeated"
CLOSING_EATEN = "closing markers eaten"
VALUE_CLOSERS_MISSING = "value closing tags missing"
CALL_OBJECT_BY_KEY = "call object by key"
CALL_ID_LEFT_OUT = "call id left out"
EMPTY_SECTION = "empty calls section"
MESSAGE_HEADERS = "message header variants"
WHITESPACE = "whitespace around markers"
CALLS_OPENER_LEFT_OUT = "calls opener left out"
LIST_WITHOUT_WRAPPER = "calls list without wrapper"
OTHER_KINDS_WRAPPER = "wrapper of another call kind"
INSTRUCTED_FORM = "the instructed form"
STRING_LITERALS = "strings as literals"
VALUES_UNQUOTED = "values without quotes"
RULES = (OPENER_REPEATED, CLOSING_EATEN, VALUE_CLOSERS_MISSING, CALL_OBJECT_BY_KEY,
         OTHER_KINDS_WRAPPER, CALL_ID_LEFT_OUT, EMPTY_SECTION, CALLS_OPENER_LEFT_OUT,
         LIST_WITHOUT_WRAPPER, MESSAGE_HEADERS, WHITESPACE, INSTRUCTED_FORM, STRING_LITERALS,
         VALUES_UNQUOTED)
# A marker: a tag or a bracketed token with a letter or digit in it.
_MARKER = re.compile(r"[<\[][^\s]*[A-Za-z0-9]")
# The visible text a preamble message deviation writes before a call.
PREAMBLE = "Let me look that up."


@dataclass(frozen=True)
class Deviation:
    """One deviated form of a model output, and how to read it."""

    rule: str  # the tolerance rule it exercises (RULES)
    text: str  # the output as the model / engine gives it
    start: Start
    finish_reason: str
    # the message it must read back as (the original output's, unless the deviation adds to it)
    expected: dict
    # what the deviation did (the markers left out, last first; the way)
    eaten: tuple[str, ...] = ()
    same_ids: bool = True  # False: the call ids are not the render's (it left them out: call_N)


def closing_markers(spec: ProtocolSpec) -> list[str]:
    """The markers an output may end with that an engine can stop on and leave out: the
    stoppable words of the end-of-turn markers, of the calls section's end and of the call
    layout after its last slot (a word's marker without the punctuation before it that closes
    a value: `<tool_call|>` of `}<tool_call|>`), longest first (one may end with another).
    Not the word that ends key/value arguments (`</function>`): without it the next argument
    may still have come, and the call is cut, not complete."""
    pieces = list(spec.end_of_turn)
    calls = spec.tool_calls
    keep_out = set()
    if calls is not None:
        pieces.append(calls.section_end)
        slots = [i for i, p in enumerate(calls.call) if not isinstance(p, str)]
        tail = calls.call[slots[-1] + 1:] if slots else []
        pieces += [p for p in tail if isinstance(p, str)]
        ends_arguments = slots and calls.call[slots[-1]] == {"slot": "arguments"} \
            and calls.arguments.style != ArgumentStyle.OBJECT
        first = next((w for p in tail if isinstance(p, str) for w in p.split()), None)
        if ends_arguments and first is not None and stoppable_word(first):
            keep_out.add(first)
    markers = set()
    for piece in pieces:
        for word in piece.split():
            marker = word.lstrip(CLOSES_A_VALUE)
            if marker and stoppable_word(marker) and word not in keep_out:
                markers.add(marker)
    return sorted(markers, key=lambda w: (-len(w), w))


def value_closer(spec: ProtocolSpec) -> str | None:
    """The closing tag a key/value format writes after each raw value (`</parameter>`), where
    what follows a value left without it settles it (the next argument's opener, the call's
    close): one layout, raw strings, an opener of its own and no key after the value. None
    for other formats."""
    calls = spec.tool_calls
    if calls is None or calls.arguments.style != ArgumentStyle.KV \
            or len(calls.arguments.argument) != 1:
        return None
    (layout,) = calls.arguments.argument.values()
    if calls.arguments.value_encoders.get("string") not in ("raw", "raw-or-quoted"):
        return None
    before, _, after = kv_parts(layout)
    value = layout.index({"slot": "value"})
    if not before.strip() or not after.strip() or {"slot": "key"} in layout[value + 1:]:
        return None
    return after.strip()


def _in_holder(value: dict, path: KeyPath, rewrite) -> dict:
    """`value` with the object that holds `path`'s last key replaced by rewrite(that object)."""
    if len(path) == 1:
        return rewrite(value)
    return {k: _in_holder(x, path[1:], rewrite) if k == path[0] and isinstance(x, dict) else x
            for k, x in value.items()}


def _rewritten_call_objects(text: str, name_key: KeyPath, names: set[str], rewrite) -> str:
    """`text` with each JSON object that names one of `names` at `name_key` replaced by
    rewrite(its dict) (written by json.dumps)."""
    out, i = [], 0
    decoder = json.JSONDecoder()
    while True:
        at = text.find("{", i)
        if at == -1:
            break
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            value, end = None, at + 1
        if isinstance(value, dict) and value_at(value, name_key) in names:
            out += [text[i:at], json.dumps(rewrite(value), ensure_ascii=False)]
        else:
            out.append(text[i:end])
        i = end
    return "".join(out) + text[i:]


def deviations(output: ModelOutput, spec: ProtocolSpec) -> list[Deviation]:
    """The deviated forms of `output` that the tolerance rules apply to (none: the rules do
    not apply to this turn)."""
    found = []
    messages = message_format(spec, Boundaries()) if spec.tool_calls is not None else None
    reasoning = spec.reasoning
    if output.start == Start.REASONING and reasoning is not None and reasoning.start.strip():
        found.append(Deviation(OPENER_REPEATED, reasoning.start + output.text, output.start, "stop",
                               output.expected))
    elif reasoning is not None and reasoning.start.strip() \
            and output.expected["reasoning_content"] and output.text.startswith(reasoning.start):
        found.append(Deviation(OPENER_REPEATED, reasoning.start + output.text, output.start, "stop",
                               output.expected, ("written twice",)))
    # Closing markers eaten: the end of the output loses one more of them each time, for as
    # long as it ends with one (after whitespace), as an engine that stops on it leaves it out.
    markers = closing_markers(spec)
    text, eaten = output.text, []
    while True:
        body = text.rstrip()
        marker = next((m for m in markers if body.endswith(m)), None)
        if marker is None:
            break
        text = body[: len(body) - len(marker)]
        eaten.append(marker)
        found.append(Deviation(CLOSING_EATEN, text, output.start, "stop", output.expected,
                               tuple(eaten)))
    # Value closing tags missing: every one, or only the last (what follows settles each).
    closer = value_closer(spec)
    if closer and output.expected["tool_calls"] and closer in output.text:
        found.append(Deviation(VALUE_CLOSERS_MISSING, output.text.replace(closer, ""), output.start,
                               "stop", output.expected, (closer,) * output.text.count(closer)))
        if output.text.count(closer) > 1:
            at = output.text.rindex(closer)
            found.append(Deviation(VALUE_CLOSERS_MISSING,
                                   output.text[:at] + output.text[at + len(closer):], output.start,
                                   "stop", output.expected, (closer,)))
    # A call object by key: the call objects of the render rewritten four ways.
    calls = spec.tool_calls
    json_call = json_call_object(calls.call) if calls is not None \
        and calls.arguments.style == ArgumentStyle.OBJECT \
        and calls.arguments.encoder.startswith("json") else None
    names = {name for name, _ in output.expected["tool_calls"]}
    if json_call is not None and names:
        keys = json_call.keys
        arguments = keys["arguments"]
        alias = ARGUMENTS_ALIASES.get(arguments[-1], "arguments")
        ways = {
            "keys reversed": lambda v: dict(reversed(list(v.items()))),
            f"{alias!r} for {arguments[-1]!r}": lambda v: _in_holder(
                v, arguments, lambda o: {alias if k == arguments[-1] else k: x
                                         for k, x in o.items()}),
            "an extra key": lambda v: {"type": "function", **v},
            "arguments as a JSON string": lambda v: _in_holder(
                v, arguments, lambda o: {k: json.dumps(x) if k == arguments[-1] else x
                                         for k, x in o.items()}),
        }
        if "id" in keys:
            ways["no id"] = lambda v: _in_holder(
                v, keys["id"], lambda o: {k: x for k, x in o.items() if k != keys["id"][-1]})
        for way, rewrite in ways.items():
            text = _rewritten_call_objects(output.text, keys["name"], names, rewrite)
            if text != output.text:
                found.append(Deviation(CALL_OBJECT_BY_KEY, text, output.start, "stop",
                                       output.expected, (way,), same_ids=way != "no id"))
    # A call id left out, with the literal before it: [CALL_ID]id between two literals.
    if calls is not None and names:
        layout = calls.call
        inside = range(json_call.first, json_call.last + 1) if json_call is not None else range(0)
        for i in range(1, len(layout) - 1):
            if i in inside:
                continue  # (in a JSON call object: "no id" above)
            before, after = layout[i - 1], layout[i + 1]
            if layout[i] == {"slot": "id"} and isinstance(before, str) and isinstance(after, str) \
                    and before.strip() and after.strip():
                text = re.sub(re.escape(before.strip()) + r"[A-Za-z0-9_-]+(?=\s*"
                              + re.escape(after.strip()) + ")", "", output.text)
                if text != output.text:
                    found.append(Deviation(CALL_ID_LEFT_OUT, text, output.start, "stop",
                                           output.expected, (before.strip(),), same_ids=False))
    # An empty calls section right after the content of a turn without calls (where the
    # section's end holds the end of turn, it ends the turn there: the turn's own ending goes).
    content = output.expected["content"]
    # (Not in a turn of messages with headers: its calls are messages, not a section.)
    if calls is not None and _MARKER.match(calls.section_start.strip()) \
            and calls.section_end.strip() and not names and content and content in output.text \
            and messages is None:
        at = output.text.rindex(content) + len(content)
        section = calls.section_start + calls.section_end
        ends = [section.index(m.strip()) + len(m.strip()) for m in spec.end_of_turn
                if m.strip() and m.strip() in section]
        # (a model's turn ends at its first end-of-turn marker, as the outputs are cut)
        text = output.text[:at] + (section[: min(ends)] if ends else section + output.text[at:])
        found.append(Deviation(EMPTY_SECTION, text, output.start, "stop", output.expected,
                               (section,)))
    found += _message_header_variants(output, spec, messages)
    if messages is None:
        # (in a turn of messages the calls are messages: these rules are the layouts')
        found += _whitespace_around_markers(output, spec)
        found += _calls_opener_left_out(output, spec)
    found += _list_without_wrapper(output, spec)
    found += _instructed_form(output, spec)
    if output.expected["tool_calls"]:
        found += _strings_as_literals(output, spec) + _values_without_quotes(output, spec)
    calls = spec.tool_calls
    if calls is not None and calls.wrappers and output.expected["tool_calls"]:
        start = calls.section_start.strip() \
            or next((p for p in calls.call if isinstance(p, str)), "").strip()
        at = output.text.find(start) if start else -1
        for wrapper in calls.wrappers:
            if at != -1:
                found.append(Deviation(OTHER_KINDS_WRAPPER,
                                       output.text[:at] + wrapper + output.text[at:], output.start,
                                       "stop", output.expected, (wrapper,)))
    return found


def _instructed_form(output: ModelOutput, spec: ProtocolSpec) -> list[Deviation]:
    """A turn of calls only, its calls section written as the template's tool instructions tell
    the model: without the section's markers (`instructed_bare`), the calls joined by each
    instructed separator (or the history's own)."""
    calls = spec.tool_calls
    expected = output.expected
    if calls is None or not (calls.instructed_bare or calls.instructed_separators) \
            or not expected["tool_calls"] or expected["content"] or expected["reasoning_content"] \
            or slot("id") in calls.call:
        return []
    written = [{"name": name, "arguments": arguments} for name, arguments in expected["tool_calls"]]
    section = calls.format(written)
    at = output.text.find(section)
    if at == -1:
        return []
    found = []
    for separator in calls.instructed_separators or [calls.separator]:
        told = replace(calls, separator=separator)
        body = told.format_list(written) if calls.instructed_bare else told.format(written)
        text = output.text[:at] + body + output.text[at + len(section):]
        found.append(Deviation(INSTRUCTED_FORM, text, output.start, "stop", expected, (separator,)))
    return found


def _strings_as_literals(output: ModelOutput, spec: ProtocolSpec) -> list[Deviation]:
    """A turn with calls whose key/value arguments write strings raw, with nothing after a
    value, in a literal notation (the runtime's KeyValueFormat.literal_strings): its calls with
    each string value written as a JSON string literal, then as a Python one."""
    calls = spec.tool_calls
    if calls is None or not _literal_forms(calls).literal_strings:
        return []
    found = [_rewritten_arguments(output, calls, STRING_LITERALS, encoder, replace(
        calls.arguments, value_encoders={**calls.arguments.value_encoders, "string": encoder}))
             for encoder in ("json", "python")]
    return [d for d in found if d is not None]


def _values_without_quotes(output: ModelOutput, spec: ProtocolSpec) -> list[Deviation]:
    """A turn with calls whose key/value arguments put every value in the layout's quotes,
    strings raw inside them, in a literal notation (the runtime's KeyValueFormat.value_quote):
    its calls with each value written as the Python literal it is (strings in Python's quotes),
    the layout's quotes left out."""
    calls = spec.tool_calls
    quote = _literal_forms(calls).value_quote if calls is not None else ""
    if calls is None or not quote:
        return []
    layout = calls.arguments.argument["string"]
    v = layout.index(slot("value"))
    middle, after = layout[v - 1], layout[v + 1]
    assert isinstance(middle, str) and isinstance(after, str)  # (value_quote: text around it)
    unquoted = layout[:v - 1] + [middle[:-1], slot("value"), after[1:]] + layout[v + 2:]
    encoders = {kind: "python" if encoder == "raw" else encoder
                for kind, encoder in calls.arguments.value_encoders.items()}
    found = _rewritten_arguments(output, calls, VALUES_UNQUOTED, quote, replace(
        calls.arguments, value_encoders=encoders, argument={"string": [p for p in unquoted if p]}))
    return [found] if found is not None else []


class _NoLiteralForms(NamedTuple):
    literal_strings: bool = False
    value_quote: str = ""


def _literal_forms(calls: ToolCallFormat) -> KeyValueFormat | _NoLiteralForms:
    """How the runtime reads the calls' key/value arguments (its KeyValueFormat, whose
    `literal_strings` and `value_quote` say which literal forms it reads); for arguments that
    are one object, neither."""
    if calls.arguments.style != ArgumentStyle.KV:
        return _NoLiteralForms()
    return KeyValueFormat(arguments_table(calls.arguments))


def _rewritten_arguments(output: ModelOutput, calls: ToolCallFormat, rule: str, way: str,
                         arguments: ArgumentFormat) -> Deviation | None:
    """The output with its calls section written again with another argument format: the
    deviation of `rule`, None where it changes nothing."""
    written = [{"name": name, "arguments": arguments}
               for name, arguments in output.expected["tool_calls"]]
    section = calls.format(written) if written else ""
    at = output.text.find(section) if section else -1
    if at == -1:
        return None
    text = output.text[:at] + replace(calls, arguments=arguments).format(written) \
        + output.text[at + len(section):]
    if text == output.text:
        return None
    return Deviation(rule, text, output.start, "stop", output.expected, (way,))


def _list_without_wrapper(output: ModelOutput, spec: ProtocolSpec) -> list[Deviation]:
    """A turn of calls only, whose calls section is a bracketed list between marker tokens
    and whose calls are `name(`: the list without those tokens (and without the turn's end)."""
    calls = spec.tool_calls
    expected = output.expected
    if calls is None or not expected["tool_calls"] or expected["content"] \
            or expected["reasoning_content"] or not calls.call \
            or calls.call[0] != {"slot": "name"} or not isinstance(calls.call[1], str) \
            or not calls.call[1].startswith("("):
        return []
    start, end = calls.section_start.strip(), calls.section_end.strip()
    opened, closed = re.fullmatch(r"(.*?)\s*\[", start), re.fullmatch(r"\]\s*(.*)", end)
    if not opened or not closed or not _MARKER.match(opened.group(1)) \
            or not _MARKER.match(closed.group(1)):
        return []
    at, to = output.text.find(start), output.text.rfind(end)
    if at == -1 or to == -1 or output.text[:at].strip():
        return []
    text = "[" + output.text[at + len(start):to] + "]"
    return [Deviation(LIST_WITHOUT_WRAPPER, text, output.start, "stop", expected,
                      (opened.group(1), closed.group(1)))]


def _calls_opener_left_out(output: ModelOutput, spec: ProtocolSpec) -> list[Deviation]:
    """The calls of a call turn without the marker that opens them, where what follows it
    in the layout is a marker of the call's own (not a JSON object: its keys tell a call)."""
    calls = spec.tool_calls
    if calls is None or not output.expected["tool_calls"]:
        return []
    first = next((p for p in calls.call if isinstance(p, str)), "").strip()
    section, end = calls.section_start.strip(), calls.section_end.strip()
    found = []

    def add(way, text):
        if text != output.text:
            found.append(Deviation(CALLS_OPENER_LEFT_OUT, text, output.start, "stop",
                                   output.expected, (way,)))

    def opens_only_calls(head):
        """Whether the call's own marker (`head` up to its first marker end) opens calls and
        nothing else in the render: one occurrence per call."""
        matched = re.match(r"[^>\]]*[>\]]?", head)
        assert matched is not None  # (the pattern matches any text, if only its empty start)
        marker = matched.group()
        return bool(_MARKER.match(marker)) \
            and output.text.count(marker) == len(output.expected["tool_calls"])

    if section:
        if not opens_only_calls(first) or section not in output.text:
            return []
        add("the section's opener", output.text.replace(section, ""))
        if end:
            add("the section's opener and end", output.text.replace(section, "").replace(end, ""))
    else:
        opener, _, rest = first.partition("\n") if "\n" in first else first.partition(" ")
        opener, rest = opener.strip(), rest.strip()
        closer = opener[:1] + "/" + opener[1:]
        if not opener or not opens_only_calls(rest) or not _MARKER.match(opener) \
                or closer not in output.text:
            return []
        without = re.sub(re.escape(opener) + r"\s*", "", output.text)
        add("the call's outer opener", without)
        add("the call's outer opener and its pair", re.sub(r"\s*" + re.escape(closer), "", without))
    return found


def _whitespace_around_markers(output: ModelOutput, spec: ProtocolSpec) -> list[Deviation]:
    """A space where the call layout writes a marker right next to other text (inside its
    literals, and before a literal that starts with a marker after a slot); a space after
    the content of a turn with content and a call, which the content keeps only where the
    render writes nothing between the content and the call's opener."""
    calls = spec.tool_calls
    names = [name for name, _ in output.expected["tool_calls"]]
    if calls is None or not names:
        return []
    found = []
    layout = calls.call
    loosened = {}
    for i, piece in enumerate(layout):
        if not isinstance(piece, str) or not piece.strip():
            continue
        if i > 0 and layout[i - 1] == {"slot": "arguments"} \
                and calls.arguments.style != ArgumentStyle.OBJECT:
            # (the word that ends key/value arguments is read as written: see docs/tolerance.md)
            continue
        loose = MARKER_BOUNDARY.sub(" ", piece)  # (where a marker ends or begins inside a word)
        if i > 0 and not isinstance(layout[i - 1], str) and piece[:1] in "<[":
            loose = " " + loose
        if loose != piece:
            loosened[piece] = loose
    # (only in the call layout's own text: the arguments, as the format writes them, stay as
    # they are)
    try:
        kept = [calls.arguments.format(arguments) for _, arguments in output.expected["tool_calls"]]
    except SpecError:
        kept = None  # (arguments the format writes some other way: their text is not known here)
    longest_first = sorted(set(kept or ()), key=len, reverse=True)
    cut = re.compile("(" + "|".join(re.escape(k) for k in longest_first if k) + ")") \
        if kept and any(kept) else None
    parts = cut.split(output.text) if cut else [output.text]
    for j in range(0, len(parts), 2):  # (the odd parts are the arguments)
        for piece, loose in loosened.items():
            parts[j] = parts[j].replace(piece, loose)
    spaced = "".join(parts)
    if kept is not None and spaced != output.text:
        found.append(Deviation(WHITESPACE, spaced, output.start, "stop", output.expected,
                               ("spaces around the call's markers",)))
    arguments = calls.arguments
    if arguments.style == ArgumentStyle.KV and arguments.separator.strip() \
            and not arguments.separator[-1:].isspace() \
            and "native" not in arguments.value_encoders.values():
        # (`a=1, b=2` where the template writes `a=1,b=2`; not inside a value in the format's
        # own notation, whose separator is the same: docs/tolerance.md)
        spaced_out = _rewritten_arguments(output, calls, WHITESPACE, "a space after the "
                                          "arguments' separator",
                                          replace(arguments, separator=arguments.separator + " "))
        found += [spaced_out] if spaced_out is not None else []
    content = output.expected["content"]
    first = calls.section_start if calls.section_start.strip() \
        else next((p for p in layout if isinstance(p, str)), "")
    opener = first.strip().split()[0] if first.strip() else ""
    if content and opener and content in output.text:
        at = output.text.index(content) + len(content)
        between = output.text[at:output.text.find(opener, at)] \
            if opener in output.text[at:] else None
        if between is not None:
            # (the render writes whitespace between without a space, or none: the space is the
            # content's)
            expected = {**output.expected, "content": content + " "} \
                if not between.strip() and " " not in between else output.expected
            found.append(Deviation(WHITESPACE, output.text[:at] + " " + output.text[at:],
                                   output.start, "stop", expected, ("a space after the content",)))
    return found


def _message_header_variants(output: ModelOutput, spec: ProtocolSpec,
                             messages: Mapping[str, Any] | None) -> list[Deviation]:
    """A call turn written as messages with headers, its call messages written the ways
    models write them (the header's fields are read by what they are, not where they sit)."""
    names = [name for name, _ in output.expected["tool_calls"]]
    if messages is None or not names:
        return []
    calls = spec.tool_calls
    assert calls is not None  # (messages with headers are the calls' format)
    head, channel, body = calls.call[1], messages["channel"], messages["body"]
    assert isinstance(head, str)  # (the call message's header, a literal)
    # The call's header as rendered: <role fields: the recipient><channel><its name><fields><body>.
    header = head.strip()[len(channel):len(head.strip()) - len(body)]
    call_channel, _, fields = header.strip().partition(" ")
    fields = f" {fields}" if fields else ""
    reasoning_channel = next(c for c, kind in messages["channels"].items() if kind == "reasoning")
    recipient = calls.section_start.strip()
    start, end, call_end = messages["start"], messages["end"], messages["call_end"]
    rendered = {name: calls.section_start + name + head for name in names}
    found = []

    def add(way, text, expected=None):
        if text != output.text:
            found.append(Deviation(MESSAGE_HEADERS, text, output.start, "stop",
                                   expected or output.expected, (way,)))

    def rewritten(header):
        text = output.text
        for name, written in rendered.items():
            text = text.replace(written, header(name))
        return text

    add("recipient in the channel header", rewritten(lambda n: f"{channel}{call_channel} "
                                                               f"{recipient}{n}{fields}{body}"))
    if fields:
        add("content type left out",
            rewritten(lambda n: f" {recipient}{n}{channel}{call_channel}{body}"))
    add("the call on the reasoning channel",
        rewritten(lambda n: f" {recipient}{n}{channel}{reasoning_channel}{fields}{body}"))
    if messages["namespace"]:
        add("a recipient without the namespace",
            rewritten(lambda n: f" {messages['recipient']}{n}{head}"))
    ends_with_call = output.text.rstrip().endswith(call_end)
    if ends_with_call:
        add("the call message ended by a message end", output.text.rstrip()[: -len(call_end)] + end)
    first = output.text.find(rendered[names[0]])
    if output.expected["content"] is None and first != -1:
        preamble = f"{channel}{call_channel}{body}{PREAMBLE}{end}{start}"
        add("a preamble message before the call",
            output.text[:first] + preamble + output.text[first:],
            {**output.expected, "content": PREAMBLE})
    if len(names) == 1 and ends_with_call and first != -1:
        add("a second call message", output.text.rstrip() + start + output.text[first:].rstrip(),
            {**output.expected, "tool_calls": output.expected["tool_calls"] * 2})
    return found
