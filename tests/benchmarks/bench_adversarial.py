"""Cost on hostile output shapes, as ratios (a benchmark, not a test).

    python tests/benchmarks/bench_adversarial.py [TEMPLATES_DIR] [N]

Models loop: on whitespace, on a marker's first character, on half a marker, on braces, on
the same broken call. For each shape below, written from the family's own spec (its markers,
its call layout), the parse of N and of 4N characters is timed one-shot, fed in 4-character
chunks and fed one character at a time; printed is the 4N/N cost ratio. Linear is 4; a
rescan of what was read (quadratic) shows as 16. Each output is also checked to read as
expected (the text kept, the calls read or refused), so a fast wrong answer is not timed.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import tplparse
from tplparse import runtime
from tplparse.bridge import compile_in_memory
from tplparse.spec import ArgumentStyle

DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "templates"
FAMILIES = {"JSON object": "Qwen-Qwen3-0.6B", "key/value tags": "Qwen-Qwen3-Coder", "pythonic": "LiquidAI-LFM2.5-8B-A1B"}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "a": {"type": "integer"}, "s": {"type": "string"}}}}}]


def call_text(spec, arguments: dict) -> str:
    """One call of `f`, as the family's spec writes it (no content around it)."""
    return spec.tool_calls.format([{"name": "f", "arguments": arguments}])


def shapes(spec) -> dict:
    """name -> (N -> output text); what each must read back as is checked by `check`."""
    first = next(p.strip() for p in (spec.tool_calls.section_start, *spec.tool_calls.call)
                 if isinstance(p, str) and p.strip())
    marker = re.match(r"<[^<>]*>|\S+", first).group()  # the opener's first tag or word
    one_call = call_text(spec, {"a": 1})
    # A call whose arguments do not read (`1,,` is no JSON, no Python and no integer), as a model
    # stuck in a loop repeats it.
    broken = call_text(spec, {"a": 12345}).replace("12345", "1,,", 1)
    found = {
        "spaces": lambda n: "x" + " " * n,
        "newlines before a call": lambda n: "Hi" + "\n" * n + one_call,
        "many invalid calls": lambda n: "\n".join([broken] * max(1, n // len(broken))),
        "marker first char": lambda n: marker[0] * n,
        "marker prefix": lambda n: marker[:-1] * max(1, n // max(1, len(marker) - 1)),
        "one huge argument": lambda n: call_text(spec, {"a": 1, "s": "y" * n}),
    }
    between = spaces_after_a_value(spec)
    if between is not None:  # (a layout that writes whitespace after a value's closing text)
        found["spaces after a value"] = lambda n: between[0] + " " * n + between[1]
    if spec.tool_calls.arguments.style == ArgumentStyle.OBJECT:
        # (a key of JSON arguments as long as the turn, with what wakes an argument stream in it)
        found["one huge key"] = lambda n: call_text(spec, {"k:" * (n // 2): 1})
    if spec.reasoning and spec.reasoning.start:
        start, end = spec.reasoning.start, spec.reasoning.end
        found["newlines in reasoning"] = lambda n: start + "x" + "\n" * n
        found["braces in reasoning"] = lambda n: start + "{" * n + end + "ok"
    return found


def spaces_after_a_value(spec):
    """A call of two arguments cut where the layout writes whitespace after the first value's
    closing text (the text both calls, with and without a second argument, write after the
    value, to its last whitespace): (before, after); None where it writes none there."""
    two, one = call_text(spec, {"s": "v1", "a": 1}), call_text(spec, {"s": "v1"})
    at = two.find("v1") + 2
    if at < 2 or one[:at] != two[:at]:
        return None
    common = os.path.commonprefix([two[at:], one[at:]])
    ends = [i + 1 for i, c in enumerate(common) if c.isspace()]
    return (two[:at + ends[-1]], two[at + ends[-1]:]) if ends else None


def check(name: str, message: dict) -> None:
    """What each shape must read as: text kept, a call read, or calls refused with an error."""
    calls, errors = message["tool_calls"], [e["kind"] for e in message["errors"]]
    if name in ("newlines before a call", "one huge argument", "one huge key", "spaces after a value"):
        ok = len(calls) == 1 and not errors
    elif name == "many invalid calls":
        ok = not calls and errors and set(errors) <= {"invalid_arguments", "invalid_tool_call"}
    else:
        ok = not calls
    if not ok:
        raise SystemExit(f"{name}: read as {len(calls)} calls, errors {errors}: timing it would say nothing")


def timed(*fns, rounds=5) -> list[float]:
    """Best time of each of `fns` over `rounds` rounds that run each in turn: N and 4N side by
    side, so a slow spell of this shared machine weighs on both."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def main(folder: Path, n: int) -> None:
    worst = 0.0
    print(f"{'encoding':<15} {'shape':<24} {'4N/N one-shot':>14} {'4-char':>7} {'1-char':>7}   (N = {n:,} characters; linear: 4)")
    for label, stem in FAMILIES.items():
        path = folder / f"{stem}.jinja"
        if not path.is_file():
            print(f"{label:<15} skipped: {path} is not here")
            continue
        spec, protocol = compile_in_memory(tplparse.load(path))

        def fed(text, size):
            parser = runtime.StreamParser(protocol, tools=TOOLS, start="content")
            for i in range(0, len(text), size):
                parser.feed(text[i:i + size])
            parser.end()
            return parser.message

        for name, make in shapes(spec).items():
            ratios = []
            for how in ("one-shot", 4, 1):
                read = (lambda t: runtime.parse(protocol, t, tools=TOOLS, start="content")) if how == "one-shot" else (
                    lambda t, size=how: fed(t, size))
                small, large = make(n), make(4 * n)
                check(name, read(large))
                t_large, t_small = timed(lambda: read(large), lambda: read(small))
                ratios.append(t_large / t_small)
            worst = max(worst, *ratios)
            print(f"{label:<15} {name:<24} {ratios[0]:>14.1f} {ratios[1]:>7.1f} {ratios[2]:>7.1f}", flush=True)
    print(f"worst ratio: {worst:.1f} (linear: 4; quadratic: 16)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT, int(sys.argv[2]) if len(sys.argv) > 2 else 25_000)
