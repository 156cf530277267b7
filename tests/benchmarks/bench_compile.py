"""How long `tplparse compile` takes per template, stage by stage: probe, proof, emit.

    python tests/benchmarks/bench_compile.py [TEMPLATES_DIR] [--checker ir] [--checker llama.cpp] [--checker lark]

For each template of the folder (default: the shared corpus), in one process: the probe
(the spec), the proof under each checker asked for (every standard turn read back, and
accepted by the grammar), and the files (grammars, parser module). The checkers: `ir`, the
IR matcher, as a plain install (no llama-cpp-python) proves; `llama.cpp`, as CI proves;
`lark`, lark's Earley reading of the GBNF, as a plain install proved before the IR matcher.
Default: ir and llama.cpp (where installed). Prints each template's times, then per checker
the median compile (probe + proof + emit) and the slowest, and the medians' ratios, all
from the same run (issue #32: compile ≤ 1 s median on a plain install).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import tplparse
from tplparse.check import ir_match
from tplparse.check import llama as llama_check
from tplparse.check import proof as proof_module
from tplparse.check.gbnf_lark import GbnfAcceptor
from tplparse.emit.gbnf import emit_gbnf
from tplparse.pipeline import artifacts
from tplparse.probe import PLACEHOLDER_TOKENS, probe

DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "templates"


def acceptor(checker: str):
    """(name, accepts(grammar, text)) for the proof, as proof._grammar_acceptor returns it."""
    if checker == "ir":
        return "the IR matcher", ir_match.accepts
    readers: dict = {}

    def accepts(grammar, text):
        if id(grammar) not in readers:
            gbnf = emit_gbnf(grammar)
            readers[id(grammar)] = (grammar, GbnfAcceptor(gbnf).accepts if checker == "lark" else
                                    lambda t, gbnf=gbnf: llama_check.checker().accepts(gbnf, t))
        return readers[id(grammar)][1](text)

    return checker, accepts


def timed(job):
    started = time.perf_counter()
    value = job()
    return value, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--checker", action="append", choices=["ir", "llama.cpp", "lark"])
    args = parser.parse_args()
    checkers = args.checker or (["ir", "llama.cpp"] if llama_check.available() else ["ir"])
    if "llama.cpp" in checkers and not llama_check.available():
        raise SystemExit("--checker llama.cpp: llama-cpp-python is not installed")
    paths = sorted(args.folder.glob("*.jinja"))
    if not paths:
        raise SystemExit(f"no templates in {args.folder}")
    totals: dict[str, list[tuple[float, str]]] = {c: [] for c in checkers}
    print(f"{'template':<40} {'probe':>6} {'emit':>6} " + " ".join(f"{'proof ' + c:>16}" for c in checkers)
          + "  (seconds)")
    for path in paths:
        template = tplparse.load(path)
        template = template.with_tokens(**{k: v for k, v in PLACEHOLDER_TOKENS.items() if k not in template.named_tokens})
        spec, probe_s = timed(lambda: probe(template))
        _, emit_s = timed(lambda: artifacts(template, spec))
        row = []
        for checker in checkers:
            proof_module._grammar_acceptor = lambda checker=checker: acceptor(checker)
            proof, proof_s = timed(lambda: proof_module.prove(template, spec))
            totals[checker].append((probe_s + proof_s + emit_s, path.stem))
            row.append(f"{proof_s:16.2f}" + ("" if proof.ok else " (not proved)"))
        print(f"{path.stem[:40]:<40} {probe_s:6.2f} {emit_s:6.2f} " + " ".join(row))
    print()
    medians = {c: statistics.median(t for t, _ in found) for c, found in totals.items()}
    for checker, found in totals.items():
        slowest = sorted(found, reverse=True)[:3]
        print(f"compile, proof by {checker}: median {medians[checker]:.2f} s over {len(found)} templates; slowest "
              + ", ".join(f"{stem} {t:.2f} s" for t, stem in slowest))
    first = checkers[0]
    for checker in checkers[1:]:
        print(f"median compile by {checker} / by {first}: {medians[checker] / medians[first]:.2f}x")


if __name__ == "__main__":
    main()
