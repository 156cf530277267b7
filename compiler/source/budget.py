"""How long template work may take: a budget of CPU time, and the wall-clock backstop above it.

Budgets count CPU time (the rendering thread's in a render, the child process's for a
command), so that a busy machine (a shared CI runner) does not refuse work the budget allows.
The wall clock still bounds work that waits instead of working: the backstop. Shared by the
renderer's watchdog (render.py) and the command's child process (isolation.py).
"""

from __future__ import annotations


def backstop_seconds(seconds: float) -> float:
    """The wall-clock backstop of a CPU budget of `seconds` (a command's, a probe's, a
    render's): well above it, so that a busy machine does not stop work the budget allows, and
    still bounded for work that waits instead of working."""
    return 3 * seconds + 10
