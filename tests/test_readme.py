"""The README and docs/ say what tplparse does, and they stay true:

- the README's set-up commands are the ones CI runs;
- every console sample (a ```console block: `$ command` lines, each followed by what it prints)
  is run again and must print what the page shows, or carries, right before its block, a mark
  with the reason it cannot be run here: `<!-- sample: not re-run: timings vary -->`;
- every relative link in README.md and docs/*.md points at a file that exists, and at a heading
  of that page where it names one.

How a sample is run. Each block runs in a sandbox of its own, a temporary folder laid out as
the samples assume the repository is: `examples/` (linked), `generated/` (a copy: `tplparse
compile` writes there), `README.md` (a copy: an error sample names it), `tests/.fixtures`
(linked to $TPLPARSE_FIXTURES) and `../shared/corpus/templates` (linked to $TPLPARSE_CORPUS).
Each `$` line goes to `bash -c` there, in order, with the installed `tplparse` first on PATH
and the exit status of the line before as `$?` (so `echo $?` works); stdout and stderr are
read together, unbuffered, in the order they were written. A file a page shows with `$ cat
FILE` (an override, a model output) is an input: it is written into every sandbox first, so a
later sample, on any page, may use it. A sample that needs the corpus or the fetched fixtures
is skipped, saying so, when they are absent.

How the output is compared: exactly, but for
- the elisions the pages write: `...`, on a line of its own or inside one, stands for any
  text, lines too (a real `...` in the output still matches itself);
- what depends on the machine or the moment, not on tplparse, made the same on both sides:
  the grammar checker a compile names (`llama.cpp` where llama-cpp-python is installed, else
  `the IR matcher`), a transcript's `"time"`, and the sandbox's absolute path (no sample
  prints one today).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import CORPUS, FIXTURES, REPO, TPLPARSE

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NOT_RE_RUN = re.compile(r"<!-- sample: not re-run: (?P<reason>\S.*?) -->")


# --- the set-up commands ---------------------------------------------------------------------


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


# --- reading the pages -----------------------------------------------------------------------


@dataclass
class Block:
    page: Path
    line: int  # 1-based, the opening fence
    lang: str
    lines: list[str]
    mark: str | None  # the reason of a `not re-run` mark right before the block

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


@dataclass
class Step:
    command: str
    output: list[str] = field(default_factory=list)


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, each with the mark before it, if any."""
    found, lines = [], page.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        opening = re.match(r"^```(\S*)\s*$", lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j] == "```")
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = NOT_RE_RUN.fullmatch(before.strip())
        reason = mark.group("reason") if mark else None
        found.append(Block(page, i + 1, opening.group(1), lines[i + 1:end], reason))
        i = end + 1
    return found


def steps(block: Block) -> list[Step]:
    """A console block as its commands, each with the lines it prints."""
    assert block.lines and block.lines[0].startswith("$ "), \
        f"{block.where}: a console block starts with `$ `"
    found: list[Step] = []
    for line in block.lines:
        if line.startswith("$ "):
            found.append(Step(line[2:]))
        else:
            found[-1].output.append(line)
    return found


def console_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.lang == "console"]


def shown_inputs() -> dict[str, tuple[str, str]]:
    """name -> (its text, where it is shown), of every file a page shows with `$ cat NAME`."""
    shown: dict[str, tuple[str, str]] = {}
    for block in console_blocks():
        for step in steps(block):
            name = re.fullmatch(r"cat ([\w.-]+)", step.command)
            if not name:
                continue
            text = "\n".join(step.output) + "\n"
            earlier = shown.get(name.group(1))
            assert earlier is None or earlier[0] == text, \
                f"{block.where}: {name.group(1)} is shown as another text at {earlier[1]}"
            shown[name.group(1)] = (text, block.where)
    return shown


def test_every_console_sample_is_re_run_or_says_why_not():
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").split("\n")
        for number, line in enumerate(lines, 1):
            where = f"{page.relative_to(REPO)}:{number}"
            if "<!-- sample:" in re.sub(r"`[^`]*`", "", line):  # (not one quoted in code)
                assert NOT_RE_RUN.fullmatch(line.strip()), \
                    f"{where}: a mark reads `<!-- sample: not re-run: WHY -->`"
                after = next((a for a in lines[number:] if a.strip()), "")
                assert after.startswith("```"), f"{where}: a mark stands right before its block"
        for block in blocks(page):
            assert block.lang == "console" or not block.lines[:1] or \
                not block.lines[0].startswith("$ "), \
                f"{block.where}: a sample of commands is a ```console block (so that it is re-run)"
    samples = console_blocks()
    assert len(samples) >= 20  # the pages are read as they are written
    for block in samples:
        steps(block)  # each is commands and what they print
    shown_inputs()  # a file shown twice is shown alike


# --- re-running the samples ------------------------------------------------------------------

SANDBOX_LINKS = {"examples": REPO / "examples", "tests/.fixtures": FIXTURES,
                 "../shared/corpus/templates": CORPUS}
SANDBOX_COPIES = {"generated": REPO / "generated", "README.md": REPO / "README.md"}
MACHINE = [  # (what differs from machine to machine or run to run, what both sides read)
    (re.compile(r"\(the IR matcher\)"), "(llama.cpp)"),  # a compile proved without llama.cpp
    (re.compile(r'"time": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00"'), '"time": "<a time>"'),
]


def sandbox(root: Path) -> Path:
    work = root / "main"
    work.mkdir()
    for name, target in SANDBOX_LINKS.items():
        link = (work / name).resolve() if name.startswith("..") else work / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            link.symlink_to(target.resolve(), target_is_directory=True)
    for name, source in SANDBOX_COPIES.items():
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, work / name)
    for name, (text, _) in shown_inputs().items():
        (work / name).write_text(text, encoding="utf-8")
    return work


def output_matches(expected: str, actual: str) -> bool:
    """`expected`, in which each `...` stands for any text (lines too), against `actual`."""
    pattern = "(?s:.*)".join(map(re.escape, expected.split("...")))
    return re.fullmatch(pattern, actual) is not None


def normalised(text: str, work: Path) -> str:
    text = text.replace(str(work.resolve()), ".").replace(str(work), ".")
    for pattern, replacement in MACHINE:
        text = pattern.sub(replacement, text)
    return text


def needs(block: Block) -> str | None:
    """Why the block cannot run on this machine, if it cannot."""
    text = "\n".join(block.lines)
    if "../shared/corpus/templates/" in text and not CORPUS.is_dir():
        return f"the shared template corpus is not at {CORPUS}"
    if "tests/.fixtures/" in text and not FIXTURES.is_dir():
        return f"the fixtures are not fetched into {FIXTURES} (run tests/fetch_fixtures.py)"
    return None


@pytest.mark.parametrize("block", [b for b in console_blocks() if not b.mark],
                         ids=lambda b: b.where)
def test_console_sample_prints_what_the_page_shows(block, tmp_path):
    reason = needs(block)
    if reason:
        pytest.skip(reason)
    assert TPLPARSE.is_file(), f"{TPLPARSE}: the tplparse console script is not installed"
    work = sandbox(tmp_path)
    path = f"{TPLPARSE.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = dict(os.environ, PATH=path, PYTHONUNBUFFERED="1")
    status = 0
    for step in steps(block):
        result = subprocess.run(["bash", "-c", f"(exit {status}); {step.command}"], cwd=work,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                timeout=600)
        status = result.returncode
        actual = normalised(result.stdout.decode("utf-8", errors="replace"), work)
        actual = actual[:-1] if actual.endswith("\n") else actual  # the page's next line
        expected = normalised("\n".join(step.output), work)
        assert output_matches(expected, actual), (
            f"{block.where}: `$ {step.command}` prints (exit {status}):\n{actual}\n"
            f"--- the page shows:\n{expected}")


# --- links -----------------------------------------------------------------------------------


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (outside code blocks)."""
    found, counts, fenced = set(), {}, False
    for line in page.read_text(encoding="utf-8").split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        heading = not fenced and re.match(r"^#{1,6} (.+?)\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            n = counts.get(slug, 0)
            counts[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def links(page: Path) -> list[tuple[str, int]]:
    """(target, line) of each inline link of a page, outside code blocks and code spans."""
    found, fenced = [], False
    for number, line in enumerate(page.read_text(encoding="utf-8").split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            line = re.sub(r"`[^`]*`", "", line)
            found += [(target, number) for target in re.findall(r"\]\(([^)\s]+)\)", line)]
    return found


def test_every_relative_link_points_at_a_file_and_heading():
    checked = 0
    for page in PAGES:
        for target, number in links(page):
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            goal = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO)}:{number}: {target}"
            assert goal.exists(), f"{where}: no such file"
            if anchor and goal.suffix == ".md":
                assert anchor in anchors(goal), f"{where}: no such heading"
            checked += 1
    assert checked > 0
