"""Decoding speed under each corpus family's grammar, against the same prompt unconstrained.

    python tests/benchmarks/bench_grammar.py [--tokens N] [--families STEM,...]

A real llama-server (one slot, one thread: the binary .ci/llama-server.sh builds, or
$TPLPARSE_LLAMA_SERVER) with SmolLM2-135M (tests/fetch_fixtures.py) decodes, for each
corpus family with a tool-call format, the family's own prompt (the closed loop's: two
tools, thinking off) three ways, one after the other: unconstrained, under the `required`
grammar and under the `auto` one (the fields `tplparse gbnf --llama-request` prints). Each
request is greedy (temperature 0, so every run decodes the same tokens) and its speed is
llama-server's own count: generated tokens per second of generation
(`timings.predicted_per_second`); the prompt is evaluated once per family (the cache keeps
it). The unconstrained answer runs to `--tokens` (no stop string, the end of generation
ignored); a constrained answer the grammar ends in fewer than MIN_TOKENS tokens is not timed. Prints each family's three speeds and the grammars' share of the unconstrained speed,
then the slowest families (issue #32: every family ≥ 90%).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

import httpx  # noqa: E402

from conftest import SMOLLM2, proved_corpus_stems  # noqa: E402
from servers import llama_server_binary, start_llama_server  # noqa: E402
from test_closed_loop import family_prompt, request_body  # noqa: E402


MIN_TOKENS = 8  # a constrained answer shorter than this (the grammar ended it) is not timed


def speed(url: str, body: dict) -> tuple[float, int]:
    """(generated tokens per second, tokens generated) of one request."""
    answer = httpx.post(url + "/completion", json={**body, "temperature": 0, "stream": False}, timeout=600).json()
    if "error" in answer:
        raise RuntimeError(answer["error"])
    timings = answer["timings"]
    return timings["predicted_per_second"], timings["predicted_n"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request (default 64)")
    parser.add_argument("--families", help="comma-separated corpus stems (default: every proved one)")
    args = parser.parse_args()
    binary = llama_server_binary()
    if binary is None or not SMOLLM2.is_file():
        raise SystemExit("needs llama-server (bash .ci/llama-server.sh .venv/bin/python) and SmolLM2 "
                         "(python tests/fetch_fixtures.py)")
    stems = args.families.split(",") if args.families else proved_corpus_stems()
    server = start_llama_server(binary, SMOLLM2, Path(tempfile.mkdtemp()) / "log", slots=1)
    shares = []
    try:
        print(f"{'family':<46} {'free':>7} {'required':>9} {'auto':>7}  (tokens/s; share of free)")
        for stem in stems:
            found = family_prompt(stem)
            if isinstance(found, str):
                continue
            template, prompt = found
            free_body = {**request_body(template, prompt, "required", 0), "n_predict": args.tokens,
                         "ignore_eos": True, "stop": []}  # (the unconstrained speed over all the tokens)
            for field in ("grammar", "grammar_lazy", "grammar_triggers", "preserved_tokens"):
                free_body.pop(field, None)
            free, _ = speed(server.url, free_body)
            row = []
            for choice in ("required", "auto"):
                constrained, count = speed(server.url, {**request_body(template, prompt, choice, 0), "n_predict": args.tokens})
                if count < MIN_TOKENS:
                    row.append(f"{'(' + str(count) + ' tokens)':>12}")
                    continue
                shares.append((constrained / free, stem, choice))
                row.append(f"{constrained:7.1f} {constrained / free:4.0%}")
            print(f"{stem[:46]:<46} {free:7.1f} {row[0]:>12} {row[1]:>12}", flush=True)
    finally:
        server.stop()
    if not shares:
        raise SystemExit("no family with a tool-call format")
    shares.sort()
    print(f"\n{len(shares)} grammars: median {statistics.median(s for s, _, _ in shares):.0%} of the unconstrained "
          f"speed; slowest: " + ", ".join(f"{stem} {choice} {share:.0%}" for share, stem, choice in shares[:5]))


if __name__ == "__main__":
    main()
