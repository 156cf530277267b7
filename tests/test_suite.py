"""The test suite itself: it collects without the optional extras, and CI draws the same
property-test examples on every run (tests/conftest.py's hypothesis profiles)."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import settings

from conftest import HYPOTHESIS_PROFILE, REPO

# Collect the whole suite with the `serve` extra's packages made unimportable (an entry of
# None in sys.modules makes `import x` raise ImportError), and without the corpus (faster: its
# parametrizations are empty, the same modules are imported).
_COLLECT_WITHOUT_SERVE = """
import sys
for name in ("httpx", "starlette", "uvicorn"):
    sys.modules[name] = None
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"]))
"""


def test_the_suite_collects_without_the_serve_extra(tmp_path):
    result = subprocess.run([sys.executable, "-c", _COLLECT_WITHOUT_SERVE], cwd=REPO, capture_output=True, text=True,
                            env={"TPLPARSE_CORPUS": str(tmp_path / "no-corpus"), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "tplparse serve's extra is not installed" in result.stdout  # skipped, and said why


def test_ci_draws_the_same_examples_every_run():
    if HYPOTHESIS_PROFILE != "ci":
        return  # TPLPARSE_HYPOTHESIS=explore: random draws on purpose
    assert settings.default.derandomize and settings.default.database is None
    assert settings.default.print_blob
