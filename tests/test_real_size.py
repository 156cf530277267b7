"""Model files the size users have (issue #51): every command on GGUF files of 1.5, 4 and 40 GB,
and on a model folder whose weights are 40 GB, reads the metadata at the file's start, keeps
its memory flat, and writes no traceback.

The files are sparse (a shipped example GGUF, `truncate`d to the size: its metadata first, then
a hole where a real model's tensors are), so they cost no disk. Each command runs as a user runs
it, in a fresh process under the default limits (the work's child process may add 1 GB of
address space: a model mapped whole would not fit); its peak resident memory is read from the
kernel's accounting of the process and its child (`RUSAGE_CHILDREN` of a small wrapper), and
compared with the same command on the example file itself."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time

import pytest

from conftest import EXAMPLES, SMOLLM2, TPLPARSE, needs_smollm2

CHATML_GGUF = EXAMPLES / "chatml-think-tools.gguf"
GB = 1 << 30
SIZES = {"1.5GB": 3 * GB // 2, "4GB": 4 * GB, "40GB": 40 * GB}
# What a command may take beyond the same command on the small example (allocator noise; a
# mapping or a read of the file's body would be gigabytes).
FLAT = 16 << 20

# Runs a command and prints its peak resident memory, over it and the child it forks.
_PEAK = ("import resource, subprocess, sys\n"
         "result = subprocess.run(sys.argv[2:], stdin=open(sys.argv[1], 'rb'), capture_output=True)\n"
         "sys.stdout.write(repr((result.returncode, result.stdout.decode('utf-8', 'replace'), "
         "result.stderr.decode('utf-8', 'replace'), "
         "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)))\n")


def sparse_copy(source, path, size: int):
    """`source` with a hole up to `size` bytes after it (a file of that size, a few KB on disk)."""
    shutil.copyfile(source, path)
    with open(path, "r+b") as f:
        f.truncate(size)
    return path


def peak(args, cwd, stdin: str = "") -> tuple[int, str, str, int]:
    """(exit status, stdout, stderr, peak resident bytes) of `tplparse ARGS`."""
    feed = cwd / "stdin.txt"
    feed.write_text(stdin, encoding="utf-8")
    result = subprocess.run([sys.executable, "-c", _PEAK, str(feed), str(TPLPARSE), *map(str, args)],
                            capture_output=True, text=True, cwd=cwd, timeout=300, check=True)
    return eval(result.stdout)  # noqa: S307 - the repr of a tuple the wrapper above printed


OUTPUT = "<think>Paris.</think>Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>"

# Every command that reads a source: (name, its arguments with SRC for the source, its stdin).
COMMANDS = [
    ("info", ["info", "SRC"], ""),
    ("info --json", ["info", "SRC", "--json"], ""),
    ("render", ["render", "SRC", EXAMPLES / "messages.json", "--tools", EXAMPLES / "tools.json"], ""),
    ("probe", ["probe", "SRC"], ""),
    ("grammar", ["grammar", "SRC", "--format", "lark", "--tools", EXAMPLES / "tools.json"], ""),
    ("gbnf", ["gbnf", "SRC", "--tools", EXAMPLES / "tools.json", "--tool-choice", "required"], ""),
    ("compile", ["compile", "SRC", "-o", "OUT"], ""),
    ("parse", ["parse", "SRC", "--tools", EXAMPLES / "tools.json"], OUTPUT),
    ("diff", ["diff", "SRC", CHATML_GGUF], ""),
    ("export vllm", ["export", "vllm", "SRC", "-o", "OUT"], ""),
    ("export response-template", ["export", "response-template", "SRC"], ""),
    ("build", ["build", "--manifest", "MANIFEST", "-o", "OUT"], ""),
]


def _run(name: str, args: list, stdin: str, source, tmp_path):
    out = tmp_path / f"out-{name.replace(' ', '-')}"
    manifest = tmp_path / "families.toml"
    manifest.write_text(f'[[family]]\nname = "big"\nsource = "{source}"\n', encoding="utf-8")
    given = [source if a == "SRC" else out if a == "OUT" else manifest if a == "MANIFEST" else a
             for a in args]
    code, stdout, stderr, rss = peak(given, tmp_path, stdin)
    return code, stdout.replace(str(out), "OUT").replace(str(source), "SRC"), stderr, rss


@pytest.fixture(scope="module")
def small_peaks(tmp_path_factory):
    """Each command's run on the example file itself: what it prints, and its peak memory."""
    tmp = tmp_path_factory.mktemp("small")
    source = sparse_copy(CHATML_GGUF, tmp / "model.gguf", CHATML_GGUF.stat().st_size)
    return {name: _run(name, args, stdin, source, tmp) for name, args, stdin in COMMANDS}


@pytest.fixture(scope="module", params=list(SIZES), ids=list(SIZES))
def big_model(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"big-{request.param}")
    path = sparse_copy(CHATML_GGUF, tmp / "model.gguf", SIZES[request.param])
    assert path.stat().st_size == SIZES[request.param] and path.stat().st_blocks * 512 < 1 << 20
    return path


@pytest.mark.parametrize("name, args, stdin", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_command_reads_a_real_size_model(big_model, small_peaks, name, args, stdin, tmp_path):
    code, out, err, rss = _run(name, args, stdin, big_model, tmp_path)
    small_code, small_out, small_err, small_rss = small_peaks[name]
    assert "Traceback" not in err, err[-3000:]
    assert code == small_code == 0, (code, err[-2000:])
    # What it prints is what it prints for the small file (its path and the output folder's aside).
    assert out == small_out
    assert rss < small_rss + FLAT, f"{name}: {rss >> 20} MB on a {big_model.stat().st_size >> 30} GB file, {small_rss >> 20} MB on the example"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_starts_on_a_40_gb_model(tmp_path):
    """serve loads in its own process (no child): the same reader, the same flat memory."""
    path = sparse_copy(CHATML_GGUF, tmp_path / "model.gguf", SIZES["40GB"])
    port = _free_port()
    server = subprocess.Popen([str(TPLPARSE), "serve", str(path), "--upstream", "http://127.0.0.1:9",
                               "--port", str(port)], stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        assert line.startswith("tplparse serve: model.gguf (family chatml-think-tools)"), line
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                    conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    answer = b"".join(iter(lambda: conn.recv(65536), b"")).decode()
                break
            except OSError:
                assert time.monotonic() < deadline, "serve did not listen"
                time.sleep(0.2)
        assert answer.startswith("HTTP/1.1 200") and '"model.gguf"' in answer
        with open(f"/proc/{server.pid}/status") as f:
            rss = next(int(line.split()[1]) << 10 for line in f if line.startswith("VmHWM:"))
        assert rss < 400 << 20, f"serve holds {rss >> 20} MB after loading a 40 GB model"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_model_folder_with_40_gb_of_weights(tmp_path):
    """A checkpoint folder: tokenizer_config.json and chat_template.jinja beside 40 GB of
    weights (safetensors and a GGUF): the weights are never read."""
    folder = tmp_path / "model"
    folder.mkdir()
    template = (EXAMPLES / "templates" / "chatml-think-tools.jinja").read_text(encoding="utf-8")
    (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|endoftext|>", "eos_token": "<|im_end|>",
        "added_tokens_decoder": {str(i): {"content": t, "special": True} for i, t in enumerate(
            ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"])},
    }), encoding="utf-8")
    (folder / "generation_config.json").write_text('{"eos_token_id": 2}', encoding="utf-8")
    for i in range(4):
        with open(folder / f"model-0000{i + 1}-of-00004.safetensors", "wb") as f:
            f.truncate(10 * GB)
    sparse_copy(CHATML_GGUF, folder / "model.gguf", 40 * GB)
    code, out, err, rss = peak(["compile", folder, "-o", tmp_path / "out"], tmp_path)
    assert code == 0 and "Traceback" not in err, err[-2000:]
    assert "wrote" in out and "typed call         proved" in out
    assert rss < 400 << 20, f"{rss >> 20} MB"
    code, out, err, _ = peak(["info", folder, "--json"], tmp_path)
    assert code == 0, err
    assert json.loads(out)["end_of_turn"] == ["<|im_end|>"]


@needs_smollm2
def test_a_real_model_grown_to_40_gb(tmp_path):
    """SmolLM2's own GGUF (a real vocabulary of 49k tokens, real tensors), with a hole after it
    to 40 GB: it compiles, as the 100 MB file does."""
    path = sparse_copy(SMOLLM2, tmp_path / "smollm2.gguf", SIZES["40GB"])
    code, out, err, rss = peak(["compile", path, "-o", tmp_path / "out"], tmp_path)
    assert code == 0 and "Traceback" not in err, err[-2000:]
    assert rss < 400 << 20, f"{rss >> 20} MB"
