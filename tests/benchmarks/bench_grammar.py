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

What a grammar costs depends on how often it refuses the model's own choice: llama.cpp's
sampler (common/sampling.h) first samples without the grammar and checks only that token; when
the grammar refuses it, the grammar is applied to the whole vocabulary and the token resampled.
So each grammar is also decoded once, untimed, with the model's top token at each step
(`n_probs`, from the raw logits): "refused" is the share of steps where the grammar took another
token, and the summary fits the speed share against it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

import httpx  # noqa: E402

from conftest import SMOLLM2, proved_corpus_stems  # noqa: E402
from servers import llama_server_binary, start_llama_server  # noqa: E402
from test_closed_loop import family_prompt, request_body  # noqa: E402


class Timed(NamedTuple):
    """One timed grammar."""

    share: float  # of the unconstrained speed (median over the rounds)
    stem: str
    choice: str  # "required" or "auto"
    refused: float  # share of its steps where the grammar refused the model's own top token


MIN_TOKENS = 8  # a constrained answer shorter than this (the grammar ended it) is not timed


def speed(url: str, body: dict) -> tuple[float, int]:
    """(generated tokens per second, tokens generated) of one request."""
    answer = httpx.post(url + "/completion", json={**body, "temperature": 0, "stream": False}, timeout=600).json()
    if "error" in answer:
        raise RuntimeError(answer["error"])
    timings = answer["timings"]
    return timings["predicted_per_second"], timings["predicted_n"]


def refused(url: str, body: dict) -> float:
    """The share of a greedy constrained answer's steps where the grammar refused the model's
    own top token (the chosen token is not the raw logits' first)."""
    answer = httpx.post(url + "/completion", json={**body, "temperature": 0, "stream": False, "n_probs": 1},
                        timeout=600).json()
    steps = answer.get("completion_probabilities") or []
    other = sum(1 for step in steps if step["top_logprobs"] and step["top_logprobs"][0]["id"] != step["id"])
    return other / len(steps) if steps else 0.0


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
        print(f"{'family':<46} {'required':>21} {'auto':>21}  (tokens/s under the grammar, median share of "
              f"the unconstrained speed over {args.rounds} rounds, (tokens), steps where the grammar refused "
              f"the model's own token)")
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
                    row.append(f"{'(' + str(count) + ' tokens)':>21}")
                    continue
                refusals = refused(server.url, body)
                shares.append(Timed(part, stem, choice, refusals))
                row.append(f"{rate:5.1f} {part:4.0%} ({count:2}) {refusals:4.0%}")
            print(f"{stem[:46]:<46} {row[0]:>21} {row[1]:>21}", flush=True)
    finally:
        server.stop()
    if not shares:
        raise SystemExit("no family with a tool-call format")
    print()
    summarize(sorted(shares))


def summarize(timed: list[Timed]) -> None:
    """The median share, the grammars below 90%, the slowest, and the fit of the share against
    the refused steps."""
    below = [t for t in timed if t.share < 0.9]
    print(f"{len(timed)} grammars: median {statistics.median(t.share for t in timed):.0%} of the unconstrained "
          f"speed, {len(below)} below 90%; slowest: "
          + ", ".join(f"{t.stem} {t.choice} {t.share:.0%}" for t in timed[:8]))
    refusals, parts = [t.refused for t in timed], [t.share for t in timed]
    if len(set(refusals)) < 2 or len(set(parts)) < 2:
        return  # nothing to fit a line to
    slope, intercept = statistics.linear_regression(refusals, parts)
    never = [t.share for t in timed if t.refused == 0]
    print(f"share against refused steps: r = {statistics.correlation(refusals, parts):.2f}; "
          f"share ≈ {intercept:.1%} {slope:+.1%} × refused"
          + (f"; {len(never)} grammars never refused the model's token: median {statistics.median(never):.0%}"
             if never else ""))


if __name__ == "__main__":
    main()
