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

from .text import marker_starts
from .values import encode_json

###{standalone
import ast
import json
import re
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
_PYTHON_AS_IS = {"'": re.compile(r"""[^'"\\\x00-\x1f]*(?:\\["\\bfnrt][^'"\\\x00-\x1f]*)*""").fullmatch,
                 '"': _JSON_AS_IS}
_JSON_ESCAPED = re.compile(r'([^"\\\x00-\x1f]*(?:\\["\\bfnrt][^"\\\x00-\x1f]*)*)(\\?)').fullmatch
# (In a Python string in single quotes, a double quote is a character of the string: taken, and
# given out as the canonical text writes it, \", by _raw_quotes_escaped.)
_PYTHON_ESCAPED = {"'": re.compile(r"""([^'\\\x00-\x1f]*(?:\\["\\bfnrt][^'\\\x00-\x1f]*)*)(\\?)""").fullmatch,
                   '"': _JSON_ESCAPED}
_RAW_QUOTE = re.compile(r'(\\.)|"')  # an escape (stays as it is), or a double quote written raw
_ALWAYS = re.compile("").search  # (a `special` that finds something in every chunk: while one is held)
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

# Where an ObjectStream is.
_TOP, _KEY_OR_CLOSE, _KEY, _KEY_STRING, _COLON, _VALUE, _VALUE_OR_CLOSE, _STRING, _AFTER_PY_STRING, _TOKEN_READ, \
    _AFTER, _DONE = range(12)


_IN_OBJECT = frozenset((_AFTER, _KEY_OR_CLOSE, _KEY, _KEY_STRING, _COLON))
# How deep a stream reads values inside values: deeper, it stops (the rest goes out when the
# call is complete, read by the decoder, which says when a value is nested too deeply for it).
_MAX_DEPTH = 128


class ObjectStream:
    """The canonical JSON text of an arguments object read from `pos` on, given out as it arrives."""

    __slots__ = ("index", "pos", "python", "either", "state", "stack", "keys", "comma", "start", "quote", "key", "out",
                 "paused", "special", "as_is", "escapes", "wake", "held", "ended")

    def __init__(self, index, pos, python, value=False):
        self.index = index  # the call's index in the deltas
        self.pos = pos  # the next character of the parser's text to read
        self.python = python
        self.state = _VALUE if value else _TOP  # (value: any one value, not only an object)
        # An argument's value is read as JSON, else as a Python literal (which reading it is is
        # known at its end): what the two read differently (\/, a surrogate pair, a key's
        # escapes, a string followed by another), the stream does not give out.
        self.either = value
        self.stack = []  # the closing brackets of the open containers
        self.keys = []  # per open object: the keys it has
        self.comma = False  # a comma read, given out with what follows it
        self.start = 0  # where the key or token being read starts
        self.quote = '"'
        self.key = None
        self.out = []  # what was given out
        self.paused = False
        # Inside a string (and not paused): a search for what may end it or begin an escape.
        # When all the text before a chunk went out (`pos` is the text's end), a chunk without
        # such a character goes out as it is: StreamParser.feed takes it without a step of the
        # reader (it cannot end the string, and ends no escape).
        self.special = None
        # Outside strings: a search for what can make the stream give something out or end
        # its value; a chunk without any is only kept (read with what follows it). None: any.
        self.wake = None
        self.held = ""  # a backslash given out with the chunk after it (see escaped)
        self.ended = False  # whether the value is read to its end (the bracket that closes it)
        self.as_is = _NEVER  # (inside a string: a chunk with escapes that go out as they are)
        self.escapes = _JSON_ESCAPED  # (and one that may end with a backslash: see escaped)

    def escaped(self, chunk):
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

    def _in_string(self):
        """The searches feed() runs on a chunk inside a string (see special, as_is, escaped)."""
        if self.python:
            self.special, self.as_is, self.escapes = _PYTHON_SPECIAL[self.quote], _PYTHON_AS_IS[self.quote], \
                _PYTHON_ESCAPED[self.quote]
        else:
            self.special, self.as_is, self.escapes = _JSON_SPECIAL, _JSON_AS_IS, _JSON_ESCAPED

    def caught_up(self, text, end):
        """The chunks given out through `escaped` and `special` (`text`) are in the parser's
        text, which now ends at `end`: the reader goes on after them (at the held backslash)."""
        held = self.held
        if held:
            self.held = ""
            self._in_string()
            text = text[:len(text) - len(held)]
        self.pos = end - len(held)
        self.out.append(_raw_quotes_escaped(text) if self.python else text)

    def pause(self):
        """Give out nothing more: the rest goes out when the call is complete."""
        self.paused = True
        self.special = self.wake = None

    def advance(self, text, eof):
        """Read what has arrived; the canonical text it settles ("" for none)."""
        if self.paused or self.state == _DONE:
            return ""
        out = []
        try:
            self._read(text, eof, out)
        except (ValueError, RecursionError):  # (what the final text may write differently: stop here)
            self.paused = True
            self.special = self.wake = None
        piece = "".join(out)
        if piece:
            self.out.append(piece)
        return piece

    def _read(self, text, eof, out):
        n = len(text)
        i = self.pos
        state = self.state
        python = self.python
        stack = self.stack
        while i < n:
            if state == _STRING:
                # What runs unchanged into the canonical text: characters, and escapes written as
                # the canonical text writes them (JSON: \" \\ \n ...).
                run = (_PYTHON_STRING_RUN[self.quote] if python else _JSON_AS_IS_TEXT).match(text, i)
                if run:
                    out.append(run.group())
                    i = run.end()
                    if i >= n:
                        break
                ch = text[i]
                if ch == self.quote:
                    i += 1
                    if python or self.either:
                        state = _AFTER_PY_STRING  # (its quote goes out once no string follows: 'a' 'b' is 'ab')
                    else:
                        out.append('"')
                        state = _AFTER
                elif ch == "\\":
                    kind = text[i + 1:i + 2]
                    if self.either and kind == "/":
                        raise ValueError  # (JSON reads \/ as /, Python as \/)
                    simple = (_PYTHON_SIMPLE if python else _JSON_SIMPLE).get(kind)
                    if simple is not None:
                        out.append(simple)
                        i += 2
                        continue
                    end = _python_escape_end(text, i, eof) if python else _escape_end(text, i, eof)
                    if end < 0:
                        break  # the rest of the escape is still to come
                    escape = text[i:end]
                    if self.either and kind == "u" and 0xD800 <= int(escape[2:6], 16) < 0xE000:
                        raise ValueError  # (a surrogate: JSON joins a pair into one character, Python does not)
                    decoded = ast.literal_eval(self.quote + escape + self.quote) if python else json.loads('"' + escape + '"')
                    out.append(encode_json(decoded)[1:-1])
                    i = end
                elif ch == '"':  # (raw inside a Python string in other quotes)
                    out.append('\\"')
                    i += 1
                elif python and ch not in "\n\r":
                    out.append(encode_json(ch)[1:-1])  # a control character, escaped
                    i += 1
                else:
                    raise ValueError  # not allowed raw in a string
                continue
            ch = text[i]
            if ch in " \t\n\r":
                i = _WS.match(text, i).end()
                if i >= n:
                    break
                ch = text[i]
            if state == _AFTER:
                if not stack:  # (a value at the top, read: what follows is not its)
                    state = _DONE
                    break
                if ch == ",":
                    self.comma = True
                    state = _KEY if stack[-1] == "}" else _VALUE
                    i += 1
                elif ch == stack[-1]:
                    out.append(stack.pop())
                    if ch == "}":
                        self.keys.pop()
                    i += 1
                    if not stack:
                        state = _DONE
                        break
                else:
                    raise ValueError
            elif state == _KEY_OR_CLOSE or state == _KEY:
                if ch == "}" and (state == _KEY_OR_CLOSE or python):
                    self.comma = False
                    out.append(stack.pop())
                    self.keys.pop()
                    i += 1
                    state = _AFTER if stack else _DONE
                    if state == _DONE:
                        break
                elif ch == '"' and not python:
                    end = self._plain_key(text, i, out)
                    if end < 0:
                        self.quote, self.start, state = ch, i + 1, _KEY_STRING
                        i += 1
                        continue
                    i, state = end, _VALUE
                elif ch == '"' or python and ch == "'":
                    self.quote = ch
                    self.start = i + 1
                    state = _KEY_STRING
                    i += 1
                else:
                    raise ValueError
            elif state == _VALUE or state == _VALUE_OR_CLOSE:
                if state == _VALUE_OR_CLOSE and ch == "]" or self.comma and python and ch == "]":
                    self.comma = False
                    out.append(stack.pop())
                    i += 1
                    state = _AFTER
                    if not stack:
                        state = _DONE
                        break
                    continue
                if ch == '"' or python and ch == "'":
                    if self.comma:
                        out.append(', "')
                        self.comma = False
                    else:
                        out.append('"')
                    self.quote = ch
                    state = _STRING
                    i += 1
                elif ch == "{":
                    if len(stack) >= _MAX_DEPTH:
                        raise ValueError
                    self._lead(out)
                    out.append("{")
                    stack.append("}")
                    self.keys.append(set())
                    state = _KEY_OR_CLOSE
                    i += 1
                elif ch == "[":
                    if len(stack) >= _MAX_DEPTH:
                        raise ValueError
                    self._lead(out)
                    out.append("[")
                    stack.append("]")
                    state = _VALUE_OR_CLOSE
                    i += 1
                else:
                    self.start = i
                    state = _TOKEN_READ
            elif state == _TOKEN_READ:
                end = _TOKEN.match(text, self.start).end()
                if end >= n and not eof:
                    i = n
                    break  # the next character decides where the number or word ends
                scalar = _scalar(text[self.start:end], python)  # (before the comma goes out: it may not be one)
                self._lead(out)
                out.append(scalar)
                i = end
                state = _AFTER
            elif state == _KEY_STRING:
                end = _string_end(text, max(self.start, i), self.quote, python, self.start)
                if end < 0:
                    i = n  # (the key's text so far, read: the next search starts after it)
                    break
                if not python:  # (a plain key and its colon, here now: at once, as above)
                    whole = self._plain_key(text, self.start - 1, out)
                    if whole >= 0:
                        i, state = whole, _VALUE
                        continue
                raw = text[self.start:end]
                if "\\" in raw and (python or self.either):
                    raise ValueError  # (read with JSON's escapes below: a Python key's may differ)
                self.key = self._new_key(json.loads('"' + raw + '"') if "\\" in raw else raw)
                i = end + 1
                state = _COLON
            elif state == _COLON:
                if ch != ":":
                    raise ValueError
                self._lead(out)
                out.append(encode_json(self.key) + ": ")
                i += 1
                state = _VALUE
            elif state == _AFTER_PY_STRING:
                if ch in "'\"":
                    raise ValueError  # 'a' 'b': Python joins them
                out.append('"')
                state = _AFTER
            elif state == _TOP:
                if ch != "{":
                    raise ValueError
                out.append("{")
                stack.append("}")
                self.keys.append(set())
                state = _KEY_OR_CLOSE
                i += 1
            else:
                raise ValueError
        self.pos, self.state = i, state
        if state == _DONE:
            self.ended = True
        if state == _STRING:
            self._in_string()
            self.wake = None
        else:
            self.special = None
            if state == _VALUE or state == _VALUE_OR_CLOSE:
                self.wake = _VALUE_WAKE
            elif state == _TOKEN_READ:
                self.wake = _TOKEN_WAKE
            elif state in _IN_OBJECT and stack and stack[-1] == "}":
                self.wake = _OBJECT_WAKE
            else:
                self.wake = None

    def _plain_key(self, text, at, out):
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

    def _new_key(self, key):
        """A key of the object being read; ValueError when it has it already (the final
        arguments refuse a duplicate key)."""
        keys = self.keys[-1]
        if key in keys:
            raise ValueError
        keys.add(key)
        return key

    def _lead(self, out):
        if self.comma:
            out.append(", ")
            self.comma = False


def _raw_quotes_escaped(text):
    """Characters of a Python string as the canonical text writes them, when the only thing
    it writes otherwise is a double quote written raw (in a string in single quotes): \\"."""
    return _RAW_QUOTE.sub(lambda m: m.group(1) or '\\"', text) if '"' in text else text


def _escape_end(text, i, eof):
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
    if text.startswith("\\u", i + 6) and _HEX4.match(text, i + 8) and 0xDC00 <= int(text[i + 8:i + 12], 16) < 0xE000:
        return i + 12
    return i + 6  # (alone: JSON keeps it as it is, and so does the stream)


_PYTHON_SIMPLE_ESCAPES = frozenset("\\'\"abfnrtv")
_PYTHON_ESCAPE_LENGTHS = {"x": 4, "u": 6, "U": 10}
_OCTAL = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")


def _python_escape_end(text, i, eof):
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


def _string_end(text, i, quote, python, start):
    """Where the string whose text starts at `start` closes (its quote, at `i` or after: what
    is before `i` was searched); -1: not here yet."""
    while True:
        at = text.find(quote, i)
        if at == -1:
            if python and "\\" in text[i - 1 if i > start else start:]:  # (a backslash: at `i` or just before)
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


def _scalar(token, python):
    """The canonical text of a number or a word (ValueError: not one, or not the same in JSON)."""
    word = (_PYTHON_WORDS if python else _JSON_WORDS).get(token)
    if word is not None:
        return word
    if not _JSON_NUMBER.fullmatch(token):
        raise ValueError
    return encode_json(json.loads(token))  # (1E5 -> 100000.0, -0 -> 0; 1e999 cannot be JSON)


_STOP_SEARCH = {}


def _stop_search(stops):
    """(the stops' first characters; their starts, whole ones too; the starts that are no whole
    stop; a search for the first whole stop), cached per stops."""
    found = _STOP_SEARCH.get(stops)
    if found is None:
        pattern = "|".join(re.escape(stop) for stop in sorted(stops, key=lambda s: (-len(s), s)))
        starts = frozenset(stop[:i] for stop in stops for i in range(1, len(stop) + 1))
        found = _STOP_SEARCH[stops] = (frozenset(stop[0] for stop in stops), starts, starts - frozenset(stops),
                                       re.compile(pattern).search)
    return found


def _json_string_text(text):
    """A string's canonical text, without its quotes (its quotes, backslashes and control
    characters escaped): json's own escaping, in C where it is."""
    return _encode_basestring(text)[1:-1]


_RAW_SPECIAL = {}


def _raw_special(stops):
    """Searches in a raw string value's chunk: for a first character of its closing text or
    a character JSON escapes (cached); for where its closing text may begin (marker_starts)."""
    firsts = "".join(sorted({stop[0] for stop in stops}))
    found = _RAW_SPECIAL.get(firsts)
    if found is None:
        body = "".join("\\" + c if c in "\\]^-[" else c for c in firsts)
        found = _RAW_SPECIAL[firsts] = re.compile('["\\\\\\x00-\\x1f' + body + "]").search
    return found, marker_starts(stops)


_RAW_SEARCHES = {}


def _raw_searches(stops):
    """(the longest stop, _raw_special's two searches, _stop_search's four): cached per stops."""
    found = _RAW_SEARCHES.get(stops)
    if found is None:
        found = _RAW_SEARCHES[stops] = (max(len(stop) for stop in stops), *_raw_special(stops), *_stop_search(stops))
    return found


class KeyValueStream:
    """The canonical JSON text of key/value arguments: `argument(key, value)` as each is read
    (its value decoded and typed); a raw string value may run ahead of its reader:
    `open_string`, then `advance` as its text arrives, then `argument` for the rest."""

    __slots__ = ("index", "count", "out", "paused", "pos", "start", "stops", "longest", "special", "as_is",
                 "stop_starts", "firsts", "starts", "partial", "stop_at", "blocked", "value", "held", "value_special")

    def __init__(self, index):
        self.index = index
        self.count = 0  # arguments begun
        self.out = []  # what was given out
        self.paused = False
        self.pos = None  # or: where the raw string value running ahead goes on in the text
        self.start = None  # where it started
        self.stops = ()  # what may end it (its layout's closing text, with its lead)
        self.special = None  # (as ObjectStream.special, while a raw string value runs ahead)
        self.as_is = _NEVER  # (its chunks with quotes or backslashes go out escaped: see escaped)
        self.value = None  # or: the ObjectStream of the value being read (open_value)
        self.held = ""  # the end of what `escaped` took that may begin a stop: given out, or not, with what follows
        self.value_special = None

    def argument(self, key, value, text):
        """A whole argument, read (or, after its string ran ahead, the rest of it; `text`: the
        parser's text, which holds what of it went out)."""
        if self.paused:
            return ""
        if self.value is not None:
            # What the value's stream gave out, and the rest of the value's canonical text.
            sent = "".join(self.value.out)
            self.out.append(sent)
            self.value = None
            try:
                whole = encode_json(value)
            except (ValueError, TypeError, RecursionError):
                self.pause()
                return ""
            if not whole.startswith(sent):
                self.pause()  # (cannot happen: the final check says so)
                return ""
            piece = whole[len(sent):]
        elif self.pos is not None:
            sent = text[self.start:self.pos]
            self.pos = self.special = None
            if not isinstance(value, str) or not value.startswith(sent):
                self.pause()  # (cannot happen for a string value; the final check says so)
                return ""
            piece = encode_json(value[len(sent):])[1:-1] + '"'
        else:
            try:
                piece = (", " if self.count else "{") + encode_json(key) + ": " + encode_json(value)
            except (ValueError, TypeError, RecursionError):
                self.pause()  # (a value JSON cannot hold: the call will not read)
                return ""
            self.count += 1
        self.out.append(piece)
        return piece

    def open_string(self, key, pos, stops):
        """A raw string value of `key` starts at `pos` in the text; one of `stops` ends it."""
        if self.paused:
            return ""
        self.pos = self.start = pos
        self.stops = stops
        self.longest, self.special, self.stop_starts, self.firsts, self.starts, self.partial, self.stop_at = \
            _raw_searches(stops)
        self.value_special, self.held = self.special, ""
        self.blocked = False
        piece = (", " if self.count else "{") + encode_json(key) + ': "'
        self.count += 1
        self.out.append(piece)
        return piece

    def open_value(self, key, pos, python):
        """A JSON (or Python, `python`) value of `key` starts at `pos`: what goes out before it,
        and the ObjectStream that gives it out as it arrives (None: paused)."""
        if self.paused:
            return "", None
        self.value = ObjectStream(self.index, pos, python, value=True)
        piece = (", " if self.count else "{") + encode_json(key) + ": "
        self.count += 1
        self.out.append(piece)
        return piece, self.value

    def pause(self):
        """Give out nothing more: the rest goes out when the call is complete."""
        self.paused = True
        self.special = None

    def escaped(self, chunk):
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
        return _json_string_text(text)

    def caught_up(self, text, end):
        """The chunks given out through `special` and `escaped` (`text`) are in the parser's
        text, which now ends at `end`: the value runs ahead from there (at what is held)."""
        held = self.held
        if held:
            self.held = ""
            self.special = self.value_special
            text = text[:len(text) - len(held)]
        self.pos = end - len(held)
        self.out.append(_json_string_text(text))

    def advance(self, text, eof):
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
