"""Time transformers' parser, given tplparse's response_template export, on runs of whitespace:
in content, in the prompt before the output, and (key/value calls) in a tag's value. Prints,
for each exporting source, the time for a run of 10k characters and of 40k, and their ratio:
linear is about 4, quadratic 16. (tests/test_response_template.py checks those inputs are
read correctly; timing is left to this script, so no test depends on the machine's speed.)

    .venv/bin/python tests/benchmarks/bench_response_template.py [SOURCE ...]

One-shot (`parse_response`) and streamed in chunks of 1000: transformers holds a run of
whitespace back until what follows it arrives, and reads it again with each chunk, so with
small chunks streaming is quadratic in the run whatever the template.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import test_response_template as t  # noqa: E402  (the test module's helpers: sources, family, inputs)


def timed(tok, text: str, prefix: str, chunk) -> float:
    start = time.perf_counter()
    t.read_with_transformers(tok, text, prefix, chunk)
    return time.perf_counter() - start


def inputs(path, n: int) -> dict[str, tuple[str, str]]:
    """name -> (output, prefix) with a run of n whitespace characters."""
    template, spec, exported = t.family(path)
    end = t.end_of_turn(spec)
    found = {"content": (t.content(spec, "a" + " \n" * (n // 2) + "b") + end, "")}
    for name, prompt in t.generation_prompts(template, spec).items():
        if t.FRESH.user in prompt:
            text = ("x" + spec.reasoning.end if spec.modes[name].start == t.Start.REASONING else "") + \
                t.content(spec, "The answer.") + end
            found["prompt"] = (text, prompt.replace(t.FRESH.user, t.FRESH.user + " " * n, 1))
            break
    if exported["fields"].get("tool_calls", {}).get("content") == "xml-inline":
        found["tag value"] = (t.calls_section(spec, {"target": "U" + " \n" * (n // 2) + "SD"}) + end, "")
    return found


def main(argv: list[str]) -> None:
    paths = [Path(a).resolve() for a in argv] or t.exporting()
    print(f"{'source':<48} {'input':<10} {'chunk':>6} {'10k s':>8} {'40k s':>8} {'ratio':>6}")
    for path in paths:
        tok = t.tokenizer(t.family(path)[2])
        small, large = inputs(path, 10_000), inputs(path, 40_000)
        for name in small:
            for chunk in (None, 1000):
                a = timed(tok, *small[name], chunk)
                b = timed(tok, *large[name], chunk)
                print(f"{t.label(path):<48} {name:<10} {chunk or '-':>6} {a:8.3f} {b:8.3f} {b / max(a, 1e-4):6.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
