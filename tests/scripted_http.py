"""An upstream engine that answers as a test scripts it: a real HTTP/1.1 server on 127.0.0.1,
so the bridge's upstreams are tested through their own client (tplparse/serve/http.py) over
sockets, framing, kept connections and failures included.

    server = ScriptedServer(handler)    # handler(Request) -> Answer, Hangup or Stall
    upstream = LlamaServer(server.url)

The server runs on a thread of its own (the tests drive the upstream with asyncio.run) and
stops when the test process ends. An answer goes out chunked (as llama-server and vLLM stream)
or with its Content-Length (`chunked=False`); `Hangup(after=b"...")` writes those bytes, then
closes the connection; `Stall()` never answers.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content) if self.content else {}


@dataclass
class Answer:
    status: int = 200
    json: Any = None
    content: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = True
    close_after: bool = False  # close the connection once answered, without saying so


    def body(self) -> bytes:
        return json.dumps(self.json).encode() if self.json is not None else self.content


@dataclass
class Hangup:
    """Close the connection after writing `after` (nothing: before any answer)."""

    after: bytes = b""


@dataclass
class Stall:
    """Read the request, answer nothing (until the client gives up)."""


Handler = Callable[[Request], "Answer | Hangup | Stall"]
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}


class ScriptedServer:
    def __init__(self, handler: Handler):
        self.handler = handler
        self.requests: list[Request] = []
        self.connections = 0  # connections accepted (kept ones carry several requests)
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True, name="scripted-http").start()
        ready.wait(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                self.requests.append(request)
                answer = self.handler(request)
                if isinstance(answer, Stall):
                    await asyncio.sleep(3600)
                if isinstance(answer, Hangup):
                    writer.write(answer.after)
                    await writer.drain()
                    return
                writer.write(_encoded(answer))
                await writer.drain()
                if answer.close_after:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # (the client closed its kept connection)
    line, *lines = head.decode("latin-1")[:-4].split("\r\n")
    method, path, _ = line.split(" ")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines)}
    content = await reader.readexactly(int(headers.get("content-length", "0")))
    return Request(method, path, headers, content)


def _encoded(answer: Answer) -> bytes:
    body = answer.body()
    headers = {"Content-Type": "application/json" if answer.json is not None else "text/event-stream",
               **answer.headers}
    if answer.chunked:
        headers["Transfer-Encoding"] = "chunked"
        # (each SSE event a chunk of its own, as an engine flushes them)
        pieces = [p for p in body.split(b"\n\n")]
        pieces = [p + b"\n\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    else:
        headers["Content-Length"] = str(len(body))
        payload = body
    head = f"HTTP/1.1 {answer.status} {REASONS.get(answer.status, 'Status')}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode("latin-1") + payload
