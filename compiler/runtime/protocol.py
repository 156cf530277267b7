"""A family's reading tables, prepared once for the rules.

The tables are plain data written at build time (`tplparse.grammar.reading` derives them
from the ProtocolSpec, and the grammar builder asks the same function its questions: what
opens a call, where the calls section ends, ...). `Protocol(tables)` turns them into what
the rules look up on every chunk: the call layout as steps, the key/value argument format
cut at its slots, the markers as tuples. It is immutable and shared by every parser of the
family.
"""

from __future__ import annotations

from .tables import (
    ArgumentsTable,
    BareListTable,
    Layout,
    LayoutPiece,
    MessagesTable,
    ReadingTables,
    ReasoningTable,
    ToolCallsTable,
)
from .text import DIGITS, ID_CHARS, NAME_CHARS, CharSet, Search, class_body, run_of, waker, words
from .values import JSON_DECODER, format_fillers

# isort: split
###{standalone
import re
from collections.abc import Callable
from typing import Any

# The version of the tables' layout this runtime reads (written into every family module).
TABLES_VERSION = 1

# Where the output starts, and the parallel-call policies (the spec's values, as strings).
CONTENT = "content"
REASONING = "reasoning"
# Where the output continues after a reasoning block read elsewhere (what `reasoning_ended_at`
# points at, handed to another reader): content, and no reasoning block of its own.
AFTER_REASONING = "after_reasoning"
# Where the output continues an answer the prompt began (a prefill, continued), in content or in
# its reasoning: no reasoning block, opener or content prefix of its own, and the whitespace it
# starts with is the answer's own.
CONTENT_CONTINUED = "content_continued"
REASONING_CONTINUED = "reasoning_continued"
STARTS = (REASONING, CONTENT, AFTER_REASONING, CONTENT_CONTINUED, REASONING_CONTINUED)
PARALLEL_ALL = "all"

# Kinds of call-layout steps.
LITERAL, NAME, CALL_ID, INDEX, ARGUMENTS, UNREAD = range(6)
_SLOT_STEPS = {"name": NAME, "id": CALL_ID, "index": INDEX, "index1": INDEX, "arguments": ARGUMENTS}
# (what a slot's run takes)
_SLOT_CHARS: dict[int, CharSet] = {NAME: NAME_CHARS, CALL_ID: ID_CHARS, INDEX: DIGITS}


class Closing:
    """What an argument layout writes after a value, as the readers use it."""

    __slots__ = ("after", "after_core", "after_lead", "raw_end", "after_here", "after_trails")

    after: str
    after_core: str
    after_lead: str
    raw_end: str
    after_here: str
    after_trails: bool

    def __init__(self, after: str, raw: bool, separator_core: str) -> None:
        self.after = after
        self.after_core = after.strip()
        self.after_lead = after[: len(after) - len(after.lstrip())]
        # a raw value ends at its closing text's first word (or the separator), and the
        # closing text comes right after it (its leading whitespace is the value's)
        self.raw_end = self.after_core or separator_core
        self.after_here = "" if not self.after_core else after.lstrip() if raw else after
        self.after_trails = self.after_here[-1:].isspace()


class ArgumentLayout:
    """One key/value argument layout cut at its slots: before key, key, middle, value, after
    (which may name the key again: </key>)."""

    def __init__(self, kind: str, layout: Layout) -> None:
        k, v = layout.index({"slot": "key"}), layout.index({"slot": "value"})

        def text(pieces: Layout) -> str:
            return "".join(p for p in pieces if isinstance(p, str))

        self.kind = kind
        self.before, middle = text(layout[:k]), text(layout[k + 1:v])
        self.after_pieces = layout[v + 1:]
        self.key_again = {"slot": "key"} in self.after_pieces
        self.middle_full = middle
        self.middle = middle.rstrip()  # matched with the grammar's whitespace tolerance
        # whitespace before the value, taken when there
        self.middle_lead = middle[len(self.middle):]
        self.raw = False  # filled by the format: a raw value, read to its closing text
        # the Closing of a layout that does not name the key after the value
        self.static: Closing | None = None
        self._closings: dict[str, Closing] = {}
        self._separator_core = ""

    def prepare(self, raw: bool, separator_core: str) -> None:
        self.raw, self._separator_core = raw, separator_core
        if not self.key_again:
            self.static = Closing("".join(p for p in self.after_pieces if isinstance(p, str)),
                                  raw, separator_core)

    def closing(self, key: str) -> Closing:
        """The Closing after the value of `key` (cached: the same few keys recur)."""
        found = self.static or self._closings.get(key)
        if found is None:
            after = "".join(piece if isinstance(piece, str) else key for piece in self.after_pieces)
            found = self._closings[key] = Closing(after, self.raw, self._separator_core)
        return found


class KeyValueFormat:
    """A key/value argument format, read once: layouts, separator, value encoders."""

    def __init__(self, fmt: ArgumentsTable) -> None:
        self.fmt = fmt
        self.layouts = [ArgumentLayout(kind, layout) for kind, layout in fmt["argument"].items()]
        self.string = next(a for a in self.layouts if a.kind == "string")
        self.separator = fmt["separator"] if fmt["separator"].strip() else ""
        self.separator_core = fmt["separator"].strip()
        self.before = self.string.before if self.string.before.strip() else ""
        encoders = self.encoders = fmt["value_encoders"]
        self.quote_open, self.quote_close = fmt["quotes"]
        self.value_min = max(1, len(self.quote_open))
        self.raw_strings = encoders.get("string") in ("raw", "raw-or-quoted")
        self.quoted_strings = encoders.get("string") == "quoted"
        self.maybe_quoted = encoders.get("string") == "raw-or-quoted"  # (raw, or in quotes: CDATA)
        self.native = encoders.get("object") == "native" or encoders.get("array") == "native"
        self.key_run = run_of(NAME_CHARS).match
        # else: told apart by their middle
        self.single = self.string if len(self.layouts) == 1 else None
        self.fillers = format_fillers(fmt["argument"].values())  # (tokens around XML-nested values)
        # (literals that end with whitespace take all the whitespace there: see literal_here)
        self.separator_trails = self.separator[-1:].isspace()
        self.before_trails = self.before[-1:].isspace()
        for layout in self.layouts:
            layout.prepare(self.raw_strings
                           and (self.single is not None or layout.kind == "string"),
                           self.separator_core)
        # One layout for every value, strings written raw, nothing written after a value
        # (`key=value, key=value`): a value ends at the separator or at the call's literal
        # after the arguments, and an object or array runs as its brackets balance.
        single = self.single
        self.open_values = bool(self.raw_strings and single is not None
                                and single.static is not None and not single.static.after_core)
        self.literal_strings, self.value_quote = self._literal_forms()
        # What begins the next argument, as the text writes it (its opener, a key, a layout's
        # middle): with the call's closing word, it settles a raw value whose closing text
        # never came (see settling). None where an argument's layout does not open with text
        # of its own, or names the key again after the value (<key>v</key>).
        before = self.before.strip()
        middles = sorted({a.middle.strip() for a in self.layouts if a.middle.strip()},
                         key=lambda m: (-len(m), m))
        self.next_argument: str | None = None
        self.next_argument_search: Search | None = None
        if before and middles and not any(a.key_again for a in self.layouts):
            self.next_argument = (re.escape(before) + "[" + class_body(NAME_CHARS) + "]+(?:"
                                  + "|".join(re.escape(m) for m in middles) + ")")
            self.next_argument_search = re.compile(self.next_argument).search
        self._settling: dict[str, Search | None] = {}
        self.raw_stops: dict[tuple[Any, ...], Any] = {}  # (a cache of Rules' _raw_stops)
        # How much of the layout a key's reader waits for after the key, with it: its middle,
        # the quote a string value opens with, and the value's first character (one wake-up).
        self.key_then = (len(self.single.middle_full)
                         + (len(self.quote_open) if self.quoted_strings else 0) + 1
                         if self.single is not None else 0)
        self._after_value: dict[str, tuple[str, ...]] = {}

    def _literal_forms(self) -> tuple[bool, str]:
        """Where the template writes objects, arrays or booleans as Python or JSON literals
        (`f(a=[1], b=True, c=text)`), a model writes every value as a literal: (whether its
        open values may be string literals, `c="text"`, `c='text, more'`, read as the string
        they hold: Rules._string_literal; the quote the layout writes around every value,
        strings raw inside, `f(a="%s")` as vLLM's Llama 4 pythonic template, which a value
        may be written without: Rules._middle_without_quote, else "")."""
        if not any(self.encoders.get(kind) in ("python", "json")
                   for kind in ("object", "array", "boolean")):
            return False, ""
        single = self.single
        quoted = (self.raw_strings and single is not None and single.static is not None
                  and single.middle[-1:] in ("'", '"') and not single.middle_lead
                  and single.static.after_core[:1] == single.middle[-1:])
        return self.open_values, single.middle[-1] if quoted and single is not None else ""

    def after_value(self, after_arguments: str) -> tuple[str, ...]:
        """What the template writes after an argument's value and its closing text, as one of
        two texts: the next argument's start (separator, opener), or the end of the arguments
        (`after_arguments`: the rest of the call and the next call's start). Their whitespace
        first is left out (a reader skips it). feed() waits for them in one go while the output
        goes on as one (see Input._expect_one_of); cached per `after_arguments`."""
        found = self._after_value.get(after_arguments)
        if found is None:
            texts = [t.lstrip() for t in (self.separator + self.before, after_arguments)]
            found = self._after_value[after_arguments] = tuple(t for t in texts if t)
        return found

    def settling(self, closing_word: str) -> Search | None:
        """A search for the first text that settles a raw value whose closing text is missing
        (the next argument's opener, or `closing_word`: the call's literal after its
        arguments); None: nothing can (cached per closing word)."""
        found = self._settling.get(closing_word)
        if found is None and closing_word not in self._settling:
            parts = [p for p in (self.next_argument,
                                 re.escape(closing_word) if closing_word else None) if p]
            found = self._settling[closing_word] = (re.compile("|".join(parts)).search
                                                    if parts else None)
        return found


def _skips_whitespace(piece: LayoutPiece | None) -> bool:
    """Whether the reader of this call-layout piece starts by skipping whitespace."""
    return piece == {"slot": "arguments"} or (isinstance(piece, str) and piece[:1].isspace())


# The finish reasons of an output that ended by itself (the model stopped): an engine that
# stops on an end-of-call or end-of-turn token leaves the token out of the text.
NATURAL_STOPS = ("stop", "tool_calls")


def stoppable_word(word: str) -> bool:
    """Whether a word of a literal (or the rest of one) is one an engine may stop on and leave
    out: whitespace, or a marker (a tag or a special token: it has a letter or digit), not
    what begins with the punctuation that closes a value (`}`, `)]`, a quote): that is never
    a stop. (`}<tool_call|>`: its `<tool_call|>` may be left out, its `}` may not.)"""
    return word.isspace() or word[:1] not in _CLOSES_A_VALUE and any(c.isalnum() for c in word)


CLOSES_A_VALUE = "}])\"'"
_CLOSES_A_VALUE = frozenset(CLOSES_A_VALUE)


def stopped_in(word: str, present: str) -> bool:
    """Whether a word of which only `present` (its start) came before a natural stop lost the
    rest to the engine: `present` is only punctuation that closes a value (or nothing: `}` of
    `}<tool_call|>`) and the rest is a marker (stoppable_word), not a cut inside one."""
    return (word.startswith(present) and all(c in _CLOSES_A_VALUE for c in present)
            and stoppable_word(word[len(present):]))


def stoppable(literal: str) -> bool:
    """Whether all of a literal's words are stoppable (see stoppable_word)."""
    return all(stoppable_word(w) for w in words(literal))


# Placeholders a call layout is written with to see whether it is a JSON object (and which
# of its keys holds which slot).
_JSON_CALL_FILLS = {"name": "tplparse-name", "id": "tplparse-id",
                    "arguments": '{"tplparse-arguments": 0}'}
# The other name models use for the arguments key (Llama writes "parameters", others "arguments").
ARGUMENTS_ALIASES = {"arguments": "parameters", "parameters": "arguments"}
# Every name a call object's arguments go by (Inkling's layout writes "args"): a model that
# writes another of them than its layout's means the arguments, not none.
ARGUMENTS_KEYS = ("arguments", "parameters", "args")


# Separators models write between calls that a format writes back to back (`{…}; {…}`).
UNWRITTEN_SEPARATORS = (";", ",")


# Where a JSON call object holds a slot: its key, then the keys of the objects inside it
# (`("function", "name")` for OpenAI's `{"id": …, "function": {"name": …, "arguments": …}}`).
KeyPath = tuple[str, ...]


class JsonCallLayout:
    """A call layout that writes the call as a JSON object around its slots ({"name": NAME,
    "arguments": ARGUMENTS}, with or without an id, or those inside an object of the call's)."""

    __slots__ = ("first", "before", "last", "after", "keys")

    first: int  # the step (a literal) the object starts in
    before: str  # that literal's text before the object
    last: int  # the step (a literal) the object ends in
    after: str  # that literal's text after the object
    keys: dict[str, KeyPath]  # slot (name, arguments, id) -> the keys that lead to it

    def __init__(self, first: int, before: str, last: int, after: str,
                 keys: dict[str, KeyPath]) -> None:
        self.first = first
        self.before = before
        self.last = last
        self.after = after
        self.keys = keys


def json_call_object(layout: Layout) -> JsonCallLayout | None:
    """The layout's JSON call object (JsonCallLayout), or None when it writes none. Found by
    writing the layout with placeholders and decoding it: the outermost object that holds the
    name and the arguments (and every other slot) at any depth."""
    text, starts = "", []
    for piece in layout:
        starts.append(len(text))
        if isinstance(piece, str):
            text += piece
        elif piece["slot"] in _JSON_CALL_FILLS:
            text += _JSON_CALL_FILLS[piece["slot"]]
        else:
            return None
    slots = {p["slot"] for p in layout if not isinstance(p, str)}
    for at in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            value, end = JSON_DECODER.raw_decode(text, at)
        except ValueError:
            continue
        if not isinstance(value, dict):
            continue
        keys = {slot: _path_holding(value, _json_fill(slot)) for slot in _JSON_CALL_FILLS}
        if not (keys["name"] and keys["arguments"] and all(keys[slot] for slot in slots)):
            continue
        first = max(i for i, start in enumerate(starts) if start <= at)
        last = max(i for i, start in enumerate(starts) if start <= end - 1)
        head, tail = layout[first], layout[last]
        if first == last or not isinstance(head, str) or not isinstance(tail, str):
            return None
        return JsonCallLayout(first, head[: at - starts[first]], last, tail[end - starts[last]:],
                              {slot: path for slot, path in keys.items() if path})
    return None


def _json_fill(slot: str) -> Any:
    """The decoded placeholder of `slot`."""
    fill = _JSON_CALL_FILLS[slot]
    return JSON_DECODER.decode(f'"{fill}"' if slot != "arguments" else fill)


def _path_holding(value: dict[str, Any], filled: Any) -> KeyPath | None:
    """The keys that lead, in a decoded call object, to the value `filled` (the nearest first)."""
    for key, held in value.items():
        if held == filled:
            return (key,)
    for key, held in value.items():
        if isinstance(held, dict):
            inner = _path_holding(held, filled)
            if inner is not None:
                return (key, *inner)
    return None


def value_at(value: dict[str, Any], path: KeyPath) -> Any:
    """What a decoded call object holds at `path` (None where it holds nothing there)."""
    held: Any = value
    for key in path:
        if not isinstance(held, dict):
            return None
        held = held.get(key)
    return held


class ArgumentsEnd:
    """Where a call's arguments end: the layout's next literal with a word."""

    __slots__ = ("literal", "word", "lead")

    literal: str  # that literal, stripped ("" when the layout writes none)
    word: str  # its first word: enough to end the arguments (the literal is matched after)
    lead: str  # the whitespace the layout writes before it

    def __init__(self, literal: str, word: str, lead: str) -> None:
        self.literal = literal
        self.word = word
        self.lead = lead


class CallStep:
    """One piece of a call layout, as the call reader runs it."""

    __slots__ = ("kind", "literal", "chars", "run", "arguments_end", "ws_follows", "exact", "then",
                 "eats")

    kind: int  # LITERAL, NAME, CALL_ID, INDEX, ARGUMENTS or UNREAD
    literal: str  # a LITERAL's text ("" for a slot)
    chars: CharSet  # the characters a NAME, CALL_ID or INDEX run takes ("" otherwise)
    run: Callable[[str, int], re.Match[str] | None] | None  # a match of a run of those characters
    arguments_end: ArgumentsEnd | None  # ARGUMENTS: where they end
    # the next reader skips whitespace itself (a literal need not wait for its end)
    ws_follows: bool
    exact: bool  # a literal that can be taken exactly as written (no whitespace at its end)
    # the length of the literal right after (a run waits for it too, and for the first
    # character of arguments that follow it: one wake-up, not two or three)
    then: int
    # all of the layout after this step is stoppable: at a natural stop, this literal's
    # unread words and the rest of the layout may be missing (the engine stopped on them)
    eats: bool

    def __init__(self, kind: int, literal: str, chars: CharSet,
                 run: Callable[[str, int], re.Match[str] | None] | None,
                 arguments_end: ArgumentsEnd | None, ws_follows: bool, exact: bool, then: int,
                 eats: bool) -> None:
        self.kind = kind
        self.literal = literal
        self.chars = chars
        self.run = run
        self.arguments_end = arguments_end
        self.ws_follows = ws_follows
        self.exact = exact
        self.then = then
        self.eats = eats


def call_steps(layout: Layout) -> tuple[CallStep, ...]:
    """The call layout as the steps the call reader runs, one per piece."""
    return tuple(_call_step(layout, i) for i in range(len(layout)))


def _call_step(layout: Layout, i: int) -> CallStep:
    piece = layout[i]
    after = layout[i + 1] if i + 1 < len(layout) else None
    then = len(after.strip()) if isinstance(after, str) else 0
    if (then and isinstance(after, str) and i + 2 < len(layout)
            and layout[i + 2] == {"slot": "arguments"}):
        # (and the arguments' first character, as rendered: their reader starts)
        then = len(after.lstrip()) + 1
    eats = all(isinstance(p, str) and stoppable(p) for p in layout[i + 1:])
    ws_follows = _skips_whitespace(after)
    if isinstance(piece, str):
        return CallStep(LITERAL, piece, "", None, None, ws_follows, not piece[-1:].isspace(),
                        then, eats)
    kind = _SLOT_STEPS.get(piece["slot"], UNREAD)
    chars: CharSet = _SLOT_CHARS.get(kind, "")
    end = _arguments_end(layout[i + 1:]) if kind == ARGUMENTS else None
    return CallStep(kind, "", chars, run_of(chars).match if chars else None, end, ws_follows,
                    False, then, eats)


def _arguments_end(rest: Layout) -> ArgumentsEnd:
    """Where arguments followed by `rest` end: the layout's text after them, to its first
    literal with a word."""
    written = ""
    for p in rest:
        if not isinstance(p, str):
            break
        written += p
        if p.strip():
            break
    following = written.strip()
    return ArgumentsEnd(following, words(following)[0] if following else "",
                        written[: len(written) - len(written.lstrip())])


class MessageFormat:
    """A turn written as messages, each with a header (the tables' "messages", from
    tplparse.grammar.reading.message_format): the markers, the channels and the recipient."""

    def __init__(self, messages: MessagesTable, end_of_turn: tuple[str, ...]) -> None:
        self.start = messages["start"]  # opens a message after the first
        self.channel = messages["channel"]  # starts the header's channel part
        self.body = messages["body"]  # ends the header
        self.end = messages["end"]  # ends a message the turn goes on after
        self.call_end = messages["call_end"]  # ends a call's message
        self.channels = messages["channels"]  # channel -> reasoning / content / calls
        self.recipient = messages["recipient"]
        self.namespace = messages["namespace"]
        # A recipient that names no tool: none, or the namespace alone (`functions.`, `functions`).
        self.no_name = {"", self.namespace, re.sub("[^A-Za-z0-9]+$", "", self.namespace)}
        # A recipient field: its key at the start of a field (after whitespace, a marker or
        # the header's start), then the name it addresses.
        self.recipient_field = re.compile("(?<![A-Za-z0-9_.=-])" + re.escape(self.recipient)
                                          + "([A-Za-z0-9_.-]*)")
        # What ends a body: a message's end, a call's end, the turn's end, the next message's
        # start, or the next header (a model that wrote no end and no start before it).
        self.body_stops = tuple(dict.fromkeys([self.end, self.call_end, *end_of_turn, self.start,
                                               self.channel]))
        # (where a call's arguments end: its message's end)
        self.closing = ArgumentsEnd(self.call_end, self.call_end, "")
        # Where a header ends: its body marker, or (a header cut off) what ends a body.
        cut_off = [self.body, *[s for s in self.body_stops if s != self.channel]]
        self.header_end = re.compile(
            "|".join(re.escape(s) for s in sorted(cut_off, key=len, reverse=True))).search
        self.header_waker = waker("".join(sorted({s[-1] for s in cut_off})))
        self.longest = max(len(s) for s in cut_off)
        self.literals = [self.start, self.channel, self.body, self.end, self.call_end]


class Protocol:
    """What the rules read: markers, the calls' layout and argument format, the start states."""

    def __init__(self, tables: ReadingTables) -> None:
        if not isinstance(tables, dict) or tables.get("version") != TABLES_VERSION:
            found = tables.get("version") if isinstance(tables, dict) else type(tables).__name__
            raise ValueError(f"reading tables of version {found!r}; "
                             f"this runtime reads version {TABLES_VERSION}")
        self.tables = tables
        self._read_reasoning(tables.get("reasoning"))
        self._read_turn(tables)
        tc = self.tool_calls = tables.get("tool_calls")
        self._read_tool_calls(tc)
        # A turn written as messages with headers (harmony): see Messages.
        messages = tables.get("messages")
        self.messages = MessageFormat(messages, self.end_of_turn) if tc and messages else None
        self.literals = self._all_literals(tc)
        self.reasoning_stops, self.content_stops = self._reasoning_stops(), self._content_stops()

    def _read_reasoning(self, table: ReasoningTable | None) -> None:
        """reasoning: its markers, and whether a call ends it."""
        reasoning: ReasoningTable | dict[str, Any] = table or {}
        self.reasoning_start: str = reasoning.get("start", "")
        self.reasoning_end: str = reasoning.get("end", "")
        self.call_ends_reasoning: bool = reasoning.get("call_ends_reasoning", True)
        # The part of a compound reasoning end that opens the content block
        # (reading.end_opens_content).
        self.end_opens_content: str = reasoning.get("end_opens_content", "")

    def _read_turn(self, tables: ReadingTables) -> None:
        """root: content's wrapper, the turn's end, the modes, segments and repeated headers."""
        self.content_start = tables["content"]["start"]
        self.content_end = tables["content"]["end"]
        # marker (and "", the end of the output) -> the whitespace the template writes between
        # content and it: content keeps the whitespace it ends with, less that.
        self.space_before = tables["content"].get("space_before") or {}
        self.end_of_turn = tuple(tables["end_of_turn"])
        self.modes = tables["modes"]
        # A turn written as segments, each with a header of its own (tplparse.grammar.reading.
        # segment_format): the marker that ends a segment the turn goes on after, the header
        # that opens the next one, and whether that header is the calls section's own.
        segments = tables.get("segments")
        self.segment_end = segments["end"] if segments else ""
        self.segment_header = segments["header"] if segments else ""
        self.segment_is_calls = bool(segments and segments["calls"])
        # What the generation prompt wrote that a model may write again at the output's start
        # (the assistant header, its role token): absorbed there, longest first.
        self.repeated_headers = tuple(tables.get("repeated_headers") or ())

    def _read_tool_calls(self, tc: ToolCallsTable | None) -> None:
        """tool-calls: the section, the call layout, the arguments, and their tolerances."""
        self.opener = tc["opener"] if tc else ""
        # (the tolerances of a format with calls)
        self.bare_opener = ""
        self.bare_list: BareListTable | None = None
        self.wrappers: tuple[str, ...] = ()
        self.key_values: KeyValueFormat | None = None
        # Layout-driven forms (data from the spec's turn layouts, not family knowledge):
        # without a call opener, content turns start with their own prefix ("all\n") and the
        # text between content and calls opens the calls (">>>"); a section whose start is
        # two markers may hold content between them (<|python_start|>content<|python_end|>).
        self.content_prefix = tc["content_prefix"] if tc else ""
        self.inline_opener = tc["inline_opener"] if tc else ""
        self.section_inner = tuple(tc["section_inner"]) if tc and tc["section_inner"] else None
        self.after_arguments = ""
        self.call_after_header = False
        if not tc:
            return
        self.call_head = tc["call_head"]
        self.section_start = tc["section_start"]
        self.section_end = tc["section_end"]
        self.separator = tc["separator"]
        self.separator_core = self.separator.strip()
        self.parallel_all = tc["parallel"] == PARALLEL_ALL
        self._read_call(tc)
        # A turn of segments whose call starts with its name, no section around it: the call
        # is a segment whose header's slot names the tool (`<|message_model|>NAME<|content_
        # invoke_tool_json|>{…}<|end_message|>`), told from a text segment by a name and the
        # literal after it where a segment starts (the turn's start, after a header).
        self.call_after_header = bool(self.segment_header and self.name_then
                                      and not self.section_start.strip())
        self._read_calls_without_markers(tc)
        self._read_separators(tc)
        if not self.object_arguments:
            self.key_values = KeyValueFormat(tc["arguments"])
        # What the template writes after a call's arguments: the rest of the call and, when
        # calls follow each other, the next call's start ("" where a slot comes first).
        # feed() waits for it in one go while the output goes on so (one wake-up, not one
        # per literal): after a JSON object, and after key/value arguments' last value.
        self.after_arguments = self._after_arguments(tc["call"])

    def _read_call(self, tc: ToolCallsTable) -> None:
        """tool-call: the layout as steps, its JSON object (if it writes one) and its arguments."""
        call = tc["call"]
        self.call_has_id = {"slot": "id"} in call
        arguments = self.arguments = tc["arguments"]
        self.object_arguments = arguments["style"] == "object"
        self.python_objects = self.object_arguments and arguments["encoder"] == "python"
        # A call written as a JSON object is also read by its keys when it is not written
        # in the layout's byte order (see Rules._call_object_by_key).
        # (a layout whose arguments are Python literals writes its object the same way: a
        # Python dict reads as well, `{"name": …, "parameters": {…}}` being one too)
        self.json_call = json_call_object(call) if self.object_arguments else None
        self.call_steps = call_steps(call)
        # A call that starts with its name (`f(a=1)`, one per line): another call after a
        # whitespace-only separator starts with a name and the literal after it (`(`).
        then = call[1] if len(call) > 1 else None
        self.name_then = (then.strip() if isinstance(then, str) and call[0] == {"slot": "name"}
                          else "")
        # A call element written self-closing, with no arguments (`<invoke name="f"/>`).
        self.self_closing = tc.get("self_closing")
        # A call that starts with its JSON object starts with any of its keys (calls that
        # follow each other with no separator are told by their first characters).
        self.call_heads_by_key: tuple[str, ...] = ()
        if (self.json_call is not None and self.json_call.first == 0
                and not self.json_call.before.strip()):
            paths = self.json_call.keys.values()
            named = {path[0] for path in paths} | {"type"}
            arguments_key = self.json_call.keys["arguments"]
            if len(arguments_key) == 1:  # (the other name of a top-level arguments key)
                named.add(ARGUMENTS_ALIASES.get(arguments_key[0], "arguments"))
            self.call_heads_by_key = tuple(sorted('{"' + key + '"' for key in named))

    def _read_calls_without_markers(self, tc: ToolCallsTable) -> None:
        """The tolerances of calls written without some of their markers: the bare call, the
        wrappers, the instructed variant, the pythonic list without its wrapper."""
        # A call written without the marker that opens the calls, from its own marker on.
        bare = tc.get("bare")
        self.bare_opener = bare["opener"] if bare else ""
        self.bare_steps: tuple[CallStep, ...] | None = call_steps(bare["call"]) if bare else None
        self.bare_closer = bare["closer"] if bare else ""
        self.bare_self_closing = bare.get("self_closing") if bare else None
        # Markers the template writes in front of some kinds of call only (`<|python_tag|>`).
        self.wrappers = tuple(tc.get("wrappers") or ())
        # The variant the template's tool instructions tell the model to write: calls without
        # the section's markers (read where a call object opens), a separator between calls.
        self.instructed_bare = bool(tc.get("instructed_bare"))
        # A pythonic list of calls without the markers that wrap it: its brackets, and a
        # match of its start up to the first call's name.
        self.bare_list = tc.get("bare_list")
        self.bare_list_head = (re.compile(re.escape(self.bare_list["open"])
                                          + r"\s*([A-Za-z0-9_]*)").match
                               if self.bare_list else None)

    def _read_separators(self, tc: ToolCallsTable) -> None:
        """separator: between calls the layout writes back to back (or with whitespace only):
        what the instructions name, and the separators models write there unasked (`;`, `,`),
        each read only when another call follows it."""
        self.instructed_separators = tuple(tc.get("instructed_separators") or ())
        self.unwritten_separators = tuple(dict.fromkeys(
            [s.strip() for s in self.instructed_separators] + list(UNWRITTEN_SEPARATORS)))
        self.unwritten_separator_starts = "".join(sorted({s[0] for s in self.unwritten_separators}))

    def _reasoning_stops(self) -> tuple[str, ...]:
        """What ends reasoning text: its end marker, the turn's end, and a call's opener when a
        call ends reasoning."""
        stops = [self.reasoning_end, *self.end_of_turn]
        if self.opener and self.call_ends_reasoning:
            stops += [self.opener, self.bare_opener]
        return tuple(s for s in stops if s)

    def _content_stops(self) -> tuple[str, ...]:
        """What ends content text: the turn's end, a call's opener (bare too), the content
        block's end, a wrapper of another kind of call, a segment's end; and a call that is a
        JSON object opened by another of its keys, or written without the section's markers
        as the template's instructions say."""
        stops = [*self.end_of_turn, self.opener, self.content_end, self.bare_opener,
                 *self.wrappers]
        if self.segment_end not in stops:
            stops.append(self.segment_end)
        if self.opener and (not self.section_start.strip() or self.instructed_bare):
            stops += self.call_heads_by_key
        return tuple(s for s in stops if s)

    def _all_literals(self, tc: ToolCallsTable | None) -> tuple[str, ...]:
        """Every literal of the format, stripped: an output that ends with the start of one
        ended inside it (truncated), whatever a reader made of it."""
        literals = [*self.end_of_turn, self.content_start, self.content_end, self.reasoning_start,
                    self.reasoning_end, self.segment_end, self.segment_header]
        if tc:
            literals += [tc["section_start"], tc["section_end"], tc["separator"],
                         self.content_prefix, self.inline_opener]
            literals += [p for p in tc["call"] if isinstance(p, str)]
            bare = tc.get("bare")
            if bare:
                literals += [p for p in bare["call"] if isinstance(p, str)] + [bare["closer"]]
            literals += list(tc.get("wrappers") or ())
            for closed in (tc.get("self_closing"), bare.get("self_closing") if bare else None):
                if closed:
                    literals += [closed["written"], closed["written"].replace(" ", "")]
            arguments = tc["arguments"]
            if arguments["style"] != "object":
                # (and the words a value may be: a value cut inside `false` is cut, not wrong)
                literals += [arguments["separator"], *arguments["quotes"],
                             "true", "false", "null", "True", "False", "None"]
                for layout in arguments["argument"].values():
                    literals += [p for p in layout if isinstance(p, str)]
        if self.messages is not None:
            literals += self.messages.literals
        return tuple(sorted({m.strip() for m in literals if m.strip()}))

    def _after_arguments(self, layout: Layout) -> str:
        """The layout's literals after its arguments (none if a slot follows them) and, when
        calls follow each other, the separator and the literals before the next call's first
        slot."""
        rest = [p for p in layout[layout.index({"slot": "arguments"}) + 1:] if isinstance(p, str)]
        if not rest or len(rest) < len(layout) - layout.index({"slot": "arguments"}) - 1:
            return ""
        first = next(i for i, p in enumerate(layout) if not isinstance(p, str))
        # (all of them: before the first slot)
        head = [p for p in layout[:first] if isinstance(p, str)]
        return "".join(rest) + (self.separator + "".join(head) if self.parallel_all else "")

    def start_state(self, generation_prompt: str | None, start: str | None) -> str:
        """Where the output starts: `start` when given, else what the generation prompt leaves
        open: reasoning or content, or either continued (the prompt ends inside an answer it
        began: *_CONTINUED)."""
        if start in (REASONING, CONTENT, CONTENT_CONTINUED, REASONING_CONTINUED):
            return start
        if start == AFTER_REASONING:
            return CONTENT
        if not self.reasoning_end:
            begun = generation_prompt is not None and (header := self._last_header(
                generation_prompt.rstrip())) is not None and self._answer_begun(
                generation_prompt.rstrip()[header.stop:], True)
            return CONTENT_CONTINUED if begun else CONTENT
        if generation_prompt is not None:
            prompt = generation_prompt.rstrip()
            known = self._mode_ending(prompt)
            if known is not None:
                return known
            header = self._last_header(prompt)
            # (the turn from its header on: a header may open the block itself; what came
            # before it, a system prompt that names the markers, is not the output's state)
            turn = prompt[header.start:] if header is not None else prompt
            closed = turn.rfind(self.reasoning_end)
            opened = turn.rfind(self.reasoning_start) if self.reasoning_start else -1
            if opened > closed:
                # (text after the block's opener: reasoning begun, continued)
                thought = turn[opened + len(self.reasoning_start):].strip()
                return REASONING_CONTINUED if thought else REASONING
            if closed != -1 and closed >= opened:
                # (text after the block's end: an answer begun, continued)
                answered = turn[closed + len(self.reasoning_end):].strip()
                return CONTENT_CONTINUED if answered else CONTENT
            if header is not None and self._answer_begun(prompt[header.stop:]):
                return CONTENT_CONTINUED
        return self.modes["default"]["start"]

    def _answer_begun(self, tail: str, unmarked: bool = False) -> bool:
        """Whether the prompt's tail after the assistant header holds text no mode's generation
        prompt writes there (and no reasoning marker): an answer the client began (a prefill,
        continued), which the model continues as content."""
        text = tail.strip()
        if not text or not (self.reasoning_start or unmarked):
            # (a block without an opener starts right after the header: text there is
            # reasoning where the mode starts in it)
            return False
        return not any(text.startswith(m["tail"].strip()) for m in self.modes.values()
                       if m["tail"].strip())

    def _mode_ending(self, prompt: str) -> str | None:
        """The start state of the mode whose generation prompt (header and tail) the prompt ends
        with, the longest such ending; None when none does, or two such modes disagree."""
        found: set[str] = set()
        length = 0
        for mode in self.modes.values():
            ending = (mode.get("header", "") + mode["tail"]).rstrip()
            if not ending.strip() or not prompt.endswith(ending) or len(ending) < length:
                continue
            if len(ending) > length:
                found, length = set(), len(ending)
            found.add(mode["start"])
        return found.pop() if len(found) == 1 else None

    def _last_header(self, prompt: str) -> range | None:
        """Where the last assistant header a generation prompt writes is in `prompt` (None: no
        header is)."""
        found = [range(at, at + len(h))
                 for h in {m.get("header", "").strip() for m in self.modes.values()}
                 if h and (at := prompt.rfind(h)) != -1]
        return max(found, key=lambda span: (span.stop, -span.start), default=None)


###}
