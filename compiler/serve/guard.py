"""The HTTP/1.1 limits `tplparse serve` holds a client to, before its request reaches the app.

uvicorn's h11 server reads what h11 reads: a head of any size that arrives at once (a 100 KB
header line, 10,000 headers), any `HTTP/x.y`, a header line without a colon, an obsolete
folded header; and it waits for a head or a body as long as a client takes to send it (a
slowloris of 60 s was served; 1,000 half-sent heads were held). `GuardedH11Protocol` reads
each request's head as it arrives, and refuses, with an error in OpenAI's shape and the
connection closed:

- a head that takes longer than `head_seconds` to arrive, from the connection's start or the
  end of the previous response (408);
- a line longer than `line_bytes`, more than `headers` header lines, a head longer than
  `head_bytes` (431);
- a version other than HTTP/1.0 and HTTP/1.1 (505); a header line without a colon, or one
  that continues the line before it (obsolete folding), or a request line that is not
  `METHOD TARGET VERSION` (400).

The body is bounded by the app: its size (413), and the time between two of its pieces
(`body_seconds`: 408), which also ends a chunked body that declared a chunk of 2^64 bytes and
sent none (docs/serving.md).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


@dataclass(frozen=True)
class HttpLimits:
    head_seconds: float = 10.0
    body_seconds: float = 30.0  # between two pieces of a body
    line_bytes: int = 8 * 1024
    headers: int = 100
    head_bytes: int = 32 * 1024


HTTP_LIMITS = HttpLimits()

_REQUEST_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ \S+ HTTP/(\d)\.(\d)")
_PHRASES = {400: "Bad Request", 408: "Request Timeout", 431: "Request Header Fields Too Large",
            505: "HTTP Version Not Supported"}


class HeadRefused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class HeadReader:
    """A request head read as it arrives: each line checked as soon as it is whole."""

    def __init__(self, limits: HttpLimits):
        self.limits = limits
        self.buffer = bytearray()
        self.checked = 0  # how much of the buffer is whole lines already checked
        self.lines = 0

    def feed(self, data: bytes) -> bool:
        """Take `data`; True once the head is whole (what follows it is not looked at).
        HeadRefused where it breaks a limit."""
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n", self.checked)
            if end == -1:
                if len(self.buffer) - self.checked > self.limits.line_bytes:
                    raise HeadRefused(431, f"a line of the request's head is longer than "
                                           f"{self.limits.line_bytes} bytes")
                return False
            line = bytes(self.buffer[self.checked:end])
            self.checked = end + 2
            if self._line(line):
                return True

    def _line(self, line: bytes) -> bool:
        """Check one line; True when it is the empty line that ends the head."""
        if len(line) > self.limits.line_bytes:
            raise HeadRefused(431, f"a line of the request's head is longer than "
                                   f"{self.limits.line_bytes} bytes")
        if self.checked > self.limits.head_bytes:
            raise HeadRefused(431, f"the request's head is longer than {self.limits.head_bytes} "
                                   "bytes")
        if self.lines == 0:
            if not line:
                return False  # (empty lines before a request are allowed, RFC 9112 2.2)
            self._request_line(line)
        elif not line:
            return True
        elif line[:1] in (b" ", b"\t"):
            raise HeadRefused(400, "an obsolete folded header line (one that continues the "
                                   "line before it) is not accepted")
        elif b":" not in line:
            raise HeadRefused(400, "a header line without a colon")
        elif self.lines > self.limits.headers:
            raise HeadRefused(431, f"more than {self.limits.headers} header lines")
        self.lines += 1
        return False

    def _request_line(self, line: bytes) -> None:
        found = _REQUEST_LINE.fullmatch(line)
        if found is None:
            raise HeadRefused(400, "the request line is not METHOD TARGET HTTP/VERSION")
        if found.group(1, 2) not in ((b"1", b"1"), (b"1", b"0")):
            raise HeadRefused(505, "only HTTP/1.1 and HTTP/1.0 are served, not HTTP/"
                                   + found.group(1).decode() + "." + found.group(2).decode())


def refusal(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 response: the error in OpenAI's shape, the connection closed."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": status}}).encode()
    return (f"HTTP/1.1 {status} {_PHRASES.get(status, 'Error')}\r\ncontent-type: "
            f"application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
            ).encode() + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, each request's head read by a `HeadReader` first (the limits
    of `HTTP_LIMITS`), and a head that does not arrive in time refused."""

    limits = HTTP_LIMITS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head: HeadReader | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._head is not None:
            try:
                whole = self._head.feed(data)
            except HeadRefused as e:
                self._refuse(e.status, e.message)
                return
            if whole:
                self._head = None
                self._stop_head_timer()
        super().data_received(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state in (h11.IDLE, h11.DONE):
            self._await_head()

    def _await_head(self) -> None:
        """A new head is read from here on, and must be whole within head_seconds."""
        self._head = HeadReader(self.limits)
        self._stop_head_timer()
        self._head_timer = self.loop.call_later(self.limits.head_seconds, self._head_too_slow)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._head is not None and self._head.buffer:
            self._refuse(408, f"the request's head did not arrive within "
                              f"{self.limits.head_seconds:g} s")
        elif not self.transport.is_closing():
            self.transport.close()  # (nothing sent: closed as an idle keep-alive is)

    def _refuse(self, status: int, message: str) -> None:
        self._stop_head_timer()
        self._head = None
        if not self.transport.is_closing():
            self.transport.write(refusal(status, message))
            self.transport.close()


__all__ = ["GuardedH11Protocol", "HTTP_LIMITS", "HeadReader", "HeadRefused", "HttpLimits"]
