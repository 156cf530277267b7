"""Streaming parser cost, as ratios (a benchmark, not a test).

    python tests/benchmarks/bench_stream.py [TEMPLATES_DIR]

For one family per argument encoding (a JSON object; key/value tags; pythonic calls), a long
realistic output (reasoning + content + several calls with long arguments) of about 4k and
32k characters, written by the family's own spec. Timed: one-shot `parse`; fed in 4-character
chunks; fed one character at a time; and a baseline that re-parses the whole buffer at every
4-character chunk (what a non-incremental server does). Floors: for one-shot, one
`re.finditer` over the markers plus `json.loads` of each argument object; for streaming, that
plus a loop calling a no-op method once per chunk. Printed: ratios to the floors, and the
32k / 4k cost ratio (linear is 8).
"""

from __future__ import annotations

import json
import re
import sys
import time
import types
from pathlib import Path

import tplparse
from tplparse.parser_gen import generate_module
from tplparse.probe import probe

DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "templates"
FAMILIES = {"JSON object": "Qwen-Qwen3-0.6B", "key/value tags": "Qwen-Qwen3-Coder", "pythonic": "LiquidAI-LFM2.5-8B-A1B"}


def module_for(spec):
    module = types.ModuleType("bench")
    exec(compile(generate_module(spec), "<generated>", "exec"), module.__dict__)
    return module


def output(spec, size: int) -> tuple[str, list[dict], list[str]]:
    """A turn of about `size` characters: reasoning, content, calls with long string arguments."""
    calls, i = [], 0
    text = ""
    while len(text) < size:
        i += 1
        calls.append({"id": f"c{i:08d}x", "type": "function", "function": {"name": f"tool_{i % 3}", "arguments": {
            "query": ("lorem ipsum dolor sit amet " * 12)[: 200], "note": f"call {i} with <markers> and \"quotes\""}}})
        message = {"role": "assistant", "content": "Here is what I will do. " * 20, "tool_calls": calls}
        text = spec.format(message)
        if spec.reasoning and spec.reasoning.start:
            text = f"{spec.reasoning.start}\n{'Thinking it through. ' * 40}\n{spec.reasoning.end}\n\n" + text
    tools = [{"type": "function", "function": {"name": f"tool_{k}", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "note": {"type": "string"}}}}} for k in range(3)]
    arguments = [json.dumps(c["function"]["arguments"]) for c in calls]  # what the floor decodes
    return text, tools, arguments


def timed(fn, repeat=3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


class _Sink:
    def feed(self, chunk):
        return None


def main(folder: Path) -> None:
    print(f"{'encoding':<16} {'chars':>6} {'one-shot/floor':>15} {'4-char/floor':>13} {'1-char/floor':>13} "
          f"{'reparse/4-char':>15}")
    for label, stem in FAMILIES.items():
        path = folder / f"{stem}.jinja"
        if not path.is_file():
            print(f"{label:<16} skipped: {path} is not here")
            continue
        spec = probe(tplparse.load(path))
        module = module_for(spec)
        markers = [m for m in [spec.reasoning.start if spec.reasoning else "", spec.reasoning.end if spec.reasoning else "",
                               *spec.end_of_turn] if m]
        markers += [p.strip() for p in spec.tool_calls.call if isinstance(p, str) and p.strip()]
        pattern = re.compile("|".join(re.escape(m) for m in markers))
        costs = {}
        for size in (4_000, 32_000):
            text, tools, args = output(spec, size)
            start = "content"

            def floor_one():
                for _ in pattern.finditer(text):
                    pass
                for a in args:
                    json.loads(a)

            def floor_stream(n):
                sink = _Sink()
                floor_one()
                for i in range(0, len(text), n):
                    sink.feed(text[i:i + n])

            def one_shot():
                module.parse(text, tools=tools, start=start)

            def fed(n):
                parser = module.StreamParser(tools=tools, start=start)
                for i in range(0, len(text), n):
                    parser.feed(text[i:i + n])
                parser.end()

            def reparse():
                for i in range(4, len(text) + 4, 4):
                    module.parse(text[:i], tools=tools, start=start)

            t_one, t_4, t_1 = timed(one_shot), timed(lambda: fed(4)), timed(lambda: fed(1))
            f_one, f_4, f_1 = timed(floor_one), timed(lambda: floor_stream(4)), timed(lambda: floor_stream(1))
            t_re = timed(reparse, repeat=1) if size <= 4_000 else float("nan")
            costs[size] = t_4
            print(f"{label:<16} {len(text):>6} {t_one / f_one:>15.1f} {t_4 / f_4:>13.1f} {t_1 / f_1:>13.1f} "
                  f"{t_re / t_4:>15.1f}")
        print(f"{label:<16} 32k/4k cost ratio (4-char chunks): {costs[32_000] / costs[4_000]:.1f} (linear: about 8)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
