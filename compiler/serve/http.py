"""The bridge's HTTP/1.1 client for its upstream engine: asyncio streams, kept-alive connections.

Every request the bridge serves is one request upstream, and at 16 concurrent requests the
time each takes to set up on the event loop decides whether they reach llama-server in one
of its decoding steps or spread over two (docs/benchmarks.md, the bridge). httpx's
AsyncClient spent 1.8 ms of CPU on a small streamed POST, and 2.5 ms each with 16 at once
(39 ms until a local server answering at once had answered the 16); this client spends 0.2 to
0.3 ms (3.4 ms for the 16): tests/benchmarks/bench_upstream_client.py. What the bridge needs of
HTTP is small, and all of it is here:

    client = Client("http://127.0.0.1:8080", read_timeout=120)
    answer = await client.request("GET", "/props")              # Response: status, headers, body
    async with client.stream("POST", "/completion", body) as r:  # body: a JSON value
        async for piece in r.pieces(): ...                       # the body as it arrives

Requests carry a JSON body (or none); answers are read by their Content-Length, chunked, or up
to the connection's end. A connection whose answer was read to its end is kept for the next
request; one left mid-answer (a client that went away) is closed, which is how an engine
learns to stop generating. A kept connection the engine closed meanwhile is replaced, once,
before anything of the request was answered.

Failures are `HttpError`s: `ConnectFailed` (nothing answers at the address), `TimedOut`
(connecting, or no byte of an answer for `read_timeout` seconds), `BrokenAnswer` (the
connection ended mid-answer, or what came is not HTTP/1.x). No proxies: the upstream is
reached at the address given. https is spoken with the system's certificates.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..version import __version__

# The most an answer's status line and headers may take, and a whole answer that is read
# at once (a JSON answer: /props, /tokenize of a long prompt): what a hostile or broken
# upstream can make the bridge hold.
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
# Connections kept open between requests (more than the concurrent streams of a busy bridge
# are closed once their answer is read).
MAX_IDLE = 64
_READ_SIZE = 64 * 1024


class HttpError(Exception):
    """An HTTP exchange with the upstream failed: no answer, or not an HTTP one."""


class ConnectFailed(HttpError):
    """Nothing answers at the upstream's address."""


class TimedOut(HttpError):
    """Connecting took too long, or an answer stopped arriving for the read timeout."""


class BrokenAnswer(HttpError):
    """The connection ended mid-answer, or what came is not an HTTP/1.x answer."""


@dataclass
class Response:
    """An answer: its status and headers (names lower-cased), and its body once read."""

    status: int
    headers: dict[str, str]
    body: bytes = b""

    def json(self) -> Any:
        """The body as JSON (json.JSONDecodeError or UnicodeDecodeError when it is not)."""
        return json.loads(self.body.decode("utf-8"))


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    loop: asyncio.AbstractEventLoop  # (a connection serves the event loop that opened it)
    used: bool = False  # it carried an answer before (a kept connection)

    def usable(self) -> bool:
        return (not self.reader.at_eof() and not self.writer.is_closing()
                and self.loop is asyncio.get_running_loop())

    def close(self) -> None:
        if self.loop.is_closed():
            return  # (its sockets went with its loop)
        self.writer.close()


@dataclass
class _Body:
    """How an answer's body is framed: by its length, chunked, or up to the connection's end."""

    length: int | None  # bytes left of a Content-Length body
    chunked: bool
    done: bool = False
    keep_alive: bool = True
    chunk_left: int = 0  # bytes left of the current chunk
    ends_chunk: bool = False  # the CRLF after a chunk's data is next


class StreamedResponse(Response):
    """An answer whose body is read as it arrives (`pieces()`), or whole (`read()`)."""

    def __init__(self, status: int, headers: dict[str, str], connection: _Connection,
                 frame: _Body, read_timeout: float):
        super().__init__(status, headers)
        self._connection = connection
        self._frame = frame
        self._read_timeout = read_timeout

    @property
    def complete(self) -> bool:
        """The body was read to its end."""
        return self._frame.done

    @property
    def keep_alive(self) -> bool:
        """The connection may carry another request once the body is read."""
        return self._frame.keep_alive

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body, piece by piece as the connection delivers it (chunk framing removed)."""
        while not self._frame.done:
            piece = await self._next_piece()
            if piece:
                yield piece

    async def read(self, limit: int = MAX_BODY_BYTES) -> bytes:
        """The whole body (BrokenAnswer past `limit` bytes)."""
        parts, size = [], 0
        async for piece in self.pieces():
            size += len(piece)
            if size > limit:
                raise BrokenAnswer(f"the answer is longer than {limit} bytes")
            parts.append(piece)
        self.body = b"".join(parts)
        return self.body

    async def _next_piece(self) -> bytes:
        try:
            return await _within(self._read_timeout, self._read_piece())
        except asyncio.TimeoutError:
            raise TimedOut(f"no data for {self._read_timeout:g} s") from None
        except asyncio.IncompleteReadError:
            raise BrokenAnswer("the connection closed mid-answer") from None
        except asyncio.LimitOverrunError:
            raise BrokenAnswer("a chunk header longer than the client reads") from None
        except (ConnectionError, OSError) as e:
            raise BrokenAnswer(f"the connection failed mid-answer ({_reason(e)})") from None

    async def _read_piece(self) -> bytes:
        frame, reader = self._frame, self._connection.reader
        if frame.chunked:
            return await self._read_chunked(frame, reader)
        if frame.length is None:  # up to the connection's end
            piece = await reader.read(_READ_SIZE)
            if not piece:
                frame.done = True
            return piece
        if frame.length == 0:
            frame.done = True
            return b""
        piece = await _read_some(reader, frame.length)
        frame.length -= len(piece)
        frame.done = frame.length == 0
        return piece

    async def _read_chunked(self, frame: _Body, reader: asyncio.StreamReader) -> bytes:
        if frame.ends_chunk:
            if await reader.readexactly(2) != b"\r\n":
                raise BrokenAnswer("a chunk does not end with CRLF")
            frame.ends_chunk = False
        if frame.chunk_left == 0:
            line = await reader.readuntil(b"\r\n")
            size = _chunk_size(line)
            if size == 0:
                await _skip_trailers(reader)
                frame.done = True
                return b""
            frame.chunk_left = size
        piece = await _read_some(reader, frame.chunk_left)
        frame.chunk_left -= len(piece)
        frame.ends_chunk = frame.chunk_left == 0
        return piece


class Client:
    """Requests to one upstream (`url`: http:// or https://, a path prefix kept), over
    kept-alive connections. `read_timeout`: the longest wait for the next byte of an answer
    (a long prompt evaluates before the first token comes)."""

    def __init__(self, url: str, read_timeout: float = 120.0, connect_timeout: float = 5.0):
        parts = urlsplit(url)
        try:
            port = parts.port
            host = (parts.hostname or "").encode("idna").decode("ascii")
        except (ValueError, UnicodeError):
            port, host = None, ""
        if parts.scheme not in ("http", "https") or not host:
            raise ValueError(f"the upstream URL must be http:// or https:// with a host and "
                             f"(if any) a port number, not {url!r}")
        self._host = host
        self._port = port or (443 if parts.scheme == "https" else 80)
        self._tls = parts.scheme == "https"
        self._prefix = parts.path.rstrip("/")
        default_port = self._port == (443 if self._tls else 80)
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = host if default_port else f"{host}:{self._port}"
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._ssl: ssl.SSLContext | None = None

    async def request(self, method: str, path: str, body: Any = None) -> Response:
        """Send a request (`body`: a JSON value, or None) and read its whole answer."""
        async with self.stream(method, path, body) as response:
            await response.read()
        return Response(response.status, response.headers, response.body)

    @asynccontextmanager
    async def stream(self, method: str, path: str, body: Any = None
                     ) -> AsyncIterator[StreamedResponse]:
        """Send a request and give its answer, whose body is read as it arrives. Left before
        the body's end, the connection is closed (the upstream stops working on it)."""
        request = self._request_bytes(method, path, body)
        connection, response = await self._exchange(request)
        try:
            yield response
        finally:
            if response.complete and response.keep_alive and connection.usable() \
                    and len(self._idle) < MAX_IDLE:
                connection.used = True
                self._idle.append(connection)
            else:
                connection.close()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    # --- the exchange -------------------------------------------------------------------

    def _request_bytes(self, method: str, path: str, body: Any) -> bytes:
        head = (f"{method} {self._prefix}{path} HTTP/1.1\r\nHost: {self._host_header}\r\n"
                f"User-Agent: tplparse/{__version__}\r\nAccept: */*\r\n")
        if body is None:
            return (head + "\r\n").encode("ascii")
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                             allow_nan=False).encode("utf-8")
        head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        return head.encode("ascii") + payload

    async def _exchange(self, request: bytes) -> tuple[_Connection, StreamedResponse]:
        """Send `request` on a kept connection or a new one, and read its answer's head. A
        kept connection that the upstream closed meanwhile fails before any answer: the
        request goes again, once, on a new connection."""
        while True:
            connection = self._kept() or await self._connect()
            try:
                await self._send(connection, request)
                return connection, await self._answer(connection)
            except BaseException as e:
                connection.close()
                if connection.used and isinstance(e, _Unanswered):
                    continue  # (a new connection is not `used`: this happens once at most)
                if isinstance(e, _Unanswered):
                    raise BrokenAnswer(str(e)) from None
                raise

    def _kept(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable():
                return connection
            connection.close()
        return None

    async def _connect(self) -> _Connection:
        if self._tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        try:
            reader, writer = await _within(self.connect_timeout, asyncio.open_connection(
                self._host, self._port, ssl=self._ssl, limit=MAX_HEAD_BYTES))
        except asyncio.TimeoutError:
            raise TimedOut(f"connecting took longer than {self.connect_timeout:g} s") from None
        except (OSError, ssl.SSLError) as e:
            raise ConnectFailed(f"cannot connect to {self._host_header}: {_reason(e)}") from None
        return _Connection(reader, writer, asyncio.get_running_loop())

    async def _send(self, connection: _Connection, request: bytes) -> None:
        try:
            connection.writer.write(request)
            await _within(self.read_timeout, connection.writer.drain())
        except asyncio.TimeoutError:
            raise TimedOut(f"the upstream took no request bytes for {self.read_timeout:g} s") \
                from None
        except (ConnectionError, OSError) as e:
            raise _Unanswered(f"the connection failed ({_reason(e)})") from None

    async def _answer(self, connection: _Connection) -> StreamedResponse:
        try:
            head = await _within(self.read_timeout,
                                 connection.reader.readuntil(b"\r\n\r\n"))
        except asyncio.TimeoutError:
            raise TimedOut(f"no answer in {self.read_timeout:g} s") from None
        except asyncio.IncompleteReadError as e:
            if not e.partial:
                raise _Unanswered("the connection closed before an answer") from None
            raise BrokenAnswer("the connection closed mid-answer") from None
        except asyncio.LimitOverrunError:
            raise BrokenAnswer(f"the answer's head is longer than {MAX_HEAD_BYTES} bytes") from None
        except (ConnectionError, OSError) as e:
            raise _Unanswered(f"the connection failed ({_reason(e)})") from None
        status, headers, http10 = _parse_head(head)
        frame = _framing(status, headers, http10)
        return StreamedResponse(status, headers, connection, frame, self.read_timeout)


class _Unanswered(HttpError):
    """The connection failed before a byte of the answer came."""


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """Status, headers (lower-cased names; a repeated one joined with ", ") and whether the
    answer is HTTP/1.0."""
    text = head.decode("latin-1")  # (every byte decodes: what is not HTTP is told below)
    status_line, *lines = text[:-4].split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if version not in ("HTTP/1.1", "HTTP/1.0") or not code.isdigit():
        raise BrokenAnswer(f"not an HTTP/1.x answer: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise BrokenAnswer(f"a malformed header line: {line[:80]!r}")
        name, value = name.lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(code), headers, version == "HTTP/1.0"


def _framing(status: int, headers: dict[str, str], http10: bool) -> _Body:
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection and (not http10 or "keep-alive" in connection)
    if status in (204, 304) or 100 <= status < 200:
        return _Body(0, False, done=True, keep_alive=keep_alive)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _Body(None, True, keep_alive=keep_alive)
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise BrokenAnswer(f"a Content-Length that is not a number: {length[:40]!r}")
        return _Body(int(length), False, done=int(length) == 0, keep_alive=keep_alive)
    return _Body(None, False, keep_alive=False)  # up to the connection's end


def _chunk_size(line: bytes) -> int:
    digits = line[:-2].split(b";", 1)[0].strip()
    try:
        return int(digits, 16)
    except ValueError:
        raise BrokenAnswer(f"a chunk size that is not a number: {digits[:20]!r}") from None


async def _read_some(reader: asyncio.StreamReader, left: int) -> bytes:
    """What has come of the `left` bytes still to come (at least one; the connection's end
    before them is an IncompleteReadError)."""
    piece = await reader.read(min(left, _READ_SIZE))
    if not piece:
        raise asyncio.IncompleteReadError(b"", left)
    return piece


async def _skip_trailers(reader: asyncio.StreamReader) -> None:
    while await reader.readuntil(b"\r\n") != b"\r\n":
        pass


# asyncio.timeout (Python 3.11 on; a timer handle, where wait_for makes a task per await).
_TIMEOUT = getattr(asyncio, "timeout", None)


async def _within(seconds: float, awaitable):
    """`await awaitable`, or asyncio.TimeoutError after `seconds`."""
    if _TIMEOUT is None:  # Python 3.10
        return await asyncio.wait_for(awaitable, seconds)
    async with _TIMEOUT(seconds):
        return await awaitable


def _reason(error: BaseException) -> str:
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


async def text_lines(response: StreamedResponse) -> AsyncIterator[str]:
    """The body as lines of UTF-8 text, split at \\n only (llama-server writes U+2028, U+2029
    and U+0085 raw in its JSON: a split at every Unicode line break cuts an event), without
    their \\r; an invalid byte is U+FFFD."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    pending = ""
    async for piece in response.pieces():
        pending += decoder.decode(piece)
        if "\n" in pending:
            *lines, pending = pending.split("\n")
            for line in lines:
                yield line.rstrip("\r")
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


__all__ = ["BrokenAnswer", "Client", "ConnectFailed", "HttpError", "Response",
           "StreamedResponse", "TimedOut", "text_lines"]
