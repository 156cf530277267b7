"""A command's template work in a child process with hard limits: `run_isolated(job, limits)`.

The renderer's watchdog (render.py) interrupts a render between two bytecodes of the template's
compiled code and polls resident memory. One C call runs to its end whatever it is told:
squaring a huge integer, summing lists (`|sum(start=[])`, quadratic), a `replace`, `join` or
`tojson` that writes gigabytes at once, Jinja's compile of a template. Only the operating
system stops those, so the work a command does with a template (load and compile it, every
render of a probe and of a proof) runs in one forked child process:

- an address-space limit (RLIMIT_AS): what the child had when it was forked plus the memory
  limit; an allocation past it fails (`MemoryError`), so peak memory is the limit, not a poll;
- the budget, in CPU time: the machine's load (a CI runner's neighbours) does not change what
  a template may do. It is the deadline of every render in the child (`time_budget`, so a
  template stopped between bytecodes names its line); the parent reads the child's CPU time
  and kills it a short grace past the budget (one C call that runs on, unstopped by the
  render's watchdog); and a CPU-time limit (RLIMIT_CPU) a little past that stops a child
  whose parent died, or where the parent cannot read the child's CPU time;
- a wall-clock backstop well above the budget (`backstop_seconds`: three times it and ten
  seconds), for work that waits rather than works: past it the parent kills the child.
  The error says which ran out.

One child per command, not per render: a fork and the pickled result cost milliseconds, the
dozens of renders of a probe share the child. The job's value comes back pickled; a
`TplparseError` it raises is raised again in the parent; any other exception too (a tplparse
bug), with the child's traceback as its cause. Where there is no fork (Windows), the job runs
in this process under the budget and the watchdog alone.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..errors import TemplateError, TplparseError
from .budget import backstop_seconds

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows
    resource = None  # type: ignore[assignment]

T = TypeVar("T")


@dataclass(frozen=True)
class WorkLimits:
    """The limits of a command's whole template work (`tplparse --time-limit / --memory-limit`)."""

    seconds: float = 15.0  # CPU time, for all of it (and a wall-clock backstop: backstop_seconds)
    memory_bytes: int = 1 << 30  # address space the work may add to what the process had

    @property
    def backstop(self) -> float:
        """The wall clock all of it may take."""
        return backstop_seconds(self.seconds)


DEFAULT_WORK_LIMITS = WorkLimits()

# How long past the budget (of CPU time, or of the wall-clock backstop) the parent waits for
# the child to unwind and report its own limit error (which names the template's line) before
# it kills it.
GRACE_SECONDS = 0.5

# How often the parent reads the child's CPU time.
_POLL_SECONDS = 0.05


def _time_budget(seconds: float):
    """render.time_budget (imported here when a job runs: importing the isolation costs no
    jinja2)."""
    from .render import time_budget

    return time_budget(seconds)


class ChildTraceback(Exception):
    """The traceback of an exception raised in the child (the cause of the one raised again
    here)."""


def run_isolated(job: Callable[[], T], limits: WorkLimits = DEFAULT_WORK_LIMITS,
                 name: str = "template") -> T:
    """`job()`, run in a forked child under `limits`; its value, or its error raised here.

    Running out of time or memory is a limit `TemplateError` naming `name` and the limit
    ("the render budget of 15 s is used up", "the memory limit of 1024 MB")."""
    if not hasattr(os, "fork"):  # pragma: no cover - Windows
        with _time_budget(limits.seconds):
            return job()
    for stream in (sys.stdout, sys.stderr):
        # (what the parent buffered is written once, by the parent)
        stream.flush()
    read_end, write_end = os.pipe()
    pid = _fork()
    if pid == 0:
        os.close(read_end)
        _run_child(job, limits, write_end)  # never returns
    os.close(write_end)
    try:
        payload, ended = _read_until(read_end, _Clocks(pid, limits))
    except BaseException:  # (an interrupt: the child goes with the parent)
        _kill(pid)
        raise
    finally:
        os.close(read_end)
    if ended is not None:
        _kill(pid)
        raise ended.error(limits, name)
    status = _wait(pid)
    return _outcome(payload, status, limits, name)


def _fork() -> int:
    """os.fork(), the garbage collector's objects frozen across it (unless the caller froze some
    itself): a collection in the child then leaves the parent's objects alone, and their pages
    shared, where it would touch, and so copy, every page of the parent's heap (100-150 ms of a
    compile's 2 s; 25 ms frozen)."""
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    pid = os.fork()
    if pid != 0 and freeze:
        gc.unfreeze()
    return pid


# --- the child ------------------------------------------------------------------------------


def _run_child(job, limits: WorkLimits, write_end: int) -> None:
    """Run `job` under the limits and write its pickled outcome; then exit, whatever happens
    (the parent's code after the fork, a test runner's, must never run here)."""
    code = 0
    try:
        _die_with_parent()
        _set_limits(limits)
        try:
            with _time_budget(limits.seconds):
                outcome = ("value", job())
        except MemoryError:
            outcome = ("memory", None)
        except TplparseError as e:
            outcome = ("error", _error_state(e))
        except Exception as e:  # noqa: BLE001 - a tplparse bug: raised again in the parent
            outcome = ("exception", (e, traceback.format_exc()))
        _write_all(write_end, _pickled(outcome))
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - nothing may escape into the parent's code
        code = 1
    finally:
        os._exit(code)


def _die_with_parent() -> None:
    """On Linux, the child is killed when its parent dies (a parent killed with SIGKILL cannot
    kill it itself); elsewhere RLIMIT_CPU stops it."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _address_space() -> int | None:
    """The process's current virtual size in bytes (Linux), or None."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _set_limits(limits: WorkLimits) -> None:
    if resource is None:  # pragma: no cover - Windows
        return
    cpu = int(limits.seconds + GRACE_SECONDS) + 2
    _lower_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    size = _address_space()
    if size is not None and hasattr(resource, "RLIMIT_AS"):
        if _lower_limit(resource.RLIMIT_AS, size + limits.memory_bytes, size + limits.memory_bytes):
            from .render import note_memory_limit

            note_memory_limit(limits.memory_bytes)


def _lower_limit(which: int, soft: int, hard: int) -> bool:
    """Set a resource limit, never above the one the process already has; whether it holds."""
    old_soft, old_hard = resource.getrlimit(which)
    if old_hard != resource.RLIM_INFINITY:
        hard = min(hard, old_hard)
    soft = min(soft, hard)
    if old_soft != resource.RLIM_INFINITY and old_soft <= soft:
        return False
    try:
        resource.setrlimit(which, (soft, hard))
    except (ValueError, OSError):
        return False
    return True


def _error_state(error: TplparseError) -> tuple:
    """A TplparseError as (class, args, attributes): rebuilt as it was, whatever its __init__
    takes."""
    return type(error), error.args, dict(error.__dict__)


def _pickled(outcome: tuple) -> bytes:
    try:
        data = pickle.dumps(outcome)
        # (it must come back too: an exception whose __init__ takes other arguments than
        # its args pickles, and fails to unpickle in the parent)
        pickle.loads(data)
        return data
    except MemoryError:
        return pickle.dumps(("memory", None))
    except Exception as e:  # noqa: BLE001
        # (a value or an exception that does not pickle: a tplparse bug)
        detail = outcome[1][1] if outcome[0] == "exception" else ""
        error = RuntimeError(f"the child's {outcome[0]} does not pickle: {e}")
        return pickle.dumps(("exception", (error, detail)))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# --- the parent -----------------------------------------------------------------------------


class _RanOut:
    """Which of the limits the child ran past, for its error."""

    def __init__(self, cpu: bool):
        self.cpu = cpu

    def error(self, limits: WorkLimits, name: str) -> TemplateError:
        return _budget_error(limits, name) if self.cpu else _backstop_error(limits, name)


class _Clocks:
    """The child's two limits, read by the parent: its CPU time (Linux: /proc), and the wall
    clock since it was forked."""

    def __init__(self, pid: int, limits: WorkLimits):
        self.stat = f"/proc/{pid}/stat"
        self.cpu_limit = limits.seconds + GRACE_SECONDS
        self.wall_deadline = time.monotonic() + limits.backstop + GRACE_SECONDS

    def ran_out(self) -> _RanOut | None:
        if _cpu_seconds(self.stat) > self.cpu_limit:
            return _RanOut(cpu=True)
        if time.monotonic() > self.wall_deadline:
            return _RanOut(cpu=False)
        return None


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(stat_path: str) -> float:
    """The CPU time (user and system) a child has spent, from /proc; 0 where that cannot be read
    (not Linux: RLIMIT_CPU stops the child instead)."""
    try:
        with open(stat_path, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def _read_until(fd: int, clocks: _Clocks) -> tuple[bytes, _RanOut | None]:
    """What the child writes until it closes its end (None), or what came by the time it ran
    past a limit (which)."""
    chunks: list[bytes] = []
    while True:
        ran_out = clocks.ran_out()
        if ran_out is not None:
            return b"".join(chunks), ran_out
        ready, _, _ = select.select([fd], [], [], _POLL_SECONDS)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks), None
        chunks.append(chunk)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _wait(pid)


def _wait(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0


def _budget_error(limits: WorkLimits, name: str) -> TemplateError:
    return _limit_error(f"the render budget of {limits.seconds:g} s of CPU time is used up (the "
                        "template's work was stopped)", name)


def _backstop_error(limits: WorkLimits, name: str) -> TemplateError:
    return _limit_error(f"the wall-clock backstop of {limits.backstop:g} s is used up (the "
                        f"render budget is {limits.seconds:g} s of CPU time: the work waited, "
                        "or the machine is too busy; the template's work was stopped)", name)


def _memory_error(limits: WorkLimits, name: str) -> TemplateError:
    return _limit_error("the template's work needs more than the memory limit of "
                        f"{limits.memory_bytes >> 20} MB", name)


def _limit_error(message: str, name: str) -> TemplateError:
    error = TemplateError(message, template=name)
    error.limit = True
    return error


def _outcome(payload: bytes, status: int, limits: WorkLimits, name: str):
    """The job's value, or its error raised, from what the child wrote and how it ended."""
    try:
        kind, value = pickle.loads(payload)
    except Exception:  # noqa: BLE001 - nothing, or a message cut off: the child did not finish it
        raise _abnormal_end(status, limits, name) from None
    if kind == "value":
        return value
    if kind == "memory":
        raise _memory_error(limits, name)
    if kind == "error":
        cls, args, attributes = value
        error = cls.__new__(cls)
        error.args = args
        error.__dict__.update(attributes)
        raise error
    exception, child_traceback = value
    raise exception from ChildTraceback(child_traceback)


def _abnormal_end(status: int, limits: WorkLimits, name: str) -> TplparseError:
    """The error for a child that ended without its result: stopped at its CPU limit (past the
    budget), interrupted with the parent, killed by the system or crashed."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number == signal.SIGXCPU:
            return _budget_error(limits, name)
        if number == signal.SIGINT:
            raise KeyboardInterrupt
        return _limit_error("the template's work ended abnormally (killed by "
                            f"{signal.Signals(number).name})", name)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    if code == 130:
        raise KeyboardInterrupt
    return _limit_error(f"the template's work ended abnormally (exit status {code})", name)
