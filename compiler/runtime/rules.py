"""The rules: the family's grammar as a coroutine over the text.

In the rule names of the family's .peg / .gbnf (tplparse.grammar.build):

    root             reasoning? body end-of-turn?   (the generic form; see below for the others)
    reasoning        reasoning-start? reasoning-text reasoning-end  (no start when the prompt
                     opened it; a call opener also ends it, by policy)
    body             content-text (tool-calls content-text)*
    content-text     text up to a call opener, the content wrapper's end or an end of turn
    tool-calls       section start, tool-call (separator tool-call)*, section end
    tool-call        the call layout's steps: literals, tool-name, arguments, call-id, call-index
    arguments        one encoded object (JSON, a Python literal), or argument (separator argument)*
    end-of-turn      ends the message; text after it is reported and ignored

The grammar's other forms are the template's own turn layouts where the generic form does
not fit; the reading tables name the two the runtime reads differently: a format with no
call opener (content starts with its prefix, the text between content and calls opens the
calls) and content inside the calls section's markers. The grammar's body allows one calls
section (generation is held to the template's format); the runtime reads any number.

The parse (`_turn`) pulls characters through the readers and suspends when it needs more;
each `feed` resumes it, so every character is looked at a bounded number of times. A call
is read by one loop over its layout's steps (`_call_steps_here` for what is already here,
`_call_steps_waiting` for the rest), and key/value arguments by one loop over the argument
layout's steps the same way, so a one-shot parse and a character-by-character one read a
call by the same steps.
"""

from __future__ import annotations

from .errors import BadArguments, InvalidOutput, InvalidWhole, TruncatedOutput
from .input import Input
from .output import OpenCall, Output, TextField
from .protocol import (
    ARGUMENTS,
    ARGUMENTS_ALIASES,
    ARGUMENTS_KEYS,
    CALL_ID,
    CONTENT,
    CONTENT_CONTINUED,
    LITERAL,
    NAME,
    NATURAL_STOPS,
    REASONING,
    REASONING_CONTINUED,
    UNREAD,
    ArgumentLayout,
    ArgumentsEnd,
    CallStep,
    Closing,
    JsonCallLayout,
    KeyPath,
    KeyValueFormat,
    Protocol,
    stopped_in,
    value_at,
)
from .streams import KeyValueStream, ObjectStream
from .tables import ArgumentsTable, SelfClosingTable
from .text import (
    CUT,
    NAME_CHARS,
    SPACES,
    WHOLE,
    BalancedScan,
    Search,
    first_of,
    held_back,
    literal_here,
    literal_prefix_here,
    run_of,
    text_stops,
    waker,
)
from .values import (
    JSON_DECODER,
    DuplicateKey,
    JSONValue,
    SchemaValue,
    _schema_kinds,
    arguments_json,
    decode_native,
    keeps_text,
    object_value,
    python_value,
    schema_value,
    typed_raw,
)

# isort: split
###{standalone
import ast
import re
import warnings
from collections.abc import Generator, Sequence
from typing import Any

# (The rules are generators driven by `yield from`: each yields None while it waits for more
# text, is resumed with None, and returns what it read: Generator[None, None, <what it read>].
# SPACES and the other `*` runs always match: their `.match(...).end()` is marked
# `type: ignore[union-attr]`, as in text.py.)

_NAME_RUN = run_of(NAME_CHARS).match

# A number the output stopped in the middle of (1.  1e  1e-  -).
_CUT_NUMBER = re.compile(r"-|-?\d+(?:\.\d*)?(?:[eE][-+]?)?|-?\d+\.")

# The steps of one key/value argument, in order.
(_KV_WS, _KV_SEPARATOR, _KV_BEFORE, _KV_KEY, _KV_LAYOUT, _KV_MIDDLE, _KV_LEAD, _KV_VALUE,
 _KV_AFTER) = range(9)
_STOPPED = -1  # (a reader of what is here stopped at a step that must wait)


# A whole string literal, by its opening quote (Python's escapes: a backslash takes the next
# character, so an escaped quote does not end it).
_STRING_LITERALS = {q: re.compile(q + r"(?:[^" + q + r"\\\n]|\\.)*" + q, re.S).match
                    for q in ("'", '"')}

_LITERAL_NAMES = {"True": True, "False": False, "None": None,
                  "true": True, "false": False, "null": None}
_NOT_A_LITERAL = object()


def _literal_value(node: ast.AST, depth: int = 0) -> JSONValue:
    """The value of a Python expression node that is a literal JSON can hold (JSON's true /
    false / null too), else _NOT_A_LITERAL (an expression, bytes, a complex number, ...)."""
    if depth > 64:
        return _NOT_A_LITERAL
    if isinstance(node, ast.Constant):
        ok = node.value is None or isinstance(node.value, (str, bool, int, float))
        return node.value if ok else _NOT_A_LITERAL
    if isinstance(node, ast.Name):
        return _LITERAL_NAMES.get(node.id, _NOT_A_LITERAL)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(
            node.operand, ast.Constant):
        number = node.operand.value
        if type(number) is int or type(number) is float:
            return -number if isinstance(node.op, ast.USub) else number
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal_value(item, depth + 1) for item in node.elts]
        return _NOT_A_LITERAL if any(item is _NOT_A_LITERAL for item in items) else items
    if isinstance(node, ast.Dict):
        keys = [_literal_value(key, depth + 1) if key is not None else _NOT_A_LITERAL
                for key in node.keys]
        values = [_literal_value(value, depth + 1) for value in node.values]
        if any(not isinstance(key, str) for key in keys) or any(
                value is _NOT_A_LITERAL for value in values):
            return _NOT_A_LITERAL
        return dict(zip(keys, values, strict=True))
    return _NOT_A_LITERAL


def _decoded(text: str) -> JSONValue:
    """An argument value written as JSON or a Python literal (BadArguments: neither)."""
    try:
        return JSON_DECODER.decode(text)  # (a key twice is an error, as in arguments objects)
    except RecursionError:
        raise BadArguments(
            f"the argument value {text[:40]!r} is nested too deeply to read") from None
    except DuplicateKey as e:
        raise BadArguments(f"cannot read the argument value {text[:40]!r}: {e}") from None
    except ValueError:
        try:
            return python_value(text)
        except (ValueError, SyntaxError, RecursionError, MemoryError) as e:
            raise BadArguments(f"cannot read the argument value {text[:40]!r}: "
                               f"{e or 'nested too deeply'}") from None


def _may_be_container(schema: SchemaValue) -> bool:
    """Whether a value of this schema may be an object or an array (a schema that types
    nothing: any value may)."""
    kinds = _schema_kinds(schema)
    return not kinds or "object" in kinds or "array" in kinds


def _raw_stops(kv: KeyValueFormat, ending: Closing, settles: bool,
               st: _KeyValueRead) -> tuple[tuple[str, ...], tuple[str, str] | None]:
    """What may end a raw value that is still arriving (its closing text, with the whitespace
    before it, which the value loses; and, when a missing closing text may be settled by what
    follows, that and the whitespace the layout writes before it, which the value loses too):
    (stops, those two whitespace runs or None). Cached in the format, per closing text and call."""
    key = (ending, settles, st.closing_lead, st.closing_word)
    found: tuple[tuple[str, ...], tuple[str, str] | None] | None = kv.raw_stops.get(key)
    if found is None:
        stop, lead = ending.raw_end, ending.after_lead
        stops: tuple[str, ...] = (lead + stop, stop) if lead else (stop,)
        spaces: tuple[str, str] | None = None
        if settles:
            # What the layout writes between a value and what may settle it when its closing
            # text is missing: the value loses it, so it is held back too.
            trail = ending.after[len(ending.after.rstrip()):]
            between = kv.separator if kv.separator.isspace() else ""
            before_lead = kv.before[: len(kv.before) - len(kv.before.lstrip())]
            spaces = (lead + trail + between + before_lead, lead + trail + st.closing_lead)
            markers = (kv.before.strip(), st.closing_word)
            stops += tuple(sorted({space[i:] + marker
                                   for space, marker in zip(spaces, markers, strict=True)
                                   if marker for i in range(len(space) + 1)}))
        found = kv.raw_stops[key] = (stops, spaces)
    return found


class _KeyValueRead:
    """Where the reading of a call's key/value arguments is: the step, and what it has read.
    (One per parser, started afresh for each call: a parser reads one call at a time.)"""

    __slots__ = ("kv", "ends", "properties", "closing", "closing_word", "closing_lead",
                 "settling", "after_value", "unclosed", "step", "first", "key", "layout",
                 "arguments", "bad", "value", "quoted")

    kv: KeyValueFormat
    ends: tuple[ArgumentsEnd, str] | None  # (what the texts below were read from)
    properties: dict[str, SchemaValue]
    closing: str
    closing_word: str
    closing_lead: str
    settling: Search | None
    after_value: tuple[str, ...]
    unclosed: bool
    step: int  # _KV_WS, ..., _KV_AFTER
    first: bool  # at the first argument (no separator before it)
    key: str | None  # (read from _KV_LAYOUT on)
    layout: ArgumentLayout | None  # (told from _KV_MIDDLE on)
    arguments: dict[str, JSONValue]
    bad: BadArguments | None
    value: str  # the value read last by _kv_value_here, as written (without its quotes)
    quoted: bool  # whether it was written in the format's quotes

    def __init__(self, kv: KeyValueFormat) -> None:
        self.kv = kv
        self.ends = None

    def start(self, properties: dict[str, SchemaValue], closing: ArgumentsEnd,
              after_arguments: str) -> _KeyValueRead:
        self.properties = properties  # the tool's parameters.properties (types the values)
        if self.ends is None or self.ends[0] is not closing or self.ends[1] != after_arguments:
            # (read again only when the call's layout is another: most calls share one)
            self.ends = (closing, after_arguments)
            # The arguments end where the call's next literal starts: its first word is enough
            # (the literal itself is matched after, with its whitespace tolerance).
            self.closing, self.closing_word, self.closing_lead = (closing.literal, closing.word,
                                                                  closing.lead)
            # (what settles a raw value left open)
            self.settling = self.kv.settling(self.closing_word)
            # (what the template writes after a value)
            self.after_value = self.kv.after_value(after_arguments)
        self.unclosed = False  # the value just read had no closing text (settled by what follows)
        self.step, self.first, self.key, self.layout = _KV_WS, True, None, None
        self.arguments = {}
        # the first value that does not read; raised once the arguments' layout is read
        self.bad = None
        return self


class Rules:
    """The grammar of a turn, as a coroutine over the input (`Input`'s readers) that writes
    the output (`Output`'s fields, calls and errors). Its own state is set here, all of it."""

    __slots__ = ("_p", "_tools", "_in", "_out", "state", "continued", "reasoning_ended_at",
                 "_kv_read_state", "_open_call", "_steps", "_json_call", "_self_closing",
                 "_after_arguments", "_run")

    def __init__(self, protocol: Protocol, tools: dict[str, dict[str, dict[str, Any]]], inp: Input,
                 out: Output, state: str, reasoning_ended_at: int | None) -> None:
        """`tools`: the offered tools, name -> the properties of its parameters (the schema of
        each argument: they type key/value arguments); `state`: where the output starts
        (REASONING, CONTENT, or either continued); `reasoning_ended_at`: 0 when it starts after
        another reader's reasoning, or continues an answer the prompt began, else None."""
        self._p = protocol
        self._tools = tools
        self._in = inp  # the buffer and its readers: the only way the rules read text
        self._out = out  # the fields, calls and errors the rules write
        # REASONING or CONTENT: what the text being read is
        self.state = {CONTENT_CONTINUED: CONTENT, REASONING_CONTINUED: REASONING}.get(state, state)
        # the output continues an answer the prompt began: no opener or content prefix of its
        # own, and its leading whitespace is the answer's
        self.continued = state in (CONTENT_CONTINUED, REASONING_CONTINUED)
        if self.continued:
            (out.content if self.state == CONTENT else out.reasoning).started = True
        # where the text after the output's reasoning begins (see
        # StreamParser.reasoning_ended_at), once the parse has left its reasoning
        self.reasoning_ended_at = reasoning_ended_at
        # where a call's key/value arguments are (made on first use)
        self._kv_read_state: _KeyValueRead | None = None
        # the call being read (its header may have gone out)
        self._open_call: OpenCall | None = None
        # the call layout being read: its steps, JSON object keys and self-closed form (the
        # family's, or the one without its opener; the steps are set before they are read)
        self._steps: tuple[CallStep, ...] = ()
        self._json_call: JsonCallLayout | None = None
        self._self_closing: SelfClosingTable | None = None
        # (and the text the template writes after its arguments: Protocol.after_arguments)
        self._after_arguments = ""
        # the parse, primed to wait for the first chunk: the input resumes it (`Input.resume`)
        self._run = self._turn()
        next(self._run)
        inp.resume = self._run.send

    # --- the turn ---------------------------------------------------------------------

    def _turn(self) -> Generator[None, None, None]:
        """root: reasoning? content (tool-calls content?)* end-of-turn?"""
        inp = self._in
        yield  # primed; wait for the first chunk
        try:
            yield from self._turn_body()
        except TruncatedOutput as e:
            self._call_failed("truncated_tool_call", str(e))
        except InvalidOutput as e:
            # Wrong, or cut short: only the end of the stream tells (and so every chunking of
            # one output tells the same): an output that ends inside one of the format's
            # literals stopped, "not enough input yet", it did not go wrong.
            inp.streaming = None  # (nothing more of a call that went wrong goes out)
            at, offset = inp.pos, inp.offset()
            while not inp.eof:
                inp.pos = len(inp.text)
                yield
            inp.pos = at
            if not isinstance(e, InvalidWhole) and self._ends_inside_a_marker():
                self._call_failed("truncated_tool_call", f"the output ended inside a call ({e})",
                                  offset)
            else:
                self._call_failed("invalid_tool_call", str(e), offset)
        while True:  # whatever still comes is past the parse
            inp.pos = len(inp.text)
            if inp.eof:
                if inp.finish == "length" and self.state == REASONING:
                    self._out.error("reasoning_truncated", "the output ended inside reasoning",
                                    inp.offset())
                return
            yield

    def _turn_body(self) -> Generator[None, None, None]:
        """The turn, read by its format (a turn of messages with headers: see Messages)."""
        return self._turn_by_layout()

    def _turn_by_layout(self) -> Generator[None, None, None]:
        """root, in the generic form: an optional reasoning block, then content and calls."""
        inp = self._in
        p = self._p
        if p.repeated_headers and self.reasoning_ended_at is None:
            yield from self._repeated_header()
        if (self.state == CONTENT and self.reasoning_ended_at is None and p.reasoning_start
                and p.reasoning_end):
            # An optional reasoning block first (the model opens it itself), or its end alone:
            # an empty block (a template that asks for reasoning by instruction writes the end
            # marker before an answer without it).
            yield from inp.skip_ws()
            yield from inp.need(max(len(p.reasoning_start), len(p.reasoning_end)))
            if inp.text.startswith(p.reasoning_start, inp.pos):
                inp.pos += len(p.reasoning_start)
                self.state = REASONING
                yield from self._opener_repeated()
            elif inp.text.startswith(p.reasoning_end, inp.pos):
                inp.pos += len(p.reasoning_end)
        elif self.state == REASONING and p.reasoning_start and not self.continued:
            # The prompt opened the block and the model opens it again: its opener is
            # absorbed, not reasoning (a tolerance: the template never writes it twice).
            yield from inp.skip_ws()
            if (yield from inp.peek(p.reasoning_start)):
                inp.pos += len(p.reasoning_start)
                yield from self._opener_repeated()
        if (self.state == REASONING and p.end_opens_content and self.reasoning_ended_at is None
                and not self.continued):
            # The prompt opened the block and the output starts by opening the content block,
            # the compound end's closing part left out: an empty block.
            yield from inp.skip_ws()
            if (yield from inp.peek(p.end_opens_content)):
                inp.pos += len(p.end_opens_content)
                self.state = CONTENT
        if self.state == REASONING:
            self.continued = False  # (what follows the reasoning opens as it always does)
        while self.state == REASONING:
            stop = yield from self._reasoning_block()
            if stop is None or stop in p.end_of_turn:
                yield from self._after_end(stop)
                return
            if stop == p.opener or stop == p.bare_opener:
                self.reasoning_ended_at = inp.offset()  # (at the call that ended it)
                yield from self._tool_calls(bare=stop == p.bare_opener)
            elif (yield from self._reasoning_again()):
                # (another block, or segment, of reasoning: read on into it)
                self.state = REASONING
        if self.reasoning_ended_at is None:
            self.reasoning_ended_at = inp.offset()
        self.state = CONTENT
        if p.tool_calls and not p.opener:
            yield from self._turn_without_opener()
        else:
            yield from self._content()

    def _repeated_header(self) -> Generator[None, None, None]:
        """At the output's start, the assistant header (or its role token) the generation
        prompt already wrote, written again: absorbed (a tolerance: `<|CHATBOT_TOKEN|>Hello`)."""
        inp = self._in
        p = self._p
        at = inp.pos
        header = yield from inp.which_after_ws(p.repeated_headers)
        inp.pos = at if header is None else inp.pos + len(header)

    def _opener_repeated(self) -> Generator[None, None, None]:
        """Right after the reasoning opener: the same opener again (`<think><think>`), absorbed
        with the whitespace before it, as often as it comes (a tolerance: not reasoning)."""
        inp = self._in
        p = self._p
        while True:
            at = inp.pos
            if not (yield from inp.peek_after_ws(p.reasoning_start)):
                inp.pos = at
                return
            inp.pos += len(p.reasoning_start)

    def _reasoning_again(self) -> Generator[None, None, bool]:
        """After a reasoning block's end: whether another block opens right after it (a
        repeated or empty reasoning channel, a second reasoning segment with its own header);
        its opener and the whitespace after it are consumed, else nothing is."""
        inp = self._in
        p = self._p
        at = inp.pos
        if p.reasoning_start and (yield from inp.peek_after_ws(p.reasoning_start)):
            inp.pos += len(p.reasoning_start)
            yield from inp.skip_ws()  # (the opener's own whitespace, as the template writes it)
            return True
        inp.pos = at
        return False

    def _segment_follows(self) -> Generator[None, None, bool]:
        """At a segment's end marker (p.segment_end): whether the next segment's header
        follows it (after whitespace), so the turn goes on. Nothing is consumed."""
        inp = self._in
        p = self._p
        at = inp.pos
        inp.pos += len(p.segment_end)
        follows = yield from inp.peek_after_ws(p.segment_header)
        inp.pos = at
        return follows

    def _next_segment(self) -> Generator[None, None, bool | str]:
        """At a segment's end marker that the next segment's header follows (_segment_follows):
        that segment. A header of the calls' own role (the section starts with the end
        marker): the calls, read from the marker on. An assistant header: the segment it
        opens, by what follows it: reasoning (its opener), content (its start, or any other
        text), a call (the call opener). "ended": the turn ended inside that segment; else
        the content goes on."""
        inp = self._in
        p = self._p
        if p.segment_is_calls:
            yield from self._tool_calls()
            return True
        inp.pos += len(p.segment_end)
        yield from inp.skip_ws()
        inp.pos += len(p.segment_header)
        while p.reasoning_start and (yield from inp.peek_after_ws(p.reasoning_start)):
            inp.pos += len(p.reasoning_start)
            yield from inp.skip_ws()
            stop = yield from self._reasoning_block()
            if stop is None or stop in p.end_of_turn:
                yield from self._after_end(stop)
                return "ended"
            if stop == p.opener or stop == p.bare_opener:
                yield from self._tool_calls(bare=stop == p.bare_opener)
                return True
        heads = [h for h in (p.content_start, p.opener, p.bare_opener) if h]
        head = (yield from inp.which_after_ws(heads)) if heads else None
        if head is not None and head == p.content_start:
            inp.pos += len(head)
        elif head is not None:
            yield from self._tool_calls(bare=head == p.bare_opener)
        elif p.call_after_header and (yield from self._header_call_follows()):
            yield from self._tool_calls()  # (a segment that is a call: its header names the tool)
        return True

    def _call_failed(self, kind: str, message: str, offset: int | None = None) -> None:
        """The parse stops at an error; a call whose header went out is dropped, and a delta
        says so."""
        inp = self._in
        out = self._out
        out.error(kind, message, inp.offset() if offset is None else offset)
        call, self._open_call, inp.streaming = self._open_call, None, None
        if call is not None and call.announced:
            out.drop_call(call.index, kind, message)

    def _ends_inside_a_marker(self) -> bool:
        """Whether the output ends with the start of one of the format's literals, from near where
        a reader stopped: what looked invalid is a literal the stream did not finish."""
        inp = self._in
        text, pos = inp.text, inp.pos
        if not text[pos:].strip():
            # (only whitespace after where the reader stopped: what it expected never came)
            return True
        for start in range(max(0, pos - 32), min(pos, len(text)) + 1):
            rest = text[start:].strip()
            if rest and (_CUT_NUMBER.fullmatch(rest) or any(
                    len(rest) < len(literal) and literal.startswith(rest)
                    for literal in self._p.literals)):
                return True
        return self._ends_inside_a_call_head(text[pos:].lstrip())

    def _ends_inside_a_call_head(self, rest: str) -> bool:
        """Whether `rest` (what is left where a reader stopped) is the start of a call that
        begins with its name (`get_ra`, `get_rate` of `get_rate(`): the name's characters, up
        to the end or then a start of the literal the layout writes after the name; the name
        an offered tool's start (any name, none offered). The next call, cut in its head."""
        p = self._p
        name = p.call_steps[0] if p.name_then and p.call_steps else None
        if not rest or name is None or name.kind != NAME or name.run is None:
            return False
        end = name.run(rest, 0).end()  # type: ignore[union-attr]
        head, then = rest[:end], rest[end:]
        return (0 < end and len(then) < len(p.name_then) and p.name_then.startswith(then)
                and (not self._tools or any(tool.startswith(head) for tool in self._tools)))

    def _reasoning_block(self) -> Generator[None, None, str | None]:
        """reasoning-text, up to its end marker (or a call opener, by policy: a call inside
        open reasoning ends it, unless the reasoning closes after it, when it was quoted)."""
        inp = self._in
        out = self._out
        p = self._p
        stops = p.reasoning_stops
        stop = yield from self._text_until(stops, out.reasoning)
        while stop is not None and stop in (p.opener, p.bare_opener) and (
                yield from self._closes_later(inp.pos)):
            out.emit_text(out.reasoning, stop)  # (a call the reasoning quotes: reasoning)
            inp.pos += len(stop)
            stop = yield from self._text_until(stops, out.reasoning)
        if stop == p.reasoning_end:
            inp.pos += len(stop)
            self.state = CONTENT
        return stop

    def _closes_later(self, start: int) -> Generator[None, None, bool]:
        """Whether the reasoning block closes after `start` (where a call opens inside it): its
        end marker comes before the turn ends. Decided only when the output tells, by that
        marker, the turn's end or the output's; until then nothing from `start` on goes out."""
        inp = self._in
        p = self._p
        stops = [p.reasoning_end] + [m for m in p.end_of_turn if m]
        find = first_of(stops)
        searched = start
        while True:
            found = find(inp.text, searched)
            if found is not None:
                return found.group() == p.reasoning_end
            if inp.eof:
                return False
            searched = max(start, len(inp.text) - max(len(s) for s in stops) + 1)
            inp.quiet = waker("".join(sorted({s[-1] for s in stops})))
            yield

    def _content(self) -> Generator[None, None, None]:
        """content-text (tool-calls content-text?)* end-of-turn?"""
        inp = self._in
        out = self._out
        p = self._p
        stops = p.content_stops
        if p.content_start and not self.continued:
            yield from inp.skip_ws()
            yield from inp.need(len(p.content_start))
            if inp.text.startswith(p.content_start, inp.pos):
                inp.pos += len(p.content_start)
            elif p.call_after_header and (yield from self._header_call_follows()):
                yield from self._tool_calls()  # (the turn's first segment is a call)
        field = out.content
        if p.bare_list is not None and self._tools and (yield from self._list_without_wrapper()):
            stops = p.end_of_turn  # (a list of calls on its own: only the turn's end follows)
        while True:
            written = len(field.parts)
            stop = yield from self._text_until(stops, field)
            follows = stop is not None and stop == p.segment_end and (
                yield from self._segment_follows())
            space = p.space_before.get("" if stop is None else stop.strip())
            if space is not None and len(field.parts) > written and not (
                    follows and not p.segment_is_calls):
                # (text of its own, then whitespace: the model's; before a segment's end and the
                # next header, it stays held, as before any markup between content and a call)
                out.keep_trailing_space(field, space)
            if follows:
                if (yield from self._next_segment()) == "ended":
                    return
                continue
            if stop is not None and stop == p.segment_end and stop != p.content_end:
                if stop not in p.end_of_turn and stop != p.opener:
                    out.emit_text(field, stop)  # (the marker with no header after it: text)
                    inp.pos += len(stop)
                    continue
            if stop is None or stop in p.end_of_turn:
                yield from self._after_end(stop)
                return
            if stop == p.content_end:
                inp.pos += len(stop)
                continue
            if stop in p.wrappers:
                yield from self._after_wrapper(stop)
                continue
            yield from self._tool_calls(bare=stop == p.bare_opener,
                                        unopened=p.instructed_bare and stop in p.call_heads_by_key)
            if not p.separator_core and self._separator_may_come():
                # (`{…}; {…}` where each call is a section)
                yield from self._unwritten_separator()

    def _after_wrapper(self, wrapper: str) -> Generator[None, None, None]:
        """A marker the template writes in front of another kind of call (`<|python_tag|>`):
        a call of this format after it is read as without it; anything else after it is a
        call of a kind this format does not read, an error (not content, not a guess)."""
        inp = self._in
        p = self._p
        inp.pos += len(wrapper)
        heads = [h for h in (p.opener.strip(), p.bare_opener, *p.call_heads_by_key) if h]
        if (yield from inp.peek_any_after_ws(heads)):
            yield from self._tool_calls(
                bare=inp.text.startswith(p.bare_opener, inp.pos) if p.bare_opener else False)
        elif inp.available():
            raise InvalidOutput(f"after {wrapper!r}, a call of a kind this format does not read")
        else:
            raise TruncatedOutput(f"the output ended after {wrapper!r}")

    def _list_without_wrapper(self) -> Generator[None, None, bool]:
        """A pythonic list of calls without the markers that wrap it
        (`[get_weather(city="Paris")]`), read as the calls when tools are offered, it starts
        with an offered tool's name and a call's bracket, it is the whole output (up to the
        turn's end), and as Python it is a list of calls of offered tools with keyword
        arguments; else it is content (nothing of it went out while it could be either). True
        when it was read as calls."""
        inp = self._in
        out = self._out
        p = self._p
        bare_list, list_head = p.bare_list, p.bare_list_head
        assert bare_list is not None and list_head is not None  # (the caller tests bare_list)
        opening, call_open = bare_list["open"], bare_list["call"]
        yield from inp.skip_ws()
        start = inp.pos
        if not (yield from inp.peek(opening)):
            return False
        while True:  # the first call's name, up to what follows it
            head = list_head(inp.text, start)
            assert head is not None  # (the list's opening is here: its head matches)
            if head.end() < len(inp.text) or inp.eof:
                break
            inp.wait_for = len(inp.text) + 1
            yield
        if head.group(1) not in self._tools or not inp.text.startswith(call_open, head.end()):
            return False
        scan = BalancedScan("'\"", start)
        while not scan.scan(inp.text, inp.eof):
            if inp.eof:
                return False  # (never closed: text, kept as it is)
            inp.quiet = scan.quiet(len(inp.text))
            if inp.quiet is not None:
                inp.poll = scan
            yield
        if scan.unbalanced:
            return False
        end = scan.end
        assert end is not None  # (scanned to its end)
        inp.pos = end
        alone = bool(p.end_of_turn) and (yield from inp.peek_any_after_ws(p.end_of_turn))
        alone = alone or (yield from self._at_end_after_ws())
        inp.pos = start
        calls = self._calls_of_offered_tools(inp.text[scan.start:scan.end]) if alone else None
        if calls is None:
            return False
        # (read as Python, the notation it is written in: each call complete at once)
        for name, arguments in calls:
            index = len(out.calls) + out.invalid_calls
            call = OpenCall(index)
            call.name, call.arguments, call.announced = name, arguments, True
            out.announce(index, call)
            out.complete_call(index, call, inp.offset())
        inp.pos = end
        return True

    def _at_end_after_ws(self) -> Generator[None, None, bool]:
        """Whether only whitespace is left (waits for the end of the stream to tell)."""
        inp = self._in
        while True:
            inp.pos = SPACES.match(inp.text, inp.pos).end()  # type: ignore[union-attr]
            if inp.pos < len(inp.text):
                return False
            if inp.eof:
                return True
            yield

    def _calls_of_offered_tools(self, text: str) -> list[tuple[str, str]] | None:
        """[(name, arguments as JSON text)] when `text` is, as Python, a list of calls of
        offered tools with keyword arguments whose values are literals; else None."""
        try:
            with warnings.catch_warnings():
                # (a model's 'C:\dir' is not this program's warning)
                warnings.simplefilter("ignore")
                tree = ast.parse(text, mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if not isinstance(tree, ast.List) or not tree.elts:
            return None
        calls: list[tuple[str, str]] = []
        for c in tree.elts:
            if not (isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                    and c.func.id in self._tools) or c.args:
                return None
            arguments: dict[str, JSONValue] = {}
            for keyword in c.keywords:
                value = _literal_value(keyword.value)
                if keyword.arg is None or value is _NOT_A_LITERAL or keyword.arg in arguments:
                    return None
                arguments[keyword.arg] = value
            try:
                calls.append((c.func.id, arguments_json(arguments)))
            except BadArguments:
                return None  # (a value JSON has no text for: 1e999)
        return calls

    def _turn_without_opener(self) -> Generator[None, None, None]:
        """No marker opens a call: a content turn starts with its prefix, anything else is calls."""
        inp = self._in
        out = self._out
        p = self._p
        if not self.continued:
            yield from inp.skip_ws()
        if self.continued or p.content_prefix and (yield from inp.peek(p.content_prefix)):
            if not self.continued:
                inp.pos += len(p.content_prefix)
            stops = list(p.end_of_turn) + ([p.inline_opener] if p.inline_opener else [])
            stop = yield from self._text_until(stops, out.content)
            if stop is None or stop in p.end_of_turn:
                yield from self._after_end(stop)
                return
            inp.pos += len(stop)
        if inp.available() or not inp.eof:
            yield from self._tool_calls()
        yield from inp.skip_ws()
        longest = max([len(m) for m in p.end_of_turn] + [1])
        yield from inp.need(longest)  # enough text to tell an end-of-turn marker
        stop = next((m for m in p.end_of_turn if inp.text.startswith(m, inp.pos)), None)
        if stop is None and inp.available():
            raise InvalidOutput(f"unexpected text after the calls: "
                                f"{inp.text[inp.pos:inp.pos + longest]!r}")
        yield from self._after_end(stop)

    def _after_end(self, stop: str | None) -> Generator[None, None, None]:
        """end-of-turn: the message ends; text after it is reported, not parsed."""
        inp = self._in
        out = self._out
        if stop is None:
            return
        inp.pos += len(stop)
        start = inp.offset()
        rest: list[str] = []
        while True:
            rest.append(inp.text[inp.pos:])
            inp.pos = len(inp.text)
            if inp.eof:
                break
            yield
        text = "".join(rest)
        if text.strip():
            out.error("text_after_end_of_turn", f"ignored: {text[:80]!r}", start)

    def _text_until(self, stops: Sequence[str],
                    field: TextField) -> Generator[None, None, str | None]:
        """reasoning-text / content-text: emit text up to the first stop; return the stop (or
        None at the end)."""
        inp = self._in
        out = self._out
        searches = text_stops(stops)
        stops, first_stop, quiet = searches.stops, searches.first_stop, searches.quiet
        partials, longest = searches.partials, searches.longest
        while True:
            text, pos = inp.text, inp.pos
            found = first_stop(text, pos)
            if found is not None and not inp.eof:
                # A longer stop that starts the same way may still be arriving: wait for it.
                at, stop = found.start(), found.group()
                rest = len(text) - at
                if rest < longest and any(len(s) > rest and s.startswith(text[at:])
                                          for s in stops if s.startswith(stop)):
                    out.emit_text(field, text[pos:at])
                    inp.pos = at
                    inp.trim_ok = True
                    yield
                    inp.trim_ok = False
                    continue
            if found is not None:
                out.emit_text(field, text[pos:found.start()])
                inp.pos = found.start()
                return found.group()
            if inp.eof:
                out.emit_text(field, text[pos:])
                inp.pos = len(text)
                return None
            keep = held_back(text[max(pos, len(text) - longest):], stops)
            out.emit_text(field, text[pos:len(text) - keep])
            inp.pos = len(text) - keep
            # (feed gives out the chunks that cannot move this scan: with what is kept, if any)
            inp.plain, inp.quiet, inp.partials = field, quiet, partials
            inp.trim_ok = True
            yield
            inp.trim_ok = False

    def _tool_calls(self, bare: bool = False,
                    unopened: bool = False) -> Generator[None, None, None]:
        """tool-calls: section start, tool-call (separator tool-call)*, section end. `bare`:
        written without the marker that opens the calls, from the call's own marker on (a
        tolerance: the call layout from that marker, its opener's pair read if it comes).
        `unopened`: written without the section's markers, as the template's instructions
        tell the model (the call layout as it is; the section's end read if it comes)."""
        inp = self._in
        out = self._out
        p = self._p
        if bare:
            assert p.bare_steps is not None  # (a format that reads bare calls has their steps)
            self._steps, self._json_call = p.bare_steps, None
        else:
            self._steps, self._json_call = p.call_steps, p.json_call
        self._after_arguments = "" if bare else p.after_arguments
        self._self_closing = p.bare_self_closing if bare else p.self_closing
        if not (bare or unopened) and not (yield from self._section_start()):
            return  # (an empty section)
        steps = len(self._steps)
        # (a call whose layout starts with whitespace is read from before the whitespace after
        # the one before it: its first literal, as rendered)
        lead = self._steps[0].kind == LITERAL and self._steps[0].literal[:1].isspace()
        while True:
            index = len(out.calls) + out.invalid_calls
            call = OpenCall(index)
            self._open_call = call
            k = self._call_steps_here(index, call, 0)
            if k < steps:
                yield from self._call_steps_waiting(index, call, k)
            self._end_call(index, call)
            if bare and p.bare_closer and not (
                    yield from inp.match(p.bare_closer, required=False, eats=True)):
                self._cut_inside(p.bare_closer)
            if not p.parallel_all:
                break
            if not self._next_call_here(bare, lead) and not (
                    yield from self._another_call(bare, lead)):
                break
        # (the section's end, its own words: as the call steps'; without an opener, if it comes)
        if p.section_end.strip():
            if not (yield from inp.match(p.section_end, required=not (bare or unopened),
                                           eats=True)):
                self._cut_inside(p.section_end)

    def _next_call_here(self, bare: bool, lead: bool) -> bool:
        """separator: whether another call follows, told by what is here alone (the common
        case of a one-shot parse: the separator, or the next call's opener after whitespace);
        False leaves it to _another_call (nothing consumed then)."""
        inp = self._in
        p = self._p
        if p.separator_core:
            return inp.here(p.separator)
        head = p.bare_opener if bare else p.call_head
        if not head or (not bare and p.name_then) or head[0] in p.unwritten_separator_starts:
            return False
        start = inp.pos
        if inp.ws_here() and inp.text.startswith(head, inp.pos):
            if lead:
                inp.pos = start
            return True
        inp.pos = start
        return False

    def _section_start(self) -> Generator[None, None, bool]:
        """The calls section's start (its opener is here); False when the section is empty
        (read whole: no call)."""
        inp = self._in
        out = self._out
        p = self._p
        inner = p.section_inner
        if inner and not (yield from inp.match(p.section_start, required=False)):
            # The section holds content first: <start>content<end>, then the calls.
            content_start, content_end = inner
            yield from inp.match(content_start)
            stop = yield from self._text_until([content_end], out.content)
            if stop is None:
                raise TruncatedOutput(f"the output ended before {content_end!r}")
            inp.pos += len(stop)
        elif not inner:
            yield from inp.match(p.section_start)
            end = p.section_end.strip()
            if end and p.section_start.strip() and (yield from inp.peek_after_ws(end)):
                # an empty section: no call (a tolerance: the template never writes one)
                inp.pos += len(end)
                return False
            if not p.section_start.strip() and p.bare_closer.strip() and (
                    yield from self._empty_wrapper()):
                return False  # (the same, of a call's wrapper: <tool_call>\n</tool_call>)
        return True

    def _another_call(self, bare: bool, lead: bool) -> Generator[None, None, bool]:
        """separator: whether another call follows the one just read (its separator read;
        nothing else consumed, except before a call whose layout starts with whitespace)."""
        inp = self._in
        p = self._p
        if p.separator_core:
            return inp.here(p.separator) or (yield from inp.match(p.separator, required=False))
        if self._separator_may_come() and (yield from self._unwritten_separator()):
            return True
        # Calls separated by whitespace only: another call starts with the call's opener.
        start = inp.pos
        head = p.bare_opener if bare else p.call_head
        if not bare and p.name_then:
            if (yield from self._name_then_after_ws(p.name_then)):
                return True  # (a call that starts with its name: a name, then what follows it)
        elif head and (inp.ws_here() and inp.text.startswith(head, inp.pos)
                       or (yield from inp.peek_after_ws(head))):
            if lead:
                inp.pos = start
            return True
        if p.call_heads_by_key and (yield from inp.peek_any_after_ws(p.call_heads_by_key)):
            return True  # (a call object in another key order)
        inp.pos = start
        return False

    def _separator_may_come(self) -> bool:
        """Whether an unwritten separator may come next (after whitespace): its character is
        there, or nothing is yet (the fast way past the usual case, a call or text)."""
        inp = self._in
        at = SPACES.match(inp.text, inp.pos).end()  # type: ignore[union-attr]
        return at >= len(inp.text) or inp.text[at] in self._p.unwritten_separator_starts

    def _unwritten_separator(self) -> Generator[None, None, bool]:
        """A separator between calls that the layout writes back to back: one the template's
        instructions name (`; `), or one models write unasked (`;`, `,`). Read when another
        call follows it (the separator and the whitespace around it consumed); else nothing is."""
        inp = self._in
        p = self._p
        start = inp.pos
        heads = [h for h in (p.call_head.strip(), p.opener.strip(), *p.call_heads_by_key) if h]
        if heads and (yield from inp.peek_any_after_ws(p.unwritten_separators)):
            inp.pos += next(len(s) for s in p.unwritten_separators
                              if inp.text.startswith(s, inp.pos))
            if (yield from inp.peek_any_after_ws(heads)):
                return True
        inp.pos = start
        return False

    def _empty_wrapper(self) -> Generator[None, None, bool]:
        """Whether the calls' opener comes with its pair right after it, whitespace between
        (`<tool_call>\n</tool_call>`: the wrapper of a call, holding none); consumed if so."""
        inp = self._in
        p = self._p
        start = inp.pos
        if not inp.text.startswith(p.opener, start):
            return False
        inp.pos += len(p.opener)
        closer = p.bare_closer.strip()
        if (yield from inp.peek_after_ws(closer)):
            inp.pos += len(closer)
            return True
        inp.pos = start
        return False

    def _header_call_follows(self) -> Generator[None, None, bool]:
        """Where a segment starts: whether it is a call (p.call_after_header), a name and the
        call's marker after it (whitespace either side; what follows the marker is the call
        layout's to read, an object in another key order too)."""
        p = self._p
        then = p.name_then
        marker = p.opener.strip()
        return (yield from self._name_then_after_ws(
            marker if marker and then.startswith(marker) else then, spaced=True))

    def _name_then_after_ws(self, then: str,
                            spaced: bool = False) -> Generator[None, None, bool]:
        """Whether a call that starts with its name comes next after whitespace: a name, then
        `then` (the literal after the name; `spaced`: after whitespace, where `then` is a
        marker). The whitespace before the name is consumed, nothing else."""
        inp = self._in
        while True:
            pos = inp.pos = SPACES.match(inp.text, inp.pos).end()  # type: ignore[union-attr]
            end = _NAME_RUN(inp.text, pos).end()  # type: ignore[union-attr]
            if spaced and end > pos:
                end = SPACES.match(inp.text, end).end()  # type: ignore[union-attr]
            here = inp.text[end:end + len(then)]
            if end < len(inp.text) or inp.eof:
                if end == pos or len(here) == len(then) or inp.eof:
                    return end > pos and here == then
                if not then.startswith(here):
                    return False
            inp.wait_for = end + len(then)
            yield

    def _cut_inside(self, marker: str) -> None:
        """An optional marker the output ended inside of (after whitespace) is read: it is not
        content."""
        inp = self._in
        if not inp.eof:
            return
        text, core = inp.text, marker.strip()
        start = SPACES.match(text, inp.pos).end()  # type: ignore[union-attr]
        end = min(len(text), start + len(core))
        # (what is left is at most the marker's length, then whitespace: read no more than that,
        # a call of a long output is not followed by a copy of the rest of it)
        if SPACES.match(text, end).end() != len(text):  # type: ignore[union-attr]
            return
        rest = text[start:end].rstrip()
        if rest and core.startswith(rest):
            inp.pos = len(text)

    # --- tool-call: one loop over the call layout's steps ------------------------------

    def _call_steps_here(self, index: int, call: OpenCall, start: int) -> int:
        """Read the call's steps from step `start` for as long as each is already here (the
        plain readers' rules, inline); return the index of the first step that must wait (all
        read: their count)."""
        inp = self._in
        steps = self._steps
        text, pos = inp.text, inp.pos
        json_call = self._json_call
        for k in range(start, len(steps)):
            step = steps[k]
            kind = step.kind
            if json_call is not None and k == json_call.first:
                call.object_at = pos  # (where a call written as a JSON object starts)
            if kind == LITERAL:
                literal = step.literal
                if step.exact and text.startswith(literal, pos):  # as rendered
                    pos += len(literal)
                else:
                    end = literal_here(text, pos, literal, inp.eof or step.ws_follows)
                    if end < 0:
                        inp.pos = pos
                        return k
                    pos = end
            elif kind == ARGUMENTS:
                inp.pos = pos
                arguments_end = step.arguments_end
                assert arguments_end is not None  # (an ARGUMENTS step has its end)
                if not self._arguments_here(call, arguments_end):
                    return k
                pos = inp.pos
            elif kind != UNREAD:
                # (a slot's step has its run, of `*`: it always matches)
                end = step.run(text, pos).end()  # type: ignore[misc, union-attr]
                if not pos < end < len(text):  # (a run ends at another character, already here)
                    inp.pos = pos
                    return k
                if kind == NAME or kind == CALL_ID:
                    run = text[pos:end]
                    read = call.name if kind == NAME else call.id
                    if read is not None and read != run:
                        # (a layout that writes the name twice: the waiting step says so)
                        inp.pos = pos
                        return k
                    if kind == NAME:
                        call.name = run
                    else:
                        call.id = run
                    self._announce_when_settled(index, call)
                pos = end
        inp.pos = pos
        return len(steps)

    def _call_steps_waiting(self, index: int, call: OpenCall,
                            k: int) -> Generator[None, None, None]:
        """The call's steps from step k: this one waited for, the next ones read from what is
        here again when they can."""
        inp = self._in
        steps = self._steps
        json_call = self._json_call
        while k < len(steps):
            step = steps[k]
            kind = step.kind
            if json_call is not None and k == json_call.first:
                call.object_at = inp.pos
            try:
                if kind == LITERAL and self._id_may_be_absent(k):
                    k = yield from self._literal_before_id(index, call, k)
                elif kind == LITERAL and self._self_closing is not None \
                        and k == self._self_closing["at"]:
                    k = yield from self._opening_tag_or_self_closed(index, call, step)
                elif kind == LITERAL:
                    yield from inp.match(step.literal, ws_follows=step.ws_follows, eats=step.eats)
                elif kind == ARGUMENTS:
                    arguments_end = step.arguments_end
                    assert arguments_end is not None  # (an ARGUMENTS step has its end)
                    yield from self._arguments_waiting(call, arguments_end, self._after_arguments)
                elif kind == NAME or kind == CALL_ID:
                    what = "tool name" if kind == NAME else "call id"
                    run = yield from inp.read_while(step.chars, what, step.then)
                    self._name_or_id_read(index, call, kind, run)
                elif kind != UNREAD:
                    yield from inp.read_while(step.chars, "call index")
            except InvalidOutput as error:
                # Not in the layout's byte order: the call is a JSON object all the same?
                k = yield from self._call_object_instead(index, call, k, error)
            k = self._call_steps_here(index, call, k + 1)

    def _name_or_id_read(self, index: int, call: OpenCall, kind: int, run: str) -> None:
        """tool-name, call-id: read (the same as the layout wrote it before, if it did)."""
        read = call.name if kind == NAME else call.id
        if read is not None and read != run:
            field = "name" if kind == NAME else "id"
            raise InvalidOutput(f"the call's {field} is {read!r}, then {run!r}")
        if kind == NAME:
            call.name = run
        else:
            call.id = run
        self._announce_when_settled(index, call)

    def _literal_before_id(self, index: int, call: OpenCall, k: int) -> Generator[None, None, int]:
        """The literal before an id (step k): the id may be left out, its literals with it
        ([TOOL_CALLS]name[ARGS]{…} where the layout writes [CALL_ID]id). The step read last."""
        inp = self._in
        steps = self._steps
        step = steps[k]
        if (yield from inp.match(step.literal, required=False, ws_follows=step.ws_follows)):
            return k
        following = steps[k + 2]
        yield from inp.match(following.literal, ws_follows=following.ws_follows,
                               eats=following.eats)
        call.id_absent = True
        self._announce_when_settled(index, call)
        return k + 2

    def _id_may_be_absent(self, k: int) -> bool:
        """Whether step k (a literal) is the literal before an id that has a literal with a
        word after it: the id may be left out with them. (Inside a JSON call object, the
        object read by its keys decides.)"""
        steps = self._steps
        json_call = self._json_call
        return k + 2 < len(steps) and steps[k + 1].kind == CALL_ID \
            and steps[k + 2].kind == LITERAL and bool(steps[k + 2].literal.strip()) \
            and (json_call is None or not json_call.first <= k <= json_call.last)

    def _opening_tag_or_self_closed(self, index: int, call: OpenCall,
                                    step: CallStep) -> Generator[None, None, int]:
        """The element's opening tag, or the element self-closed with no arguments
        (`<invoke name="f"/>`): then its closing tag is not written either. The step read last."""
        inp = self._in
        closed = self._self_closing
        assert closed is not None  # (the caller's test: the layout has a self-closed form)
        k = closed["at"]
        if (yield from inp.match(step.literal, required=False, ws_follows=step.ws_follows)):
            return k
        if (yield from inp.match(closed["written"], required=False)):
            self._arguments_read(call, {})
            if closed["rest"].strip():
                yield from inp.match(closed["rest"], eats=self._steps[closed["resume"]].eats)
            return closed["resume"]
        # (its error)
        yield from inp.match(step.literal, ws_follows=step.ws_follows, eats=step.eats)
        return k

    def _call_object_instead(self, index: int, call: OpenCall, k: int,
                             error: InvalidOutput) -> Generator[None, None, int]:
        """A call the layout's reader failed at step k that is a JSON object all the same (keys
        in another order, "parameters" for "arguments", extra keys, no id, arguments as a JSON
        string): read by its keys, then the rest of its layout; the step read last. Else the
        reader's `error` stands."""
        inp = self._in
        json_call, steps = self._json_call, self._steps
        at = call.object_at
        if json_call is None or not json_call.first <= k <= json_call.last or at is None:
            raise error
        # (the object starts after that literal's text before it: is it here?)
        if json_call.before.strip():
            at = literal_here(inp.text, at, json_call.before, True)
            if at < 0:
                raise error
        yield from self._call_object_by_key(index, call, json_call.keys, at)
        if json_call.after:
            last = steps[json_call.last]
            yield from inp.match(json_call.after, ws_follows=last.ws_follows, eats=last.eats)
        return json_call.last

    def _call_object_by_key(self, index: int, call: OpenCall, keys: dict[str, KeyPath],
                            at: int) -> Generator[None, None, None]:
        """tool-call, written as a JSON object in another order than the layout's: the whole
        object from where it starts, decoded, its keys mapped to the call's slots (`keys`: the
        layout's paths; "arguments", "parameters" and "args" each name the arguments, other keys
        are not the call's). What the layout's reader read of it stands if the object says the
        same."""
        inp = self._in
        stream = inp.streaming
        if stream is not None:
            # (what it gave out stays given; the rest goes out when the call is complete)
            stream.pause()
        inp.pos = at
        python = self._p.python_objects
        text = yield from inp.read_balanced("\"'" if python else '"', "call object")
        try:
            value = python_value(text) if python else JSON_DECODER.decode(text)
        except RecursionError:
            raise InvalidOutput("the call object is nested too deeply to read") from None
        except (ValueError, SyntaxError) as e:  # (ast's SyntaxError: not a Python literal)
            raise InvalidOutput(
                f"the call is not a {'Python' if python else 'JSON'} object: {e}") from None
        if not isinstance(value, dict):
            raise InvalidWhole(f"the call is not a JSON object: {text[:40]!r}")
        self._call_name_by_key(call, value, keys["name"], text)
        if "id" in keys:
            self._call_id_by_key(call, value, keys["id"])
        arguments = self._call_arguments_by_key(call, value, keys["arguments"])
        if arguments is None:
            return
        call.bad = None
        self._arguments_read(call, arguments)
        if "id" not in keys or call.id is not None:
            self._announce_when_settled(index, call)

    @staticmethod
    def _call_name_by_key(call: OpenCall, value: dict[str, Any], path: KeyPath,
                          text: str) -> None:
        """The call's name, at `path` in its decoded object."""
        name = value_at(value, path)
        if not isinstance(name, str) or not name:
            raise InvalidWhole(f"the call object has no {'.'.join(path)!r} string: {text[:60]!r}")
        if call.name is not None and call.name != name:
            raise InvalidOutput(f"the call's name is {call.name!r}, then {name!r}")
        call.name = name

    @staticmethod
    def _call_id_by_key(call: OpenCall, value: dict[str, Any], path: KeyPath) -> None:
        """The call's id, at `path` in its decoded object (a call may leave it out)."""
        found = value_at(value, path)
        if found is not None and not isinstance(found, str):
            raise InvalidOutput(f"the call's {'.'.join(path)!r} is not a string: {found!r}")
        if call.id is not None and found is not None and call.id != found:
            raise InvalidOutput(f"the call's id is {call.id!r}, then {found!r}")
        call.id = call.id or found

    @staticmethod
    def _call_arguments_by_key(call: OpenCall, value: dict[str, Any],
                               path: KeyPath) -> dict[str, Any] | None:
        """The call's arguments, at `path` in its decoded object or under another of their names
        beside it (ARGUMENTS_KEYS; none: no arguments); None, with the call marked bad, where
        they do not read (two of those names: not guessed)."""
        holder, key = value_at(value, path[:-1]), path[-1]
        holder = holder if isinstance(holder, dict) else {}
        named = [k for k in dict.fromkeys((key, ARGUMENTS_ALIASES.get(key), *ARGUMENTS_KEYS))
                 if k is not None and k in holder]
        arguments = holder[named[0]] if named else {}
        if len(named) > 1:
            call.bad = f"the call object has both {named[0]!r} and {named[1]!r}"
            return None
        if isinstance(arguments, str):  # (arguments as a JSON string of the object)
            try:
                arguments = JSON_DECODER.decode(arguments)
            except (ValueError, RecursionError):
                call.bad = f"the arguments string is not a JSON object: {arguments[:40]!r}"
                return None
        if not isinstance(arguments, dict):
            call.bad = "the arguments are not an object"
            return None
        return arguments

    def _announce_when_settled(self, index: int, call: OpenCall) -> None:
        """The header goes out once the name (and the id, when the layout has one) is read, and
        is a name of an offered tool (when tools were offered: another name is never announced)."""
        out = self._out
        if not call.announced and call.name and (
                call.id or not self._p.call_has_id or call.id_absent) and (
                not self._tools or call.name in self._tools):
            call.announced = True
            out.announce(index, call)

    def _end_call(self, index: int, call: OpenCall) -> None:
        """The call's layout is read: the call, or (an unknown tool, arguments that do not read)
        an error."""
        inp = self._in
        out = self._out
        stream, inp.streaming, self._open_call = inp.streaming, None, None
        if self._tools and call.name not in self._tools:
            # Parsing is not authorization, but a call of a tool nobody offered is not a call.
            out.error("unknown_tool",
                        f"call {index} names {call.name!r}, which is not an offered tool",
                        inp.offset())
            return  # (its header never went out: it takes no index)
        streamed = "".join(stream.out) if stream is not None else ""
        bad = call.bad
        if bad is None:
            # (arguments that read are set: see _arguments_read)
            assert call.arguments is not None
            if not call.arguments.startswith(streamed):
                # (never: a stream gives out only what the final text writes; if it did, the
                # call is not trusted)
                bad = (f"the streamed arguments {streamed[:40]!r} are not the call's: a "
                       "tplparse bug, please report it")
        if bad is not None:
            message = f"call {index} ({call.name}): {bad}"
            out.error("invalid_arguments", message, inp.offset())
            if call.announced:
                out.drop_call(index, "invalid_arguments", message)
                out.invalid_calls += 1  # (its header went out: its index stays taken)
            return
        if not call.announced:
            call.announced = True
            out.announce(index, call)
        out.complete_call(index, call, inp.offset(), streamed)

    def _stream_argument(self, st: _KeyValueRead, key: str, value: JSONValue) -> None:
        """A key/value argument is read: it goes out (the rest of it, if its string ran
        ahead), unless the arguments went wrong (then nothing more goes out)."""
        inp = self._in
        stream = inp.streaming
        assert isinstance(stream, KeyValueStream)  # (the callers': key/value arguments stream)
        if st.bad is None:
            self._stream_piece(stream.argument(key, value, inp.text))
        else:
            stream.pause()

    def _stream_piece(self, piece: str) -> None:
        inp = self._in
        out = self._out
        if piece:
            stream = inp.streaming
            assert stream is not None  # (the callers': a piece of the open call's stream)
            out.arguments_delta(stream.index, piece)

    # --- arguments ----------------------------------------------------------------------

    def _arguments_here(self, call: OpenCall, closing: ArgumentsEnd) -> bool:
        """arguments, when they can be read from what is here: a JSON object that is all here
        (decoded in one C call), or key/value arguments whose reader did not have to wait.
        False (nothing consumed, or a key/value reader left waiting in `call.pending`)."""
        inp = self._in
        p = self._p
        if p.object_arguments:
            if p.python_objects:
                return False
            text = inp.text
            pos = SPACES.match(text, inp.pos).end()  # type: ignore[union-attr]
            # (not tried before a "}" is here: a failed decode counts the lines of what it is
            # given)
            if not text.startswith("{", pos) or text.rfind("}") < pos:
                return False
            # Decoded in a window that ends with the call's next literal, not in the whole
            # buffer: a decode that fails counts the lines before it, and a stream of invalid
            # calls must cost linear time. (The object may hold that literal inside a string:
            # then the window cuts it, the decode fails, and the waiting reader reads it.)
            literal = closing.literal
            at = text.find(literal, pos) if literal else -1
            window, start = (text[pos:at + len(literal)], 0) if at != -1 else (text, pos)
            try:
                value, end = JSON_DECODER.raw_decode(window, start)
            except (ValueError, RecursionError):
                return False  # truncated or invalid: the waiting reader says which, and where
            if at != -1:
                end += pos
            if not isinstance(value, dict):
                return False
            try:
                call.arguments = arguments_json(value)
            except BadArguments:
                return False
            inp.pos = end
            return True
        properties = self._tools.get(call.name) if call.name is not None else None
        read = (self._kv_read_state or self._new_kv_read()).start(properties or {}, closing,
                                                                  self._after_arguments)
        if not self._kv_steps_here(read):
            call.pending = read  # a step must wait: the waiting steps go on from it
            return False
        if read.bad is not None:
            call.bad = str(read.bad)
        else:
            self._arguments_read(call, read.arguments)
        return True

    def _new_kv_read(self) -> _KeyValueRead:
        kv = self._p.key_values
        assert kv is not None  # (a format whose arguments are key/value has their format)
        self._kv_read_state = _KeyValueRead(kv)
        return self._kv_read_state

    def _arguments_waiting(self, call: OpenCall, closing: ArgumentsEnd,
                           then: str = "") -> Generator[None, None, None]:
        """arguments, waiting for them as they arrive (`then`: the text the template writes after
        them, Protocol.after_arguments, which feed() may wait for as well before the parse reads
        on)."""
        inp = self._in
        p = self._p
        if p.object_arguments:
            if self._json_call is not None:
                yield from inp.skip_ws()
                if inp.text.startswith('"', inp.pos):
                    # (the call object is read by its keys)
                    raise InvalidOutput("the arguments are a JSON string")
            stream: ObjectStream | None = None
            if call.announced:  # the arguments go out as they arrive (the reader runs the stream)
                stream = inp.streaming = ObjectStream(call.index, inp.pos, p.python_objects)
            try:
                value = yield from self._object_arguments(then, stream)
                if value is None:
                    # (a JSON object its stream read to the end, giving out all of it: its text
                    # is the canonical text of the object, decoded and written again)
                    assert stream is not None  # (None: that stream's answer)
                    call.arguments = "".join(stream.out)
                else:
                    call.arguments = arguments_json(value)
            except BadArguments as e:
                call.bad = str(e)
            return
        read: _KeyValueRead | None
        read, call.pending = call.pending, None
        if call.announced:  # each argument goes out once read (a raw string as it arrives)
            kv_stream = inp.streaming = KeyValueStream(call.index)
            if read is not None:
                for key, value in read.arguments.items():
                    self._stream_piece(kv_stream.argument(key, value, inp.text))
                if read.bad is not None:
                    kv_stream.pause()
        if read is None:  # (not tried on what is here yet)
            properties = self._tools.get(call.name) if call.name is not None else None
            read = (self._kv_read_state or self._new_kv_read()).start(properties or {}, closing,
                                                                      then)
            if not self._kv_steps_here(read):
                yield from self._kv_steps_waiting(read)
        else:
            yield from self._kv_steps_waiting(read)
        if read.bad is not None:
            call.bad = str(read.bad)
        else:
            self._arguments_read(call, read.arguments)

    def _arguments_read(self, call: OpenCall, arguments: dict[str, JSONValue]) -> None:
        """The arguments are read: as JSON text, or (a value JSON cannot hold) bad."""
        try:
            call.arguments = arguments_json(arguments)
        except BadArguments as e:
            call.bad = str(e)

    def _object_arguments(self, then: str = "", stream: ObjectStream | None = None
                          ) -> Generator[None, None, dict[str, JSONValue] | None]:
        """arguments: one object, a JSON object or a Python dict, brackets balanced; None when
        `stream`, the JSON object's argument stream, read it to its end (its text is the
        object's canonical text: nothing to decode)."""
        inp = self._in
        python = self._p.python_objects
        inp.ws_here()  # (whitespace still to come is skipped by the object's reader)
        text = yield from inp.read_balanced("'\"" if python else '"', "arguments object", then)
        if stream is not None and not python and stream.ended and not stream.paused:
            return None
        try:
            value = object_value(text, python)
        except RecursionError:
            raise BadArguments("the arguments are nested too deeply to read") from None
        except (ValueError, SyntaxError, MemoryError) as e:
            raise BadArguments(
                f"the arguments are not valid {'Python' if python else 'JSON'}: {e}") from None
        if not isinstance(value, dict):
            raise BadArguments("the arguments are not an object")
        return value

    # --- key/value arguments: the argument layout as steps ------------------------------
    # argument (separator argument)*, up to the call's next literal: per argument the steps
    # whitespace (or the end), separator, before, key, layout, middle, lead, value, after.
    # `_kv_steps_here` reads whole arguments on what is here (the plain readers' rules,
    # inline, on local copies of the text and position) and stops at the first step that
    # must wait; `_kv_argument_rest` reads that step and the rest of its argument with the
    # waiting readers (each tries what is here first); then whole arguments again.

    def _kv_steps_here(self, st: _KeyValueRead) -> bool:
        """Read arguments from an argument's start on what is here; True once the arguments
        are read, False at the first step that must wait (recorded in `st`, with the key and
        layout read so far)."""
        inp = self._in
        text, pos, first, eof = inp.text, inp.pos, st.first, inp.eof
        closing, closing_word = st.closing, st.closing_word
        while True:
            pos = SPACES.match(text, pos).end()  # type: ignore[union-attr]
            # the arguments' end: the call's next literal (its first word), or the output's end
            if pos >= len(text) and not eof:
                return self._kv_stop(st, pos, _KV_WS, None, None, first)
            if closing:
                if text.startswith(closing_word, pos):
                    inp.pos, st.first = pos, first
                    return True
                if eof and inp.finish in NATURAL_STOPS and 0 < len(text) - pos < len(closing_word) \
                        and stopped_in(closing_word, text[pos:]):
                    # (`}` of `}<tool_call|>` here, the rest the engine's stop; nothing at all
                    # is not enough: the next argument might have come)
                    inp.pos, st.first = pos, first  # (the call's literal reads the rest)
                    return True
                if not eof and len(text) - pos < len(closing_word) and closing_word.startswith(
                        text[pos:]):
                    # (it may still be the end)
                    return self._kv_stop(st, pos, _KV_WS, None, None, first)
            elif eof and pos >= len(text):
                inp.pos, st.first = pos, first
                return True
            # else an argument
            if st.kv.before or st.kv.separator and not first:
                pos = self._kv_opening_here(st, pos, first)
                if pos == _STOPPED:
                    return False
            first = False
            pos = self._kv_argument_here(st, pos)
            if pos == _STOPPED:
                return False

    def _kv_opening_here(self, st: _KeyValueRead, pos: int, first: bool) -> int:
        """separator (not before the first argument), then the text before a key, on what is
        here: where the key starts, or _STOPPED (the step that must wait recorded)."""
        inp = self._in
        kv, text, eof = st.kv, inp.text, inp.eof
        separator, before = kv.separator, kv.before
        if separator and not first:
            # As rendered, and what follows is not whitespace: literal_here's answer, without
            # the call.
            end = pos + len(separator)
            if text.startswith(separator, pos) and (
                    not kv.separator_trails or end < len(text) and not text[end].isspace()):
                pos = end
            else:
                end = literal_here(text, pos, separator, eof)
                if end < 0:
                    return self._kv_wait(st, pos, _KV_SEPARATOR, None, None, first)
                pos = end
        if before:
            end = pos + len(before)
            if text.startswith(before, pos) and (
                    not kv.before_trails or end < len(text) and not text[end].isspace()):
                pos = end
            else:
                end = literal_here(text, pos, before, eof)
                if end < 0:
                    return self._kv_wait(st, pos, _KV_BEFORE, None, None, first)
                pos = end
        return pos

    def _kv_argument_here(self, st: _KeyValueRead, pos: int) -> int:
        """argument: key, middle, value and the text after it, on what is here: where the
        argument ends, or _STOPPED (the step that must wait recorded)."""
        inp = self._in
        kv, text = st.kv, inp.text
        end = kv.key_run(text, pos).end()  # type: ignore[union-attr]
        if not pos < end < len(text):
            return self._kv_wait(st, pos, _KV_KEY, None, None, False)
        key, pos = text[pos:end], end
        layout = kv.single
        if layout is None:  # (several layouts: told apart by the waiting reader)
            return self._kv_wait(st, pos, _KV_LAYOUT, key, None, False)
        middle = layout.middle  # (no end whitespace: as rendered, it ends right after itself)
        if not text.startswith(middle, pos):
            return self._kv_wait(st, pos, _KV_MIDDLE, key, layout, False)
        pos += len(middle)
        lead = layout.middle_lead
        # (exactly this whitespace, once: a raw value may start with whitespace of its own)
        if lead:
            if not text.startswith(lead, pos):
                return self._kv_wait(st, pos, _KV_LEAD, key, layout, False)
            pos += len(lead)
        ending = layout.static or layout.closing(key)  # what the layout writes after this value
        # (open: see _open_value)
        end = -1 if kv.open_values else self._kv_value_here(st, layout, ending, pos)
        if end < 0:
            # anything but raw or quoted text that is here to its end: the waiting reader
            return self._kv_wait(st, pos, _KV_VALUE, key, layout, False)
        # the value, typed by the tool's schema and kept (and streamed), or the arguments are
        # bad (a key twice, a value its type refuses)
        arguments, value = st.arguments, st.value
        schema = st.properties.get(key)
        if key in arguments:
            st.bad = st.bad or BadArguments(f"the key {key!r} appears twice")
        elif schema and schema.get("type") != "string":  # (a string stays as written)
            try:
                arguments[key] = typed_raw(value, schema, kv.fillers, st.quoted)
            except BadArguments as e:
                # the value was read; its closing text keeps the parse in step
                st.bad = st.bad or e
        else:
            arguments[key] = value
        if inp.streaming is not None:
            self._stream_argument(st, key, arguments.get(key))
        pos = end
        after = ending.after_here
        if after:  # (the loop skips whitespace next)
            if text.startswith(after, pos):  # as rendered: its end whitespace takes all there is
                pos = (SPACES.match(text, pos + len(after)).end()  # type: ignore[union-attr]
                       if ending.after_trails else pos + len(after))
            else:
                end = literal_here(text, pos, after, True)
                if end < 0:
                    return self._kv_wait(st, pos, _KV_AFTER, key, layout, False)
                pos = end
        return pos

    def _kv_value_here(self, st: _KeyValueRead, layout: ArgumentLayout, ending: Closing,
                       pos: int) -> int:
        """value: raw or quoted text that is here to its end: where what follows it starts
        (the value in `st.value`, `st.quoted`), else -1."""
        inp = self._in
        text, kv = inp.text, st.kv
        quote_open, quote_close = kv.quote_open, kv.quote_close
        if layout.raw and not (kv.maybe_quoted and text.startswith(quote_open, pos)):
            at = text.find(ending.raw_end, pos)
            if at == -1 or kv.next_argument_search is not None and ending.after_core and (
                    kv.next_argument_search(text, pos, at)):
                # (not closed yet, or something that settles an open value comes first:
                # the waiting reader decides, at the closing text or the end)
                return -1
            value = text[pos:at]
            lead = ending.after_lead
            st.value = value[: len(value) - len(lead)] if lead and value.endswith(lead) else value
            st.quoted = False
            return at
        if not (layout.raw or kv.quoted_strings and text.startswith(quote_open, pos)):
            return -1
        # (quoted: a raw value in the quotes the format may put it in, or a quoted string)
        at = text.find(quote_close, pos + len(quote_open))
        if at == -1:
            return -1
        st.value, st.quoted = text[pos + len(quote_open):at], not layout.raw
        return at + len(quote_close)

    def _kv_stop(self, st: _KeyValueRead, pos: int, step: int, key: str | None,
                 layout: ArgumentLayout | None, first: bool) -> bool:
        """`_kv_steps_here` stopped: False (see _kv_wait)."""
        self._kv_wait(st, pos, step, key, layout, first)
        return False

    def _kv_wait(self, st: _KeyValueRead, pos: int, step: int, key: str | None,
                 layout: ArgumentLayout | None, first: bool) -> int:
        """Where a reader of what is here stopped: the step that must wait, and what its
        argument has read; _STOPPED."""
        inp = self._in
        inp.pos = pos
        st.step, st.key, st.layout, st.first = step, key, layout, first
        return _STOPPED

    def _kv_steps_waiting(self, st: _KeyValueRead) -> Generator[None, None, None]:
        """The arguments from the step `_kv_steps_here` stopped at: the rest of that argument
        waited for, then whole arguments from what is here again."""
        while True:
            yield from self._kv_argument_rest(st)
            if self._kv_steps_here(st):
                return

    def _kv_argument_rest(self, st: _KeyValueRead) -> Generator[None, None, None]:
        """One argument's steps from `st.step` on, with the waiting readers."""
        inp = self._in
        kv = st.kv
        step = st.step
        if step == _KV_WS:  # whitespace, and enough text to tell the call's next literal
            if not st.first:
                # After a value: the next argument's start or the arguments' end (and the rest
                # of the call, the next call's start) come next as the template writes them;
                # feed() waits for all of one of them in one go.
                yield from inp.expect_one_of(st.after_value)
            yield from inp.skip_ws()
            if st.closing:
                # (decided as soon as what is here is not its start)
                yield from inp.peek(st.closing_word)
            return
        if step <= _KV_SEPARATOR and kv.separator and not inp.here(kv.separator):
            yield from inp.match(kv.separator)
        if step <= _KV_BEFORE:
            if kv.before and not inp.here(kv.before):
                yield from inp.match(kv.before)
            st.first = False
        if step <= _KV_KEY:
            if not inp.ws_here():  # (whitespace before the key: `a=1, b=2` for `a=1,b=2`)
                yield from inp.skip_ws()
            st.key = inp.run_here(NAME_CHARS) or (
                yield from inp.read_while(NAME_CHARS, "argument name", kv.key_then))
        if step <= _KV_LAYOUT:
            st.layout = kv.single or (yield from self._argument_layout(kv))
        key, layout = st.key, st.layout
        assert key is not None and layout is not None  # (read above, or before the step waited)
        unquoted = False  # (the value without the layout's quotes: KeyValueFormat.value_quote)
        if step <= _KV_MIDDLE and not inp.here(layout.middle):
            if kv.value_quote:
                unquoted = yield from self._middle_without_quote(layout.middle, kv.value_quote)
            if not unquoted:
                yield from inp.match(layout.middle)
        lead = layout.middle_lead
        # (exactly this whitespace, once: a raw value may start with whitespace of its own)
        if step <= _KV_LEAD and lead and (inp.text.startswith(lead, inp.pos)
                                          or (yield from inp.peek(lead))):
            inp.pos += len(lead)
        ending = layout.closing(key)
        if step <= _KV_VALUE:
            yield from self._kv_value(st, key, layout, ending, unquoted)
        if st.unclosed:
            st.unclosed = False  # (its closing text never came: what settled it comes next)
        elif ending.after_core and not unquoted and not inp.here(ending.after, True):
            # (the loop skips whitespace next)
            yield from inp.match(ending.after, ws_follows=True)
        st.step = _KV_WS

    def _kv_value(self, st: _KeyValueRead, key: str, layout: ArgumentLayout, ending: Closing,
                  unquoted: bool) -> Generator[None, None, None]:
        """argument-value, kept in the arguments (and streamed), or the arguments are bad (a
        key twice, a value its type refuses); `unquoted`: written without the quotes the
        layout puts around every value."""
        inp = self._in
        # (a key read twice is the error, whatever its value: as _kv_steps_here says it)
        twice = BadArguments(f"the key {key!r} appears twice") if key in st.arguments else None
        if twice is not None and inp.streaming is not None:
            inp.streaming.pause()  # (its value is not streamed: the call will not read)
        try:
            value = yield from (self._open_value(st, key, st.properties.get(key)) if unquoted
                                else self._argument_value(st.kv, layout, ending, st, key))
            if twice is not None:
                raise twice
            st.arguments[key] = value
        except BadArguments as e:
            # the value was read; its closing text keeps the parse in step
            st.bad = st.bad or twice or e
        if inp.streaming is not None:
            self._stream_argument(st, key, st.arguments.get(key))

    def _argument_layout(self, kv: KeyValueFormat) -> Generator[None, None, ArgumentLayout]:
        """Which layout this argument uses: the one whose middle text comes next, read as
        `Input.match` reads it (whitespace runs of the template's text match any whitespace or none,
        as the grammar's do); the longest first, and not before what has come could only be
        the start of a longer one. Ended inside a middle: a cut, not a wrong layout."""
        inp = self._in
        longest = max(len(a.middle.strip()) for a in kv.layouts)
        # (and so the message below quotes the same text on every chunking)
        yield from inp.need(longest + 8)
        layouts = sorted(kv.layouts, key=lambda a: -len(a.middle_full))
        while True:
            found = [literal_prefix_here(inp.text, inp.pos, a.middle) for a in layouts]
            if inp.eof or CUT not in found:
                break
            yield from inp.need(inp.available() + 1)
        if WHOLE in found:
            return layouts[found.index(WHOLE)]
        seen = inp.text[inp.pos:inp.pos + longest + 8]
        if CUT in found:
            raise TruncatedOutput(f"the output ended inside an argument's layout at {seen!r}")
        raise InvalidOutput(f"an argument's layout is not recognised at {seen!r}")

    def _argument_value(self, kv: KeyValueFormat, layout: ArgumentLayout, ending: Closing,
                        st: _KeyValueRead, key: str) -> Generator[None, None, JSONValue]:
        """argument-value: raw text, quoted text, JSON, a Python literal or the format's
        notation."""
        inp = self._in
        schema = st.properties.get(key)
        if inp.available() < kv.value_min:
            yield from inp.need(kv.value_min)
        string_layout = len(kv.layouts) == 1 or layout.kind == "string"
        if kv.maybe_quoted and string_layout and (yield from inp.peek(kv.quote_open)):
            # a raw string in the format's quotes (CDATA): to the closing quote, then as raw text
            return typed_raw((yield from self._quoted_value(kv, key, schema)), schema, quoted=True)
        if kv.open_values:
            return (yield from self._open_value(st, key, schema))
        if kv.raw_strings and string_layout:
            return typed_raw((yield from self._raw_value(kv, ending, st, key, schema)), schema,
                             kv.fillers)
        if kv.quoted_strings and inp.text.startswith(kv.quote_open, inp.pos):
            return typed_raw((yield from self._quoted_value(kv, key, schema)), schema, quoted=True)
        if kv.native:
            text = yield from self._read_native(kv.fmt)
            return decode_native(text, kv.fmt)
        return (yield from self._encoded_value(kv, layout, ending, key, schema))

    def _quoted_value(self, kv: KeyValueFormat, key: str,
                      schema: SchemaValue) -> Generator[None, None, str]:
        """argument-value, in the format's quotes: the text between them (the quote is here)."""
        inp = self._in
        inp.pos += len(kv.quote_open)
        text = inp.until_here(kv.quote_close)
        if text is None:
            self._open_raw_string(key, schema, (kv.quote_close,))
            text = yield from inp.read_until(kv.quote_close, "argument value")
        inp.pos += len(kv.quote_close)
        return text

    def _raw_value(self, kv: KeyValueFormat, ending: Closing, st: _KeyValueRead, key: str,
                   schema: SchemaValue) -> Generator[None, None, str]:
        """argument-value, raw: the text up to its closing text (or, that missing, to what
        settles it), less the whitespace the layout writes before that."""
        inp = self._in
        stop = ending.raw_end
        settling = st.settling if ending.after_core else None
        text = inp.until_here(stop)
        if text is not None and settling is not None and kv.next_argument_search and (
                kv.next_argument_search(text)):
            inp.pos -= len(text)  # (something that settles an open value comes first)
            text = None
        if text is None:
            stops, spaces = _raw_stops(kv, ending, settling is not None, st)
            self._open_raw_string(key, schema, stops)
            text = yield from (self._read_raw_value(st, key, stop, settling, spaces)
                               if settling is not None
                               else inp.read_until(stop, "argument value"))
        lead = ending.after_lead
        if lead and text.endswith(lead) and not st.unclosed:
            text = text[: len(text) - len(lead)]
        return text

    def _encoded_value(self, kv: KeyValueFormat, layout: ArgumentLayout, ending: Closing, key: str,
                       schema: SchemaValue) -> Generator[None, None, JSONValue]:
        """argument-value, encoded: JSON or a Python literal (streamed as it arrives when its
        schema takes it as written), or a typed value up to its layout's closing text."""
        inp = self._in
        python = any(kv.encoders.get(k) in ("python", "jinja") for k in (layout.kind, "string"))
        if ending.after_core and layout.kind != "string":
            # A typed value runs to its layout's closing text (DSML: string="false">3</parameter>).
            text = (yield from inp.read_until(ending.after_core, "argument value")).strip()
        else:
            stream = inp.streaming
            if stream is None or not (yield from self._streams_as_written(schema)):
                text = yield from inp.read_balanced("'\"" if python else '"', "argument value")
            else:
                # A JSON or Python value (pythonic calls): it goes out as it arrives, through
                # a stream of its own while it is read.
                assert isinstance(stream, KeyValueStream)  # (key/value arguments' stream)
                piece, inp.streaming = stream.open_value(key, inp.pos, python)
                if inp.streaming is not None:
                    self._stream_piece(piece)
                    inp.stream_arguments()
                text = yield from inp.read_balanced("'\"" if python else '"', "argument value")
                inp.streaming = stream  # (an error above ends the call, and its streams)
        return schema_value(_decoded(text), schema)

    def _streams_as_written(self, schema: SchemaValue) -> Generator[None, None, bool]:
        """Whether a JSON or Python value about to be read is one its schema takes as it is
        written, so that it may go out as it arrives: the schema types nothing, or its first
        character opens an object or array the schema allows (any other value may be read
        as another type, schema_value: it goes out once read)."""
        inp = self._in
        kinds = _schema_kinds(schema)
        if not kinds:
            return True
        yield from inp.skip_ws()
        first = inp.text[inp.pos:inp.pos + 1]
        return first == "{" and "object" in kinds or first == "[" and "array" in kinds

    def _open_value(self, st: _KeyValueRead, key: str,
                    schema: SchemaValue) -> Generator[None, None, JSONValue]:
        """A value the layout writes nothing after (`key=value, key=value)`, strings raw; or one
        written without the quotes the layout puts around every value): an
        object or array (`{` or `[` first, where the schema allows one or there is none) runs
        as its brackets balance and reads as JSON or a Python literal; any other value is the
        text up to the separator or the call's literal after the arguments, whichever comes
        first, typed by the schema (what cannot be read as its type: invalid_arguments)."""
        inp = self._in
        if inp.text.startswith(("{", "["), inp.pos) and _may_be_container(schema):
            text = yield from inp.read_balanced("'\"", "argument value")
            return typed_raw(text, schema) if _schema_kinds(schema) else _decoded(text)
        stops = tuple(s for s in (st.kv.separator_core, st.closing_word) if s)
        literals = st.kv.literal_strings or st.kv.value_quote
        if literals and inp.text.startswith(("'", '"'), inp.pos):
            literal = yield from self._string_literal(stops)
            if literal is not None:
                return typed_raw(literal, schema, quoted=True)
        self._open_raw_string(key, schema, stops)
        start = searched = inp.pos
        longest = max(map(len, stops), default=1)
        while True:
            found = [at for at in (inp.text.find(s, searched) for s in stops) if at != -1]
            if found or inp.eof and not stops:
                inp.pos = min(found) if found else len(inp.text)
                return typed_raw(inp.text[start:inp.pos], schema)
            if inp.eof:
                raise TruncatedOutput("the output ended inside a argument value")
            searched = max(start, len(inp.text) - longest + 1)
            if inp.streaming is not None:
                inp.stream_arguments()
            yield

    def _middle_without_quote(self, middle: str, quote: str) -> Generator[None, None, bool]:
        """Whether an argument's middle (`="`) is written without its last character, the
        quote the layout writes around every value (KeyValueFormat.value_quote), with the value
        right after it (`days=3`, `city='LA'`): then that much is consumed. Else nothing is,
        and the middle is read as written."""
        inp = self._in
        short = middle[:-len(quote)]
        if not (yield from inp.peek(short)):
            return False
        if inp.available() <= len(short):
            yield from inp.need(len(short) + 1)
        at = inp.pos + len(short)
        if at >= len(inp.text) or inp.text.startswith(quote, at) or inp.text[at].isspace():
            return False
        inp.pos = at
        return True

    def _string_literal(self, stops: tuple[str, ...]) -> Generator[None, None, str | None]:
        """An open value written as a string literal where the template writes strings raw
        (KeyValueFormat.literal_strings: `city="Paris, France"` for `city=Paris, France`): the
        string it holds, when a whole literal (in Python's quotes and escapes, JSON's among
        them) is followed, after whitespace, by one of `stops` (the separator, the call's
        closing word) or by the output's end; it and that whitespace are consumed. Else None,
        nothing consumed: the value is raw text that starts with a quote (`"Hi," she said`).
        Nothing of it goes out before it is decided."""
        inp = self._in
        start = inp.pos
        quote = inp.text[start]
        whole = _STRING_LITERALS[quote]
        while True:
            found = whole(inp.text, start)
            if found is not None:
                break
            if inp.eof or "\n" in inp.text[start:]:  # (a literal's quotes are on one line)
                return None
            inp.quiet = waker(quote + "\n")
            yield
        longest = max(map(len, stops), default=1)
        while True:  # what follows the literal: enough of it to tell a stop
            after = SPACES.match(inp.text, found.end()).end()  # type: ignore[union-attr]
            rest = inp.text[after:after + longest]
            if inp.eof or not any(len(rest) < len(s) and s.startswith(rest) for s in stops):
                break
            inp.wait_for = after + longest
            yield
        if rest and not rest.startswith(stops):
            return None
        try:
            value = python_value(found.group())
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            return None
        if not isinstance(value, str):
            return None
        inp.pos = after
        return value

    def _read_raw_value(self, st: _KeyValueRead, key: str, stop: str, settling: Search,
                        spaces: tuple[str, str] | None) -> Generator[None, None, str]:
        """A raw value up to its closing text `stop`, where a value left open (its closing text
        missing) is settled by what follows it (`settling`: the next argument's opener, the
        call's closing word). Closed, with the next argument's opener inside it: two readings
        (the value holds that text, or its closing text is missing and another argument
        follows), and the parse does not guess: the arguments are bad, naming both (the value
        read as closed keeps the parse in step). (Closed and holding the call's closing word
        is one reading: the other would leave the value's own closing text after the call.)
        Never closed by the end of the output: settled by the first such text, if any (so the
        output decides only at its end), less the whitespace the layout writes between a
        value and that text (`spaces`: before the next argument, before the call's close);
        else cut."""
        inp = self._in
        start = searched = inp.pos
        while True:
            at = inp.text.find(stop, searched)
            if at != -1:
                value, inp.pos = inp.text[start:at], at
                found = st.kv.next_argument_search(value) if st.kv.next_argument_search else None
                if found is not None:
                    st.bad = st.bad or BadArguments(
                        f"two readings of {key!r}: a value holding {found.group()!r} "
                        f"({value[:40]!r}), or a value without its {stop!r} "
                        f"({value[:found.start()][:40]!r}) "
                        f"and {found.group()!r} after it; not guessed")
                return value
            if inp.eof:
                # (only an output that ended by itself is settled so: cut by the length limit,
                # the settling text may be the start of more of the value)
                found = settling(inp.text, start) if inp.finish in NATURAL_STOPS else None
                if found is None or stop.startswith(inp.text[found.start():]):
                    # (nothing settles it; or what would is the start of the value's own closing
                    # text, the output ending inside it: `</t` of `</t param>`, which the call's
                    # `</t call>` begins with too: cut there, not closed by the call)
                    raise TruncatedOutput("the output ended inside an argument value")
                inp.pos = found.start()
                st.unclosed = True
                value = inp.text[start:inp.pos]
                assert spaces is not None  # (given with `settling`: see _raw_stops)
                before_next, before_closing = spaces
                space = (before_closing if st.closing_word and found.group() == st.closing_word
                         else before_next)
                cut = next(i for i in range(len(space) + 1) if value.endswith(space[i:]))
                return value[: len(value) - (len(space) - cut)]
            searched = max(start, len(inp.text) - len(stop) + 1)
            inp.quiet = waker(stop[-1])
            if inp.streaming is not None:
                inp.stream_arguments()
            yield

    def _open_raw_string(self, key: str, schema: SchemaValue, stops: tuple[str, ...]) -> None:
        """A string value as written (raw, or in the format's quotes) that is still arriving:
        it goes out as it arrives, all but what may be the start of its closing text."""
        inp = self._in
        stream = inp.streaming
        if stream is not None and keeps_text(schema):
            assert isinstance(stream, KeyValueStream)  # (key/value arguments' stream)
            self._stream_piece(stream.open_string(key, inp.pos, stops))

    def _read_native(self, fmt: ArgumentsTable) -> Generator[None, None, str]:
        """A value in the format's own notation: its quotes and brackets balanced."""
        inp = self._in
        quote_open, quote_close = fmt["quotes"]
        opens = {opening: closing for opening, closing in fmt.get("brackets", {}).values()}
        start = inp.pos
        stack: list[str] = []
        while True:
            while inp.pos < len(inp.text):
                if quote_open and inp.text.startswith(quote_open, inp.pos):
                    end = inp.text.find(quote_close, inp.pos + len(quote_open))
                    if end == -1:
                        break
                    inp.pos = end + len(quote_close)
                    if not stack:
                        return inp.text[start:inp.pos]
                    continue
                if (quote_open and not inp.eof and len(inp.text) - inp.pos < len(quote_open)
                        and quote_open.startswith(inp.text[inp.pos:])):
                    break  # what is here may be the start of a quote: wait and see
                ch = inp.text[inp.pos]
                if ch in opens:
                    stack.append(opens[ch])
                elif stack and ch == stack[-1]:
                    stack.pop()
                    if not stack:
                        inp.pos += 1
                        return inp.text[start:inp.pos]
                elif not stack and (ch in fmt["separator"] or ch in "}])"):
                    return inp.text[start:inp.pos]
                inp.pos += 1
            if inp.eof:
                if not stack and inp.pos > start:
                    return inp.text[start:inp.pos]
                raise TruncatedOutput("the output ended inside an argument value")
            yield


###}
