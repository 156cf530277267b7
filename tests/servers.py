"""Real servers for the tests: llama-server (built by .ci/llama-server.sh from the llama.cpp
that the installed llama-cpp-python vendors) with SmolLM2, and `tplparse serve` in front of
it, each a subprocess on a free port of 127.0.0.1, stopped when the test is done."""

from __future__ import annotations

import importlib.metadata
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def llama_server_binary() -> Path | None:
    """$TPLPARSE_LLAMA_SERVER, or the binary .ci/llama-server.sh caches for this version."""
    given = os.environ.get("TPLPARSE_LLAMA_SERVER")
    if given:
        return Path(given) if Path(given).is_file() else None
    try:
        version = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    binary = cache / "tplparse" / f"llama-server-{version}" / "llama-server"
    return binary if binary.is_file() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A subprocess serving HTTP on 127.0.0.1:port; `url`, `stop()`."""

    def __init__(self, argv: list[str], port: int, log: Path, ready: str = "/health", timeout: float = 90.0):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self._log_file = open(log, "wb")
        self.process = subprocess.Popen(argv, stdout=self._log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"{argv[0]} exited with {self.process.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + ready, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{argv[0]} did not come up in {timeout} s: {log.read_text()[-2000:]}")

    def kill(self) -> None:
        """Gone at once, as a crashed engine is (no graceful shutdown)."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()


def start_llama_server(binary: Path, model: Path, log: Path, port: int | None = None, *extra: str,
                       slots: int = 4) -> Server:
    # `slots` slots of 2048 tokens: concurrent requests are batched, the rest wait their turn.
    # (Batched, one request's numbers depend on which others share its batch: a sampled
    # answer is the same from run to run only on a server that runs one request at a time.)
    # One thread: the tests' own processes (the parsers, tplparse serve, the clients) share the
    # machine's two cores, and llama.cpp's threads wait for each other at every step, so one
    # of two that loses its core stalls both (SmolLM2 on a loaded 2-core machine: 1.1 tokens/s
    # with two threads, 19 with one).
    port = port or free_port()
    return Server([str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(2048 * slots),
                   "-np", str(slots), "-t", "1", "--no-webui", *extra], port, log)


def start_tplparse_serve(source: Path, upstream: str, log: Path, *extra: str) -> Server:
    port = free_port()
    tplparse = Path(sys.executable).with_name("tplparse")
    return Server([str(tplparse), "serve", str(source), "--upstream", upstream, "--port", str(port), *extra], port, log,
                  ready="/v1/models")
