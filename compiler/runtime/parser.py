"""StreamParser: the input, rules and output layers over one family's Protocol.

    parser = StreamParser(protocol, tools=tools, generation_prompt=prompt)
    for chunk in stream: deltas = parser.feed(chunk)   # OpenAI-style deltas
    deltas = parser.end(finish_reason); message = parser.message

or parse(protocol, text, ...) for a whole output at once (the same result).
"""

from .input import Input
from .output import Output, TextField
from .protocol import Protocol
from .rules import Rules

###{standalone
import codecs


class StreamParser(Input, Rules, Output):
    """Feed a model's output in chunks (str or bytes); get OpenAI-style deltas back.

    `protocol`: the family's Protocol (or its tables); `tools`: the offered tools (their
    schemas type key/value and pythonic arguments); `generation_prompt` (or its tail) and
    `start` ("reasoning" / "content") decide whether the output starts inside reasoning.
    Text that may start a marker is held back until it cannot; nothing emitted is retracted.
    """

    def __init__(self, protocol, tools=None, generation_prompt=None, start=None):
        self._p = protocol if isinstance(protocol, Protocol) else Protocol(protocol)
        self._tools = {}  # name -> parameters (a JSON Schema)
        for tool in tools or []:
            function = tool.get("function") or tool
            self._tools[function.get("name")] = function.get("parameters") or {}
        self._properties = {name: schema.get("properties") or {} for name, schema in self._tools.items()}
        self._state = self._p.start_state(generation_prompt, start)
        # input
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
        # output
        self._deltas = []
        self._content_text = TextField("content")
        self._reasoning_text = TextField("reasoning_content")
        self._calls = []
        self._invalid_calls = 0  # complete calls dropped for their arguments (they keep their index)
        self._kv_read_state = None  # where a call's key/value arguments are (rules, made on first use)
        self._errors = []
        self._finish = None
        # rules: the parse, primed to wait for the first chunk
        self._run = self._turn()
        next(self._run)
        self._resume = self._run.send


def read_all(parser, text, finish_reason="stop"):
    """Feed a whole output to `parser` at once; its message (the same as streaming it)."""
    parser.feed(text)
    parser.end(finish_reason)
    return parser.message


def parse(protocol, text, tools=None, generation_prompt=None, start=None, finish_reason="stop"):
    """Parse a whole output at once: the same result as streaming it."""
    return read_all(StreamParser(protocol, tools=tools, generation_prompt=generation_prompt, start=start), text,
                    finish_reason)


###}
