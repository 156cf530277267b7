"""`tplparse build` in another repository: a manifest of its own models, outside this checkout.

The serving repository lists its models in a manifest (paths relative to the manifest),
regenerates their parsers and grammars with `tplparse build --manifest PATH -o DIR`, and
runs `tplparse build --check` in CI or as a pre-commit hook: 0 fresh, 1 stale or a
protocol changed, 2 bad input.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, run_cli


@pytest.fixture
def serving_repo(tmp_path):
    """A repository outside the checkout: models/ beside ci/families.toml, two families."""
    assert REPO not in tmp_path.parents
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(EXAMPLES / "templates" / "chatml-think-tools.jinja", models / "chat.jinja")
    shutil.copy(EXAMPLES / "bracket-tools.gguf", models / "bracket.gguf")
    manifest = tmp_path / "ci" / "families.toml"
    manifest.parent.mkdir()
    manifest.write_text(
        '[[family]]\nname = "chat"\nsource = "../models/chat.jinja"\neos_token = "<|im_end|>"\n\n'
        '[[family]]\nname = "bracket"\nsource = "../models/bracket.gguf"\n', encoding="utf-8")
    return tmp_path, manifest


def test_build_writes_then_checks_fresh(serving_repo):
    root, manifest = serving_repo
    out = root / "parsers"
    built = run_cli("build", "--manifest", manifest, "-o", out, cwd=root)
    assert built.returncode == 0, built.stderr
    for name in ("chat", "bracket"):
        for ext in ("peg", "gbnf", "lark", "spec.json"):
            assert (out / "grammars" / f"{name}.{ext}").is_file(), (name, ext)
        assert (out / "generated" / f"{name}.py").is_file()
    assert not (manifest.parent / "grammars").exists()  # -o, not the manifest's folder
    fresh = run_cli("build", "--manifest", manifest, "-o", out, "--check", cwd=root)
    assert fresh.returncode == 0 and "all 2 families are current" in fresh.stdout


def test_check_names_the_family_whose_protocol_changed(serving_repo):
    root, manifest = serving_repo
    out = root / "parsers"
    assert run_cli("build", "--manifest", manifest, "-o", out).returncode == 0
    # The model's template is updated: a think block that another marker closes.
    chat = root / "models" / "chat.jinja"
    chat.write_text(chat.read_text(encoding="utf-8").replace("</think>", "</reasoning>"), encoding="utf-8")
    stale = run_cli("build", "--manifest", manifest, "-o", out, "--check")
    assert stale.returncode == 1
    changed = next(line for line in stale.stderr.splitlines() if line.startswith("protocol changed: chat: "))
    assert "reasoning.end" in changed and "tool_calls" not in changed  # (its calls did not change)
    assert "grammars/chat.spec.json" in stale.stderr and "bracket" not in stale.stderr.split("stale")[0]
    # A build writes the new files; the check is then fresh again.
    assert run_cli("build", "--manifest", manifest, "-o", out).returncode == 0
    assert run_cli("build", "--manifest", manifest, "-o", out, "--check").returncode == 0


@pytest.mark.parametrize("entry, message", [
    ('name = "chat"\nsource = "../models/nowhere.jinja"', "nowhere.jinja: no such file or folder"),
    ('name = "../escape"\nsource = "../models/chat.jinja"', "name '../escape' must be lower-case"),
    ('name = "chat"\nsource = "../models/chat.jinja"\nbos = "<s>"', "unknown key(s) 'bos'"),
    ('name = "chat"\nsource = "../models/chat.jinja"\neos_token = 2', "eos_token must be a string"),
    ('name = "chat"', "needs a name and a source"),
    ('name = "x_y"\nsource = "../models/chat.jinja"', "name 'x_y' must be lower-case letters and digits"),
    ('name = "tplparse-runtime"\nsource = "../models/chat.jinja"', "is taken by a file every build writes"),
    ('name = "chat"\nsource = "../models"', "family chat: "),
])
def test_bad_manifests_exit_2(serving_repo, entry, message):
    root, manifest = serving_repo
    manifest.write_text(f"[[family]]\n{entry}\n", encoding="utf-8")
    result = run_cli("build", "--manifest", manifest, "-o", root / "out", "--check")
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_an_optional_family_whose_source_is_absent_is_skipped_and_said(serving_repo):
    root, manifest = serving_repo
    manifest.write_text(manifest.read_text() + '\n[[family]]\nname = "later"\nsource = "../models/later.gguf"\n'
                        'optional = true\n', encoding="utf-8")
    result = run_cli("build", "--manifest", manifest, "-o", root / "out")
    assert result.returncode == 0, result.stderr
    assert "skipped later" in result.stderr and "built 2 families" in result.stdout


def test_an_output_file_that_is_not_utf8_is_rewritten(serving_repo):
    root, manifest = serving_repo
    out = root / "parsers"
    assert run_cli("build", "--manifest", manifest, "-o", out).returncode == 0
    (out / "grammars" / "chat.lark").write_bytes(b"\xff\xfe not a grammar")
    (out / "grammars" / "chat.spec.json").write_text("[1, 2]", encoding="utf-8")
    stale = run_cli("build", "--manifest", manifest, "-o", out, "--check")
    assert stale.returncode == 1 and "Traceback" not in stale.stderr
    assert "grammars/chat.lark" in stale.stderr and "the spec file written before does not read" in stale.stderr
    assert run_cli("build", "--manifest", manifest, "-o", out).returncode == 0
    assert run_cli("build", "--manifest", manifest, "-o", out, "--check").returncode == 0


def test_the_pre_commit_hook_runs_the_check():
    hooks = (REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    assert "entry: tplparse build --check" in hooks and "pass_filenames: false" in hooks
    workflow = (REPO / "examples" / "ci" / "tplparse-build.yml").read_text(encoding="utf-8")
    assert "tplparse build --manifest" in workflow and "--check" in workflow


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_parallel_and_cached_builds_write_the_same_bytes_as_a_serial_one(serving_repo):
    """`--jobs` compiles families at a time and the cache skips the compile of what did not
    change: neither changes a byte of what a serial, uncached build writes (issue #32)."""
    root, manifest = serving_repo
    serial, parallel = root / "serial", root / "parallel"
    assert run_cli("build", "--manifest", manifest, "-o", serial, "-j", "1", "--no-cache").returncode == 0
    assert run_cli("build", "--manifest", manifest, "-o", parallel, "-j", "2").returncode == 0
    assert _tree(parallel) == _tree(serial)
    cached = run_cli("build", "--manifest", manifest, "-o", parallel, "-j", "2")
    assert cached.returncode == 0 and "0 files changed" in cached.stdout and _tree(parallel) == _tree(serial)


def test_the_cache_is_keyed_by_the_template_and_by_tplparse_itself(serving_repo, tmp_path, monkeypatch):
    """An entry is used where template, tokens, override and this tplparse's own source are
    the same, and never otherwise: an entry written by another tplparse is not read."""
    from tplparse import pipeline

    root, manifest = serving_repo
    out = root / "out"
    cache = pipeline.BuildCache(tmp_path / "cache")
    assert not pipeline.build(manifest, out_dir=out, cache=cache).unproved
    entries = sorted((tmp_path / "cache").glob("*.json"))
    assert len(entries) == 2
    # An entry tampered with is what a build with the same key writes: the cache is read.
    for entry in entries:
        entry.write_text(entry.read_text(encoding="utf-8").replace("@generated by tplparse", "@generated by TAMPERED"),
                         encoding="utf-8")
    assert "grammars/chat.gbnf" in pipeline.build(manifest, out_dir=out, cache=cache).changed
    assert "TAMPERED" in (out / "grammars" / "chat.gbnf").read_text(encoding="utf-8")
    # Another tplparse (its source changed): the same templates compile again.
    monkeypatch.setattr(pipeline, "_tplparse_identity", lambda: "another tplparse")
    rebuilt = pipeline.build(manifest, out_dir=out, cache=pipeline.BuildCache(tmp_path / "cache"))
    assert "grammars/chat.gbnf" in rebuilt.changed
    assert "TAMPERED" not in (out / "grammars" / "chat.gbnf").read_text(encoding="utf-8")
    assert len(list((tmp_path / "cache").glob("*.json"))) == 4
