"""A family's Hugging Face `response_template`, derived from its ProtocolSpec.

transformers 5 (`transformers.utils.chat_parsing`) parses a model's raw output with a
declarative template read from tokenizer_config.json: `fields`, each a region of the output
between an open and a close anchor (literals, or regexes in the `regex` module's dialect),
whose text a content parser reads (`text`, `json`, `xml-inline`, `python-call-list`) and a
`transform` shapes; the one field without an open anchor takes the text outside the others.
Regions do not nest: inside one, only its close is looked for. Before the output, the parser
reads the prompt from the end of the last `start_anchor` match, so a prompt that opens
reasoning starts the output inside it.

Here: reasoning is a region between its markers, content is the open-less field (or a region
between its wrapper's markers), and tool calls are one region per call (the name captured by
the open anchor, the arguments read as JSON or as key/value tags) or one region per calls
list (a JSON array, or a Python call list). Every marker comes from an untrusted template:
where it goes into a regex it is escaped (`re.escape`); literal anchors are escaped by
transformers itself. A construct the format cannot express raises `CannotExport` naming it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import CannotExport, InputError
from ..grammar.reading import (
    cut_at_end,
    end_of_turn_markers,
    message_format,
    one_call_object,
    section_with_content,
    segment_format,
)
from ..probe.spans import Boundaries
from ..runtime import KeyPath, json_call_object, value_at
from ..spec import ArgumentStyle, ProtocolSpec, Start, ToolCallFormat, slot

VERSION = 1  # the response_template version transformers 5 reads
# The field that takes the end of turn and all after it (see _after_end_of_turn_field): named
# as tplparse's parser reports that text (its error kind), never a key of the message.
AFTER_END_OF_TURN = "text_after_end_of_turn"


def _char_class(chars) -> str:
    """One of `chars` (a set of characters), as a regex class (runs of three or more as ranges)."""
    points = sorted(map(ord, chars))
    runs: list[list[int]] = []
    for p in points:
        if runs and runs[-1][1] == p - 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return "[" + "".join(re.escape(chr(a))
                         + ("" if a == b else ("-" if b > a + 1 else "") + re.escape(chr(b)))
                         for a, b in runs) + "]"


# The first transformers release whose response parser reads each feature an export may use,
# read in each release's own transformers/utils/chat_parsing (the published wheels): the
# content parsers its CONTENT_PARSERS lists, the field keys its loader accepts (an unknown one
# is a ValueError there), its transform placeholders, and ResponseParser's `tools=`.
# 5.12.1 has no chat_parsing package (only the older chat_parsing_utils).
TRANSFORMERS_SINCE = {
    # the format: fields, open/close patterns, start_anchor_pattern, repeats,
    "response_template": "5.13.0",
                                    # transform, transform_each; get_response_parser(prefix=)
    "text": "5.13.0",
    "json": "5.13.0",
    "xml-inline": "5.13.0",
    # xml-inline values typed by the tool's JSON Schema (else all strings)
    "tools= typing": "5.15.0",
    # a repeated text field's regions joined (5.13-5.15 refuse the key)
    "join": "5.16.0",
    # `{content.name}`: a key of the parsed value (5.13-5.15: whole names only)
    "transform paths": "5.16.0",
    "python-call-list": "5.24.0",
}
# A transform placeholder that names a key of a value (`{content.name}`), not the whole value.
_PATH_PLACEHOLDER = re.compile(r"\{\w+(?:\.\w+)+\}")
_RELEASE = re.compile(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(\.?(?:a|b|rc|dev)\d*)?(?:\.?post\d*)?"
                      r"(?:\+[\w.]+)?")


def transformers_features(template: dict) -> dict[str, str]:
    """feature -> the first transformers release that reads it, for each feature `template`
    (an export) uses."""
    used = {"response_template"}
    for field in template["fields"].values():
        used.add(field.get("content", "text"))
        if field.get("content") == "xml-inline":
            used.add("tools= typing")
        if "join" in field:
            used.add("join")
        if _PATH_PLACEHOLDER.search(json.dumps(field.get("transform", ""))):
            used.add("transform paths")
    return {feature: TRANSFORMERS_SINCE[feature] for feature in sorted(used, key=_order)}


def _order(feature: str) -> tuple:
    return (_release(TRANSFORMERS_SINCE[feature]), list(TRANSFORMERS_SINCE).index(feature))


def transformers_needed(template: dict) -> str:
    """The first transformers release that reads every feature `template` uses."""
    return max(transformers_features(template).values(), key=_release)


def transformers_missing(template: dict, version: str) -> dict[str, str]:
    """The features of `template` that transformers `version` does not read (feature -> the
    release that first does); an InputError when `version` is no release number."""
    have = _release(version)
    return {f: since for f, since in transformers_features(template).items()
            if have < _release(since)}


def _release(version: str) -> tuple:
    """A release number as a comparable tuple: a pre-release (rc, dev) before its release."""
    m = _RELEASE.fullmatch(version.strip())
    if m is None:
        raise InputError(f"transformers {version!r}: not a release number (as 5.16.0)")
    major, minor, micro, pre = m.groups()
    return int(major), int(minor or 0), int(micro or 0), 0 if pre else 1


# What a call's name and id may be made of: the runtime's own sets, mirrored (the runtime
# package does not export its lexical layer, compiler/runtime/text.py; the test module holds
# these equal to its NAME_CHARS and ID_CHARS), so that transformers opens a call exactly where
# tplparse's parser reads one. An id has no `.` or `:`.
_LETTERS_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
NAME_CHARS = frozenset(_LETTERS_DIGITS + "_.-")
ID_CHARS = frozenset(_LETTERS_DIGITS + "_-")
_NAME = _char_class(NAME_CHARS) + "+"
_ID = _char_class(ID_CHARS) + "*"
_INDEX = r"[0-9]+"
# A placeholder in a transform is `{name}` or `{a.b}` of word characters only (transformers'
# _PLACEHOLDER): a JSON key from the template that is not one cannot be named in a transform.
_WORD = re.compile(r"\w+")


def response_template(spec: ProtocolSpec) -> dict:
    """The family's response_template (plain data, ready for tokenizer_config.json), or
    CannotExport naming the first construct of the spec that the format cannot express."""
    if spec.tool_calls is not None and message_format(spec, Boundaries(())) is not None:
        raise CannotExport("channel messages", "a turn is a sequence of messages with headers "
                                               "(harmony's <|channel|>…<|message|>); a field's "
                                               "region cannot be told by the header before it")
    segments = segment_format(spec, Boundaries(())) if spec.tool_calls is not None else None
    if segments and segments["end"] in [m.strip() for m in end_of_turn_markers(spec)]:
        raise CannotExport("calls in a turn of their own after the end of turn",
                           "the template writes the calls after the content turn's end marker "
                           f"({segments['end']!r}, then {segments['header']!r}); the response "
                           "parser ends the message at that marker")
    fields: dict[str, dict] = {}
    calls = _tool_calls_field(spec) if spec.tool_calls is not None else None
    if spec.reasoning is not None:
        fields["reasoning_content"] = _reasoning_field(spec, calls)
    if calls is not None:
        fields["tool_calls"] = calls
    fields["content"] = _content_field(spec, listed=calls is not None
                                       and calls.get("transform_each", False))
    if _ends(spec):
        fields[AFTER_END_OF_TURN] = _after_end_of_turn_field(spec)
    return {
        "version": VERSION,
        "defaults": {"role": "assistant"},
        "start_anchor_pattern": _start_anchor(spec),
        "fields": fields,
    }


# --- regex pieces ------------------------------------------------------------------------

def _lit(text: str) -> str:
    """`text` as a regex: escaped, each run of whitespace any run (templates differ in
    whitespace where models do too, and a region's text is stripped anyway)."""
    return "".join(r"\s*" if part.isspace() else re.escape(part)
                   for part in re.split(r"(\s+)", text) if part)


def _alternatives(texts) -> str:
    """Any of `texts`, as one regex atom (the longer first, as transformers orders literals)."""
    texts = sorted({t for t in texts if t}, key=len, reverse=True)
    return _lit(texts[0]) if len(texts) == 1 else "(?:" + "|".join(_lit(t) for t in texts) + ")"


# Where an anchor may take the whitespace before it: at the position the search starts from
# (`\G`: right after the region before), or after the last non-space character before the run
# (`\S\K`, the match starting after it; the `\G` one first, else a marker begun right at the
# search's start is, streamed, taken for that non-space character and not held back). Not a
# bare leading `\s*`: searched from every position of a run of n spaces, that is n² steps (a
# prompt or output of spaces would stall the parser), and so are a lookbehind (`(?<!\s)\s*`)
# and `(?:\G|\S\K)\s*` in the partial matching transformers streams with; two whole
# alternatives are read in one pass (tests/benchmarks/bench_response_template.py).
_SPACED = (r"\G\s*(?:", r")|\S\K\s*(?:", ")")


def _leading_space(regex: str) -> str:
    r"""`regex` after any whitespace: what the template writes between regions (a newline before
    a call) is then no region of its own. (transformers' own Qwen template opens with `\s*`.)"""
    while regex.startswith(r"\s*"):  # (`\s*\s*` reads a run of n spaces n² ways)
        regex = regex[len(r"\s*"):]
    a, b, c = _SPACED
    return a + regex + b + regex + c


def _unspaced(pattern: str) -> str:
    """The regex that _leading_space put after the whitespace."""
    a, b, c = _SPACED
    n = (len(pattern) - len(a) - len(b) - len(c)) // 2
    assert _leading_space(pattern[len(a):len(a) + n]) == pattern
    return pattern[len(a):len(a) + n]


# --- where the output starts ---------------------------------------------------------------

def _start_anchor(spec: ProtocolSpec) -> str:
    """A regex whose last match ends where the output's own text starts in the prompt.

    The spec does not keep the assistant header, but it knows what decides the start state:
    the end of the generation prompt. Where a mode starts inside reasoning, the prompt ends
    with the reasoning marker (in the mode's tail, or the header: Qwen3.5's
    `<|im_start|>assistant\\n<think>\\n`) and whitespace: the anchor matches (zero-width) right
    before that marker, and the parser reads the marker as the open of the reasoning region.
    Where a mode starts in content and its prompt ends with content's wrapper opener (GLM-4's
    `<|assistant|>`, which the template writes before every turn's content: the spec's
    content_start), likewise right before that opener: the output's text is then read inside
    the region the prompt opened (_content_field), as tplparse's parser reads it, not dropped
    as text outside any region. Otherwise it matches at the very end, and the output starts
    in content. Never nothing: an anchor that does not match makes transformers read the
    whole prompt (history included)."""
    openers = set(_prompt_opens_content(spec))
    for mode in spec.modes.values():
        if mode.start != Start.REASONING:
            continue
        opener = spec.reasoning.start.strip() if spec.reasoning is not None else ""
        if not opener:
            raise CannotExport("reasoning that starts without a marker",
                               "the output starts inside reasoning that no marker opens; "
                               "only the one field without an open anchor could take it, "
                               "and that one is content")
        at = mode.tail.rfind(opener)
        after = mode.tail[at + len(opener):] if at != -1 else mode.tail
        if after.strip():
            raise CannotExport("a generation prompt that writes text after the reasoning marker",
                               f"{mode.tail!r} ends with text that is not the model's")
        openers.add(opener)
    if not openers:
        return r"\Z"
    before = _alternatives(openers)
    # (`regex` takes a variable-length lookbehind: not at the end when the prompt ends with a
    # marker.)
    # (The lookbehind after `\Z`, so it is tried at the end only: before it, at every position
    # of a run of spaces, it would read the run back, n² steps.)
    return rf"(?={before}\s*\Z)|\Z(?<!{before}\s*)"


def _prompt_opens_content(spec: ProtocolSpec) -> list[str]:
    """Content's wrapper opener, where a mode's generation prompt ends with it and starts the
    output in content (the prompt opened the wrapper; the output as rendered has no opener of
    its own); else none."""
    start = spec.content_start.strip()
    if start and any(mode.start == Start.CONTENT
                     and (mode.header + mode.tail).rstrip().endswith(start)
                     for mode in spec.modes.values()):
        return [start]
    return []


# --- reasoning and content ---------------------------------------------------------------

def _reasoning_field(spec: ProtocolSpec, calls: dict | None) -> dict:
    r = spec.reasoning
    assert r is not None  # (asked for a family with reasoning only)
    if not r.start.strip() or not r.end.strip():
        if any(m.start == Start.REASONING for m in spec.modes.values()):
            _start_anchor(spec)  # (raises, naming it)
        raise CannotExport("a reasoning block without both markers",
                           f"start {r.start!r}, end {r.end!r}")
    # A turn may end inside reasoning (the model stopped thinking at its end of turn): the end
    # of turn closes the region too, else transformers keeps the marker in the reasoning; right
    # before the marker (zero-width), which then opens the field after the end of turn. Not a
    # marker the reasoning's end starts with (or that starts with it): streamed, transformers
    # commits the shorter of two literals as soon as the text after it differs from the longer.
    end = r.end.strip()
    ends = [m for m in _ends(spec) if not (m.startswith(end) or end.startswith(m))]
    # (The whitespace before the marker is taken with it: a run of it before reasoning is no
    # content region of its own, see _content_field.)
    field = {"open_pattern": _leading_space(re.escape(r.start.strip()))}
    before = [_close_before(ends)] if ends else []
    if calls is not None and r.tool_call_ends_reasoning:
        # A call ends the reasoning (the spec's policy, as tplparse's parser reads it): the
        # region closes also right before where the calls field opens (zero-width, so that
        # field then opens there), else transformers reads the call as reasoning text.
        opener = _unspaced(calls["open_pattern"]).replace(f"(?P<name>{_NAME})", _NAME)
        before.append(f"(?={opener})")
    if before:
        field["close_pattern"] = "|".join([re.escape(end), *before])
    else:
        field["close"] = end  # (a literal: transformers commits it as soon as it is complete)
    field["content"] = "text"
    return field


def _after_end_of_turn_field(spec: ProtocolSpec) -> dict:
    """The end of turn, and everything after it: tplparse's parser ends the message at the
    marker and reports the text after it (`text_after_end_of_turn`), reading none of it; an
    engine that does not strip its stop token passes the marker on, and one that does not stop
    there (a marker that is no stop token of its own: a Llama-3 header, another eos after it)
    the next turn's text too. Here the marker opens a region that nothing closes, so no other
    field opens after it; the region's text streams under this field's name (reported, as
    tplparse reports it) and its value is empty (a transform that is a literal ""), which the
    message leaves out. Every close of another field at an end of turn is zero-width (right
    before the marker), so that this one opens there; the whitespace before the marker is taken
    with it (a run of it after a call would be an empty content region: see _content_field)."""
    return {"open_pattern": _leading_space(_alternatives(_ends(spec))), "content": "text",
            "transform": ""}


def _content_field(spec: ProtocolSpec, listed: bool = False) -> dict:
    """Content: the field without an open anchor (where text outside reasoning and calls
    goes), closed by an end-of-turn marker; or, with a wrapper that every turn writes, the
    region between its markers (text outside it is dropped, as transformers does with a
    template that has no open-less field). Several content regions are joined (`join`): text
    the template writes between two regions (a newline after the calls) is a region of its
    own, and transformers would otherwise overwrite the content with it.

    Each region's text is stripped (transformers' `text` parser) and joined by a blank line:
    content before and after a call (`Sure.\n<tool_call>…</tool_call>\nAfter.`) reads as
    tplparse reads it, `Sure.\n\nAfter.`, where the template writes a newline on each side,
    and never glued. A run of whitespace between two regions is no region of its own (its
    empty text would add a blank line): the anchor after it takes it (the calls' and
    reasoning's opens, content's own close at the output's end, and the end of turn, which
    opens the field after it: _leading_space, _after_end_of_turn_field). Content is never
    closed by an end of turn itself: transformers would read the text after it as content."""
    ends = _ends(spec)
    closes = []
    tc = spec.tool_calls
    section_end = cut_at_end(tc.section_end, ends).strip() if tc is not None else ""
    if section_end and not listed and not any(m.startswith(section_end) or section_end.startswith(m)
                                              for m in ends):
        # The calls section's end, after the last call's own close, is content's too: a
        # region with nothing in it, which sets nothing (else its text would be content).
        # (Not one an end of turn starts, or starts with: see _reasoning_field. Not where the
        # calls are one list read whole: its end, `]`, is inside that region, and in content
        # a `]` of the text, as in `x[0]`, would close it and be dropped.)
        closes.append(section_end)
    start, end = spec.content_start.strip(), spec.content_end.strip()
    field = {"content": "text", "repeats": True, "join": "\n\n"}
    if start or end:
        for kind, layout in spec.turns.items():
            if slot("content") not in layout:
                continue
            at = layout.index(slot("content"))
            prev = layout[at - 1] if at else ""
            before = prev if isinstance(prev, str) else ""
            following = layout[at + 1] if at + 1 < len(layout) else ""
            after = following if isinstance(following, str) else ""
            if not before.rstrip().endswith(start) or not after.lstrip().startswith(end):
                raise CannotExport("content written both inside and outside its wrapper",
                                   f"the {kind} turn writes its content without {start or end!r}; "
                                   "a region has one open anchor, or none")
        if not start:
            raise CannotExport("a content wrapper without an opening marker")
        if spec.reasoning is not None and start in (spec.reasoning.start.strip(),
                                                    spec.reasoning.end.strip()):
            raise CannotExport("content and reasoning opened by the same marker",
                               f"both are opened by {start!r}")
        if _prompt_opens_content(spec):
            # (The prompt wrote the opener, where the start anchor has the parser read it; a
            # model that writes it again is not read as content: tplparse's parser takes one
            # opener, after whitespace, at content's start, and streams none of the whitespace
            # around it (the rendered turn's line break after the header). The regex is pending
            # at the prompt's end until the output's first other character.)
            field["open_pattern"] = rf"{re.escape(start)}(?:\s*{re.escape(start)})?\s*"
        else:
            field["open"] = start
    field.update(_content_close(start, end, closes, ends + _calls_after_open_content(spec)))
    return field


def _calls_after_open_content(spec: ProtocolSpec) -> list[str]:
    """The calls' opening marker where a turn writes its calls right after a content wrapper
    that has no end (`<|assistant|>\n{content}\n<tool_call>…`): the wrapper's region closes
    right before it, as before an end of turn, or the calls would be its text."""
    tc = spec.tool_calls
    if tc is None or spec.content_end.strip() or not spec.content_start.strip():
        return []
    follows = any(layout[at + 1: at + 2] == [slot("calls")]
                  for layout in spec.turns.values()
                  for at in range(len(layout)) if layout[at] == slot("content"))
    opener = (tc.section_start.split() or [""])[0]
    return [opener] if follows and opener else []


def _content_close(start: str, end: str, closes: list[str], ends: list[str]) -> dict:
    """Content's close: its wrapper's end, or (open-less, or a wrapper with no end) `closes`
    and the output's end. A region its wrapper opened watches its own close only: it closes
    right before an end of turn too (a turn that ends without the wrapper's end, Cohere's
    `<|START_RESPONSE|>…<|END_OF_TURN_TOKEN|>`), and before the calls' opener where calls
    follow it (`ends` holds that opener too), where the field after it opens. The open-less
    one is closed by that field's open."""
    before = _close_before(ends) if start and ends else ""
    if end and before:
        return {"close_pattern": re.escape(end) + "|" + before if end not in ends else before}
    if end:
        return {"close": end}  # (a literal: transformers commits it as soon as it is complete)
    # (Trailing whitespace at the output's end too. Not a bare `\Z`: streamed, the regex
    # module reports that complete match at the buffer's end over the partial one of an end
    # of turn just begun there, whose first characters would then be content. Nor at a run
    # of whitespace inside one of the markers this pattern watches, begun at the buffer's end
    # (`</｜DSML｜ calls>` streamed up to its space): that run would be the complete match, and
    # the marker's first word content. Each literal's whitespace any, as tplparse's parser
    # reads the section's end: see _lit.)
    watched = sorted(set(closes), key=len, reverse=True)
    literals = "".join(_lit(m) + "|" for m in watched)
    at_end = r"(?<=\s)\Z" + _not_inside(watched + (ends if before else []))
    return {"close_pattern": _leading_space(literals + (before + "|" if before else "") + at_end)}


def _not_inside(markers: list[str]) -> str:
    r"""A lookbehind: the text does not end with one of `markers` begun up to a run of
    whitespace inside it (`</｜DSML｜ ` of `</｜DSML｜ calls>`); "" where none has such a run.
    (After `\Z`, so it is tried at the end only, reading back the run once.)"""
    heads = {m.strip()[:run.start()] for m in markers for run in re.finditer(r"\s+", m.strip())
             if run.start()}
    return rf"(?<!{_alternatives(heads)}\s*)" if heads else ""


# --- tool calls ----------------------------------------------------------------------------

def _tool_calls_field(spec: ProtocolSpec) -> dict:
    tc = spec.tool_calls
    assert tc is not None  # (asked for a family with calls only)
    if section_with_content(spec) is not None:
        raise CannotExport("content inside the calls section",
                           "the calls section's markers are written around the content too")
    call = list(tc.call)
    if slot("arguments") not in call:
        raise CannotExport("calls without arguments")
    listed = _calls_list(spec)
    if listed is not None:
        return listed
    return _call_regions(spec)


def _ends(spec: ProtocolSpec) -> list[str]:
    return [m.strip() for m in end_of_turn_markers(spec)]


def _after_value(close: str, last: str) -> str:
    r"""`close` (a regex) where it follows a complete value, one that ends with `last` (a JSON
    object's `}`, a list's `]`) and whitespace: the marker written inside a string of the
    value (`{"q": "a</tool_call>b"}`) is then its text, not the region's end, which transformers
    would cut the value at and fail to parse. (The lookbehind after the marker, so it is tried
    only where the marker is: before it, at every position, it would read back over a run of
    spaces each time.) A marker right after that character inside a string still ends it."""
    return rf"{close}(?<={re.escape(last)}\s*{close})"


def _close_before(texts) -> str:
    """A zero-width close: right before the next of `texts` (a region that no marker of its
    own ends, closed where what follows it starts; at the end of the output it ends anyway)."""
    # (Not `(?=\s*…)`: tried at every position of a run of spaces, that reads the run each
    # time. The spaces before the next marker stay in the region, which its parser skips.)
    return rf"(?={_alternatives(texts)})"


def _calls_list(spec: ProtocolSpec) -> dict | None:
    """A calls section that is one list (`[TOOL_CALLS][{…}, {…}]`,
    `<|tool_call_start|>[f(a=1)]<|tool_call_end|>`): one region from the marker before the list
    to the marker after it, read whole, each item made a call (`transform_each`). None where the
    section is not a bracketed list."""
    tc = spec.tool_calls
    assert tc is not None  # (asked for a family with calls only)
    start, end = tc.section_start.rstrip(), cut_at_end(tc.section_end, _ends(spec)).lstrip()
    if not start.endswith("[") or not end.startswith("]"):
        return None
    opener, closer = start[:-1].strip(), end[1:].strip()
    python = _python_call(tc)
    if python is None:
        # (an index the template numbers its calls by is a number in the object: any will do to
        # find the keys)
        found = json_call_object([("0" if p in (slot("index"), slot("index1")) else p)
                                  for p in tc.call])
        if found is None:
            raise CannotExport("a JSON list of calls that are not {name, arguments} objects",
                               f"a call is written {_shown(tc.call)}; a transform takes a "
                               "call's name from a fixed key")
        keys = found.keys
        if (found.first != 0 or found.last != len(tc.call) - 1 or found.before.strip()
                or found.after.strip()):
            return None
        _json_arguments(tc)
        _check_sample_list(tc, keys)
        function = {"name": _placeholder(keys["name"]),
                    "arguments": _placeholder(keys["arguments"])}
        content = {"content": "json"}
    else:
        function = {"name": "{name}", "arguments": "{arguments}"}
        content = {"content": "python-call-list"}
    if not opener:
        raise CannotExport("a calls list that no marker opens",
                           f"the section starts {tc.section_start!r}")
    field = {"open_pattern": _leading_space(_wrapped(tc, _lit(opener))), **content,
             "transform": {"type": "function", "function": function}, "transform_each": True}
    field.update({"close_pattern": _after_value(_lit(closer), "]")} if closer else
                 {"close_pattern": _close_before(_ends(spec))} if _ends(spec) else {})
    return field


def _python_call(tc: ToolCallFormat) -> bool | None:
    """True for Python calls (`name(key=value, …)`, values as Python or JSON literals), the
    notation transformers' `python-call-list` reads; None for other call layouts."""
    args = tc.arguments
    if list(tc.call) != [slot("name"), "(", slot("arguments"), ")"] \
            or args.style != ArgumentStyle.KV:
        return None
    layouts = {json.dumps(layout) for layout in args.argument.values()}
    if layouts != {json.dumps([slot("key"), "=", slot("value")])} or args.separator.strip() != ",":
        return None
    for kind, encoder in args.value_encoders.items():
        quoted = encoder == "quoted" and list(args.quotes) in (["'", "'"], ['"', '"'])
        if not (quoted or encoder.startswith("json") or encoder == "python"):
            raise CannotExport("pythonic calls with values it cannot read",
                               f"a {kind} value is written {encoder!r}; python-call-list reads "
                               "Python or JSON literals")
    return True


def _check_sample_list(tc: ToolCallFormat, keys: dict[str, KeyPath]) -> None:
    """The section of two calls, written by the spec, must hold one JSON array of the call
    objects (the separator a comma, nothing else between them)."""
    calls = [{"name": "first_tool", "arguments": {"a": 1}},
             {"name": "second_tool", "arguments": {}}]
    text = tc.section_start.rstrip()[-1] + tc.format_list(calls) + "]"
    try:
        items = json.loads(text)
    except ValueError:
        raise CannotExport("a calls list that is not a JSON array",
                           f"two calls are written {text!r}") from None
    names = [value_at(item, keys["name"]) if isinstance(item, dict) else None for item in items]
    if names != ["first_tool", "second_tool"]:
        raise CannotExport("a calls list that is not a JSON array of the calls",
                           f"two calls are written {text!r}")


def _placeholder(path: KeyPath) -> str:
    """A transform's placeholder for what a call object holds at `path` (`{function.name}`)."""
    for key in path:
        if not _WORD.fullmatch(key):
            raise CannotExport("a JSON call object whose keys are not words",
                               f"{key!r} cannot be named in a transform placeholder")
    return "{" + ".".join(path) + "}"


def _json_arguments(tc: ToolCallFormat) -> None:
    args = tc.arguments
    if args.style == ArgumentStyle.OBJECT and not args.encoder.startswith("json"):
        raise CannotExport("arguments written as a Python literal" if args.encoder == "python"
                           else f"arguments encoded {args.encoder!r}",
                           "the json parser reads JSON only")


def _wrapped(tc: ToolCallFormat, regex: str) -> str:
    """`regex`, after any marker the template writes before some kinds of call
    (`<|python_tag|>`)."""
    if not tc.wrappers:
        return regex
    return rf"(?:{_alternatives(w.strip() for w in tc.wrappers)}\s*)?{regex}"


def _call_regions(spec: ProtocolSpec) -> dict:
    """One region per call: the open anchor is the call's text up to its arguments (the name
    captured; the calls section's start, when there is one, optional in front of it), the
    close is its text after them (the section's end, after the last call, is content's
    close: see _content_field)."""
    tc = spec.tool_calls
    assert tc is not None  # (asked for a family with calls only)
    # (a section that holds one call and opens its JSON object, Llama 3.1's `{"name": "`, is the
    # call's own text)
    section_start, call, section_end = one_call_object(tc, _ends(spec))
    if tc.separator.strip():
        raise CannotExport("calls separated by text",
                           f"the template writes {tc.separator!r} between calls")
    found = json_call_object(call)
    if found is not None:
        first, before, last, after, keys = (found.first, found.before, found.last, found.after,
                                            found.keys)
        head = [p for p in call[:first] if isinstance(p, str)] + [before]
        if len(head) != first + 1 or not all(isinstance(p, str) for p in call[last + 1:]):
            raise CannotExport("a JSON call object with slots around it")
        opening, closing = "".join(head), after + "".join(call[last + 1:])
        if not opening.strip():
            if section_start.strip():
                # (A zero-width open on the object's own text, `{"name": "`, would open a
                # call on that text anywhere in content too, where tplparse reads text.)
                raise CannotExport("a call written as a bare JSON object",
                                   "no marker opens each call: the section's "
                                   f"{section_start.strip()!r} is written before the first one "
                                   "only, and a region needs an open anchor")
            raise CannotExport("a call written as a bare JSON object",
                               "no marker opens it: a region needs an open anchor")
        _json_arguments(tc)
        body = {"content": "json"}
        function = {"name": "{content." + _placeholder(keys["name"])[1:-1] + "}",
                    "arguments": "{content." + _placeholder(keys["arguments"])[1:-1] + "}"}
        open_regex = _lit(opening)
    else:
        at = call.index(slot("arguments"))
        head, tail = call[:at], call[at + 1:]
        if slot("name") not in head or not isinstance(head[0], str) or not head[0].strip():
            raise CannotExport("a call with no marker before its name",
                               f"the call is written {_shown(call)}")
        if not all(isinstance(p, str) for p in tail):
            raise CannotExport("a call with slots after its arguments",
                               f"the call is written {_shown(call)}")
        parts: list[str] = []
        for at, piece in enumerate(head):
            if isinstance(piece, str):
                parts.append(_lit(piece))
            elif piece == slot("name"):
                parts.append(rf"(?P<name>{_NAME})")
            elif piece in (slot("index"), slot("index1")):
                parts.append(_INDEX)
            elif piece == slot("id") and at and isinstance(head[at - 1], str) \
                    and at + 1 < len(head) and isinstance(head[at + 1], str) \
                    and head[at + 1].strip():
                # An id between literals may be left out, the literal before it with it, as
                # tplparse's parser reads it (`[TOOL_CALLS]name[ARGS]{…}` where the layout
                # writes `[TOOL_CALLS]name[CALL_ID]id[ARGS]{…}`).
                parts[-1] = f"(?:{parts[-1]}{_ID})?"
            elif piece == slot("id"):
                parts.append(_ID)
            else:
                raise CannotExport(f"a call's {piece['slot']} slot")
        open_regex = "".join(parts)
        closing = "".join(tail)
        body = _arguments_body(tc)
        function = {"name": "{name}", "arguments": "{content}"}
    section_start, section_end = section_start.strip(), cut_at_end(section_end, _ends(spec)).strip()
    if section_start:
        open_regex = rf"(?:{_lit(section_start)}\s*)?" + open_regex
    field: dict[str, Any] = {"open_pattern": _leading_space(_wrapped(tc, open_regex))}
    # (The section's end is not in the call's close: an optional tail there is committed
    # without it when the stream splits it; content's close takes it, see _content_field.)
    if closing.strip() and body["content"] == "json":
        field["close_pattern"] = _after_value(_lit(closing.strip()), "}")
    elif closing.strip() and not any(c.isspace() for c in closing.strip()):
        # (a literal: transformers commits it as soon as it is complete)
        field["close"] = closing.strip()
    elif closing.strip():
        field["close_pattern"] = _lit(closing.strip())
    else:
        # (no text of its own after the arguments: the call ends where the next call, the
        # section's end or the turn's end starts)
        first_text = next(p for p in call if isinstance(p, str)).strip()
        field["close_pattern"] = _close_before([first_text, section_end, *_ends(spec)])
    field.update({**body, "repeats": True, "transform": {"type": "function", "function": function}})
    return field


def _arguments_body(tc: ToolCallFormat) -> dict:
    """How a call's arguments are read: one JSON object, or key/value tags (`xml-inline`,
    its tag pattern built from the argument layouts)."""
    args = tc.arguments
    if args.style == ArgumentStyle.OBJECT:
        _json_arguments(tc)
        return {"content": "json"}
    layouts = list(args.argument.values())
    shapes = {tuple(isinstance(p, str) or p["slot"] for p in layout) for layout in layouts}
    if len(shapes) != 1:
        raise CannotExport("key/value arguments written in layouts of different shapes")
    shape = shapes.pop()
    first_piece = layouts[0][0]
    if shape[:1] != (True,) or "key" not in shape or "value" not in shape \
            or not (isinstance(first_piece, str) and first_piece.strip()):
        raise CannotExport("key/value arguments not written as tags",
                           f"an argument is written {_shown(layouts[0])}: xml-inline reads "
                           "tags around each value")
    for kind in ("object", "array"):
        if kind not in args.value_encoders or args.value_encoders[kind] == "native":
            raise CannotExport("key/value arguments with objects or arrays written as nested tags",
                               "xml-inline reads one level of tags; a value is kept as its text")
    for kind, encoder in args.value_encoders.items():
        if kind == "string" and encoder == "raw-or-quoted":
            raise CannotExport("string arguments that may be written in CDATA blocks",
                               "xml-inline keeps a value's text as it is")
        if kind == "string" and encoder not in ("raw", "jinja"):
            raise CannotExport(f"string arguments encoded {encoder!r}",
                               "xml-inline (with tools=) keeps a string parameter's text as it is")
        if kind in ("object", "array") and not encoder.startswith("json"):
            raise CannotExport("key/value arguments with objects or arrays "
                               "written as Python literals",
                               f"a {kind} value is written {encoder!r}; "
                               "transformers decodes those as JSON")
        if kind in ("integer", "number", "boolean", "null") \
                and not (encoder.startswith("json") or encoder in ("python", "jinja")):
            raise CannotExport(f"{kind} arguments encoded {encoder!r}")
    # Each position of the layouts: its literals (alternatives where the types differ, as
    # DeepSeek's string="true" / string="false"), the key, the value, or the key written again.
    pattern, seen_key = "", False
    for at, part in enumerate(shape):
        if part is True:
            texts = {layout[at] for layout in layouts}
            if any(texts):
                pattern += f"(?:{_alternatives(texts)})?" if "" in texts else _alternatives(texts)
        elif part == "key":
            pattern += r"(?P=key)" if seen_key else r"(?P<key>.+?)"
            seen_key = True
        elif part == "value" and _spaced_after(layouts, at):
            # (Ending at a non-space, or empty: the whitespace before the closing tag, which
            # the next literal's `\s*` takes, is then read once, not once per character.)
            pattern += r"(?P<value>(?:.*?\S)??)"
        elif part == "value":
            pattern += r"(?P<value>.*?)"
        else:
            raise CannotExport(f"an argument's {part} slot")
    if shape[-1] == "value":
        raise CannotExport("key/value arguments with nothing after the value")
    return {"content": "xml-inline", "content_args": {"tag_pattern": pattern}}


def _spaced_after(layouts: list, at: int) -> bool:
    r"""Whether every layout writes whitespace right after its slot at `at` (the literal there,
    as a regex, then opens with `\s*`)."""
    return all(at + 1 < len(layout) and isinstance(layout[at + 1], str)
               and layout[at + 1][:1].isspace()
               for layout in layouts)


def _shown(layout: list) -> str:
    return "".join(p if isinstance(p, str) else "{" + p["slot"] + "}" for p in layout)


__all__ = ["AFTER_END_OF_TURN", "CannotExport", "TRANSFORMERS_SINCE", "VERSION",
           "response_template", "transformers_features", "transformers_missing",
           "transformers_needed"]
