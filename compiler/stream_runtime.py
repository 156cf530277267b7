"""The streaming parser engine that every generated module carries (standard library only).

A generated module is this engine plus its family's `SPEC` (a ProtocolSpec as a dict). The
engine reads a model's output as it streams and turns it into OpenAI-style deltas and, at
the end, the normalized message. It follows the family's grammar (tplparse.grammar):

    reasoning-text   text up to the reasoning end (or a call opener, by policy)
    content-text     text up to a call opener or an end-of-turn marker
    tool-calls       section start, tool-call (separator tool-call)*, section end
    tool-call        the spec's call layout: literals, tool-name, arguments, call-id, call-index
    end-of-turn      ends the message; text after it is reported and ignored

The parse is a coroutine (`_turn`) that pulls characters and suspends when it needs more:
each `feed` resumes it, so every character is looked at a bounded number of times. Text
that may be the start of a marker is held back until it cannot be; nothing emitted is ever
retracted. A tool call's header delta goes out once its name (and id, when the layout has
one) is complete; its arguments, normalized to JSON, once the call's layout is complete.
"""

import ast
import codecs
import json
import re

SPEC: dict = {}  # replaced by the generated module's own SPEC

# ---------------------------------------------------------------------------
# Tables from the spec

_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_SLOT_CHARS = {"name": _NAME_CHARS, "id": _ID_CHARS, "index": "0123456789", "index1": "0123456789"}
_MARKER_END = ">]\n"


def _first_marker(text):
    """The first marker of a literal (after whitespace): up to its first > or ], or its first word."""
    text = text.lstrip()
    for i, ch in enumerate(text):
        if ch in _MARKER_END and i > 0:
            return text[: i + 1].strip() if ch != "\n" else text[:i].strip()
    return text.strip()


class _Tables:
    def __init__(self, spec):
        self.spec = spec
        reasoning = spec.get("reasoning") or {}
        self.reasoning_start = reasoning.get("start", "")
        self.reasoning_end = reasoning.get("end", "")
        self.call_ends_reasoning = reasoning.get("tool_call_ends_reasoning", True)
        self.content_start = spec.get("content_start", "")
        self.content_end = spec.get("content_end", "")
        self.end_of_turn = tuple(m for m in spec.get("end_of_turn", []) if m.strip())
        self.tool_calls = spec.get("tool_calls")
        self.opener = ""
        if self.tool_calls:
            tc = self.tool_calls
            head = tc["section_start"] or next((p for p in tc["call"] if isinstance(p, str)), "")
            self.opener = _first_marker(head)
            # what starts a call (another call after a whitespace-only separator starts so)
            self.call_has_id = {"slot": "id"} in tc["call"]
            self.call_head = _first_marker(next((p for p in tc["call"] if isinstance(p, str)), ""))
            self.section_end = _cut_at_end(tc["section_end"], self.end_of_turn)
            # each piece of the call layout, with the next literal after it, whether what comes
            # next skips whitespace itself (then a literal need not wait for its end), whether
            # the piece is a literal that can be taken exactly as written (no end whitespace),
            # and the length of the literal right after it (0: none)
            self.call_pieces = [
                (piece, next((p for p in tc["call"][i + 1:] if isinstance(p, str) and p.strip()), ""),
                 _skips_whitespace(tc["call"][i + 1] if i + 1 < len(tc["call"]) else None),
                 isinstance(piece, str) and not piece[-1:].isspace(),
                 len(tc["call"][i + 1].strip()) if i + 1 < len(tc["call"]) and isinstance(tc["call"][i + 1], str) else 0)
                for i, piece in enumerate(tc["call"])
            ]
        self.key_values = None
        if self.tool_calls and self.tool_calls["arguments"]["style"] != "object":
            self.key_values = _KeyValueFormat(self.tool_calls["arguments"])
        self.content_after_calls = _content_may_follow_calls(spec)
        # Layout-driven forms (data from the spec's turn layouts, not family knowledge):
        # - without a call opener, content turns start with their own prefix ("all\n") and
        #   the text between content and calls opens the calls (">>>");
        # - a section whose start is two markers may hold content between them
        #   (<|python_start|>content<|python_end|>calls).
        turns = spec.get("turns", {})
        self.content_prefix = self.inline_opener = ""
        self.section_inner = None
        content_layout = turns.get("content") or []
        mixed = turns.get("content+calls") or []
        if self.tool_calls and not self.opener and content_layout and isinstance(content_layout[0], str):
            self.content_prefix = content_layout[0].strip()
            for a, b in zip(mixed, mixed[1:] + [None]):
                if a == {"slot": "content"} and isinstance(b, str) and b.strip():
                    self.inline_opener = b.strip()
        for i, piece in enumerate(mixed[:-3]):
            if (isinstance(piece, str) and mixed[i + 1] == {"slot": "content"} and isinstance(mixed[i + 2], str)
                    and mixed[i + 3] == {"slot": "call_list"} and self.tool_calls
                    and "".join((piece + mixed[i + 2]).split()) == "".join(self.tool_calls["section_start"].split())):
                self.section_inner = (piece.strip(), mixed[i + 2].strip())

    def start_state(self, generation_prompt, start):
        if start in ("reasoning", "content"):
            return start
        if not self.reasoning_end:
            return "content"
        if generation_prompt is not None:
            tail = generation_prompt.rstrip()
            closed = tail.rfind(self.reasoning_end)
            opened = tail.rfind(self.reasoning_start) if self.reasoning_start else -1
            for mode in self.spec["modes"].values():
                if mode["tail"].strip() and tail.endswith(mode["tail"].strip()):
                    return mode["start"]
            if opened > closed:
                return "reasoning"
            if closed != -1 and closed >= opened:
                return "content"
        return self.spec["modes"]["default"]["start"]


def _skips_whitespace(piece):
    """Whether the reader of this call-layout piece starts by skipping whitespace."""
    return piece == {"slot": "arguments"} or (isinstance(piece, str) and piece[:1].isspace())


_TABLES = []  # [(spec, its _Tables)]: built once per spec, read-only afterwards


def _tables_of(spec):
    for known, tables in _TABLES:
        if known is spec:
            return tables
    tables = _Tables(spec)
    _TABLES[:] = [(spec, tables)]
    return tables


def _cut_at_end(text, end_markers):
    cut = min([text.find(m) for m in end_markers if m and m in text] or [len(text)])
    return text[:cut]


def _content_may_follow_calls(spec):
    for layout in spec.get("turns", {}).values():
        slots = [p["slot"] for p in layout if isinstance(p, dict)]
        if "content" in slots and any(s in slots for s in ("calls", "call_list")):
            calls_at = min(slots.index(s) for s in ("calls", "call_list") if s in slots)
            if slots.index("content") > calls_at:
                return True
    return False


class _ArgumentLayout:
    """One key/value argument layout cut at its slots: before key, key, middle, value, after."""

    def __init__(self, kind, layout):
        k, v = layout.index({"slot": "key"}), layout.index({"slot": "value"})

        def text(pieces):
            return "".join(p for p in pieces if isinstance(p, str))

        self.kind = kind
        self.before, middle, self.after = text(layout[:k]), text(layout[k + 1:v]), text(layout[v + 1:])
        self.middle_full = middle
        self.middle = middle.rstrip()  # matched with the grammar's whitespace tolerance
        self.middle_lead = middle[len(self.middle):]  # whitespace before the value, taken when there
        self.after_core = self.after.strip()
        self.after_lead = self.after[: len(self.after) - len(self.after.lstrip())]


class _KeyValueFormat:
    """The spec's key/value argument format, read once: layouts, separator, value encoders."""

    def __init__(self, fmt):
        self.fmt = fmt
        self.layouts = [_ArgumentLayout(kind, layout) for kind, layout in fmt["argument"].items()]
        self.string = next(a for a in self.layouts if a.kind == "string")
        self.separator = fmt["separator"] if fmt["separator"].strip() else ""
        self.separator_core = fmt["separator"].strip()
        self.before = self.string.before if self.string.before.strip() else ""
        encoders = self.encoders = fmt["value_encoders"]
        self.quote_open, self.quote_close = fmt["quotes"]
        self.value_min = max(1, len(self.quote_open))
        self.raw_strings = encoders.get("string") == "raw"
        self.quoted_strings = encoders.get("string") == "quoted"
        self.native = encoders.get("object") == "native" or encoders.get("array") == "native"
        self.key_run = _run_of(_NAME_CHARS).match


class _BalancedScan:
    """The resumable scan of a JSON / Python literal at `start` (after whitespace): brackets
    balanced, strings (in `quotes`) respected. `scan(text)` reads on from where it stopped and
    says True once the literal's `end` is known (or `unbalanced`, a stray closing bracket)."""

    __slots__ = ("quotes", "start", "i", "depth", "quote", "end", "unbalanced")

    def __init__(self, quotes, start):
        self.quotes, self.start, self.i = quotes, None, start
        self.depth, self.quote, self.end, self.unbalanced = 0, None, None, None

    def quiet(self, n):
        """A search for the characters that can move the scan on, once it has read `n` characters."""
        if self.start is None:  # nothing but whitespace yet
            return _NOT_SPACE
        # Only a closing bracket can end a nested value; a closing quote a string alone.
        # (Waking on quotes inside a nested value would cost more: strings escape them.)
        if self.depth > 0 and self.i >= n:
            return _CLOSERS
        if self.depth == 0 and self.quote and self.i >= n - 1:
            return _waker(self.quote)
        return None

    def scan(self, text, eof=False):
        if self.end is not None or self.unbalanced is not None:
            return True
        n = len(text)
        if self.start is None:  # the literal starts at its first non-space character
            self.i = _SPACES.match(text, self.i).end()
            if self.i >= n:
                return False
            self.start = self.i
        start, i, depth, quote, quotes = self.start, self.i, self.depth, self.quote, self.quotes
        while i < n:
            # Skip runs of ordinary characters at C speed.
            run = (_STRING_BODY[quote] if quote else _PLAIN).match(text, i)
            if run and i > start and (quote or depth > 0):
                i = run.end()
                if i >= n:
                    break
            ch = text[i]
            if quote:
                if ch == "\\":
                    if i + 1 >= n:
                        break
                    i += 2
                    continue
                if ch == quote:
                    quote = None
                    if depth == 0:  # a string on its own
                        self.end = i + 1
                        return True
            elif ch in quotes:
                quote = ch
            elif ch in "{[(":
                depth += 1
            elif ch in "}])":
                depth -= 1
                if depth == 0:
                    self.end = i + 1
                    return True
                if depth < 0:
                    self.unbalanced = ch
                    return True
            elif depth == 0 and not ch.isspace() and i == start:
                # a scalar: read to the next delimiter (none: an empty value, which will not read)
                scalar = _SCALAR.match(text, i)
                end = scalar.end() if scalar else i
                if end < n or eof:
                    self.end = end
                    return True
                break
            i += 1
        self.i, self.depth, self.quote = i, depth, quote
        return False


class _TextField:
    """Content or reasoning as emitted so far: its parts, and the whitespace held at its edges."""

    __slots__ = ("key", "parts", "pending", "started")

    def __init__(self, key):
        self.key = key  # its delta key: "content" or "reasoning_content"
        self.parts = []
        self.pending = ""  # whitespace at the end so far: emitted only if more text follows it
        self.started = False  # until then, whitespace at the very start is dropped


class _Invalid(Exception):
    """The output leaves the format."""


class _Truncated(Exception):
    """The output ended in the middle of something."""


class _BadArguments(Exception):
    """A complete call whose arguments do not read (invalid JSON, a value of the wrong type)."""


# ---------------------------------------------------------------------------
# The parser


class StreamParser:
    """Feed a model's output in chunks (str or bytes); get OpenAI-style deltas back."""

    def __init__(self, tools=None, generation_prompt=None, start=None):
        self._t = _tables_of(SPEC)
        self._tools = {}
        for tool in tools or []:
            function = tool.get("function") or tool
            self._tools[function.get("name")] = function.get("parameters") or {}
        self._state = self._t.start_state(generation_prompt, start)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._text = ""
        self._pos = 0
        self._offset_base = 0  # characters dropped from the front of _text
        self._trim_ok = False  # True only while the parse waits inside _text_until
        # While the parse waits, `_quiet` (a regex search) finds the characters that can move it;
        # a chunk without any is handled by `feed` alone: kept (`_plain` is None) or, when the
        # parse waits in reasoning/content text (`_plain` is that field) with nothing held
        # back, emitted at once.
        self._quiet = None
        self._plain = None
        self._wait_for = 0  # or: the parse needs _text to reach this length to decide
        self._poll = None  # or: a value's scan, which feed() runs on a chunk that passed `_quiet`
        self._eof = False
        self._deltas = []
        self._content_text = _TextField("content")
        self._reasoning_text = _TextField("reasoning_content")
        self._calls = []
        self._invalid_calls = 0  # complete calls dropped for their arguments (they keep their index)
        self._errors = []
        self._finish = None
        self._run = self._turn()
        next(self._run)
        self._resume = self._run.send

    # --- the public contract ------------------------------------------------------

    def feed(self, chunk):
        text = chunk if chunk.__class__ is str else self._decode(chunk)
        # Fast paths: most chunks cannot move the parse past what it waits in. (After end()
        # none is open: it clears what they test.)
        quiet = self._quiet
        if quiet is None:
            if len(self._text) + len(text) < self._wait_for:
                self._append(text)  # still fewer characters than the parse needs to decide
                return []
        elif quiet(text) is None or len(self._text) + len(text) < self._wait_for:
            if self._plain is None:
                # Inside a value that only a `quiet` character can end: keep it (as _append).
                buffer, self._text = self._text, ""
                buffer += text
                self._text = buffer
                return []
            if self._pos == len(self._text):
                # Plain content or reasoning with nothing held back: it goes straight out.
                self._offset_base += len(text)
                field = self._plain
                if field.started:  # (_emit_text, inlined: most chunks of a stream come here)
                    body = text.rstrip()
                    if body is text and not field.pending:  # no whitespace at the end, none held
                        field.parts.append(text)
                        return [{field.key: text}]
                    if not body:
                        field.pending += text
                        return []
                    out = field.pending + body if field.pending else body
                    field.pending = text[len(body):]
                    field.parts.append(out)
                    return [{field.key: out}]
                self._emit_text(field, text)
                deltas, self._deltas = self._deltas, []
                return deltas
        elif self._poll is not None:
            # The value's scan can tell by itself whether this chunk completes it: ask it.
            scan = self._poll
            self._append(text)
            if not scan.scan(self._text):
                self._quiet = scan.quiet(len(self._text))
                if self._quiet is not None:
                    return []
            return self._push("")
        if self._finish is not None:
            raise RuntimeError("end() was called: the stream is closed")
        return self._push(text)

    def _decode(self, chunk):
        return self._decoder.decode(chunk) if isinstance(chunk, (bytes, bytearray)) else chunk

    def end(self, finish_reason="stop"):
        if self._finish is not None:
            return []
        tail = self._decoder.decode(b"", final=True)
        self._finish = finish_reason
        self._eof = True
        deltas = self._push(tail)
        self._quiet = self._plain = self._poll = None  # (feed's fast paths stay closed)
        self._wait_for = 0
        if finish_reason == "length" and self._state == "reasoning":
            self._errors.append(_error("reasoning_truncated", "the output ended inside reasoning",
                                      self._offset_base + len(self._text)))
        return deltas

    @property
    def message(self):
        if self._finish is None:
            raise RuntimeError("the message is complete only after end()")
        content = "".join(self._content_text.parts)
        reasoning = "".join(self._reasoning_text.parts)
        return {
            "role": "assistant",
            "content": content or None,
            "reasoning_content": reasoning or None,
            "tool_calls": [dict(c) for c in self._calls],
            "errors": list(self._errors),
            "finish_reason": self._finish,
        }

    # --- plumbing -------------------------------------------------------------------

    def _push(self, text):
        """Add text and resume the parse until it needs more."""
        if text:
            if self._pos > 4096 and self._trim_ok:
                # Drop what is consumed (keeps feed O(chunk)); only while the parse waits in
                # text scanning, which re-reads its position (readers keep their own indices).
                self._text = self._text[self._pos:]
                self._offset_base += self._pos
                self._pos = 0
            self._append(text)
        self._quiet = self._plain = self._poll = None
        self._wait_for = 0
        try:
            self._resume(None)
        except StopIteration:
            pass
        deltas, self._deltas = self._deltas, []
        return deltas

    def _append(self, text):
        # Grow the buffer in place: with its only reference in a local, CPython extends the
        # string instead of copying it (`self._text += text` copies the whole buffer each time).
        buffer, self._text = self._text, ""
        buffer += text
        self._text = buffer

    def _offset(self):
        return self._offset_base + self._pos

    def _available(self):
        return len(self._text) - self._pos

    def _need(self, n):
        """Wait until n characters are available (or the stream ended)."""
        while self._available() < n and not self._eof:
            self._wait_for = self._pos + n
            yield

    def _emit_text(self, field, text):
        """Emit reasoning or content, without the whitespace at its very start and end."""
        if not text:
            return
        if not field.started:
            text = text.lstrip()
            if not text:
                return
            field.started = True
        body = text.rstrip()
        if not body:
            field.pending += text
            return
        out = field.pending + body if field.pending else body
        field.pending = text[len(body):]
        field.parts.append(out)
        self._deltas.append({field.key: out})

    def _text_until(self, stops, field):
        """reasoning-text / content-text: emit text up to the first stop; return the stop (or None at the end)."""
        stops = [s for s in stops if s]
        first_stop = _first_of(stops)  # one scan from the position: never past the first stop
        quiet = _waker("".join(s[0] for s in stops))
        longest = max(len(s) for s in stops)
        while True:
            text, pos = self._text, self._pos
            found = first_stop(text, pos)
            if found is not None and not self._eof:
                # A longer stop that starts the same way may still be arriving: wait for it.
                at, stop = found.start(), found.group()
                rest = len(text) - at
                if rest < longest and any(len(s) > rest and s.startswith(text[at:]) for s in stops if s.startswith(stop)):
                    self._emit_text(field, text[pos:at])
                    self._pos = at
                    self._trim_ok = True
                    yield
                    self._trim_ok = False
                    continue
            if found is not None:
                self._emit_text(field, text[pos:found.start()])
                self._pos = found.start()
                return found.group()
            if self._eof:
                self._emit_text(field, text[pos:])
                self._pos = len(text)
                return None
            keep = _held_back(text[max(pos, len(text) - longest):], stops)
            self._emit_text(field, text[pos:len(text) - keep])
            self._pos = len(text) - keep
            if not keep:
                self._plain, self._quiet = field, quiet
            self._trim_ok = True
            yield
            self._trim_ok = False

    # Plain forms of the readers below, for text that is already here (most of a one-shot
    # parse): each consumes and returns a result, or consumes nothing and returns None/False,
    # and the caller falls back to the waiting form (`yield from`).

    def _here(self, literal, ws_follows=False):
        """Consume `literal` if it comes next as rendered (its end whitespace: any)."""
        parts = _LITERALS.get(literal)
        if parts is not None and not parts[2] and self._text.startswith(literal, self._pos):
            self._pos += len(literal)  # (the common case, without a call)
            return True
        end = _literal_here(self._text, self._pos, literal, self._eof or ws_follows)
        if end < 0:
            return False
        self._pos = end
        return True

    def _ws_here(self):
        """Skip whitespace; True when what follows is known (another character, or the end)."""
        self._pos = _SPACES.match(self._text, self._pos).end()
        return self._pos < len(self._text) or self._eof

    def _run_here(self, chars):
        """A non-empty run of `chars` ended by another character already here."""
        end = _run_of(chars).match(self._text, self._pos).end()
        if self._pos < end < len(self._text):
            run, self._pos = self._text[self._pos:end], end
            return run
        return None

    def _until_here(self, stop):
        """The text up to `stop` (not consumed), if `stop` is already here."""
        at = self._text.find(stop, self._pos)
        if at == -1:
            return None
        value, self._pos = self._text[self._pos:at], at
        return value

    # Waiting forms.

    def _skip_ws(self):
        while True:
            self._pos = _SPACES.match(self._text, self._pos).end()
            if self._pos < len(self._text) or self._eof:
                return
            yield

    def _match(self, literal, required=True, ws_follows=False):
        """A literal whose whitespace runs match any whitespace or none (the grammar's tolerance;
        a run at either end takes all the whitespace there). With `ws_follows` (the next reader
        skips whitespace itself) the literal does not wait to see where its end run stops."""
        start = self._pos
        end = _literal_here(self._text, start, literal, self._eof or ws_follows)
        if end >= 0:  # the common case: written as rendered
            self._pos = end
            return True
        core, lead, trail = _literal_parts(literal)
        if lead and not self._ws_here():
            yield from self._skip_ws()
        if core:
            at = self._pos
            if len(self._text) - at < len(core) and not self._eof and core.startswith(self._text[at:]):
                # Written so far as rendered: wait for the whole literal, then decide (word by
                # word below if what comes is written differently).
                yield from self._need(len(core))
            if self._text.startswith(core, at):
                self._pos = at + len(core)
            else:
                for word in _words(core):
                    if word.isspace():
                        yield from self._skip_ws()
                        continue
                    yield from self._need(len(word))
                    if self._text.startswith(word, self._pos):
                        self._pos += len(word)
                        continue
                    if self._available() < len(word):
                        self._pos = start
                        if required:
                            raise _Truncated(f"the output ended inside {core!r}")
                        return False
                    seen = self._text[max(start, self._pos + len(word) - 40):self._pos + len(word)]
                    self._pos = start
                    if required:  # (the message quotes only text read so far: the same on every chunking)
                        raise _Invalid(f"expected {core!r} at {seen!r}")
                    return False
        if trail and not self._ws_here() and not ws_follows:
            yield from self._skip_ws()
        return True

    def _peek(self, text):
        """Whether `text` comes next (nothing consumed); decided as soon as what is here is not its start."""
        while len(self._text) - self._pos < len(text) and not self._eof:
            if not text.startswith(self._text[self._pos:]):
                return False
            self._wait_for = self._pos + len(text)
            yield
        return self._text.startswith(text, self._pos)

    def _peek_after_ws(self, text):
        """Whether `text` comes next after whitespace (the whitespace is consumed, `text` is not)."""
        while True:
            self._pos = _SPACES.match(self._text, self._pos).end()
            here = self._text[self._pos:self._pos + len(text)]
            if len(here) == len(text) or self._eof:
                return here == text
            if here and not text.startswith(here):
                return False
            # (one wait for the whitespace and the text: whitespace still to come waits again)
            self._wait_for = self._pos + len(text)
            yield

    def _read_while(self, chars, what, then=0):
        """A run of `chars` (a tool name, a call id, an index), ended by any other character.
        `then`: the length of the literal that must follow; the parse waits for it too (it
        cannot go on before), so the run's end and that literal cost one wake-up, not two."""
        start = self._pos
        run = _run_of(chars)
        while True:
            self._pos = run.match(self._text, self._pos).end()
            if self._pos < len(self._text):
                break
            if self._eof:
                raise _Truncated(f"the output ended inside a {what}")
            self._quiet = _outside(chars)
            self._wait_for = len(self._text) + then
            yield
        if self._pos == start:
            raise _Invalid(f"expected a {what} at {self._text[start]!r}")
        return self._text[start:self._pos]

    def _read_until(self, stop, what):
        """Raw text up to `stop` (not consumed)."""
        searched = self._pos
        while True:
            at = self._text.find(stop, searched)
            if at != -1:
                value, self._pos = self._text[self._pos:at], at
                return value
            if self._eof:
                raise _Truncated(f"the output ended inside a {what}")
            searched = max(self._pos, len(self._text) - len(stop) + 1)
            self._quiet = _waker(stop[-1])
            yield

    def _read_balanced(self, quotes, what):
        """A JSON / Python literal: brackets balanced, strings (in `quotes`) respected."""
        scan = _BalancedScan(quotes, self._pos)
        while not scan.scan(self._text, self._eof):
            if self._eof:  # (reported where the value starts, or at the end if it never did)
                self._pos = scan.start if scan.start is not None else len(self._text)
                raise _Truncated(f"the output ended inside a {what}")
            # A chunk that can move the scan on is scanned by feed() itself (`_poll`): the
            # parse is resumed only once the value is complete.
            self._quiet = scan.quiet(len(self._text))
            if self._quiet is not None:
                self._poll = scan
            yield
        if scan.unbalanced:
            self._pos = scan.start  # (reported where the value starts)
            raise _Invalid(f"unbalanced {scan.unbalanced!r} in a {what}")
        self._pos = scan.end
        return self._text[scan.start:scan.end]

    # --- the turn ---------------------------------------------------------------------

    def _turn(self):
        """root: reasoning? content (tool-calls content?)* end-of-turn?"""
        yield  # primed; wait for the first chunk
        t = self._t
        try:
            if self._state == "content" and t.reasoning_start and t.reasoning_end:
                # An optional reasoning block first (the model opens it itself).
                yield from self._skip_ws()
                yield from self._need(len(t.reasoning_start))
                if self._text.startswith(t.reasoning_start, self._pos):
                    self._pos += len(t.reasoning_start)
                    self._state = "reasoning"
            if self._state == "reasoning":
                stop = yield from self._reasoning_block()
                if stop is None or stop in t.end_of_turn:
                    yield from self._after_end(stop)
                    return
                if stop == t.opener:
                    yield from self._tool_calls()
            self._state = "content"
            if t.tool_calls and not t.opener:
                yield from self._turn_without_opener()
            else:
                yield from self._content()
        except _Truncated as e:
            self._errors.append(_error("truncated_tool_call", str(e), self._offset()))
        except _Invalid as e:
            self._errors.append(_error("invalid_tool_call", str(e), self._offset()))
            self._pos = len(self._text)
        while True:  # whatever still comes is past the parse
            self._pos = len(self._text)
            if self._eof:
                return
            yield

    def _reasoning_block(self):
        """reasoning-text, up to its end marker (or a call opener, by policy)."""
        t = self._t
        stops = [t.reasoning_end] + list(t.end_of_turn)
        if t.opener and t.call_ends_reasoning:
            stops.append(t.opener)
        stop = yield from self._text_until(stops, self._reasoning_text)
        if stop == t.reasoning_end:
            self._pos += len(stop)
            self._state = "content"
        return stop

    def _content(self):
        """content-text (tool-calls content-text?)* end-of-turn?"""
        t = self._t
        stops = list(t.end_of_turn) + ([t.opener] if t.opener else []) + ([t.content_end] if t.content_end else [])
        if t.content_start:
            yield from self._skip_ws()
            yield from self._need(len(t.content_start))
            if self._text.startswith(t.content_start, self._pos):
                self._pos += len(t.content_start)
        while True:
            stop = yield from self._text_until(stops, self._content_text)
            if stop is None or stop in t.end_of_turn:
                yield from self._after_end(stop)
                return
            if stop == t.content_end:
                self._pos += len(stop)
                continue
            yield from self._tool_calls()

    def _turn_without_opener(self):
        """No marker opens a call: a content turn starts with its prefix, anything else is calls."""
        t = self._t
        yield from self._skip_ws()
        if t.content_prefix and (yield from self._peek(t.content_prefix)):
            self._pos += len(t.content_prefix)
            stops = list(t.end_of_turn) + ([t.inline_opener] if t.inline_opener else [])
            stop = yield from self._text_until(stops, self._content_text)
            if stop is None or stop in t.end_of_turn:
                yield from self._after_end(stop)
                return
            self._pos += len(stop)
        if self._available() or not self._eof:
            yield from self._tool_calls()
        yield from self._skip_ws()
        longest = max([len(m) for m in t.end_of_turn] + [1])
        yield from self._need(longest)  # enough text to tell an end-of-turn marker
        stop = next((m for m in t.end_of_turn if self._text.startswith(m, self._pos)), None)
        if stop is None and self._available():
            raise _Invalid(f"unexpected text after the calls: {self._text[self._pos:self._pos + longest]!r}")
        yield from self._after_end(stop)

    def _after_end(self, stop):
        """end-of-turn: the message ends; text after it is reported, not parsed."""
        if stop is None:
            return
        self._pos += len(stop)
        start = self._offset()
        rest = []
        while True:
            rest.append(self._text[self._pos:])
            self._pos = len(self._text)
            if self._eof:
                break
            yield
        text = "".join(rest)
        if text.strip():
            self._errors.append(_error("text_after_end_of_turn", f"ignored: {text[:80]!r}", start))

    def _tool_calls(self):
        """tool-calls: section start, tool-call (separator tool-call)*, section end."""
        tc = self._t.tool_calls
        inner = self._t.section_inner
        if inner and not (yield from self._match(tc["section_start"], required=False)):
            # The section holds content first: <start>content<end>, then the calls.
            yield from self._match(inner[0])
            stop = yield from self._text_until([inner[1]], self._content_text)
            if stop is None:
                raise _Truncated(f"the output ended before {inner[1]!r}")
            self._pos += len(stop)
        elif not inner:
            yield from self._match(tc["section_start"])
        while True:
            index = len(self._calls) + self._invalid_calls
            if not self._call_here(index):
                yield from self._tool_call(index)
            if tc["parallel"] == "all" and tc["separator"].strip():
                if self._here(tc["separator"]) or (yield from self._match(tc["separator"], required=False)):
                    continue
            elif tc["parallel"] == "all":
                # Calls separated by whitespace only: another call starts with the call's opener.
                start = self._pos
                head = self._t.call_head
                if head and (self._ws_here() and self._text.startswith(head, self._pos)
                             or (yield from self._peek_after_ws(head))):
                    continue
                self._pos = start
            break
        if self._t.section_end.strip():
            yield from self._match(self._t.section_end)

    def _tool_call(self, index):
        """tool-call: the layout's literals, then name, arguments, id, index slots."""
        call = {"name": None, "id": None, "arguments": None}
        bad = None
        has_id = self._t.call_has_id
        announced = False
        for piece, following, ws_follows, exact, then in self._t.call_pieces:
            if piece.__class__ is str:
                if exact and self._text.startswith(piece, self._pos):  # as rendered
                    self._pos += len(piece)
                elif not self._here(piece, ws_follows):
                    yield from self._match(piece, ws_follows=ws_follows)
                continue
            slot = piece["slot"]
            if slot == "name":
                call["name"] = self._run_here(_NAME_CHARS) or (
                    yield from self._read_while(_NAME_CHARS, "tool name", then))
            elif slot == "id":
                call["id"] = self._run_here(_ID_CHARS) or (yield from self._read_while(_ID_CHARS, "call id", then))
            elif slot in ("index", "index1"):
                yield from self._read_while("0123456789", "call index")
            elif slot == "arguments":
                try:
                    call["arguments"] = _arguments_json((yield from self._arguments(call["name"], following)))
                except _BadArguments as e:
                    bad = str(e)
            if not announced and call["name"] and (call["id"] or not has_id):
                announced = True
                self._announce(index, call)
        if not announced:
            self._announce(index, call)
        if bad is not None:
            # The call is complete but its arguments do not read: no call, an error.
            self._errors.append(_error("invalid_arguments", f"call {index} ({call['name']}): {bad}", self._offset()))
            self._invalid_calls += 1
            return
        self._complete_call(index, call)

    def _complete_call(self, index, call):
        """The call is complete and its arguments (now JSON text) read: its last delta, and the call."""
        arguments = call["arguments"]
        self._deltas.append({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
        self._calls.append({"id": call["id"] or f"call_{index}", "type": "function",
                            "function": {"name": call["name"], "arguments": arguments}})

    # --- a call that is all here ---------------------------------------------------------
    # The plain form of `_tool_call` for a call that is already all here, written as rendered
    # (a one-shot parse, a large chunk): the same layout read with no generator and no waiting.
    # It covers the common shapes (JSON arguments; key/value strings, raw or quoted) and gives
    # up, consuming nothing, on anything else (a missing piece, other whitespace, a value to
    # type or that does not read): `_tool_call` then reads the call. The chunking tests hold
    # the two to the same result (one-shot takes this path, one-character feeds the other).

    def _call_here(self, index):
        text = self._text
        start = pos = self._pos
        call = {"name": None, "id": None, "arguments": None}
        for piece, following, ws_follows, exact, then in self._t.call_pieces:
            if piece.__class__ is str:
                if exact and text.startswith(piece, pos):  # as rendered
                    pos += len(piece)
                    continue
                pos = _literal_here(text, pos, piece, ws_follows)
                if pos < 0:
                    return False
                continue
            slot = piece["slot"]
            if slot == "arguments":
                self._pos = pos
                value = self._arguments_here(call["name"], following)
                pos, self._pos = self._pos, start
                if value is None:
                    return False
                try:
                    call["arguments"] = _arguments_json(value)
                except _BadArguments:
                    return False
                continue
            chars = _SLOT_CHARS.get(slot)
            if chars is None:  # a slot the call layout does not read (as in _tool_call)
                continue
            end = _run_of(chars).match(text, pos).end()
            if not pos < end < len(text):
                return False
            if slot in ("name", "id"):
                call[slot] = text[pos:end]
            pos = end
        self._pos = pos
        self._announce(index, call)
        self._complete_call(index, call)
        return True

    def _arguments_here(self, name, following):
        """The arguments of `_call_here` (None: not all here, or not a shape read here)."""
        text = self._text
        fmt = self._t.tool_calls["arguments"]
        if fmt["style"] == "object":
            pos = _SPACES.match(text, self._pos).end()
            if fmt["encoder"] == "python" or not text.startswith("{", pos) or text.rfind("}") < pos:
                return None
            try:
                value, end = _JSON_DECODER.raw_decode(text, pos)
            except (ValueError, RecursionError):
                return None
            if not isinstance(value, dict):
                return None
            self._pos = end
            return value
        kv = self._t.key_values
        closing = following.strip()
        if len(kv.layouts) != 1 or not closing or not (kv.raw_strings or kv.quoted_strings):
            return None
        properties = (self._tools.get(name) or {}).get("properties") or {}
        layout = kv.string
        middle, middle_lead, after_lead = layout.middle, layout.middle_lead, layout.after_lead
        # (whitespace alone after a value is left to the loop; a raw value ends right at the
        # closing text, its leading whitespace read as part of the value and stripped)
        after = (layout.after.lstrip() if kv.raw_strings else layout.after) if layout.after_core else ""
        value_end = layout.after_core or kv.separator_core  # where a raw value ends
        quote_open, quote_close = kv.quote_open, kv.quote_close
        key_run, spaces, raw = kv.key_run, _SPACES.match, kv.raw_strings
        arguments = {}
        pos = self._pos
        while True:
            pos = spaces(text, pos).end()
            if text.startswith(closing, pos):
                break
            if arguments and kv.separator:
                pos = _literal_here(text, pos, kv.separator)
            if kv.before and pos >= 0:
                pos = _literal_here(text, pos, kv.before)
            if pos < 0:
                return None
            end = key_run(text, pos).end()
            if not pos < end < len(text) or not text.startswith(middle, end):
                return None
            key, pos = text[pos:end], end + len(middle)
            if middle_lead and text.startswith(middle_lead, pos):
                pos += len(middle_lead)
            if raw:
                at = text.find(value_end, pos)
                if at == -1:
                    return None
                value, pos = text[pos:at], at
                if after_lead and value.endswith(after_lead):
                    value = value[: len(value) - len(after_lead)]
            elif text.startswith(quote_open, pos):
                at = text.find(quote_close, pos + len(quote_open))
                if at == -1:
                    return None
                value, pos = text[pos + len(quote_open):at], at + len(quote_close)
            else:
                return None
            schema = properties.get(key)
            if schema and schema.get("type") != "string":
                try:
                    value = _typed_raw(value, schema)
                except _BadArguments:
                    return None
            arguments[key] = value
            if after:
                pos = _literal_here(text, pos, after, True)  # (the loop skips whitespace next)
                if pos < 0:
                    return None
        self._pos = pos
        return arguments

    def _announce(self, index, call):
        self._deltas.append({"tool_calls": [{"index": index, "id": call["id"] or f"call_{index}", "type": "function",
                                             "function": {"name": call["name"], "arguments": ""}}]})

    # --- arguments ----------------------------------------------------------------------

    def _arguments(self, name, following):
        """arguments: one encoded object, or argument (separator argument)*."""
        fmt = self._t.tool_calls["arguments"]
        schema = self._tools.get(name) or {}
        if fmt["style"] == "object":
            self._ws_here()  # (whitespace still to come is skipped by the object's reader)
            python = fmt["encoder"] == "python"
            if not python and self._text.startswith("{", self._pos) and self._text.rfind("}") > self._pos:
                # Fast path: an object that is already all here decodes in one C call. A
                # truncated or invalid one falls through to the incremental reader below
                # (not tried before a "}" is here: a failed decode counts lines in the buffer).
                try:
                    value, end = _JSON_DECODER.raw_decode(self._text, self._pos)
                except (ValueError, RecursionError):
                    pass
                else:
                    if isinstance(value, dict):
                        self._pos = end
                        return value
            text = yield from self._read_balanced("'\"" if python else '"', "arguments object")
            try:
                value = _python_value(text) if python else json.loads(text)
            except RecursionError:
                raise _BadArguments("the arguments are nested too deeply to read") from None
            except (ValueError, SyntaxError, MemoryError) as e:
                raise _BadArguments(f"the arguments are not valid {'Python' if python else 'JSON'}: {e}") from None
            if not isinstance(value, dict):
                raise _BadArguments("the arguments are not an object")
            return value
        return (yield from self._kv_arguments(self._t.key_values, schema, following))

    def _kv_arguments(self, kv, schema, following):
        arguments = {}
        properties = schema.get("properties") or {}
        # The arguments end where the call's next literal starts: its first word is enough
        # (the literal itself is matched after, with its whitespace tolerance). Waiting for
        # the length of the whole literal first lets the next argument arrive in one piece.
        closing = following.strip()
        closing_word = _words(closing)[0] if closing else ""
        first = True
        bad = None  # the first value that does not read; raised once the arguments' layout is read
        while True:
            if not self._ws_here():
                yield from self._skip_ws()
            if closing:
                if self._available() < len(closing):
                    yield from self._need(len(closing))
                if self._text.startswith(closing_word, self._pos):
                    break
            elif self._eof and not self._available():
                break
            if kv.separator and not first and not self._here(kv.separator):
                yield from self._match(kv.separator)
            first = False
            if kv.before and not self._here(kv.before):
                yield from self._match(kv.before)
            key = self._run_here(_NAME_CHARS) or (yield from self._read_while(_NAME_CHARS, "argument name"))
            layout = kv.string if len(kv.layouts) == 1 else (yield from self._argument_layout(kv))
            if not self._here(layout.middle):
                yield from self._match(layout.middle)
            lead = layout.middle_lead
            # (exactly this whitespace, once: a raw value may start with whitespace of its own)
            if lead and (self._text.startswith(lead, self._pos) or (yield from self._peek(lead))):
                self._pos += len(lead)
            try:
                arguments[key] = yield from self._argument_value(kv, layout, properties.get(key))
            except _BadArguments as e:
                bad = bad or e  # the value was read; its closing text keeps the parse in step
            if layout.after_core and not self._here(layout.after, True):  # (the loop skips whitespace next)
                yield from self._match(layout.after, ws_follows=True)
        if bad is not None:
            raise bad
        return arguments

    def _argument_layout(self, kv):
        """Which layout this argument uses: the one whose middle text comes next."""
        longest = max(len(a.middle.strip()) for a in kv.layouts)
        yield from self._need(longest + 8)
        for layout in sorted(kv.layouts, key=lambda a: -len(a.middle_full)):
            middle = layout.middle.strip()
            if self._text.startswith(middle, self._pos) or self._text[self._pos:].lstrip().startswith(middle):
                return layout
        raise _Invalid(f"an argument's layout is not recognised at {self._text[self._pos:self._pos + longest + 8]!r}")

    def _argument_value(self, kv, layout, schema):
        """argument-value: raw text, quoted text, JSON, a Python literal or the format's notation."""
        if self._available() < kv.value_min:
            yield from self._need(kv.value_min)
        if kv.raw_strings and (len(kv.layouts) == 1 or layout.kind == "string"):
            stop = layout.after_core or kv.separator_core
            text = self._until_here(stop)
            if text is None:
                text = yield from self._read_until(stop, "argument value")
            lead = layout.after_lead
            if lead and text.endswith(lead):
                text = text[: len(text) - len(lead)]
            return _typed_raw(text, schema)
        if kv.quoted_strings and self._text.startswith(kv.quote_open, self._pos):
            self._pos += len(kv.quote_open)
            text = self._until_here(kv.quote_close)
            if text is None:
                text = yield from self._read_until(kv.quote_close, "argument value")
            self._pos += len(kv.quote_close)
            return _typed_raw(text, schema)
        if kv.native:
            text = yield from self._read_native(kv.fmt)
            return _decode_native(text, kv.fmt)
        python = any(kv.encoders.get(k) in ("python", "jinja") for k in (layout.kind, "string"))
        if layout.after_core and layout.kind != "string":
            # A typed value runs to its layout's closing text (DSML: string="false">3</parameter>).
            text = (yield from self._read_until(layout.after_core, "argument value")).strip()
        else:
            text = yield from self._read_balanced("'\"" if python else '"', "argument value")
        try:
            return json.loads(text)
        except RecursionError:
            raise _BadArguments(f"the argument value {text[:40]!r} is nested too deeply to read") from None
        except ValueError:
            try:
                return _python_value(text)
            except (ValueError, SyntaxError, RecursionError, MemoryError) as e:
                raise _BadArguments(f"cannot read the argument value {text[:40]!r}: {e or 'nested too deeply'}") from None

    def _read_native(self, fmt):
        """A value in the format's own notation: its quotes and brackets balanced."""
        quote_open, quote_close = fmt["quotes"]
        opens = {b[0]: b[1] for b in fmt.get("brackets", {}).values()}
        start = self._pos
        stack = []
        while True:
            while self._pos < len(self._text):
                if quote_open and self._text.startswith(quote_open, self._pos):
                    end = self._text.find(quote_close, self._pos + len(quote_open))
                    if end == -1:
                        break
                    self._pos = end + len(quote_close)
                    if not stack:
                        return self._text[start:self._pos]
                    continue
                if (quote_open and not self._eof and len(self._text) - self._pos < len(quote_open)
                        and quote_open.startswith(self._text[self._pos:])):
                    break  # what is here may be the start of a quote: wait and see
                ch = self._text[self._pos]
                if ch in opens:
                    stack.append(opens[ch])
                elif stack and ch == stack[-1]:
                    stack.pop()
                    if not stack:
                        self._pos += 1
                        return self._text[start:self._pos]
                elif not stack and (ch in fmt["separator"] or ch in "}])"):
                    return self._text[start:self._pos]
                self._pos += 1
            if self._eof:
                if not stack and self._pos > start:
                    return self._text[start:self._pos]
                raise _Truncated("the output ended inside an argument value")
            yield


_WAKERS = {}


def _waker(chars):
    """A search for any of `chars` (cached)."""
    found = _WAKERS.get(chars)
    if found is None:
        found = _WAKERS[chars] = re.compile("[" + _class_body(chars) + "]").search
    return found


_FIRSTS = {}


def _first_of(stops):
    """A search for the first of `stops` (the longest of those that start at the same place; cached)."""
    key = tuple(stops)
    found = _FIRSTS.get(key)
    if found is None:
        ordered = sorted(set(stops), key=len, reverse=True)
        found = _FIRSTS[key] = re.compile("|".join(re.escape(s) for s in ordered)).search
    return found


_RUNS = {}


def _run_of(chars):
    """A compiled match of a run of `chars` (cached)."""
    found = _RUNS.get(chars)
    if found is None:
        found = _RUNS[chars] = re.compile("[" + _class_body(chars) + "]*")
    return found


def _outside(chars):
    """A search for any character not in `chars` (cached)."""
    found = _WAKERS.get((chars, False))
    if found is None:
        found = _WAKERS[chars, False] = re.compile("[^" + _class_body(chars) + "]").search
    return found


def _class_body(chars):
    return "".join(re.escape(ch) if ch in "\\]^-[" else ch for ch in sorted(set(chars)))


_WORDS = {}
_SPACES = re.compile(r"\s*")
_NOT_SPACE = re.compile(r"\S").search
_CLOSERS = re.compile(r"[}\])]").search


def _words(literal):
    """A literal cut into words and whitespace runs (cached: the same few literals recur)."""
    words = _WORDS.get(literal)
    if words is None:
        words = _WORDS[literal] = [w for w in re.split(r"(\s+)", literal) if w]
    return words


_LITERALS = {}


def _literal_parts(literal):
    """(the literal without its end whitespace, whether it starts with whitespace, whether it ends so); cached."""
    parts = _LITERALS.get(literal)
    if parts is None:
        core = literal.strip()
        parts = _LITERALS[literal] = (core, literal[:1].isspace(), literal[-1:].isspace())
    return parts


def _literal_here(text, pos, literal, end_known=False):
    """Where `literal` ends if it is here as `_match` reads it, without waiting (-1: it is
    not, or not yet known: whitespace it ends with runs to the end of what has arrived and
    `end_known` (the stream ended, or the next reader skips whitespace) is False)."""
    parts = _LITERALS.get(literal)
    core, lead, trail = parts if parts is not None else _literal_parts(literal)
    if text.startswith(literal, pos):  # as rendered (its leading whitespace then is all there is)
        pos += len(literal)
    else:
        if lead:
            pos = _SPACES.match(text, pos).end()
        if not text.startswith(core, pos):
            return -1
        pos += len(core)
    if trail:
        if pos < len(text) and not text[pos].isspace():
            return pos
        pos = _SPACES.match(text, pos).end()
        if pos >= len(text) and not end_known:
            return -1
    return pos


def _held_back(window, stops):
    """How much of the end of `window` could be the start of a stop (kept until it is known)."""
    longest = max(len(stop) for stop in stops) - 1
    tail = window[-longest:] if longest > 0 else ""
    firsts = {stop[0] for stop in stops}
    for p, ch in enumerate(tail):
        if ch in firsts and any(stop.startswith(tail[p:]) for stop in stops):
            return len(tail) - p
    return 0


_STRING_BODY = {'"': re.compile(r'[^"\\]+'), "'": re.compile(r"[^'\\]+")}
_PLAIN = re.compile(r"[^\"'{}\[\]()]+")
_SCALAR = re.compile(r"[^\s,}\])]+")
_JSON_DECODER = json.JSONDecoder()


def _json_encoder():
    """json.dumps(value, ensure_ascii=False, allow_nan=False), built once: the C encoder when
    it is there and writes what the pure one does (its constructor is not public), else that one."""
    pure = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
    try:
        from json.encoder import c_make_encoder, encode_basestring

        c_encode = c_make_encoder(None, pure.default, encode_basestring, None, ": ", ", ", False, False, False)
        sample = {"a": [1, -2.5e-300, None, True, "é\"\\\n\u2028\x00"], "b": {}}
        if "".join(c_encode(sample, 0)) == pure.encode(sample):
            return lambda value: "".join(c_encode(value, 0))
    except Exception:  # any other Python: the pure encoder
        pass
    return pure.encode


_ENCODE_JSON = _json_encoder()


def _arguments_json(value):
    """Arguments as the JSON text of the final call; what JSON cannot hold is bad arguments."""
    try:
        return _ENCODE_JSON(value)
    except (ValueError, TypeError, RecursionError) as e:  # NaN / Infinity; a value no decoder here makes
        raise _BadArguments(f"the arguments hold a value JSON cannot: {e}") from None


_JSON_KINDS = (str, int, float, bool, type(None))


def _python_value(text):
    """A Python literal that is a JSON value (dicts with string keys, lists, tuples, scalars)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, OverflowError):  # ({[1]: 2}: unhashable; messages may hold addresses)
        raise ValueError("not a Python literal") from None
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    raise ValueError(f"the key {key!r} is not a string")
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif not isinstance(item, _JSON_KINDS):
            raise ValueError(f"a {type(item).__name__} is not a JSON value")
    return value


def _error(kind, message, offset):
    return {"kind": kind, "message": message, "offset": offset}


def _typed_raw(text, schema):
    """A value written as raw text, typed by its schema (a string when there is none)."""
    if not schema:
        return text
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None and "enum" in schema and schema["enum"]:
        kind = {bool: "boolean", int: "integer", float: "number", type(None): "null"}.get(type(schema["enum"][0]), "string")
    if kind == "string":
        return text
    try:
        if kind == "integer":
            return int(text.strip())
        if kind == "number":
            return float(text.strip()) if any(c in text for c in ".eE") else int(text.strip())
        if kind == "boolean":
            return {"true": True, "false": False}[text.strip().lower()]
        if kind == "null":
            return None
        if kind in ("object", "array"):
            try:
                return json.loads(text)
            except ValueError:
                return _python_value(text.strip())
    except RecursionError:
        raise _BadArguments(f"{text[:40]!r} is nested too deeply to read") from None
    except (ValueError, KeyError, SyntaxError, MemoryError) as e:
        raise _BadArguments(f"{text[:40]!r} is not a {kind}: {e}") from None
    return text


def _decode_native(text, fmt):
    try:
        value, end = _native(text, 0, fmt)
    except RecursionError:
        raise _BadArguments(f"the value {text[:40]!r} is nested too deeply to read") from None
    except ValueError:  # a quote or a key's colon that is not there
        raise _Invalid(f"cannot read the value {text[:40]!r}") from None
    if end != len(text):
        raise _Invalid(f"unexpected {text[end:end + 20]!r} in a value")
    return value


_NATIVE_SCALAR = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|None|True|False")


def _native(text, i, fmt):
    quote_open, quote_close = fmt["quotes"]
    if quote_open and text.startswith(quote_open, i):
        end = text.index(quote_close, i + len(quote_open))
        return text[i + len(quote_open):end], end + len(quote_close)
    for kind in ("object", "array"):
        brackets = fmt.get("brackets", {}).get(kind)
        if brackets and text.startswith(brackets[0], i):
            i += len(brackets[0])
            out = {} if kind == "object" else []
            while not text.startswith(brackets[1], i):
                if kind == "object":
                    colon = text.index(":", i)
                    key = text[i:colon]
                    value, i = _native(text, colon + 1, fmt)
                    out[key] = value
                else:
                    value, i = _native(text, i, fmt)
                    out.append(value)
                if text.startswith(fmt["separator"], i):
                    i += len(fmt["separator"])
            return out, i + len(brackets[1])
    match = _NATIVE_SCALAR.match(text, i)
    if not match:
        raise _Invalid(f"cannot read a value at {text[i:i + 20]!r}")
    word = match.group(0)
    words = {"true": True, "True": True, "false": False, "False": False, "null": None, "None": None}
    return (words[word] if word in words else json.loads(word)), match.end()


def parse(text, tools=None, generation_prompt=None, start=None, finish_reason="stop"):
    """Parse a whole output at once: the same result as streaming it."""
    parser = StreamParser(tools=tools, generation_prompt=generation_prompt, start=start)
    parser.feed(text)
    parser.end(finish_reason)
    return parser.message
