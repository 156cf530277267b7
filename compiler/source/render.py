"""Render chat templates the way Hugging Face transformers does, inside a sandbox with limits.

What "the way transformers does" means (its `apply_chat_template`, version 5):
- `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with the
  `loopcontrols` extension and a `{% generation %}...{% endgeneration %}` block tag
  (transformers uses it to mark assistant tokens; for rendering it is transparent);
- a `tojson` filter that is plain `json.dumps` (no HTML escaping) accepting
  `ensure_ascii`, `indent`, `separators` and `sort_keys`;
- globals `raise_exception(message)`, `strftime_now(format)`, a `dict` constructor and a
  `namespace` that refuses underscore-prefixed attributes;
- the inputs it passes: top-level `None` values dropped from each message, a message's
  reasoning offered under `reasoning_content`, `thinking` and `thought`, the named special
  tokens (`bos_token`, `eos_token`, ...) as variables, and any extra keyword arguments.

Some templates that ship in real GGUF files are refused by that immutable sandbox although
llama.cpp renders them: they build their own lists (`ns.ids.append(x)`) or print the result
of a filter such as `map` with `tojson`. Such a template is rendered a second time in a
sandbox that lets a template mutate only the containers it created itself (never the
messages or tools it is given) and turns filter results into lists for `tojson`; the
`ChatTemplate` records that it needed it (`compat_notes`), and the probe puts it in the
spec's warnings.

Templates are untrusted code shipped inside model files (CVE-2024-34359 was a GGUF chat
template that ran code), so the sandbox always stays on, and each render also runs under
a watchdog: a limit on the CPU time the rendering thread spends (with a wall-clock
backstop well above it, for a render that waits rather than works), an output-size limit,
a cap on how much memory the render may grow, and size checks on the operators that can
build huge strings in one step
(`'x' * n`, `n ** m`, `'%999999999d' % x`).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import string
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.exceptions import SecurityError
from jinja2.sandbox import (
    ImmutableSandboxedEnvironment,
    SandboxedEnvironment,
    modifies_known_mutable,
)

from ..errors import TemplateError
from .budget import backstop_seconds

# The file name Jinja gives templates compiled from a string; used to find the template's
# own frames (and so its line numbers) in a traceback.
_TEMPLATE_FILENAME = "<template>"


def cpu_clock(thread_id: int | None = None) -> Callable[[], float]:
    """The CPU time a thread has spent, in seconds, readable from any thread (the calling
    thread's, from itself only, by default): what budgets count, so that the machine's load
    does not change what a template may do. Where the platform has no per-thread CPU clock
    readable from another thread, the wall clock."""
    if thread_id is None:
        return time.thread_time
    try:
        clock = time.pthread_getcpuclockid(thread_id)
    except (AttributeError, OSError):  # pragma: no cover - no per-thread clocks (macOS)
        return time.monotonic
    return lambda: time.clock_gettime(clock)


@dataclass(frozen=True)
class _Budget:
    """The time all renders of a block may take (time_budget)."""

    seconds: float  # of the CPU time of the thread that runs them
    cpu_deadline: float  # on that thread's CPU clock
    backstop: float  # seconds of wall clock
    wall_deadline: float  # the backstop, on the monotonic clock
    thread_id: int

    def within(self, outer: _Budget | None) -> _Budget:
        """This budget inside `outer`: each deadline the earlier of the two (an inner budget
        never extends an outer one)."""
        if outer is None:
            return self
        cpu = self
        if outer.thread_id == self.thread_id and outer.cpu_deadline < self.cpu_deadline:
            cpu = outer
        wall = outer if outer.wall_deadline < self.wall_deadline else self
        return _Budget(cpu.seconds, cpu.cpu_deadline, wall.backstop, wall.wall_deadline,
                       self.thread_id)

    def left(self) -> tuple[float, float]:
        """(CPU seconds, wall seconds) left; the CPU of another thread than the budget's own is
        not counted (its wall clock is)."""
        cpu = self.cpu_deadline - time.thread_time() \
            if threading.get_ident() == self.thread_id else self.seconds
        return cpu, self.wall_deadline - time.monotonic()

    def used_up(self) -> str | None:
        cpu, wall = self.left()
        if cpu <= 0:
            return f"the render budget of {self.seconds:g} s of CPU time is used up"
        if wall <= 0:
            return (f"the wall-clock backstop of {self.backstop:g} s is used up (the render "
                    f"budget is {self.seconds:g} s of CPU time: the work waited, or the machine "
                    "is too busy)")
        return None


# The budget of every render in a block (a probe's, a command's), or None.
_DEADLINE: ContextVar[_Budget | None] = ContextVar("tplparse_deadline", default=None)


@contextmanager
def time_budget(seconds: float):
    """Within the block, all renders together (and the work between them) may take `seconds`
    of the running thread's CPU time, and `backstop_seconds(seconds)` of wall clock: each
    render's own limits shrink to what is left, and a render started with nothing left fails
    (a limit). Inside another budget, the one that ends first holds (an inner budget never
    extends an outer one: a command's budget bounds the whole command)."""
    backstop = backstop_seconds(seconds)
    budget = _Budget(seconds, time.thread_time() + seconds, backstop,
                     time.monotonic() + backstop, threading.get_ident())
    token = _DEADLINE.set(budget.within(_DEADLINE.get()))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@contextmanager
def default_time_budget(seconds: float):
    """`time_budget(seconds)` unless the block already runs inside a budget, which then holds
    alone (a probe's own 15 s give way to the budget of the command that runs it)."""
    if _DEADLINE.get() is not None:
        yield
        return
    with time_budget(seconds):
        yield


def check_time_budget(name: str) -> None:
    """Raise the limit `TemplateError` when the block's time budget (time_budget) is used up:
    for work between renders (a probe diffing large renders)."""
    budget = _DEADLINE.get()
    used_up = budget.used_up() if budget is not None else None
    if used_up is not None:
        error = TemplateError(used_up, template=name)
        error.limit = True
        raise error


@dataclass(frozen=True)
class RenderLimits:
    """Per-render limits. A template that exceeds one fails with a `TemplateError`."""

    seconds: float = 10.0  # CPU time of the rendering thread
    max_output_chars: int = 8_000_000
    max_memory_growth_bytes: int = 1 << 30  # resident memory the render may add (Linux only)
    # When `seconds` is what is left of a time budget for several renders (time_budget): that
    # budget, which the error then names.
    budget_seconds: float | None = None
    # Wall clock the render may take: backstop_seconds(seconds) when None.
    wall_seconds: float | None = None
    # The longest template compiled (in characters). Jinja's compile of a template runs no
    # template code, but its time and memory grow with the text: 256 Ki characters of the
    # worst constructs take seconds and some 500 MB; real chat templates are under 20 Ki.
    max_template_chars: int = 256 * 1024


DEFAULT_LIMITS = RenderLimits()


# ---------------------------------------------------------------------------
# The environment


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: renders its body unchanged.

    transformers uses the block to record where assistant text sits in the prompt; the
    rendered text is the body itself, which is all that matters here.
    """

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [],
                                      body).set_lineno(lineno)

    def _render_body(self, caller) -> str:
        return caller()


class _TemplateRaised(jinja2.exceptions.TemplateError):
    """The template called `raise_exception(message)`."""


def _raise_exception(message):
    raise _TemplateRaised(str(message))


# Why the transformers-parity render refused a template that the own-containers sandbox
# renders (None: it did not), for the render in progress.
_NEEDS_OWN_CONTAINERS: ContextVar[str | None] = ContextVar("tplparse_needs_own_containers",
                                                           default=None)
# The ids of the containers a render was given (the only ones it may not mutate there).
_INPUT_CONTAINERS: ContextVar[frozenset] = ContextVar("tplparse_input_containers",
                                                      default=frozenset())


def _not_serializable(value):
    if isinstance(value, Iterator):
        _NEEDS_OWN_CONTAINERS.set("it prints a filter's result (an iterator, "
                                  "not a list) with tojson")
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys, default=_not_serializable)


def _as_list(value):
    if isinstance(value, Iterator):
        return list(value)
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _tojson_lists(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """tojson that writes a filter's result (map, select, ...) as the list it yields, as
    llama.cpp does."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys, default=_as_list)


# The clock templates read through strftime_now: the real one, unless a caller pins it (the
# probe renders a conversation several times and compares the renders, so they must agree).
_CLOCK: ContextVar[datetime | None] = ContextVar("tplparse_clock", default=None)


def _strftime_now(format):
    return (_CLOCK.get() or datetime.now()).strftime(format)


@contextmanager
def fixed_clock(moment: datetime | None = None):
    """Within the block, templates see `moment` (default: 2026-01-01 12:00:00) as now."""
    token = _CLOCK.set(moment or datetime(2026, 1, 1, 12, 0, 0))
    try:
        yield
    finally:
        _CLOCK.reset(token)


class _DictConstructor:
    """`dict(...)` for templates: builds a dict, exposes nothing else of the `dict` type."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    """`namespace(...)` that refuses underscore-prefixed attribute names (no reach into
    internals)."""

    def __init__(*args, **kwargs):  # same signature trick as Jinja's, so namespace(self=1) works
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError("templates cannot store underscore-prefixed attributes on "
                                f"a namespace ({name!r})")


class _TooBig(SecurityError):
    """An operation would build a value past the render's size limit (a resource limit)."""


# str methods whose integer argument sets the size of the result.
_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})


class _ParserStackOverflow(Exception):
    """Python's parser ran out of its own stack on the code Jinja generated from a template."""


class _ChatTemplateEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, plus size checks on the operations that can allocate a huge string at once."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, max_result_chars: int):
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_GenerationBlock, jinja2.ext.loopcontrols],
        )
        self.max_result_chars = max_result_chars
        self.filters["tojson"] = _tojson
        self.filters["center"] = self._checked_filter(self.filters["center"], "width")
        self.filters["indent"] = self._checked_filter(self.filters["indent"], "width")
        self.filters["format"] = self._checked_format_filter(self.filters["format"])
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now
        self.globals["dict"] = _DictConstructor()
        self.globals["namespace"] = _Namespace

    def _too_big(self, what: str, size: int) -> None:
        if size > self.max_result_chars:
            raise _TooBig(f"{what} would build a value of about {size} items (limit "
                          f"{self.max_result_chars})")

    def _compile(self, source: str, filename: str):
        # (Jinja's hook around Python's compile of the code it generates) Python's parser
        # raises MemoryError when its stack overflows, at a few thousand levels of nesting (a
        # chain of 6,000 elif), however little memory is in use: told apart here.
        try:
            return super()._compile(source, filename)
        except MemoryError:
            raise _ParserStackOverflow from None

    def _checked_filter(self, filter_func, argument: str):
        def checked(value, *args, **kwargs):
            width = kwargs.get(argument, args[0] if args else 0)
            if isinstance(width, int):
                self._too_big(f"the filter argument {argument}={width}", width)
            return filter_func(value, *args, **kwargs)

        checked.__name__ = getattr(filter_func, "__name__", "filter")
        return checked

    def _checked_format_filter(self, filter_func):
        """`'%05d'|format(x)` is `'%05d' % x`: its widths are checked as the operator's are."""
        def checked(value, *args, **kwargs):
            if isinstance(value, str):
                self._check_percent_widths(value, kwargs or args)
            return filter_func(value, *args, **kwargs)

        checked.__name__ = getattr(filter_func, "__name__", "format")
        return checked

    def _check_percent_widths(self, text: str, values) -> None:
        """The widths and precisions of `text % values`: those written in `text`, and with a `*`
        in it, those taken from `values` (checked all: a `*` takes its width from among them)."""
        for number in _digit_runs(text):
            self._too_big("a %-format width", number)
        if "*" in text:
            for value in values if isinstance(values, (tuple, list)) else (values,):
                if isinstance(value, int):
                    self._too_big("a %-format width", abs(value))

    def _check_format_widths(self, text: str, args, kwargs) -> None:
        """The widths of `text.format(...)`: those written in `text`, and where a field's spec
        holds a nested field (`{0:{1}}`), the integers among the arguments (one is that width)."""
        for number in _digit_runs(text):
            self._too_big("a format width", number)
        if _has_nested_format_field(text):
            values = list(args) + list(kwargs.values())
            if len(args) == 1 and isinstance(args[0], Mapping):  # (format_map)
                values += list(args[0].values())
            for value in values:
                if isinstance(value, int):
                    self._too_big("a format width", abs(value))

    def call_binop(self, context, operator, left, right):
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
                    self._too_big("repeating a sequence", len(seq) * times)
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
                # the result has about right * log2(left) bits
                self._too_big("a power", right * abs(left).bit_length() // 8)
        elif operator == "%" and isinstance(left, str):
            self._check_percent_widths(left, right)
        elif operator == "+" and isinstance(left, (str, list, tuple)) \
                and isinstance(right, (str, list, tuple)):
            # (doubling a list in a loop)
            self._too_big("joining two sequences", len(left) + len(right))
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja's own signature)
        name = getattr(__obj, "__name__", "")
        if isinstance(getattr(__obj, "__self__", None), str):
            if name in _WIDTH_METHODS:
                for value in list(args) + list(kwargs.values()):
                    if isinstance(value, int):
                        __self._too_big(f"str.{name}()", value)
                        if name == "expandtabs":  # (each tab becomes up to that many spaces)
                            spaces = __obj.__self__.count("\t") * value
                            __self._too_big("str.expandtabs()", len(__obj.__self__) + spaces)
        return super().call(__context, __obj, *args, **kwargs)

    def is_safe_attribute(self, obj, attr, value):
        if not SandboxedEnvironment.is_safe_attribute(self, obj, attr, value):
            return False
        if modifies_known_mutable(obj, attr):  # what transformers' immutable sandbox refuses
            _NEEDS_OWN_CONTAINERS.set(f"it mutates a {type(obj).__name__} it builds ({attr})")
            return False
        return True

    def wrap_str_format(self, value):
        # Jinja wraps `str.format` when the template looks the method up; the widths are
        # checked when it is called (a nested field takes its width from the arguments).
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        text = value.__self__

        def checked(*args, **kwargs):
            self._check_format_widths(text, args, kwargs)
            return wrapped(*args, **kwargs)

        return checked


class _OwnContainersEnvironment(_ChatTemplateEnvironment):
    """The same sandbox and limits, except that a template may mutate the lists, dicts and
    sets it created itself (not those it was given), and tojson writes iterators as lists."""

    def __init__(self, max_result_chars: int):
        super().__init__(max_result_chars)
        self.filters["tojson"] = _tojson_lists

    def is_safe_attribute(self, obj, attr, value):
        if not SandboxedEnvironment.is_safe_attribute(self, obj, attr, value):
            return False
        return not modifies_known_mutable(obj, attr) or id(obj) not in _INPUT_CONTAINERS.get()


def _container_ids(value, found: set) -> set:
    """The ids of every list and dict inside `value` (the inputs of a render)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if id(item) not in found:
                found.add(id(item))
                stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            if id(item) not in found:
                found.add(id(item))
                stack.extend(item)
    return found


def _has_nested_format_field(text: str) -> bool:
    """Whether a replacement field of the str.format string `text` has a field in its spec."""
    try:
        return any(spec and "{" in spec for _, field_name, spec, _ in string.Formatter().parse(text)
                   if field_name is not None)
    except ValueError:  # (not a valid format string: format() refuses it)
        return False


def _digit_runs(text: str):
    """The integers written in `text` (format widths hide among them): runs of decimal digits,
    of any script (`str.format` reads a width of Arabic-Indic digits too), not other digit
    characters (`²` is a digit to `isdigit` and no number to `int` or to a format)."""
    number = ""
    for ch in text + " ":
        if ch.isdecimal():
            number += ch
        elif number:
            yield int(number) if len(number) < 20 else 10**20
            number = ""


@lru_cache(maxsize=8)
def _environment(max_result_chars: int, own_containers: bool = False) -> _ChatTemplateEnvironment:
    environment = _OwnContainersEnvironment if own_containers else _ChatTemplateEnvironment
    return environment(max_result_chars)


@lru_cache(maxsize=128)
def _compile(source: str, max_result_chars: int, own_containers: bool = False) -> jinja2.Template:
    return _environment(max_result_chars, own_containers).from_string(source)


def compile_template(source: str, name: str, limits: RenderLimits = DEFAULT_LIMITS,
                     own_containers: bool = False) -> jinja2.Template:
    """Compile `source`; a syntax error becomes a `TemplateError` with its line number, and a
    template too big or nested too deeply to compile a limit `TemplateError` naming the limit."""
    _check_template_size(source, name, limits)
    try:
        return _compile(source, limits.max_output_chars, own_containers)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"Jinja syntax error: {e.message}", template=name,
                            line=e.lineno) from None
    except (RecursionError, SyntaxError, MemoryError) as e:
        raise _compile_limit(e, name) from None
    except _ParserStackOverflow:
        raise _limit("the template nests too deeply to compile (the stack of Python's parser "
                     "overflows on the code Jinja makes of it: a chain of thousands of elif, or "
                     "blocks nested thousands deep)", name) from None


def parse_template(source: str, limits: RenderLimits = DEFAULT_LIMITS) -> jinja2.nodes.Template:
    """The template's syntax tree, from the same environment that renders it (for reading
    which variables it uses, never for running it)."""
    _check_template_size(source, "template", limits)
    try:
        return _environment(limits.max_output_chars).parse(source)
    except (RecursionError, MemoryError) as e:
        raise _compile_limit(e, "template") from None


def _check_template_size(source: str, name: str, limits: RenderLimits) -> None:
    if len(source) > limits.max_template_chars:
        raise _limit(f"the template is {len(source)} characters long; the limit is "
                     f"{limits.max_template_chars} (RenderLimits.max_template_chars)", name)


def _compile_limit(error: RecursionError | SyntaxError | MemoryError, name: str) -> TemplateError:
    """The limit `TemplateError` for a template Jinja or Python cannot compile within its limits:
    nesting deeper than Python's recursion limit (parentheses, lists, ifs, filter chains), more
    nested loops than Python's compiler takes, or no memory left."""
    if isinstance(error, RecursionError):
        return _limit("the template nests too deeply to compile (Python's recursion limit)", name)
    if isinstance(error, MemoryError):
        return _limit(f"compiling the template ran out of memory{_memory_limit_note()}", name)
    # (a SyntaxError from compiling Jinja's generated code: the template's own syntax is Jinja's)
    return _limit(f"the template nests too deeply to compile (Python's compiler: {error.msg})",
                  name)


# ---------------------------------------------------------------------------
# Inputs, as transformers prepares them


_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning", "thought")


def plain_data(value: Any, where: str = "input") -> Any:
    """A deep copy of `value` made of JSON-like types only (the template sees nothing else)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_data(k, where): plain_data(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v, where) for v in value]
    raise TypeError(f"{where}: {type(value).__name__} values cannot be passed to a chat template")


def prepare_messages(messages: list) -> list[dict]:
    """Messages as transformers hands them to the template.

    Top-level keys whose value is None are dropped (many templates print "None" or fail on
    them, and handle a missing key); reasoning given under any of its names is offered as
    `reasoning_content`, `thinking` and `thought` (MiniCPM 3 and Apriel 1.5 read the last).
    """
    if not isinstance(messages, (list, tuple)):
        raise TypeError("messages must be a list of message objects, not "
                        f"{type(messages).__name__}")
    prepared = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TypeError(f"message {index} must be an object with a 'role', not "
                            f"{type(message).__name__}")
        message = {k: v for k, v in plain_data(message, f"message {index}").items()
                   if v is not None}
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None),
                         None)
        if reasoning is not None:
            message = {"thinking": reasoning, "thought": reasoning, **message,
                       "reasoning_content": reasoning}
        prepared.append(message)
    return prepared


# ---------------------------------------------------------------------------
# Rendering under the watchdog


class _RenderInterrupted(BaseException):
    """Raised inside the rendering thread by the watchdog (a BaseException, so nothing catches
    it)."""


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _wall_seconds(limits: RenderLimits) -> float:
    return limits.wall_seconds if limits.wall_seconds is not None \
        else backstop_seconds(limits.seconds)


@dataclass
class _Watch:
    """One render under watch: whom to interrupt, and when."""

    thread_id: int
    cpu: Callable[[], float]  # the rendering thread's CPU clock
    cpu_deadline: float
    wall_deadline: float
    start_rss: int | None
    limits: RenderLimits
    breach: str | None = None
    signal_again: float = 0.0  # (when to interrupt it again if it still runs after a breach)
    armed: bool = False  # (interrupted only once armed: see _Watchdog.watch)


class _Watchdog:
    """Interrupts a rendering thread whose render runs too long or grows memory too much.

    One daemon thread (started on first use, restarted after a fork) polls the clock and
    resident memory for every render in progress; on a breach it raises
    `_RenderInterrupted` in the rendering thread (CPython's asynchronous exception, which
    lands between two bytecodes of the template's compiled Python code), and again every
    0.1 s until the render has unwound. A render only registers and unregisters, so
    watching costs microseconds, not a thread start.

    The exception may land anywhere in the rendering thread until its watch is gone, so
    that thread takes the lock only with a `with` on a C lock: it is held from the moment
    it is taken inside the statement's protection (a Python-level `__enter__`, such as
    threading.Condition's, can be interrupted after taking its lock and before the `with`
    is set up, and the lock is never released: the watchdog, and every render after it,
    then waits forever).
    """

    POLL_SECONDS = 0.005
    SIGNAL_AGAIN_SECONDS = 0.1

    def __init__(self):
        self._lock = threading.Lock()
        self._wake = threading.Event()  # (set by a render that registers while the watchdog idles)
        self._active: dict[int, _Watch] = {}
        self._pid: int | None = None

    @contextmanager
    def watch(self, limits: RenderLimits):
        thread_id = threading.get_ident()
        cpu = cpu_clock(thread_id)
        watch = _Watch(thread_id, cpu, cpu() + limits.seconds,
                       time.monotonic() + _wall_seconds(limits), _resident_bytes(), limits)
        key = id(watch)
        with self._lock:
            if self._pid != os.getpid():
                self._wake = threading.Event()
                # (a start that fails, the machine out of threads, raises here and is tried
                # again by the next render: no render runs unwatched)
                threading.Thread(target=self._run, name="tplparse-render-watchdog",
                                 daemon=True).start()
                self._pid = os.getpid()
            self._active[key] = watch
        # Woken while the watch is not armed yet: Event.set takes a Python-level lock, and an
        # interrupt must not land while this thread holds it.
        self._wake.set()
        watch.armed = True
        try:
            yield watch
        finally:
            with self._lock:
                # Unregistered first, by the call that can be interrupted only once it is done
                # (its key computed before): from here on nothing more is raised for this render.
                self._active.pop(key, None)
                if watch.breach is not None:
                    # The exception may still be pending (not yet delivered): withdraw it.
                    _async_raise(watch.thread_id, None)

    def after_fork(self) -> None:
        """In a forked child: no thread of the parent runs here, so no watch of theirs is live
        and their lock may be held forever; start over (the thread restarts on first use)."""
        self._lock = threading.Lock()
        self._active = {}
        self._pid = None

    def _run(self):
        while True:
            while not self._active:
                self._wake.clear()
                if not self._active:
                    self._wake.wait()
            time.sleep(self.POLL_SECONDS)
            now = time.monotonic()
            rss = _resident_bytes()
            with self._lock:
                for watch in self._active.values():
                    if not watch.armed:
                        continue
                    if watch.breach is None:
                        watch.breach = _breach(watch, now, rss)
                    # Signalled again while it still runs: an asynchronous exception that lands
                    # in a finalizer (a __del__, a generator closed by the garbage collector,
                    # running between two bytecodes of the template) is ignored there, and the
                    # render would go on. The watch leaves only when the render unwinds (watch()
                    # unregisters it, under this lock, and withdraws what is still pending).
                    if watch.breach is not None and now >= watch.signal_again:
                        _async_raise(watch.thread_id, _RenderInterrupted)
                        watch.signal_again = now + self.SIGNAL_AGAIN_SECONDS


def _breach(watch: _Watch, now: float, rss: int | None) -> str | None:
    budget = watch.limits.budget_seconds
    if watch.cpu() > watch.cpu_deadline:
        if budget is not None:
            return f"the render budget of {budget:g} s of CPU time is used up"
        return f"rendering took longer than {watch.limits.seconds:g} s of CPU time"
    if now > watch.wall_deadline:
        backstop = _wall_seconds(watch.limits)
        return (f"rendering took longer than {backstop:g} s of wall clock, the backstop of its "
                f"{budget if budget is not None else watch.limits.seconds:g} s of CPU time (the "
                "render waited, or the machine is too busy)")
    limit = watch.limits.max_memory_growth_bytes
    if rss is not None and watch.start_rss is not None and rss - watch.start_rss > limit:
        return f"rendering grew memory by more than {limit >> 20} MB"
    return None


def _async_raise(thread_id: int, exception) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exception) if exception else None)


_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):
    # A child forked while another thread held the lock or had renders watched starts clean.
    os.register_at_fork(after_in_child=_WATCHDOG.after_fork)


# The address-space limit this process runs under, when one was set for it (a command's
# child process, tplparse.source.isolation), which an out-of-memory error names.
_MEMORY_LIMIT_BYTES: int | None = None


def note_memory_limit(limit_bytes: int | None) -> None:
    """Record the address-space limit this process now runs under (out-of-memory errors name it)."""
    global _MEMORY_LIMIT_BYTES
    _MEMORY_LIMIT_BYTES = limit_bytes


def _memory_limit_note() -> str:
    if _MEMORY_LIMIT_BYTES is None:
        return ""
    return f" (the memory limit of {_MEMORY_LIMIT_BYTES >> 20} MB)"


def _template_line(tb) -> int | None:
    """The last line of the template (not of Jinja or Python) in a traceback."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _TEMPLATE_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def render_template(
    source: str,
    name: str,
    variables: dict[str, Any],
    limits: RenderLimits = DEFAULT_LIMITS,
    own_containers: bool = False,
) -> str:
    """Render `source` with `variables` in the sandbox; every failure is a `TemplateError`.

    `own_containers`: the sandbox that lets the template mutate the containers it builds
    (see the module docstring). A refusal that this sandbox would not make is a
    `TemplateError` whose `own_containers` says why."""
    template = compile_template(source, name, limits, own_containers)
    budget = _DEADLINE.get()
    if budget is not None:
        used_up = budget.used_up()
        if used_up is not None:
            raise _limit(used_up, name)
        cpu, wall = budget.left()
        if cpu < limits.seconds or wall < _wall_seconds(limits):
            limits = replace(limits, seconds=min(cpu, limits.seconds),
                             wall_seconds=min(wall, _wall_seconds(limits)),
                             budget_seconds=budget.seconds)
    needs = _NEEDS_OWN_CONTAINERS.set(None)
    inputs = _INPUT_CONTAINERS.set(frozenset(_container_ids(variables, set())) if own_containers
                                   else frozenset())
    try:
        return _render(template, name, variables, limits)
    except TemplateError as e:
        if not own_containers:
            e.own_containers = _NEEDS_OWN_CONTAINERS.get()
        raise
    finally:
        _NEEDS_OWN_CONTAINERS.reset(needs)
        _INPUT_CONTAINERS.reset(inputs)


# The longest piece of a template's own text (a raise_exception message) an error quotes.
MAX_QUOTED_CHARS = 300


def escaped(text: str, max_chars: int = MAX_QUOTED_CHARS) -> str:
    """`text` quoted on one line, as Python writes a string (newlines, carriage returns, NUL,
    terminal escape sequences and lone surrogates as escapes), cut after `max_chars` characters:
    the template's own words in an error message, never able to rewrite the terminal."""
    if len(text) <= max_chars:
        return repr(text)
    return f"{text[:max_chars]!r}... ({len(text) - max_chars} more characters)"


def _limit(message: str, name: str, line: int | None = None) -> TemplateError:
    error = TemplateError(message, template=name, line=line)
    error.limit = True
    return error


def _render(template: jinja2.Template, name: str, variables: dict[str, Any],
            limits: RenderLimits) -> str:
    pieces: list[str] = []
    size = 0
    try:
        try:
            with _WATCHDOG.watch(limits) as watch:
                for piece in template.generate(**variables):
                    size += len(piece)
                    if size > limits.max_output_chars:
                        raise _limit("rendered output exceeds "
                                     f"{limits.max_output_chars} characters", name)
                    pieces.append(piece)
        except _RenderInterrupted:
            raise _limit(watch.breach or "rendering was interrupted", name) from None
    except TemplateError:
        raise
    except _TooBig as e:
        raise _limit(f"blocked by the sandbox: {e}", name,
                     _template_line(e.__traceback__)) from None
    except _TemplateRaised as e:
        raise TemplateError(f"the template raised an exception: {escaped(str(e))}", template=name,
                            line=_template_line(e.__traceback__)) from None
    except SecurityError as e:
        raise TemplateError(f"blocked by the sandbox: {e}", template=name,
                            line=_template_line(e.__traceback__)) from None
    except RecursionError as e:
        raise TemplateError("recursion too deep", template=name,
                            line=_template_line(e.__traceback__)) from None
    except MemoryError as e:
        raise _limit(f"ran out of memory{_memory_limit_note()}", name,
                     _template_line(e.__traceback__)) from None
    except Exception as e:  # any error raised while evaluating untrusted template code
        line = _template_line(e.__traceback__)
        if line is None:
            raise _not_the_templates(e, name) from None
        raise TemplateError(f"{type(e).__name__}: {e}", template=name, line=line) from None
    text = "".join(pieces)
    _check_unicode(text, name)
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_unicode(text: str, name: str) -> None:
    """A render holding a lone surrogate (a template can write '\\ud800', or be given one) is no
    Unicode text: no UTF-8 encodes it, no tokenizer reads it, no file holds it; an error."""
    found = _SURROGATE.search(text)
    if found is not None:
        raise TemplateError(f"the template writes a lone surrogate ({found.group()!r}) at "
                            f"character {found.start()}: that is not Unicode text", template=name)


def _not_the_templates(error: Exception, name: str) -> TemplateError:
    """An error raised where no code of the template runs (setting up the render, starting the
    watchdog): not a sign that the template refuses this input, so not a failure a probe may
    read as "this shape does not render" and move past, silently with one conversation less.
    A limit error, which stops the probe and names the cause."""
    return _limit(f"rendering failed outside the template's code: {type(error).__name__}: "
                  f"{error}", name)
