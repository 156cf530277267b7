"""`tplparse serve`'s HTTP/1.1 limits (issue #52): what a client may send before its request
reaches the app, run against the real command over raw sockets (serve/guard.py).

Each refusal is an error in OpenAI's shape with the connection closed: a head line past 8 KiB
or more than 100 header lines (431), a version other than 1.0 and 1.1 (505), a header line
without a colon or folded onto the one before it (400), a head or a body that stops arriving
(408, here after the --head-timeout / --body-timeout of 1 s the server is started with). A
well-formed request is still served on the same kind of connection, and after each refusal
the server goes on serving others."""

from __future__ import annotations

import json
import socket
import time

import pytest

pytest.importorskip("uvicorn", reason="tplparse serve's extra is not installed: pip install 'tplparse[serve]'")

from conftest import EXAMPLES  # noqa: E402
from servers import start_tplparse_serve  # noqa: E402

SOURCE = EXAMPLES / "chatml-think-tools.gguf"


@pytest.fixture(scope="module")
def serving(tmp_path_factory):
    # (the upstream is never reached: /v1/models and refused heads do not need it)
    server = start_tplparse_serve(SOURCE, "http://127.0.0.1:9", tmp_path_factory.mktemp("http") / "serve.log",
                                  "--head-timeout", "1", "--body-timeout", "1")
    yield server
    server.stop()


def exchange(server, data: bytes, pause: float = 0.0, more: bytes = b"") -> tuple[int, dict, bool]:
    """Send `data` (then, after `pause` seconds, `more`); (status, JSON body, whether the
    server closed the connection)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as conn:
        conn.sendall(data)
        if pause:
            time.sleep(pause)
        if more:
            try:
                conn.sendall(more)
            except OSError:
                pass
        received = b""
        while True:
            try:
                piece = conn.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not piece:
                break
            received += piece
    head, _, body = received.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    closed = b"connection: close" in head.lower()
    return status, json.loads(body) if body.startswith(b"{") else {}, closed


def request(*headers: bytes, version: bytes = b"HTTP/1.1", target: bytes = b"/v1/models") -> bytes:
    return b"GET " + target + b" " + version + b"\r\nHost: x\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n"


def still_serving(server) -> None:
    status, body, _ = exchange(server, request(b"Connection: close"))
    assert status == 200 and body["data"][0]["id"] == "chatml-think-tools.gguf"


@pytest.mark.parametrize("name, data, status, words", [
    ("a 100 KB header line", request(b"X-Big: " + b"a" * 100_000), 431, "longer than 8192 bytes"),
    ("10,000 headers", request(*[b"X-H%d: v" % i for i in range(10_000)]), 431, "more than 100 header lines"),
    ("HTTP/9.9", request(version=b"HTTP/9.9"), 505, "not HTTP/9.9"),
    ("HTTP/2.0 as text", request(version=b"HTTP/2.0"), 505, "not HTTP/2.0"),
    ("a header without a colon", request(b"X-No-Colon"), 400, "without a colon"),
    ("an obsolete folded header", request(b"X-Folded: one", b" two"), 400, "folded"),
    ("a request line that is none", b"HELLO\r\n\r\n", 400, "request line"),
])
def test_a_head_past_the_limits_is_refused(serving, name, data, status, words):
    got, body, closed = exchange(serving, data)
    assert (got, closed) == (status, True), (got, body)
    assert words in body["error"]["message"] and body["error"]["code"] == status
    still_serving(serving)


def test_a_head_that_stops_arriving_is_a_408(serving):
    started = time.monotonic()
    status, body, closed = exchange(serving, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    assert (status, closed) == (408, True) and "did not arrive within 1 s" in body["error"]["message"]
    assert time.monotonic() - started < 5
    still_serving(serving)


def test_a_body_that_stops_arriving_is_a_408(serving):
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n")
    status, body, _ = exchange(serving, head + b'{"messages": ')
    assert status == 408 and "stopped arriving" in body["error"]["message"]
    still_serving(serving)


def test_a_chunk_of_two_to_the_64_bytes_is_not_waited_for(serving):
    """It was never answered: the chunk's bytes never come, and the body's limit is not
    reached without them."""
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    status, body, _ = exchange(serving, head + b"%x\r\n" % 2**64 + b'{"messages"')
    assert status in (400, 408, 413), (status, body)
    still_serving(serving)


def test_a_well_formed_request_on_a_kept_connection_is_served_twice(serving):
    with socket.create_connection(("127.0.0.1", serving.port), timeout=15) as conn:
        for _ in range(2):
            conn.sendall(request())
            received = b""
            while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
                received += conn.recv(65536)
            assert received.startswith(b"HTTP/1.1 200")
