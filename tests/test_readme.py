"""The README's set-up commands are the ones CI runs."""

from __future__ import annotations

import re

from conftest import REPO


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", setup, flags=re.S)


def test_ci_runs_the_two_readme_commands():
    commands = readme_commands()
    assert len(commands) == 2
    ci_lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for command in commands:
        assert command in ci_lines, f"README command not in .ci/run: {command}"
