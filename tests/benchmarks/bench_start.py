"""How long the CLI takes to start, against Python's own start, in one run.

    python tests/benchmarks/bench_start.py [ROUNDS]

Prints the median wall time of `tplparse --version`, `tplparse --help`, `tplparse parse
generated/<family>.py` (an output on stdin) and, for the floor, `python -c pass`, each run
ROUNDS times (default 15) as a new process. The CLI imports the probe, the grammar builder,
jinja2 and the GGUF reader only where a command uses them (issue #32: ≤ 150 ms). Python
writes and reads its bytecode cache here as on a user's machine (PYTHONDONTWRITEBYTECODE is
unset for the runs, one run first to write it): compiling the 200 KB runtime costs ~50 ms.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TPLPARSE = Path(sys.executable).with_name("tplparse")
MODULE = ROOT / "generated" / "qwen_qwen3_0_6b.py"


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def median_seconds(argv: list[str], stdin: bytes, rounds: int) -> float:
    subprocess.run(argv, input=stdin, capture_output=True, check=True, env=ENV)  # (the bytecode cache written)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(argv, input=stdin, capture_output=True, check=True, env=ENV)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(rounds: int) -> None:
    cases = [
        ("python -c pass", [sys.executable, "-c", "pass"], b""),
        ("tplparse --version", [str(TPLPARSE), "--version"], b""),
        ("tplparse --help", [str(TPLPARSE), "--help"], b""),
        (f"tplparse parse generated/{MODULE.name}", [str(TPLPARSE), "parse", str(MODULE)], b"<think>a</think>b"),
    ]
    floor = None
    for name, argv, stdin in cases:
        seconds = median_seconds(argv, stdin, rounds)
        floor = floor or seconds
        print(f"{name:<45} {seconds * 1000:6.0f} ms  ({seconds / floor:.1f}x python's start)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
