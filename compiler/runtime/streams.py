"""Argument deltas: a call's arguments given out as canonical JSON text while the call is
still arriving, and only what no later character can change.

The readers of the rules decide what the arguments are (and whether they read); a stream
runs ahead of them on the text that has arrived, and gives out a prefix of the JSON text the
finished call will have (`arguments_json`: ", " and ": " separators, escapes as json.dumps
writes them without ensure_ascii). Whatever a stream is not sure to write exactly as that
final text does (a Python escape, a duplicate key, a value of a type the schema does not
give, a value nested deeper than _MAX_DEPTH), it stops at: it pauses, and the rest goes out
when the call is complete. So the deltas of a call always concatenate to its final
arguments, and an error found later takes nothing back (the call is dropped, and a
`tool_call_error` delta says so). A JSON object its stream read to its end without pausing
is that text: the reader takes it as the arguments (it would decode to the same value and
write the same text again).

Inside a string whose text so far went out, StreamParser.feed gives a chunk out by itself,
without a step of the stream (`special`, `as_is`, `escaped`: a chunk that cannot end the
string, escaped as the canonical text writes it, a backslash or the start of a closing text at
its end held until the next chunk tells), and hands the chunks back in one piece when the
stream reads on (`caught_up`).

    ObjectStream     an arguments object: JSON character by character (strings as they come,
                     numbers and words once the next character ends them, a comma with what
                     follows it), or a Python literal (the same, pausing at what Python
                     writes differently); or one such value (an argument's, below)
    KeyValueStream   key/value arguments: each argument once its value is read; a raw string
                     value character by character, held back where the layout's closing
                     text may begin; a JSON or Python value (pythonic calls) through an
                     ObjectStream of it, while it is read
"""

from __future__ import annotations

from .text import Search, marker_starts
from .values import JSONValue, encode_json

# isort: split
###{standalone
import ast
import json
import re
from collections.abc import Callable
from json.encoder import encode_basestring as _encode_basestring

# What runs unchanged from a Python string into the canonical text (no quote, backslash or
# control character: those are escaped, or not allowed raw; for JSON, _JSON_AS_IS_TEXT below).
_PYTHON_STRING_RUN = {"'": re.compile(r"[^'\"\\\x00-\x1f]+"), '"': re.compile(r'[^"\\\x00-\x1f]+')}
_WS = re.compile(r"[ \t\n\r]*")
# A JSON key without escapes or control characters (its canonical text is itself), its colon.
_JSON_PLAIN_KEY = re.compile(r'"([^"\\\x00-\x1f]*)"[ \t\n\r]*:[ \t\n\r]*')
# Inside a string whose text so far went out, a chunk without these goes out as it is
# (`special`); one of characters and escapes the canonical text writes the same, too
# (`as_is`: a JSON string's \" \\ \n ...); and (`_..._ESCAPED`) one that ends with a backslash,
# held: the escape it begins comes with the next chunk.
_JSON_SPECIAL = re.compile(r'["\\\x00-\x1f]').search
_PYTHON_SPECIAL = {"'": re.compile(r"""['"\\\x00-\x1f]""").search, '"': _JSON_SPECIAL}
_JSON_AS_IS_TEXT = re.compile(r'[^"\\\x00-\x1f]*(?:\\["\\bfnrt][^"\\\x00-\x1f]*)*')
_JSON_AS_IS = _JSON_AS_IS_TEXT.fullmatch
_PYTHON_AS_IS = {
    "'": re.compile(r"""[^'"\\\x00-\x1f]*(?:\\["\\bfnrt][^'"\\\x00-\x1f]*)*""").fullmatch,
    '"': _JSON_AS_IS,
}
_JSON_ESCAPED = re.compile(r'([^"\\\x00-\x1f]*(?:\\["\\bfnrt][^"\\\x00-\x1f]*)*)(\\?)').fullmatch
# (In a Python string in single quotes, a double quote is a character of the string: taken, and
# given out as the canonical text writes it, \", by _raw_quotes_escaped.)
_PYTHON_ESCAPED = {
    "'": re.compile(r"""([^'\\\x00-\x1f]*(?:\\["\\bfnrt][^'\\\x00-\x1f]*)*)(\\?)""").fullmatch,
    '"': _JSON_ESCAPED,
}
_RAW_QUOTE = re.compile(r'(\\.)|"')  # an escape (stays as it is), or a double quote written raw
# (a `special` that finds something in every chunk: while one is held)
_ALWAYS = re.compile("").search
_NEVER = re.compile("(?!)").fullmatch  # (an `as_is` that takes no chunk)
_TOKEN = re.compile(r"[A-Za-z0-9_.+\-]*")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_JSON_ESCAPES = frozenset('"\\/bfnrtu')
# The canonical text of the escapes that stand for one character (the others: decoded).
_JSON_SIMPLE = {c: encode_json(json.loads('"\\' + c + '"'))[1:-1] for c in '"\\/bfnrt'}
_PYTHON_SIMPLE = {c: encode_json(ast.literal_eval("'\\" + c + "'"))[1:-1] for c in "\\'\"abfnrtv"}
_JSON_WORDS = {"true": "true", "false": "false", "null": "null"}
_PYTHON_WORDS = {"True": "true", "False": "false", "None": "null", **_JSON_WORDS}

# Outside strings, what can make an ObjectStream give something out (or end its value): in an
# object before a value, only the colon after a key or a closing bracket (a comma, a key read
# so far settle nothing yet); before a value, any character; in a number or word, what ends it.
_OBJECT_WAKE = re.compile(r"[:}\]]").search
_VALUE_WAKE = re.compile(r"\S").search
_TOKEN_WAKE = re.compile(r"[^A-Za-z0-9_.+\-]").search

# Where an ObjectStream is (its `state`): each has its step in _OBJECT_STEPS.
(
    _TOP,  # before the object (its "{")
    _KEY_OR_CLOSE,  # after an object's "{": its first key, or its "}"
    _KEY,  # after a comma in an object: a key (Python: or the "}" after a trailing comma)
    _KEY_STRING,  # in a key's string (its text from `start` on)
    _COLON,  # after a key (`key`) whose colon is not read yet
    _VALUE,  # where a value goes (Python, after a comma in an array: or the "]")
    _VALUE_OR_CLOSE,  # after an array's "[": its first value, or its "]"
    _STRING,  # in a string value (its quote: `quote`)
    _AFTER_PY_STRING,  # after a string that another may follow (Python joins 'a' 'b')
    _TOKEN_READ,  # in a number or a word (from `start` on)
    _AFTER,  # after a value: a comma, or the closing bracket of its container
    _DONE,  # the value is read to its end
) = range(12)

_IN_OBJECT = frozenset((_AFTER, _KEY_OR_CLOSE, _KEY, _KEY_STRING, _COLON))
# How deep a stream reads values inside values: deeper, it stops (the rest goes out when the
# call is complete, read by the decoder, which says when a value is nested too deeply for it).
_MAX_DEPTH = 128


class ObjectStream:
    """The canonical JSON text of an arguments object read from `pos` on, given out as it
    arrives.

    `advance` reads what has arrived: `_read` takes one step at a time, each the method of
    the state the stream is in (_OBJECT_STEPS: a token, or a run of a string), which gives out
    what it settles and says where reading goes on. Inside a string, feed() may give chunks
    out without a step (`special`, `as_is`, `escaped`; then `caught_up`)."""

    __slots__ = ("index", "pos", "python", "either", "state", "stack", "keys", "comma", "start",
                 "quote", "key", "out", "paused", "special", "as_is", "escapes", "wake", "held",
                 "ended")

    index: int  # the call's index in the deltas
    pos: int  # the next character of the parser's text to read
    python: bool  # the value is a Python literal (else JSON)
    either: bool  # JSON, else a Python literal: known at its end (see __init__)
    state: int  # where the stream is (_TOP, _KEY, ..., _DONE)
    stack: list[str]  # the closing brackets of the open containers
    keys: list[set[str]]  # per open object: the keys it has
    comma: bool  # a comma read, given out with what follows it
    start: int  # where the key or token being read starts
    quote: str  # the quote of the string being read
    key: str | None  # the key read, whose colon is not yet
    out: list[str]  # what was given out
    paused: bool  # nothing more goes out (see pause)
    special: Search | None  # inside a string: what may end it or begin an escape
    as_is: Search  # inside a string: a chunk of escapes the canonical text writes the same
    escapes: Search  # and one that may end with a backslash (see escaped)
    wake: Search | None  # outside strings: what can make the stream give something out
    held: str  # a backslash given out with the chunk after it (see escaped)
    ended: bool  # whether the value is read to its end (the bracket that closes it)

    def __init__(self, index: int, pos: int, python: bool, value: bool = False) -> None:
        self.index = index
        self.pos = pos
        self.python = python
        self.state = _VALUE if value else _TOP  # (value: any one value, not only an object)
        # An argument's value is read as JSON, else as a Python literal (which reading it is is
        # known at its end): what the two read differently (\/, a surrogate pair, a key's
        # escapes, a string followed by another), the stream does not give out.
        self.either = value
        self.stack = []
        self.keys = []
        self.comma = False
        self.start = 0
        self.quote = '"'
        self.key = None
        self.out = []
        self.paused = False
        # Inside a string (and not paused): a search for what may end it or begin an escape.
        # When all the text before a chunk went out (`pos` is the text's end), a chunk without
        # such a character goes out as it is: StreamParser.feed takes it without a step of the
        # reader (it cannot end the string, and ends no escape).
        self.special = None
        # Outside strings: a search for what can make the stream give something out or end
        # its value; a chunk without any is only kept (read with what follows it). None: any.
        self.wake = None
        self.held = ""
        self.ended = False
        self.as_is = _NEVER
        self.escapes = _JSON_ESCAPED

    def escaped(self, chunk: str) -> str | None:
        """The next characters of the string (all of its text before them given out, `held`
        aside), in which `special` found something: if they hold only escapes that the
        canonical text writes the same (\\n, \\", ...), and perhaps a backslash at their end
        (then held until the next chunk completes its escape), what of them goes out; else
        None (the reader steps through them)."""
        held = self.held
        whole = self.escapes(held + chunk if held else chunk)
        if whole is None:
            return None
        piece, now = whole.groups()
        if now != held:
            self.held = now
            if now:
                self.special, self.as_is = _ALWAYS, _NEVER
            else:
                self._in_string()
        return _raw_quotes_escaped(piece) if self.python else piece

    def _in_string(self) -> None:
        """The searches feed() runs on a chunk inside a string (see special, as_is, escaped)."""
        if self.python:
            quote = self.quote
            self.special = _PYTHON_SPECIAL[quote]
            self.as_is, self.escapes = _PYTHON_AS_IS[quote], _PYTHON_ESCAPED[quote]
        else:
            self.special, self.as_is, self.escapes = _JSON_SPECIAL, _JSON_AS_IS, _JSON_ESCAPED

    def caught_up(self, text: str, end: int) -> None:
        """The chunks given out through `escaped` and `special` (`text`) are in the parser's
        text, which now ends at `end`: the reader goes on after them (at the held backslash)."""
        held = self.held
        if held:
            self.held = ""
            self._in_string()
            text = text[:len(text) - len(held)]
        self.pos = end - len(held)
        self.out.append(_raw_quotes_escaped(text) if self.python else text)

    def pause(self) -> None:
        """Give out nothing more: the rest goes out when the call is complete."""
        self.paused = True
        self.special = self.wake = None

    def advance(self, text: str, eof: bool) -> str:
        """Read what has arrived; the canonical text it settles ("" for none)."""
        if self.paused or self.state == _DONE:
            return ""
        out: list[str] = []
        try:
            self._read(text, eof, out)
        except (ValueError, RecursionError):  # (what the final text may write otherwise)
            self.paused = True
            self.special = self.wake = None
        piece = "".join(out)
        if piece:
            self.out.append(piece)
        return piece

    # Reading. `_read` runs one step at a time; each step starts at `i` (in a string, or at a
    # token: whitespace between tokens is skipped before), appends what it settles to `out`,
    # and returns where reading goes on; or -1 when it stops the reading, having set `pos`
    # (the value read to its end; an escape whose rest is still to come). ValueError: what the
    # final text may write otherwise (the stream pauses there).

    def _read(self, text: str, eof: bool, out: list[str]) -> None:
        """Read on from `pos` in `text` (what has arrived; `eof`: all of it), the canonical
        text it settles appended to `out`; then set the searches feed() runs on the next chunk
        for where the stream stopped."""
        n = len(text)
        i = self.pos
        steps = _OBJECT_STEPS
        while i < n:
            state = self.state
            # (whitespace between tokens; in a key's string too, which is read from its start)
            if state != _STRING and text[i] in " \t\n\r":
                i = _WS.match(text, i).end()  # type: ignore[union-attr]  # (a `*` run)
                if i >= n:
                    break
            i = steps[state](self, text, i, eof, out)
            if i < 0:  # (the step stopped the reading, at `pos`)
                i = self.pos
                break
        self.pos = i
        self._set_searches()

    def _set_searches(self) -> None:
        """The searches feed() runs on the next chunk, for where the stream stopped: inside a
        string, `special` (and as_is, escapes); else `wake` (None: any chunk may move it)."""
        state = self.state
        if state == _DONE:
            self.ended = True
        if state == _STRING:
            self._in_string()
            self.wake = None
            return
        self.special = None
        if state == _VALUE or state == _VALUE_OR_CLOSE:
            self.wake = _VALUE_WAKE
        elif state == _TOKEN_READ:
            self.wake = _TOKEN_WAKE
        elif state in _IN_OBJECT and self.stack and self.stack[-1] == "}":
            self.wake = _OBJECT_WAKE
        else:
            self.wake = None

    def _top(self, text: str, i: int, eof: bool, out: list[str]) -> int:
        """_TOP: the object's opening brace."""
        if text[i] != "{":
            raise ValueError
        return self._open("{", i, out)

    def _open(self, bracket: str, i: int, out: list[str]) -> int:
        """An object's or array's opening `bracket`, at `i`: given out (after a comma read
        before it)."""
        if len(self.stack) >= _MAX_DEPTH:
            raise ValueError
        self._lead(out)
        out.append(bracket)
        if bracket == "{":
            self.stack.append("}")
            self.keys.append(set())
            self.state = _KEY_OR_CLOSE
        else:
            self.stack.append("]")
            self.state = _VALUE_OR_CLOSE
        return i + 1

    def _close(self, i: int, out: list[str]) -> int:
        """The closing bracket, at `i`, of the innermost container: given out; the value read
        to its end when that container was the outermost."""
        self.comma = False
        closer = self.stack.pop()
        out.append(closer)
        if closer == "}":
            self.keys.pop()
        if not self.stack:
            self.state = _DONE
            self.pos = i + 1
            return -1
        self.state = _AFTER
        return i + 1

    def _key(self, text: str, i: int, eof: bool, out: list[str]) -> int:
        """_KEY_OR_CLOSE, _KEY: where a key goes (or the object's closing brace: first, or, in
        Python, after a trailing comma). A JSON key without escapes goes out with its colon
        at once when they are here (_plain_key); any other is read as a string."""
        ch = text[i]
        python = self.python
        if ch == "}" and (self.state == _KEY_OR_CLOSE or python):
            return self._close(i, out)
        if ch == '"' and not python:
            end = self._plain_key(text, i, out)
            if end >= 0:
                self.state = _VALUE
                return end
        elif ch != '"' and not (python and ch == "'"):
            raise ValueError
        self.quote, self.start, self.state = ch, i + 1, _KEY_STRING
        return i + 1

    def _key_string(self, text: str, i: int, eof: bool, out: list[str]) -> int:
        """_KEY_STRING: the rest of a key's string (from `start`), once its closing quote is
        here: the key (a duplicate, or escapes that Python reads otherwise: ValueError)."""
        start = self.start
        python = self.python
        end = _string_end(text, max(start, i), self.quote, python, start)
        if end < 0:
            return len(text)  # (the key's text so far, read: the next search starts after it)
        if not python:  # (a plain key and its colon, here now: at once, as in _key)
            whole = self._plain_key(text, start - 1, out)
            if whole >= 0:
                self.state = _VALUE
                return whole
        raw = text[start:end]
        if "\\" in raw and (python or self.either):
            raise ValueError  # (read with JSON's escapes below: a Python key's may differ)
        self.key = self._new_key(json.loads('"' + raw + '"') if "\\" in raw else raw)
        self.state = _COLON
        return end + 1

    def _colon(self, text: str, i: int, eof: bool, out: list[str]) -> int:
        """_COLON: the colon after a key; the key goes out with it."""
        if text[i] != ":":
            raise ValueError
        self._lead(out)
        out.append(encode_json(self.key) + ": ")
        self.state = _VALUE
        return i + 1

    def _value(self, text: str, i: int, eof: bool, out: list[str]) -> int:
        """_VALUE, _VALUE_OR_CLOSE: where a value goes (or the array's closing bracket: first,
        or, in Python, after a trailing comma). A string, object or array opens; anything else
        is a number or a word."""
        ch = text[i]
        if ch == "]" and (self.state == _VALUE_OR_CLOSE or self.comma and self.python):
            return self._close(i, out)
        if ch == '"' or self.python and ch == "'":
            out.append(', "' if self.comma else '"')
            self.comma = False
            self.quote = ch
            self.state = _STRING
            return i + 1
        if ch == "{" or ch == "[":
            return self._open(ch, i, out)
        self.start = i
        self.state = _TOKEN_READ
        return i

    def _string(self, text: str, i: int, eof: bool, out: list[str]) -> int:
        """_STRING: a run of a string value's characters, and what ends the run: its closing
        quote, an escape, or a character the canonical text escapes."""
        python = self.python
        # What runs unchanged into the canonical text: characters, and escapes written as the
        # canonical text writes them (JSON: \" \\ \n ...).
        run = (_PYTHON_STRING_RUN[self.quote] if python else _JSON_AS_IS_TEXT).match(text, i)
        if run:
            out.append(run.group())
            i = run.end()
            if i >= len(text):
                return i
        ch = text[i]
        if ch == self.quote:
            if python or self.either:
                # (its quote goes out once no string follows: 'a' 'b' is 'ab')
                self.state = _AFTER_PY_STRING
            else:
                out.append('"')
                self.state = _AFTER
            return i + 1
        if ch == "\\":
            return self._escape(text, i, eof, out)
        if ch == '"':  # (raw inside a Python string in other quotes)
            out.append('\\"')
        elif python and ch not in "\n\r":
            out.append(encode_json(ch)[1:-1])  # a control character, escaped
        else:
            raise ValueError  # not allowed raw in a string
        return i + 1

    def _escape(self, text: str, i: int, eof: bool, out: list[str]) -> int:
        """The escape at `i` in a string, in the canonical text (-1 when the rest of it is
        still to come: read from `i` again then)."""
        python = self.python
        kind = text[i + 1:i + 2]
        if self.either and kind == "/":
            raise ValueError  # (JSON reads \/ as /, Python as \/)
        simple = (_PYTHON_SIMPLE if python else _JSON_SIMPLE).get(kind)
        if simple is not None:
            out.append(simple)
            return i + 2
        end = _python_escape_end(text, i, eof) if python else _escape_end(text, i, eof)
        if end < 0:
            self.pos = i
            return -1
        escape = text[i:end]
        if self.either and kind == "u" and 0xD800 <= int(escape[2:6], 16) < 0xE000:
            raise ValueError  # (a surrogate: JSON joins a pair into one character, Python does not)
        quote = self.quote
        if python:
            decoded = ast.literal_eval(quote + escape + quote)
        else:
            decoded = json.loads('"' + escape + '"')
        out.append(encode_json(decoded)[1:-1])
        return end

    def _after_py_string(self, text: str, i: int, eof: bool, out: list[str]) -> int:
        """_AFTER_PY_STRING: what follows a string that may be a Python literal's (another
        string: Python joins them, ValueError); its closing quote goes out."""
        if text[i] in "'\"":
            raise ValueError  # 'a' 'b': Python joins them
        out.append('"')
        self.state = _AFTER
        return i

    def _token(self, text: str, i: int, eof: bool, out: list[str]) -> int:
        """_TOKEN_READ: a number or a word (from `start`), once what follows it ends it (or
        `eof`): its canonical text."""
        start = self.start
        end = _TOKEN.match(text, start).end()  # type: ignore[union-attr]  # (a `*` run)
        if end >= len(text) and not eof:
            return len(text)  # the next character decides where the number or word ends
        # (read before the comma goes out: it may not be a number or a word)
        scalar = _scalar(text[start:end], self.python)
        self._lead(out)
        out.append(scalar)
        self.state = _AFTER
        return end

    def _after(self, text: str, i: int, eof: bool, out: list[str]) -> int:
        """_AFTER: after a value, a comma (given out with what follows it) or the closing
        bracket of its container; after the value at the top, its end."""
        stack = self.stack
        if not stack:  # (a value at the top, read: what follows is not its)
            self.state = _DONE
            self.pos = i
            return -1
        ch = text[i]
        if ch == ",":
            self.comma = True
            self.state = _KEY if stack[-1] == "}" else _VALUE
            return i + 1
        if ch == stack[-1]:
            return self._close(i, out)
        raise ValueError

    def _done(self, text: str, i: int, eof: bool, out: list[str]) -> int:
        """_DONE: nothing is read after the value's end (advance does not read on)."""
        raise ValueError

    def _plain_key(self, text: str, at: int, out: list[str]) -> int:
        """A key without escapes (its canonical text is itself) at `at`, its colon and the
        whitespace after it, all here: given out, and where they end; else -1."""
        whole = _JSON_PLAIN_KEY.match(text, at)
        if whole is None:
            return -1
        key = self._new_key(whole.group(1))
        if self.comma:
            out.append(", ")
            self.comma = False
        out.append('"' + key + '": ')
        return whole.end()

    def _new_key(self, key: str) -> str:
        """A key of the object being read; ValueError when it has it already (the final
        arguments refuse a duplicate key)."""
        keys = self.keys[-1]
        if key in keys:
            raise ValueError
        keys.add(key)
        return key

    def _lead(self, out: list[str]) -> None:
        """The comma read before what goes out now, given out first."""
        if self.comma:
            out.append(", ")
            self.comma = False


# A step of ObjectStream._read: (the stream, the text, where, eof, out) -> where reading goes
# on (-1: it stops there, at the stream's `pos`).
_ObjectStep = Callable[[ObjectStream, str, int, bool, list[str]], int]
_STEP_OF: dict[int, _ObjectStep] = {
    _TOP: ObjectStream._top,
    _KEY_OR_CLOSE: ObjectStream._key,
    _KEY: ObjectStream._key,
    _KEY_STRING: ObjectStream._key_string,
    _COLON: ObjectStream._colon,
    _VALUE: ObjectStream._value,
    _VALUE_OR_CLOSE: ObjectStream._value,
    _STRING: ObjectStream._string,
    _AFTER_PY_STRING: ObjectStream._after_py_string,
    _TOKEN_READ: ObjectStream._token,
    _AFTER: ObjectStream._after,
    _DONE: ObjectStream._done,
}
_OBJECT_STEPS = tuple(_STEP_OF[state] for state in range(len(_STEP_OF)))  # (by state)


def _raw_quotes_escaped(text: str) -> str:
    """Characters of a Python string as the canonical text writes them, when the only thing
    it writes otherwise is a double quote written raw (in a string in single quotes): \\"."""
    return _RAW_QUOTE.sub(lambda m: m.group(1) or '\\"', text) if '"' in text else text


def _escape_end(text: str, i: int, eof: bool) -> int:
    """Where the JSON escape at `i` ends (a surrogate pair as one); -1 while it may go on."""
    n = len(text)
    if i + 1 >= n:
        if eof:
            raise ValueError
        return -1
    kind = text[i + 1]
    if kind not in _JSON_ESCAPES:
        raise ValueError
    if kind != "u":
        return i + 2
    if i + 6 > n:
        if eof or not _HEX4.match(text[i + 2:] + "0000"):
            raise ValueError
        return -1
    if not _HEX4.match(text, i + 2):
        raise ValueError
    if not 0xD800 <= int(text[i + 2:i + 6], 16) < 0xDC00:
        return i + 6
    # A high surrogate: a low one (DC00-DFFF) may follow, and the two are one character.
    if i + 12 > n and not eof and "\\u".startswith(text[i + 6:i + 8]) and (
            text[i + 6:i + 8] != "\\u" or _HEX4.match(text[i + 8:] + "0000")):
        return -1
    if (text.startswith("\\u", i + 6) and _HEX4.match(text, i + 8)
            and 0xDC00 <= int(text[i + 8:i + 12], 16) < 0xE000):
        return i + 12
    return i + 6  # (alone: JSON keeps it as it is, and so does the stream)


_PYTHON_SIMPLE_ESCAPES = frozenset("\\'\"abfnrtv")
_PYTHON_ESCAPE_LENGTHS = {"x": 4, "u": 6, "U": 10}
_OCTAL = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")


def _python_escape_end(text: str, i: int, eof: bool) -> int:
    """Where the Python string escape at `i` ends; -1 while it may go on. (\\N{...}, a line
    continuation and escapes Python keeps as written are not read: ValueError.)"""
    n = len(text)
    if i + 1 >= n:
        if eof:
            raise ValueError
        return -1
    kind = text[i + 1]
    if kind in _PYTHON_SIMPLE_ESCAPES:
        return i + 2
    if kind in _OCTAL:  # one to three octal digits
        end = i + 2
        while end < n and end < i + 4 and text[end] in _OCTAL:
            end += 1
        if end < i + 4 and end >= n and not eof:
            return -1
        return end
    length = _PYTHON_ESCAPE_LENGTHS.get(kind)
    if length is None:
        raise ValueError
    digits = text[i + 2:i + length]
    if not all(c in _HEX for c in digits):
        raise ValueError
    if i + length > n:
        if eof:
            raise ValueError
        return -1
    if 0xD800 <= int(digits, 16) < 0xE000:
        raise ValueError  # (a surrogate: JSON would join a pair that Python keeps as two)
    return i + length


def _string_end(text: str, i: int, quote: str, python: bool, start: int) -> int:
    """Where the string whose text starts at `start` closes (its quote, at `i` or after: what
    is before `i` was searched); -1: not here yet."""
    while True:
        at = text.find(quote, i)
        if at == -1:
            # (a backslash: at `i` or just before)
            if python and "\\" in text[i - 1 if i > start else start:]:
                raise ValueError
            return -1
        slashes = 0
        while at - 1 - slashes >= start and text[at - 1 - slashes] == "\\":
            slashes += 1
        if slashes % 2 == 0:
            if python and slashes:
                raise ValueError
            return at
        i = at + 1


def _scalar(token: str, python: bool) -> str:
    """The canonical text of a number or a word (ValueError: not one, or not the same in
    JSON)."""
    word = (_PYTHON_WORDS if python else _JSON_WORDS).get(token)
    if word is not None:
        return word
    if not _JSON_NUMBER.fullmatch(token):
        raise ValueError
    return encode_json(json.loads(token))  # (1E5 -> 100000.0, -0 -> 0; 1e999 cannot be JSON)


class StopSearch:
    """What tells where a raw string value's closing text (one of its stops) is."""

    __slots__ = ("firsts", "starts", "partial", "first_stop")

    firsts: frozenset[str]  # the stops' first characters
    starts: frozenset[str]  # their starts, whole ones too
    partial: frozenset[str]  # the starts that are no whole stop
    first_stop: Search  # a search for the first whole stop

    def __init__(self, firsts: frozenset[str], starts: frozenset[str], partial: frozenset[str],
                 first_stop: Search) -> None:
        self.firsts = firsts
        self.starts = starts
        self.partial = partial
        self.first_stop = first_stop


_STOP_SEARCH: dict[tuple[str, ...], StopSearch] = {}


def _stop_search(stops: tuple[str, ...]) -> StopSearch:
    """The stops' StopSearch (cached per stops)."""
    found = _STOP_SEARCH.get(stops)
    if found is None:
        ordered = sorted(stops, key=lambda s: (-len(s), s))
        starts = frozenset(stop[:i] for stop in stops for i in range(1, len(stop) + 1))
        found = _STOP_SEARCH[stops] = StopSearch(
            frozenset(stop[0] for stop in stops), starts, starts - frozenset(stops),
            re.compile("|".join(re.escape(stop) for stop in ordered)).search)
    return found


def _json_string_text(text: str) -> str:
    """A string's canonical text, without its quotes (its quotes, backslashes and control
    characters escaped): json's own escaping, in C where it is."""
    return _encode_basestring(text)[1:-1]


_RAW_SPECIAL: dict[str, Search] = {}


def _raw_special(stops: tuple[str, ...]) -> tuple[Search, Search]:
    """Searches in a raw string value's chunk: for a first character of its closing text or
    a character JSON escapes (cached); for where its closing text may begin (marker_starts)."""
    firsts = "".join(sorted({stop[0] for stop in stops}))
    found = _RAW_SPECIAL.get(firsts)
    if found is None:
        body = "".join("\\" + c if c in "\\]^-[" else c for c in firsts)
        found = _RAW_SPECIAL[firsts] = re.compile('["\\\\\\x00-\\x1f' + body + "]").search
    return found, marker_starts(stops)


class RawSearches:
    """What KeyValueStream searches a raw string value's text with (see _raw_special and
    StopSearch)."""

    __slots__ = ("longest", "special", "stop_starts", "firsts", "starts", "partial", "stop_at")

    longest: int  # the longest stop's length
    special: Search  # a character that may begin a stop, or that JSON escapes
    stop_starts: Search  # where a stop may begin (marker_starts)
    firsts: frozenset[str]
    starts: frozenset[str]
    partial: frozenset[str]
    stop_at: Search  # the first whole stop

    def __init__(self, longest: int, special: Search, stop_starts: Search, firsts: frozenset[str],
                 starts: frozenset[str], partial: frozenset[str], stop_at: Search) -> None:
        self.longest = longest
        self.special = special
        self.stop_starts = stop_starts
        self.firsts = firsts
        self.starts = starts
        self.partial = partial
        self.stop_at = stop_at


_RAW_SEARCHES: dict[tuple[str, ...], RawSearches] = {}


def _raw_searches(stops: tuple[str, ...]) -> RawSearches:
    """The stops' RawSearches (cached per stops)."""
    found = _RAW_SEARCHES.get(stops)
    if found is None:
        special, stop_starts = _raw_special(stops)
        search = _stop_search(stops)
        found = _RAW_SEARCHES[stops] = RawSearches(
            max(len(stop) for stop in stops), special, stop_starts, search.firsts, search.starts,
            search.partial, search.first_stop)
    return found


class KeyValueStream:
    """The canonical JSON text of key/value arguments: `argument(key, value)` as each is read
    (its value decoded and typed); a raw string value may run ahead of its reader:
    `open_string`, then `advance` as its text arrives, then `argument` for the rest."""

    __slots__ = ("index", "count", "out", "paused", "pos", "start", "stops", "longest", "special",
                 "as_is", "stop_starts", "firsts", "starts", "partial", "stop_at", "blocked",
                 "value", "held", "value_special")

    index: int  # the call's index in the deltas
    count: int  # arguments begun
    out: list[str]  # what was given out
    paused: bool  # nothing more goes out (see pause)
    pos: int | None  # or: where the raw string value running ahead goes on in the text
    start: int | None  # where it started
    stops: tuple[str, ...]  # what may end it (its layout's closing text, with its lead)
    special: Search | None  # (as ObjectStream.special, while a raw string value runs ahead)
    as_is: Search  # (its chunks with quotes or backslashes go out escaped: see escaped)
    value: ObjectStream | None  # or: the stream of the value being read (open_value)
    # The end of what `escaped` took that may begin a stop: given out, or not, with what follows.
    held: str
    value_special: Search | None  # `special` of the raw string value, while nothing is held
    # Set by open_string, for the raw string value (its stops' RawSearches):
    longest: int
    stop_starts: Search
    firsts: frozenset[str]
    starts: frozenset[str]
    partial: frozenset[str]
    stop_at: Search
    blocked: bool  # a whole stop is here: nothing more of the value goes out before its reader

    def __init__(self, index: int) -> None:
        self.index = index
        self.count = 0
        self.out = []
        self.paused = False
        self.pos = None
        self.start = None
        self.stops = ()
        self.special = None
        self.as_is = _NEVER
        self.value = None
        self.held = ""
        self.value_special = None

    def argument(self, key: str, value: JSONValue, text: str) -> str:
        """A whole argument, read (or, after its string ran ahead, the rest of it; `text`: the
        parser's text, which holds what of it went out): the canonical text that goes out."""
        if self.paused:
            return ""
        if self.value is not None:
            piece = self._rest_of_value(self.value, value)
        elif self.pos is not None:
            piece = self._rest_of_string(value, text)
        else:
            try:
                piece = (", " if self.count else "{") + encode_json(key) + ": " + encode_json(value)
            except (ValueError, TypeError, RecursionError):
                self.pause()  # (a value JSON cannot hold: the call will not read)
                return ""
            self.count += 1
        if piece is None:
            return ""
        self.out.append(piece)
        return piece

    def _rest_of_value(self, stream: ObjectStream, value: JSONValue) -> str | None:
        """After the value's ObjectStream (`stream`): what it gave out, kept, and the rest of
        the value's canonical text (None: paused)."""
        sent = "".join(stream.out)
        self.out.append(sent)
        self.value = None
        try:
            whole = encode_json(value)
        except (ValueError, TypeError, RecursionError):
            self.pause()
            return None
        if not whole.startswith(sent):
            self.pause()  # (cannot happen: the final check says so)
            return None
        return whole[len(sent):]

    def _rest_of_string(self, value: JSONValue, text: str) -> str | None:
        """After a raw string value ran ahead: the rest of its canonical text, and its closing
        quote (None: paused)."""
        sent = text[self.start:self.pos]
        self.pos = self.special = None
        if not isinstance(value, str) or not value.startswith(sent):
            self.pause()  # (cannot happen for a string value; the final check says so)
            return None
        return encode_json(value[len(sent):])[1:-1] + '"'

    def open_string(self, key: str, pos: int, stops: tuple[str, ...]) -> str:
        """A raw string value of `key` starts at `pos` in the text; one of `stops` ends it."""
        if self.paused:
            return ""
        self.pos = self.start = pos
        self.stops = stops
        searches = _raw_searches(stops)
        self.longest, self.special = searches.longest, searches.special
        self.stop_starts, self.stop_at = searches.stop_starts, searches.stop_at
        self.firsts, self.starts, self.partial = searches.firsts, searches.starts, searches.partial
        self.value_special, self.held = self.special, ""
        self.blocked = False
        piece = (", " if self.count else "{") + encode_json(key) + ': "'
        self.count += 1
        self.out.append(piece)
        return piece

    def open_value(self, key: str, pos: int,
                   python: bool) -> tuple[str, ObjectStream | None]:
        """A JSON (or Python, `python`) value of `key` starts at `pos`: what goes out before it,
        and the ObjectStream that gives it out as it arrives (None: paused)."""
        if self.paused:
            return "", None
        self.value = ObjectStream(self.index, pos, python, value=True)
        piece = (", " if self.count else "{") + encode_json(key) + ": "
        self.count += 1
        self.out.append(piece)
        return piece, self.value

    def pause(self) -> None:
        """Give out nothing more: the rest goes out when the call is complete."""
        self.paused = True
        self.special = None

    def escaped(self, chunk: str) -> str | None:
        """The next characters of the value (all of its text before them given out, `held`
        aside), in which `special` found something: their canonical text (quotes, backslashes
        and control characters escaped) if no closing text begins in them; what may begin one
        at their end (`\\n</par`, however much of it: a closing text split across chunks) is
        held until the next chunk tells; else (a whole stop, or a stop's first characters that
        go on otherwise) None: the reader steps through them."""
        text = self.held + chunk if self.held else chunk
        found = self.stop_starts(text)
        held = ""
        if found is not None:
            held = text[found.start():]
            if held not in self.partial:  # (a whole stop, or not the start of one)
                return None
            text = text[:found.start()]
        self.held = held
        self.special = _ALWAYS if held else self.value_special
        return _encode_basestring(text)[1:-1]  # (_json_string_text, inline: a chunk in three)

    def caught_up(self, text: str, end: int) -> None:
        """The chunks given out through `special` and `escaped` (`text`) are in the parser's
        text, which now ends at `end`: the value runs ahead from there (at what is held)."""
        held = self.held
        if held:
            self.held = ""
            self.special = self.value_special
            text = text[:len(text) - len(held)]
        self.pos = end - len(held)
        self.out.append(_json_string_text(text))

    def advance(self, text: str, eof: bool) -> str:
        """What of the raw string value running ahead has arrived and cannot be the start of
        its closing text, or of what may settle it when that text is missing ("" for none;
        the closing text itself ends it, so `eof` changes nothing)."""
        if self.paused or self.pos is None or self.blocked:
            return ""
        start, n = self.pos, len(text)
        end = n
        for p in range(max(start, n - self.longest + 1), n):  # (a tail that may begin a stop: held)
            if text[p] in self.firsts and text[p:] in self.starts:
                end = p
                break
        found = self.stop_at(text, start)
        if found is not None and found.start() < end:
            # A stop that is all here: the reader decides what it is; nothing from it on goes
            # out until then (and it is not searched for again).
            end = found.start()
            self.blocked = True
        if end <= start:
            return ""
        self.pos = end
        piece = encode_json(text[start:end])[1:-1]
        self.out.append(piece)
        return piece


###}
