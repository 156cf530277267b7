"""The input layer: the buffer, the fast paths of `feed`, and the readers the rules call.

`feed` appends a chunk and resumes the parse (a coroutine, see rules) only when the chunk
can move it. While the parse waits, what it waits in says what can: a search (`quiet`) for
the characters that can, a length (`wait_for`, or `_then` characters after where `quiet`
finds the end of a run), the text the template writes next (`_expect`, or one of several
texts: while the output goes on as it), a value's scan (`poll`) or a JSON value's argument
stream (`_drive`), run here by themselves until the value is complete. Plain content or
reasoning with nothing held back goes straight out as its delta, and so does a chunk inside a
string argument whose text so far went out (`_fast`: kept aside in `_ahead` until the parse
needs the text).

Readers come in two forms over the same rules of the grammar: a plain form for text that
is already here (consumes and returns a result, or consumes nothing and returns None /
False), and a waiting form (a generator, `yield from`) that suspends the parse until
enough text has arrived. Rules call the plain form first and fall back to the waiting one.
"""

from __future__ import annotations

from .errors import InvalidOutput, TruncatedOutput
from .output import Delta, Output, TextField
from .protocol import NATURAL_STOPS, stoppable_word, stopped_in
from .streams import KeyValueStream, ObjectStream
from .text import (
    LITERALS,
    SPACES,
    BalancedScan,
    CharSet,
    Search,
    literal_here,
    literal_parts,
    marker_pieces,
    outside,
    run_of,
    waker,
)

# isort: split
###{standalone
import codecs
from collections.abc import Callable, Generator, Iterable, Sequence
from re import Match

_UTF8 = codecs.getincrementaldecoder("utf-8")  # (bytes may split a character: see feed)

# (SPACES and run_of(...) match runs of `*`: they always match, and their `.match(...).end()`
# is marked `type: ignore[union-attr]`, as in text.py.)


class Input:
    """The buffer, feed() and end(), and the readers the rules call; chunks that cannot move
    the parse go to the output (`out`) from here, without a step of the rules.

    What the rules use of it (their reader interface):
      - the text: `text`, `pos` (where the parse is: the rules move it), `eof`, `finish`
        (the finish reason, once end() was called), `offset()`, `available()`;
      - the readers: the plain forms (`here`, `ws_here`, `run_here`, `until_here`) and the
        waiting forms (`need`, `skip_ws`, `match`, `peek`, ..., `read_balanced`);
      - what a rule that yields waits in, set just before it yields (feed reads it, and clears
        it when it resumes the parse): `quiet`, with `plain` and `partials`, `wait_for`,
        `poll`, `trim_ok`; and `streaming`, the open call's argument stream, which feed runs.
    `resume` is the parse's send(), set by the rules when they start.
    """

    __slots__ = ("_out", "_decoder", "text", "pos", "offset_base", "trim_ok", "eof", "finish",
                 "quiet", "plain", "partials", "_open", "wait_for", "_then", "poll", "_fast",
                 "_ahead", "_drive", "_drive_then", "_expect", "_expect_at", "streaming", "resume")

    def __init__(self, out: Output) -> None:
        """The state this layer owns: the buffer, and what the parse waits in."""
        self._out = out
        self.finish: str | None = None  # the finish reason, once the output ended (end())
        # the open call's argument stream (see streams): feed runs it on what arrives
        self.streaming: ObjectStream | KeyValueStream | None = None
        # the parse's send(): it runs until it needs more text (set by the rules)
        self.resume: Callable[[None], object]
        # (made when the first bytes come: a str stream, or one output read whole, needs none)
        self._decoder: codecs.IncrementalDecoder | None = None
        self.text = ""
        self.pos = 0
        self.offset_base = 0  # characters dropped from the front of `text`
        self.trim_ok = False  # True only while the parse waits inside the rules' text scan
        self.eof = False
        # While the parse waits, `quiet` (a regex search) finds the characters that can move it;
        # a chunk without any is handled by `feed` alone: kept (`plain` is None) or, when the
        # parse waits in reasoning/content text (`plain` is that field) with nothing held
        # back, emitted at once.
        self.quiet: Search | None = None
        self.plain: TextField | None = None
        # (with `plain`: the starts of a marker held at a chunk's end)
        self.partials: frozenset[str] = frozenset()
        # (with `plain`: the field, once it has begun and while nothing is held back: feed's
        # plainest path, for a chunk in which `quiet` finds nothing)
        self._open: TextField | None = None
        self.wait_for = 0  # or: the parse needs `text` to reach this length to decide
        self._then = 0  # or: it needs this many characters after the first that `quiet` finds
        # or: a value's scan, which feed() runs on a chunk that passed `quiet`
        self.poll: BalancedScan | None = None
        # While an argument stream is inside a string and gave out all the text so far: the
        # stream, for feed's fast path; and the chunks that path gave out, not yet in `text`.
        self._fast: ObjectStream | KeyValueStream | None = None
        self._ahead: list[str] = []
        # or: the ObjectStream that reads a JSON value feed() is inside (see feed)
        self._drive: ObjectStream | None = None
        self._drive_then = ""  # the text the template writes after that value
        # or: text the parse waits for while the output goes on as it (from _expect_at); or a
        # tuple of texts, one of which (whitespace before it any) it waits for (_expect_one_of)
        self._expect: str | tuple[str, ...] | None = None
        self._expect_at = 0

    def feed(self, chunk: str | bytes | bytearray) -> list[Delta]:
        """Read the next chunk of output (str, or bytes that may split UTF-8 sequences); return
        the deltas it settles. ValueError after end()."""
        text = chunk if chunk.__class__ is str else self._decode(chunk)
        # The two paths most chunks of a stream take, inline (a call would cost a tenth of a
        # chunk's time); every other chunk, or one these cannot settle, goes on to _feed_on.
        field = self._open
        if field is not None:
            # In content or reasoning that has begun, with nothing held back: a chunk in which
            # `quiet` finds no marker's head goes straight out, as Output.emit_text gives text
            # out (inline: the whitespace held before it goes with it, its own is held).
            found = self.quiet(text)  # type: ignore[misc]
            if found is None:
                self.offset_base += len(text)
                body = text.rstrip()
                if body is text:  # (no whitespace at its end)
                    if not text:  # (bytes that end inside a character: nothing yet)
                        return []
                    if field.pending:
                        text = "".join(field.pending) + text
                        field.pending = []
                    field.parts.append(text)
                    return [{field.key: text}]
                if body:
                    out = "".join(field.pending) + body if field.pending else body
                    field.pending = [text[len(body):]]
                    field.parts.append(out)
                    return [{field.key: out}]
                field.pending.append(text)
                return []
            return self._feed_plain(self.quiet, field, text, found)  # type: ignore[arg-type]
        fast = self._fast
        if fast is not None and text:
            # Inside a string argument that streams with all of it before this chunk given
            # out: a chunk that cannot end it is its next characters, given out without a step
            # of the reader and kept aside (`_ahead`) until the parse needs the text
            # (`_catch_up`; a long value's chunks join the text now and then).
            ahead = self._ahead
            if len(ahead) > 1024 and not fast.held:
                self._catch_up()
                ahead = self._ahead
            if fast.special(text) is None or fast.as_is(text) is not None:  # type: ignore[misc]
                ahead.append(text)
                return [{"tool_calls": [{"index": fast.index, "function": {"arguments": text}}]}]
            piece = fast.escaped(text)  # (escapes the canonical text writes the same, ...)
            if piece is not None:
                ahead.append(text)
                return ([{"tool_calls": [{"index": fast.index, "function": {"arguments": piece}}]}]
                        if piece else [])
            self._catch_up()  # (this chunk may end the string: the paths below read it)
            self._fast = None
        return self._feed_on(text)

    def _feed_on(self, text: str) -> list[Delta]:
        """feed, for a chunk its inline paths do not settle: by what the parse waits in."""
        if self._ahead:
            self._catch_up()
        if self._drive is not None:
            return self._feed_driven(self._drive, text)
        if self._expect is not None:
            return self._feed_expected(self._expect, text)
        quiet = self.quiet
        if quiet is not None and self._then:
            # A run that must be followed by `_then` characters: where this chunk ends it, they
            # are waited for from there (by their count alone).
            found = quiet(text)
            if found is not None:
                self.wait_for = len(self.text) + found.start() + self._then
                self._then, self.quiet = 0, None
                quiet = None
        if quiet is None:
            if len(self.text) + len(text) < self.wait_for:
                self._append(text)  # still fewer characters than the parse needs to decide
                return []
        elif self.plain is not None:
            return self._feed_plain(quiet, self.plain, text, quiet(text))
        elif quiet(text) is None or len(self.text) + len(text) < self.wait_for:
            # Inside a value that only a `quiet` character can end: keep it (as _append),
            # and give out what an argument stream settles of it.
            buffer, self.text = self.text, ""
            buffer += text
            self.text = buffer
            return [] if self.streaming is None else self._streamed(self.streaming)
        elif self.poll is not None:
            return self._feed_polled(self.poll, text)
        if self.finish is not None:
            raise ValueError("feed() after end(): the stream is closed")
        return self._push(text)

    def _feed_driven(self, drive: ObjectStream, text: str) -> list[Delta]:
        """feed, inside a JSON (or Python) value that its argument stream reads as it arrives:
        the stream reads the chunk, and the parse is resumed only once the value is complete
        (or the stream stops at what it does not give out: then the scan reads it)."""
        self._append(text)
        if drive.wake is not None and drive.wake(text) is None:
            return []  # (nothing it can give out yet: read with what follows)
        piece = drive.advance(self.text, False)
        if drive.ended and not drive.paused and self._drive_then:
            # What the template writes after the value (the call's end, the next call's
            # start) is waited for too, while the text goes on as written: one wake-up.
            then, rest = self._drive_then, self.text[drive.pos:]
            if len(rest) < len(then) and then.startswith(rest):
                self._drive = self._fast = None
                self._expect, self._expect_at = then, drive.pos
                return ([{"tool_calls": [{"index": drive.index, "function": {"arguments": piece}}]}]
                        if piece else [])
        if drive.paused or drive.ended:
            if piece:
                self._out.arguments_delta(drive.index, piece)
            return self._push("")
        self._fast = self._fast_path(drive)
        return ([{"tool_calls": [{"index": drive.index, "function": {"arguments": piece}}]}]
                if piece else [])

    def _feed_expected(self, expect: str | tuple[str, ...], text: str) -> list[Delta]:
        """feed, while the parse waits for the text the template writes next, as it goes on:
        kept until it is all here (or goes another way)."""
        if expect.__class__ is str:
            k = len(self.text) - self._expect_at
            if k + len(text) < len(expect) and expect.startswith(text, k):
                self._append(text)
                return []
            return self._push(text)
        # One of several texts, whitespace before it any (see _expect_one_of).
        self._append(text)
        came = self.text[self._expect_at:].lstrip()
        if not came:
            self._expect_at = len(self.text)  # (only whitespace: not read again)
            return []
        return [] if _begins_one_of(came, expect) else self._push("")

    def _feed_plain(self, quiet: Search, field: TextField, text: str,
                    found: Match[str] | None) -> list[Delta]:
        """feed, in plain content or reasoning (with what was held back before it, the start of
        what may be a marker; `found`: `quiet` on the chunk): what cannot begin a marker goes
        straight out; the first characters of a marker at its end are held back (the next
        chunk tells); only a marker's head inside it (its first three characters) wakes the
        parse."""
        held = len(self.text) - self.pos
        whole = self.text[self.pos:] + text if held else text
        if held:
            found = quiet(whole)
        # (what goes out leaves the text, and the offsets after it count it; the text is
        # then only what is held now: the parse waits in the text's scan, which reads on
        # from `pos`, so what is before it may go)
        if found is not None:
            if found.end() < len(whole) or found.group() not in self.partials:
                return self._push(text)
            text = whole[:found.start()]
            self.offset_base += self.pos + len(text)
            self.text, self.pos = whole[found.start():], 0
        elif held:
            text = whole
            self.offset_base += self.pos + len(text)
            self.text, self.pos = "", 0
        else:
            self.offset_base += len(text)
        self._out.emit_text(field, text)
        deltas, self._out.deltas = self._out.deltas, []
        self._open = self._plainest(field)
        return deltas

    def _plainest(self, field: TextField | None) -> TextField | None:
        """`field` (the one the parse waits in, if any) when feed's plainest path may give out
        the next chunk to it: the field has begun and nothing is held back; else None."""
        if field is not None and field.started and self.pos == len(self.text) \
                and not self._ahead:
            return field
        return None

    def _feed_polled(self, scan: BalancedScan, text: str) -> list[Delta]:
        """feed, inside a value whose scan can tell by itself whether this chunk completes it."""
        self._append(text)
        if not scan.scan(self.text):
            self.quiet = scan.quiet(len(self.text))
            if self.quiet is not None:
                stream = self.streaming
                return [] if stream is None else self._streamed(stream)
        return self._push("")

    def stream_arguments(self) -> None:
        """The open call's argument stream reads what has arrived; its delta, if it settled any."""
        stream = self.streaming
        assert stream is not None  # (called only while a call's arguments stream)
        piece = stream.advance(self.text, self.eof)
        if piece:
            self._out.arguments_delta(stream.index, piece)

    def _streamed(self, stream: ObjectStream | KeyValueStream) -> list[Delta]:
        """What the open call's argument stream (`stream`) settles of the text kept without a
        resume (none while a key/value stream has no string value running ahead)."""
        if stream.pos is None:
            return []
        piece = stream.advance(self.text, self.eof)  # (_stream_arguments, on feed's fast path)
        if piece:
            self._out.arguments_delta(stream.index, piece)
        self._fast = self._fast_path(stream)
        deltas, self._out.deltas = self._out.deltas, []
        return deltas

    def _fast_path(self, stream: ObjectStream | KeyValueStream | None
                   ) -> ObjectStream | KeyValueStream | None:
        """`stream` when feed's fast path may give out the next chunk for it (see feed): it is
        inside a string and gave out all the text so far; else None."""
        return (stream if stream is not None and stream.special is not None
                and stream.pos == len(self.text) else None)

    def _catch_up(self) -> None:
        """The chunks the fast path gave out (all of them the string's next characters) join
        the text, and the stream that gave them out reads on after them."""
        if self._ahead:
            ahead, self._ahead = self._ahead, []
            text = "".join(ahead)
            self._append(text)
            fast = self._fast
            assert fast is not None  # (the chunks kept aside are the fast path's: it is open)
            fast.caught_up(text, len(self.text))

    def _decode(self, chunk: object) -> str:
        if isinstance(chunk, (bytes, bytearray)):
            if self._decoder is None:
                self._decoder = _UTF8("replace")
            return self._decoder.decode(chunk)
        if isinstance(chunk, str):
            return chunk
        raise TypeError(f"feed() takes a str or bytes chunk, not {type(chunk).__name__}")

    def end(self, finish_reason: str = "stop", last: str | bytes | bytearray = "") -> list[Delta]:
        """The output is complete ("stop") or was cut ("length", or the engine's other reason):
        the last deltas. A second end() returns []. `last`: the output's last chunk, when it
        comes with its end (a whole output read at once: the parse runs through it once, not
        once to where the text ends and again at its end)."""
        if not isinstance(finish_reason, str) or not finish_reason:
            raise TypeError("finish_reason must be a non-empty str such as 'stop' or 'length', "
                            f"not {finish_reason!r}")
        if self.finish is not None:
            if last:
                raise ValueError("feed() after end(): the stream is closed")
            return []
        self._catch_up()
        self._fast = None
        tail = (last if isinstance(last, str) else self._decode(last)) \
            + (self._decoder.decode(b"", final=True) if self._decoder is not None else "")
        self.finish = finish_reason
        self.eof = True
        deltas = self._push(tail)
        # (feed's fast paths stay closed)
        self.quiet = self.plain = self.poll = self.streaming = self._drive = self._open = None
        self.wait_for = self._then = 0
        return deltas

    # --- the buffer -------------------------------------------------------------------

    def _push(self, text: str) -> list[Delta]:
        """Add text and resume the parse until it needs more."""
        if text:
            if self.pos > 4096 and self.trim_ok:
                # Drop what is consumed (keeps feed O(chunk)); only while the parse waits in
                # text scanning, which re-reads its position (readers keep their own indices).
                self.text = self.text[self.pos:]
                self.offset_base += self.pos
                self.pos = 0
            self._append(text)
        self.quiet = self.plain = self.poll = self._drive = self._expect = self._open = None
        self.wait_for = self._then = 0
        try:
            self.resume(None)
        except StopIteration:
            pass
        self._fast = self._fast_path(self.streaming)
        self._open = self._plainest(self.plain)
        deltas, self._out.deltas = self._out.deltas, []
        return deltas

    def _append(self, text: str) -> None:
        # Grow the buffer in place: with its only reference in a local, CPython extends the
        # string instead of copying it (`self.text += text` copies the whole buffer each time).
        buffer, self.text = self.text, ""
        buffer += text
        self.text = buffer

    def offset(self) -> int:
        return self.offset_base + self.pos

    def available(self) -> int:
        return len(self.text) - self.pos

    def need(self, n: int) -> Generator[None, None, None]:
        """Wait until n characters are available (or the stream ended)."""
        while self.available() < n and not self.eof:
            self.wait_for = self.pos + n
            yield

    # --- readers ------------------------------------------------------------------------
    # Plain forms of the readers below, for text that is already here (most of a one-shot
    # parse): each consumes and returns a result, or consumes nothing and returns None/False,
    # and the caller falls back to the waiting form (`yield from`).

    def here(self, literal: str, ws_follows: bool = False) -> bool:
        """Consume `literal` if it comes next as rendered (its end whitespace: any)."""
        parts = LITERALS.get(literal)
        if parts is not None:
            _core, _lead, trail = parts
            if not trail and self.text.startswith(literal, self.pos):
                self.pos += len(literal)  # (the common case, without a call)
                return True
        end = literal_here(self.text, self.pos, literal, self.eof or ws_follows)
        if end < 0:
            return False
        self.pos = end
        return True

    def ws_here(self) -> bool:
        """Skip whitespace; True when what follows is known (another character, or the end)."""
        self.pos = SPACES.match(self.text, self.pos).end()  # type: ignore[union-attr]
        return self.pos < len(self.text) or self.eof

    def run_here(self, chars: CharSet) -> str | None:
        """A non-empty run of `chars` ended by another character already here."""
        end = run_of(chars).match(self.text, self.pos).end()  # type: ignore[union-attr]
        if self.pos < end < len(self.text):
            run, self.pos = self.text[self.pos:end], end
            return run
        return None

    def until_here(self, stop: str) -> str | None:
        """The text up to `stop` (not consumed), if `stop` is already here."""
        at = self.text.find(stop, self.pos)
        if at == -1:
            return None
        value, self.pos = self.text[self.pos:at], at
        return value

    # Waiting forms.

    def skip_ws(self) -> Generator[None, None, None]:
        while True:
            self.pos = SPACES.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text) or self.eof:
                return
            yield

    def match(self, literal: str, required: bool = True, ws_follows: bool = False,
               eats: bool = False) -> Generator[None, None, bool]:
        """A literal whose whitespace runs match any whitespace or none (the grammar's tolerance;
        a run at either end takes all the whitespace there). With `ws_follows` (the next reader
        skips whitespace itself) the literal does not wait to see where its end run stops.
        With `eats` (all that follows the literal in its layout is stoppable), an output that
        ended by itself (a natural stop) where the literal's next word goes, with its unread
        words all stoppable, lacks them because the engine stopped on them: the literal is read."""
        start = self.pos
        end = literal_here(self.text, start, literal, self.eof or ws_follows)
        if end >= 0:  # the common case: written as rendered
            self.pos = end
            return True
        core, lead, trail = literal_parts(literal)
        if lead and not self.ws_here():
            yield from self.skip_ws()
        if core:
            at = self.pos
            if (len(self.text) - at < len(core) and not self.eof
                    and core.startswith(self.text[at:])):
                # Written so far as rendered: wait for the whole literal, then decide (word by
                # word below if what comes is written differently).
                yield from self.need(len(core))
            if self.text.startswith(core, at):
                self.pos = at + len(core)
            elif not (yield from self._match_words(core, start, required, eats)):
                return False
        if trail and not self.ws_here() and not ws_follows:
            yield from self.skip_ws()
        return True

    def _match_words(self, core: str, start: int, required: bool,
                     eats: bool) -> Generator[None, None, bool]:
        """A literal's core (stripped) word by word, where it is not written as rendered (see
        _match, which started at `start`): True once read, False (or the error, `required`)
        where it is not there."""
        # Word by word; whitespace the literal does not write may come where a marker
        # in it ends or begins, and before it when it starts with a marker (`:0
        # <|tool_call_argument_begin|>`): models write it, templates do not.
        pieces = marker_pieces(core)
        for word, loose, rest, after in pieces:
            if word.isspace():
                yield from self.skip_ws()
                continue
            if loose:
                yield from self.skip_ws()
            yield from self.need(len(word))
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                continue
            if self.available() < len(word) and word.startswith(self.text[self.pos:]):
                # (the rest of the layout is markers the engine stopped on: read, unless
                # the output ended inside one of them, which is a cut)
                if (eats and self.eof and self.finish in NATURAL_STOPS
                        and stopped_in(rest, self.text[self.pos:])
                        and all(stoppable_word(w) for w in after)):
                    self.pos = len(self.text)
                    return True
                # (the output ended inside the word: not enough input, not a wrong one)
                self.pos = start
                if required:
                    raise TruncatedOutput(f"the output ended inside {core!r}")
                return False
            seen = self.text[max(start, self.pos + len(word) - 40):self.pos + len(word)]
            self.pos = start
            # (the message quotes only text read so far: the same on every chunking)
            if required:
                raise InvalidOutput(f"expected {core!r} at {seen!r}")
            return False
        return True

    def peek(self, text: str) -> Generator[None, None, bool]:
        """Whether `text` comes next (nothing consumed); decided as soon as what is here is not
        its start."""
        while len(self.text) - self.pos < len(text) and not self.eof:
            if not text.startswith(self.text[self.pos:]):
                return False
            self.wait_for = self.pos + len(text)
            yield
        return self.text.startswith(text, self.pos)

    def peek_after_ws(self, text: str) -> Generator[None, None, bool]:
        """Whether `text` comes next after whitespace (the whitespace is consumed, `text` is
        not)."""
        while True:
            self.pos = SPACES.match(self.text, self.pos).end()  # type: ignore[union-attr]
            here = self.text[self.pos:self.pos + len(text)]
            if len(here) == len(text) or self.eof:
                return here == text
            if here and not text.startswith(here):
                return False
            # (one wait for the whitespace and the text: whitespace still to come waits again)
            self.wait_for = self.pos + len(text)
            yield

    def expect_one_of(self, texts: tuple[str, ...]) -> Generator[None, None, None]:
        """Wait, while what comes is the start of one of `texts` (the text the template writes
        next, whitespace before it any), until it is all here or goes another way: feed() keeps
        the chunks without resuming the parse (one wake-up for a run of literals, not one per
        literal), then the readers read it. Nothing is consumed."""
        if not self.eof and _begins_one_of(self.text[self.pos:].lstrip(), texts):
            self._expect, self._expect_at = texts, self.pos
            yield

    def peek_any_after_ws(self, texts: Sequence[str]) -> Generator[None, None, bool]:
        """Whether one of `texts` comes next after whitespace (the whitespace is consumed, the
        text is not); decided once what is here rules each of them in or out."""
        longest = max(len(t) for t in texts)
        while True:
            self.pos = SPACES.match(self.text, self.pos).end()  # type: ignore[union-attr]
            here = self.text[self.pos:self.pos + longest]
            if any(here.startswith(t) for t in texts):
                return True
            if self.eof or not any(t.startswith(here) for t in texts):
                return False
            self.wait_for = self.pos + longest
            yield

    def which_after_ws(self, texts: Sequence[str]) -> Generator[None, None, str | None]:
        """Which of `texts` comes next after whitespace, the longest that does (the whitespace is
        consumed, the text is not); None when none does. Decided once what is here rules each
        longer one in or out (`to=` is not taken while `to=user<|message|>` may still come)."""
        longest = max(len(t) for t in texts)
        while True:
            self.pos = SPACES.match(self.text, self.pos).end()  # type: ignore[union-attr]
            here = self.text[self.pos:self.pos + longest]
            found = [t for t in texts if here.startswith(t)]
            pending = [t for t in texts if len(t) > len(here) and t.startswith(here)]
            if self.eof or not pending:
                return max(found, key=len) if found else None
            # (woken by the next character: each one may rule the longer texts out)
            self.wait_for = min(len(self.text) + 1, self.pos + longest)
            yield

    def read_while(self, chars: CharSet, what: str, then: int = 0
                    ) -> Generator[None, None, str]:
        """A run of `chars` (a tool name, a call id, an index), ended by any other character.
        `then`: the length of the literal that must follow; the parse waits for it too (it
        cannot go on before), so the run's end and that literal cost one wake-up, not two."""
        start = self.pos
        run = run_of(chars)
        while True:
            self.pos = run.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text):
                if len(self.text) - self.pos < then and not self.eof:
                    # (the run ended in this chunk: the literal after it too)
                    self.wait_for = self.pos + then
                    yield
                break
            if self.eof:
                raise TruncatedOutput(f"the output ended inside {_a(what)}")
            self.quiet = outside(chars)
            self._then = then  # (feed waits for it from where the run ends)
            yield
        if self.pos == start:
            raise InvalidOutput(f"expected {_a(what)} at {self.text[start]!r}")
        return self.text[start:self.pos]

    def read_until(self, stop: str, what: str) -> Generator[None, None, str]:
        """Raw text up to `stop` (not consumed)."""
        searched = self.pos
        while True:
            at = self.text.find(stop, searched)
            if at != -1:
                value, self.pos = self.text[self.pos:at], at
                return value
            if self.eof:
                raise TruncatedOutput(f"the output ended inside {_a(what)}")
            searched = max(self.pos, len(self.text) - len(stop) + 1)
            self.quiet = waker(stop[-1])
            if self.streaming is not None:
                self.stream_arguments()
            yield

    def read_balanced(self, quotes: str, what: str, then: str = ""
                       ) -> Generator[None, None, str]:
        """A JSON / Python literal: brackets balanced, strings (in `quotes`) respected. `then`:
        the text the template writes after it, which feed() may wait for too (see there)."""
        start = self.pos
        stream = self.streaming
        if stream is not None and stream.__class__ is ObjectStream and not stream.paused:
            # The value's argument stream reads it as it arrives: feed() runs the stream alone
            # (`_drive`) until it ends the value or stops at what it does not give out.
            self.stream_arguments()
            while not (stream.ended or stream.paused or self.eof):
                self._drive, self._drive_then = stream, then
                yield
                if self.eof:
                    self.stream_arguments()  # (what came with end(), if anything)
            begin = SPACES.match(self.text, start).end()  # type: ignore[union-attr]
            if stream.ended and not stream.paused and self.text[begin] in "{[":
                # Its brackets balanced (read as JSON or Python, strings and all): where the
                # scan below would end it.
                self.pos = stream.pos
                return self.text[begin:stream.pos]
        scan = BalancedScan(quotes, start)
        while not scan.scan(self.text, self.eof):
            if self.eof:  # (reported where the value starts, or at the end if it never did)
                self.pos = scan.start if scan.start is not None else len(self.text)
                raise TruncatedOutput(f"the output ended inside {_a(what)}")
            # A chunk that can move the scan on is scanned by feed() itself (`poll`): the
            # parse is resumed only once the value is complete.
            self.quiet = scan.quiet(len(self.text))
            if self.quiet is not None:
                self.poll = scan
            if self.streaming is not None:
                self.stream_arguments()
            yield
        if scan.unbalanced:
            assert scan.start is not None  # (a closing bracket is found after the value started)
            self.pos = scan.start  # (reported where the value starts)
            raise InvalidOutput(f"unbalanced {scan.unbalanced!r} in a {what}")
        assert scan.end is not None  # (scan() said the value's end is known)
        self.pos = scan.end
        return self.text[scan.start:scan.end]

    # --- the turn ---------------------------------------------------------------------


def _begins_one_of(came: str, texts: Iterable[str]) -> bool:
    """Whether `came` is the start of one of `texts`, and not all of it yet."""
    for one in texts:
        if len(came) < len(one) and one.startswith(came):
            return True
    return False


def _a(what: str) -> str:
    """`what` with its indefinite article ("a tool name", "an argument name")."""
    return ("an " if what[:1] in "aeiou" else "a ") + what


###}
