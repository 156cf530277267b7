"""StreamParser: the input, rules and output layers over one family's Protocol.

    parser = StreamParser(protocol, tools=tools, generation_prompt=prompt)
    for chunk in stream: deltas = parser.feed(chunk)   # OpenAI-style deltas
    deltas = parser.end(finish_reason); message = parser.message

or parse(protocol, text, ...) for a whole output at once (the same result).
"""

from .input import Input
from .messages import Messages
from .output import COMPLETE, DELTAS, Output, TextField
from .protocol import AFTER_REASONING, CONTENT, REASONING, Protocol
from .rules import Rules
from .schema import schema_validator

###{standalone
import codecs


class StreamParser(Input, Rules, Messages, Output):
    """Feed a model's output in chunks (str or bytes); get OpenAI-style deltas back.

    `protocol`: the family's Protocol (or its tables); `tools`: the offered tools (their
    schemas type key/value and pythonic arguments); `generation_prompt` (or its tail) and
    `start` ("reasoning" / "content") decide whether the output starts inside reasoning;
    "after_reasoning": the output is what follows a reasoning block that another reader read
    (content, with no reasoning block of its own: see `reasoning_ended_at`).
    Text that may start a marker is held back until it cannot; nothing emitted is retracted.

    `calls` picks the stream: "deltas" (for a UI: a call's header, then its arguments as they
    are read, and a `tool_call_error` delta voiding a call that turned out broken) or
    "complete" (for code that executes tools: each call once, whole, when it is complete and
    its arguments validate against its tool's schema; nothing to take back; a call that does
    not validate is not in the message, its error is). `validate(name, arguments)` -> None or
    what is wrong: the check of "complete" (default: the runtime's own, runtime/schema.py,
    which refuses a tool schema with a keyword it does not check).
    """

    def __init__(self, protocol, tools=None, generation_prompt=None, start=None, calls=DELTAS, validate=None):
        if not isinstance(protocol, (Protocol, dict)):
            raise TypeError(f"protocol must be a Protocol or its tables (a dict), not {type(protocol).__name__}")
        self._p = protocol if isinstance(protocol, Protocol) else Protocol(protocol)
        self._tools = _offered_tools(tools)  # name -> parameters (a JSON Schema)
        self._properties = {name: schema.get("properties") or {} for name, schema in self._tools.items()}
        if generation_prompt is not None and not isinstance(generation_prompt, str):
            raise TypeError(f"generation_prompt must be a str or None, not {type(generation_prompt).__name__}")
        if start not in (None, REASONING, CONTENT, AFTER_REASONING):
            raise ValueError(f"start must be {REASONING!r}, {CONTENT!r}, {AFTER_REASONING!r} or None, not {start!r}")
        if calls not in (DELTAS, COMPLETE):
            raise ValueError(f"calls must be {DELTAS!r} or {COMPLETE!r}, not {calls!r}")
        if validate is not None and not callable(validate):
            raise TypeError(f"validate must be a function (name, arguments) -> None or a problem, not "
                            f"{type(validate).__name__}")
        self._validate = None  # the dispatch stream's check, when that is the stream
        if calls == COMPLETE:
            self._validate = validate or schema_validator(tools)
            self._ui_feed, self._ui_end = self.feed, self.end  # (the class's: what the UI stream gives)
            self.feed, self.end = self._feed_complete, self._end_complete
        self._state = self._p.start_state(generation_prompt, start)
        self._started = AFTER_REASONING if start == AFTER_REASONING else self._state
        # where the text after the output's reasoning begins (an offset in characters), once the
        # parse has left the reasoning it started in or found none (see `reasoning_ended_at`)
        self._reasoning_ended_at = 0 if start == AFTER_REASONING else None
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
        self._partials = frozenset()  # (with _plain: the starts of a marker held at a chunk's end)
        self._wait_for = 0  # or: the parse needs _text to reach this length to decide
        self._then = 0  # or: it needs this many characters after the first that `_quiet` finds
        self._poll = None  # or: a value's scan, which feed() runs on a chunk that passed `_quiet`
        self._eof = False
        # output
        self._deltas = []
        self._content_text = TextField("content")
        self._reasoning_text = TextField("reasoning_content")
        self._calls = []
        self._invalid_calls = 0  # complete calls dropped for their arguments (they keep their index)
        self._kv_read_state = None  # where a call's key/value arguments are (rules, made on first use)
        self._open_call = None  # the call being read (its header may have gone out)
        # the call layout being read: its steps, JSON object keys and self-closed form (the
        # family's, or the one without its opener)
        self._steps = self._json_call = self._self_closing = None
        self._after_arguments = ""  # (and the text the template writes after its arguments: Protocol.after_arguments)
        self._streaming = None  # or: the argument stream of that call (see streams), once it had to wait
        # While that stream is inside a string and gave out all the text so far: the stream,
        # for feed's fast path; and the chunks that path gave out, not yet in _text.
        self._fast = None
        self._ahead = []
        self._drive = None  # or: the ObjectStream that reads a JSON value feed() is inside (see feed)
        self._drive_then = ""  # the text the template writes after that value
        # or: text the parse waits for while the output goes on as it (from _expect_at); or a
        # tuple of texts, one of which (whitespace before it any) it waits for (_expect_one_of)
        self._expect = None
        self._expect_at = 0
        self._errors = []
        self._finish = None
        # rules: the parse, primed to wait for the first chunk
        self._run = self._turn()
        next(self._run)
        self._resume = self._run.send


    @property
    def start_state(self):
        """Where the output started: "reasoning" or "content" (as `start` or the generation
        prompt decided), or "after_reasoning" when it was given."""
        return self._started

    @property
    def reasoning_ended_at(self):
        """The offset (characters of the output) where what follows its reasoning begins:
        after the reasoning's end marker, at a call that ended it, or where the output's first
        text begins when it opened no reasoning; None while the parse is in reasoning or cannot
        tell yet. A parser started "after_reasoning" on the output from there reads what this
        one reads after its reasoning (vLLM's reasoning-then-tools split: `tplparse export vllm`)."""
        return self._reasoning_ended_at


def _offered_tools(tools):
    """name -> parameters of OpenAI-style tool definitions ({"type": "function", "function": {...}} or
    the function alone); TypeError naming the tool that is not one."""
    if tools is None:
        return {}
    if not isinstance(tools, (list, tuple)):
        raise TypeError(f"tools must be a list of tool definitions, not {type(tools).__name__}")
    offered = {}
    for i, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise TypeError(f"tools[{i}] must be a tool definition with a function name, not {tool!r:.60}")
        parameters = function.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise TypeError(f"tools[{i}] ({function['name']}): parameters must be a JSON Schema object, "
                            f"not {type(parameters).__name__}")
        properties = parameters.get("properties")
        if properties is not None and not isinstance(properties, dict):
            raise TypeError(f"tools[{i}] ({function['name']}): parameters.properties must be an object, "
                            f"not {type(properties).__name__}")
        for key, schema in (properties or {}).items():
            if not isinstance(schema, (dict, bool)):
                raise TypeError(f"tools[{i}] ({function['name']}): the schema of {key!r} must be an object, "
                                f"not {type(schema).__name__}")
        # (a boolean schema types nothing)
        parameters = {**parameters, "properties": {k: v if isinstance(v, dict) else {} for k, v in (properties or {}).items()}}
        offered[function["name"]] = parameters
    return offered


def read_all(parser, text, finish_reason="stop"):
    """Feed a whole output to `parser` at once; its message (the same as streaming it)."""
    parser.feed(text)
    parser.end(finish_reason)
    return parser.message


def parse(protocol, text, tools=None, generation_prompt=None, start=None, finish_reason="stop", calls=DELTAS,
          validate=None):
    """Parse a whole output at once: the same result as streaming it."""
    return read_all(StreamParser(protocol, tools=tools, generation_prompt=generation_prompt, start=start, calls=calls,
                                 validate=validate), text, finish_reason)


###}
