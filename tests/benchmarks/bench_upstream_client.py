"""What one upstream request costs the bridge's event loop: its own client against httpx's.

    python tests/benchmarks/bench_upstream_client.py [--requests N]

A local server (asyncio, in this process, the same for both) answers every POST with a short
streamed SSE body, chunked, as llama-server does. The same requests (a 2k-character prompt and
a 3k-character grammar in the JSON body, the answer read line by line) go through
`tplparse.serve.http.Client` and through `httpx.AsyncClient` (what the bridge used before),
one at a time and 16 at once, the two taking turns for five rounds. Printed: the process's CPU
time per request (client and server together: the server's share is the same for both) and,
16 at once, the wall time until all 16 are answered: what spreads a burst of requests before
they reach the engine (docs/benchmarks.md, the bridge).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx

from tplparse.serve.http import Client, text_lines

EVENTS = [b'data: {"content":"Hello","stop":false}\n\n', b'data: {"content":" there","stop":false}\n\n',
          b'data: {"content":"","stop":true,"stop_type":"eos"}\n\n']
BODY = {"prompt": "x" * 2000, "n_predict": 64, "stream": True, "grammar": "root ::= " + "a" * 3000}


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            for event in EVENTS:
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def ours(url: str):
    client = Client(url)

    async def one() -> int:
        async with client.stream("POST", "/completion", BODY) as response:
            return len([line async for line in text_lines(response)])
    return one, client.aclose


def theirs(url: str):
    client = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(120, connect=5))

    async def one() -> int:
        async with client.stream("POST", "/completion", json=BODY) as response:
            return len([line async for line in response.aiter_lines()])
    return one, client.aclose


async def timed(one, concurrent: int, batches: int) -> tuple[float, float]:
    """CPU seconds per request, and the median wall time of a batch."""
    cpu, walls = time.process_time(), []
    for _ in range(batches):
        started = time.perf_counter()
        await asyncio.gather(*[one() for _ in range(concurrent)])
        walls.append(time.perf_counter() - started)
    return (time.process_time() - cpu) / (concurrent * batches), statistics.median(walls)


async def main(requests: int) -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    made = {"tplparse": ours(url), "httpx": theirs(url)}
    clients = {name: one for name, (one, _) in made.items()}
    for one in clients.values():  # connections open, code warm
        await asyncio.gather(*[one() for _ in range(16)])
    print(f"{'client':<10} {'at once':>8} {'CPU/request':>12} {'wall/batch':>11}   (best of 5 rounds, "
          f"{requests} requests a round)")
    ratios = {}
    for concurrent in (1, 16):
        best: dict[str, tuple[float, float]] = {}
        for _ in range(5):
            for name, one in clients.items():
                cpu, wall = await timed(one, concurrent, max(1, requests // concurrent))
                old = best.get(name, (float("inf"), float("inf")))
                best[name] = (min(old[0], cpu), min(old[1], wall))
        for name, (cpu, wall) in best.items():
            print(f"{name:<10} {concurrent:>8} {cpu * 1e3:>9.3f} ms {wall * 1e3:>8.1f} ms")
        ratios[concurrent] = best["httpx"][0] / best["tplparse"][0], best["httpx"][1] / best["tplparse"][1]
    for concurrent, (cpu, wall) in ratios.items():
        print(f"{concurrent} at once: httpx costs {cpu:.1f}x the CPU per request"
              + (f", and takes {wall:.1f}x as long to answer the 16" if concurrent > 1 else ""))
    for _, close in made.values():
        await close()
    await asyncio.sleep(0.1)  # (the server sees the connections go)
    server.close()
    await server.wait_closed()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=160, help="requests per round and client (default 160)")
    asyncio.run(main(parser.parse_args().requests))
