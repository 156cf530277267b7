"""How long the probe takes per template, against the cost of one render of it.

    python tests/benchmarks/bench_probe.py [TEMPLATES_DIR]

Prints, per template of the shared corpus: the probe's wall time, the renders it made, and
the probe time as a multiple of one render (the probe is renders plus string diffs, so the
ratio is about the number of renders).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import tplparse
from tplparse.source import render as render_module
from tplparse.probe import probe

DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "templates"


def main(folder: Path) -> None:
    paths = sorted(folder.glob("*.jinja"))
    if not paths:
        sys.exit(f"no templates in {folder}")
    counted = {"renders": 0}
    original = render_module.render_template

    def counting(*args, **kwargs):
        counted["renders"] += 1
        return original(*args, **kwargs)

    render_module.render_template = counting
    import tplparse.source.template as template_module

    template_module.render_template = counting
    print(f"{'template':<46} {'probe ms':>9} {'renders':>8} {'one render ms':>14} {'probe / render':>15}")
    worst = 0.0
    for path in paths:
        template = tplparse.load(path).with_tokens(bos_token="<s>", eos_token="</s>")
        counted["renders"] = 0
        started = time.perf_counter()
        probe(template)
        elapsed = time.perf_counter() - started
        renders = counted["renders"]
        one = min(_time_render(template) for _ in range(3))
        worst = max(worst, elapsed)
        print(f"{path.stem[:45]:<46} {elapsed * 1000:9.1f} {renders:8d} {one * 1000:14.3f} {elapsed / one:15.0f}")
    print(f"slowest probe: {worst * 1000:.0f} ms")


def _time_render(template) -> float:
    started = time.perf_counter()
    try:
        template.render([{"role": "user", "content": "hi"}])
    except tplparse.TemplateError:
        pass
    return time.perf_counter() - started


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
