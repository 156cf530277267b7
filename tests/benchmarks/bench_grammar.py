"""Decoding speed under each corpus family's grammar, against the same prompt unconstrained.

    python tests/benchmarks/bench_grammar.py [--tokens N] [--rounds N] [--families STEM,...]

A real llama-server (one slot, one thread: the binary .ci/llama-server.sh builds, or
$TPLPARSE_LLAMA_SERVER) with SmolLM2-135M (tests/fetch_fixtures.py) decodes, for each
corpus family with a tool-call format, the family's own prompt (the closed loop's: two
tools, thinking off) under the `required` grammar and under the `auto` one (the fields
`tplparse gbnf --llama-request` prints), and, beside each, the same prompt unconstrained for
exactly as many tokens (stop strings and the end of generation ignored): the two decode the
same number of tokens after the same prompt, so they differ only by the grammar. Each request
is greedy (temperature 0: every round decodes the same tokens) and its speed is llama-server's
own count, generated tokens per second of generation (`timings.predicted_per_second`); the
prompt is evaluated once per family (the cache keeps it). A pair is timed `--rounds` times,
the two taking turns to go first, and the median of the rounds' ratios is the grammar's share
of the unconstrained speed (a single timing here spreads by about ±10%). A constrained answer
the grammar ends in fewer than MIN_TOKENS tokens is not timed. Prints each family's speeds and
shares, then the slowest grammars (issue #32: every family ≥ 90%).
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


def share(url: str, constrained_body: dict, free_body: dict, rounds: int) -> tuple[float, float, int]:
    """(median constrained tokens/s, median share of the unconstrained speed, tokens) of a
    grammar: each round times the constrained request and the unconstrained one for as many
    tokens, taking turns to go first. (0, 0, tokens) when the grammar ends the answer in fewer
    than MIN_TOKENS tokens."""
    first, count = speed(url, constrained_body)
    if count < MIN_TOKENS:
        return 0.0, 0.0, count
    free_body = {**free_body, "n_predict": count}
    speeds, shares = [], []
    for round_ in range(rounds):
        if round_ % 2 == 0:  # the grammar first (round 0: the timing above)
            constrained = first if round_ == 0 else speed(url, constrained_body)[0]
            free = speed(url, free_body)[0]
        else:
            free = speed(url, free_body)[0]
            constrained = speed(url, constrained_body)[0]
        speeds.append(constrained)
        shares.append(constrained / free)
    return statistics.median(speeds), statistics.median(shares), count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request at most (default 64)")
    parser.add_argument("--rounds", type=int, default=3, help="timings of each grammar and its unconstrained "
                                                              "twin (default 3)")
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
        print(f"{'family':<46} {'required':>16} {'auto':>16}  (tokens/s under the grammar, median share of "
              f"the unconstrained speed over {args.rounds} rounds)")
        for stem in stems:
            found = family_prompt(stem)
            if isinstance(found, str):
                continue
            template, prompt = found
            free_body = {**request_body(template, prompt, "required", 0), "ignore_eos": True, "stop": []}
            for field in ("grammar", "grammar_lazy", "grammar_triggers", "preserved_tokens"):
                free_body.pop(field, None)
            row = []
            for choice in ("required", "auto"):
                body = {**request_body(template, prompt, choice, 0), "n_predict": args.tokens}
                rate, part, count = share(server.url, body, free_body, args.rounds)
                if count < MIN_TOKENS:
                    row.append(f"{'(' + str(count) + ' tokens)':>16}")
                    continue
                shares.append((part, stem, choice))
                row.append(f"{rate:7.1f} {part:4.0%} ({count:2})")
            print(f"{stem[:46]:<46} {row[0]:>16} {row[1]:>16}", flush=True)
    finally:
        server.stop()
    if not shares:
        raise SystemExit("no family with a tool-call format")
    shares.sort()
    below = [s for s in shares if s[0] < 0.9]
    print(f"\n{len(shares)} grammars: median {statistics.median(s for s, _, _ in shares):.0%} of the unconstrained "
          f"speed, {len(below)} below 90%; slowest: "
          + ", ".join(f"{stem} {choice} {part:.0%}" for part, stem, choice in shares[:8]))


if __name__ == "__main__":
    main()
