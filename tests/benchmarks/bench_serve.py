"""What `tplparse serve` costs the llama-server behind it, side by side in one run.

    python tests/benchmarks/bench_serve.py [--requests N] [--tokens N]

A real llama-server (16 slots; the binary .ci/llama-server.sh builds, or
$TPLPARSE_LLAMA_SERVER) with SmolLM2-135M (tests/fetch_fixtures.py), and `tplparse serve`
in front of it with SmolLM2's own template. The same streamed requests go two ways, one
after the other, first one at a time, then 16 at a time:

- direct: `/completion` with the prompt, stop strings and sampling the bridge sends (its
  own plan for the request: `tplparse.serve.plan`);
- bridged: `/v1/chat/completions` on tplparse serve, `stream: true`, the usage included.

Greedy, `--tokens` at most (default 64), the same question each time (the server's prompt
cache keeps it in every slot, filled by both ways first, so both decode, not evaluate); the
ways take turns, `--rounds` rounds each (default ROUNDS). Prints, per way and concurrency:
tokens/s over the whole batch (generated tokens, as the engine counts them, over wall time;
the best round: a slow spell only lowers it), the time to the first token (the median of the
rounds' medians: at 16 streams it moves by tens of milliseconds from round to round, as
requests land in one decoding step of llama-server or across two), and the bridge's CPU time
per token (the serve process's user+system time from /proc over the tokens it passed on);
then the bridge's share of the direct tokens/s and what it adds to the time to the first
token: the median of the rounds' differences, each round's listed (issue #32: ≥ 95 % and
≤ 20 ms at 16 streams).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

import httpx  # noqa: E402

import tplparse  # noqa: E402
from conftest import SMOLLM2  # noqa: E402
from servers import llama_server_binary, start_llama_server, start_tplparse_serve  # noqa: E402
from tplparse.serve.plan import plan  # noqa: E402
from tplparse.serve.requests import parse_request  # noqa: E402

QUESTION = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
ROUNDS = 5


@dataclass
class Answer:
    first_token: float  # seconds from the request to the first text
    tokens: int  # generated, as the engine counts them


async def direct(client: httpx.AsyncClient, url: str, body: dict) -> Answer:
    started, first, tokens = time.perf_counter(), None, 0
    async with client.stream("POST", url + "/completion", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event.get("content") and first is None:
                first = time.perf_counter() - started
            if event.get("stop"):
                tokens = event["timings"]["predicted_n"]
    return Answer(first if first is not None else float("nan"), tokens)


async def bridged(client: httpx.AsyncClient, url: str, body: dict) -> Answer:
    started, first, tokens = time.perf_counter(), None, 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"tplparse serve answered {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices") or []:
                if choice.get("delta", {}).get("content") and first is None:
                    first = time.perf_counter() - started
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    return Answer(first if first is not None else float("nan"), tokens)


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Way:
    """One way's batch in one round."""
    rate: float  # generated tokens per second of wall time
    first_token: float  # the median time to the first text, seconds
    cpu_per_token: float  # the bridge's CPU seconds per generated token


def measure_round(ways, bridge_pid: int, concurrent: int, requests: int) -> dict[str, Way]:
    """One round: each way's batch, one after the other."""
    measured = {}
    for name, way, url, body in ways:
        cpu_before = cpu_seconds(bridge_pid)
        wall, answers = asyncio.run(batch(way, url, body, concurrent, requests))
        tokens = sum(a.tokens for a in answers)
        measured[name] = Way(tokens / wall, statistics.median(a.first_token for a in answers),
                             (cpu_seconds(bridge_pid) - cpu_before) / tokens)
    return measured


async def batch(way, url: str, body: dict, concurrent: int, requests: int) -> tuple[float, list[Answer]]:
    """(wall seconds, answers) for `requests` requests, `concurrent` at a time."""
    # (a new connection per request: llama-server closes a stream's connection when the stream ends)
    limits = httpx.Limits(max_connections=concurrent, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        gate = asyncio.Semaphore(concurrent)

        async def one():
            async with gate:
                return await way(client, url, body)

        started = time.perf_counter()
        answers = await asyncio.gather(*(one() for _ in range(requests)))
        return time.perf_counter() - started, answers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=32, help="requests per way and concurrency (default 32)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds per concurrency (default {ROUNDS})")
    args = parser.parse_args()
    binary = llama_server_binary()
    if binary is None or not SMOLLM2.is_file():
        raise SystemExit("needs llama-server (bash .ci/llama-server.sh .venv/bin/python) and SmolLM2 "
                         "(python tests/fetch_fixtures.py)")
    logs = Path(tempfile.mkdtemp())
    engine = start_llama_server(binary, SMOLLM2, logs / "llama-server", slots=16)
    bridge = start_tplparse_serve(SMOLLM2, engine.url, logs / "serve")
    try:
        chat = {"model": SMOLLM2.name, "messages": QUESTION, "max_tokens": args.tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        planned = plan(tplparse.load(SMOLLM2), parse_request(chat))
        completion = {"prompt": planned.prompt.text, "n_predict": args.tokens, "stream": True, "cache_prompt": True,
                      "stop": planned.stop, "temperature": 0}
        ways = (("direct", direct, engine.url, completion), ("bridged", bridged, bridge.url, chat))
        for _, way, url, body in ways:  # (the prompt into every slot's cache, both ways)
            asyncio.run(batch(way, url, body, 16, 16))
        print(f"{'way':<10} {'streams':>7} {'tokens/s':>9} {'first token':>12} {'bridge CPU/token':>17}  "
              f"(tokens/s: the best of {args.rounds} rounds; first token: the median of the rounds' medians; "
              "the ways taking turns)")
        rounds = {concurrent: [measure_round(ways, bridge.process.pid, concurrent, args.requests)
                               for _ in range(args.rounds)] for concurrent in (1, 16)}
        for concurrent, measured in rounds.items():
            for name in ("direct", "bridged"):
                rate = max(r[name].rate for r in measured)
                first = statistics.median(r[name].first_token for r in measured)
                per_token = (f"{statistics.median(r[name].cpu_per_token for r in measured) * 1e3:.2f} ms"
                             if name == "bridged" else "")
                print(f"{name:<10} {concurrent:>7} {rate:9.1f} {first * 1e3:9.0f} ms {per_token:>17}", flush=True)
        for concurrent, measured in rounds.items():
            share = max(r["bridged"].rate for r in measured) / max(r["direct"].rate for r in measured)
            added = sorted((r["bridged"].first_token - r["direct"].first_token) * 1e3 for r in measured)
            print(f"{concurrent} stream(s): the bridge keeps {share:.1%} of the direct tokens/s and adds "
                  f"{statistics.median(added):+.0f} ms to the first token (round by round: "
                  + ", ".join(f"{a:+.0f}" for a in added) + " ms)")
    finally:
        bridge.stop()
        engine.stop()


if __name__ == "__main__":
    main()
