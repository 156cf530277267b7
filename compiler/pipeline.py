"""The pipeline from a template to its files, for one template or a manifest of families.

    load -> probe -> spec -> grammar IR -> PEG, GBNF, Lark;  spec -> reading tables -> parser module
                             proof: the parser and the grammar read back the template's renders

`export_vllm(template)` and `export_response_template(template)` are a proved compile's vLLM
plugin and transformers response_template (tplparse.export).
`compile_template(template)` probes, proves and returns the files of one template (relative
path -> text): grammars/<family>.peg, .gbnf, .lark and .spec.json, and the parser under generated/
(the family's module, the shared runtime and the folder's __init__.py; or one standalone
file). A template whose parser does not prove is not compiled unless `allow_partial`, and
then its spec and module record the turns that did not prove. `write_artifacts` writes the
files under a directory; `build` does every family of a manifest (families.toml) and, with
`check`, writes nothing and says which files a fresh build would change. Files are written
atomically (a temporary file, then a rename).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .bridge.grammar import GrammarForm, GrammarRefused, GrammarRequest, grammar_for
from .check.proof import Proof, prove
from .emit.module import (
    RUNTIME_MODULE,
    family_module,
    module_name,
    package_init,
    runtime_source,
    standalone_module,
)
from .errors import InputError, TplparseError
from .export.response_template import response_template
from .export.vllm_plugin import VllmPlugin, vllm_plugin
from .grammar.reading import reading_tables
from .probe import probe
from .probe.overrides import Override, blamed_on, read_override
from .source import ChatTemplate, load
from .spec import ProtocolSpec, SpecError
from .spec.diff import protocol_differences

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@dataclass
class Compiled:
    spec: ProtocolSpec
    proof: Proof
    # relative path -> text; empty when the proof failed (and no allow_partial)
    files: dict[str, str]


def compile_template(template: ChatTemplate, standalone: bool = False, allow_partial: bool = False,
                     override: Override | None = None) -> Compiled:
    """Probe, prove, and (when proved, or allowed partially) the files of one template; with
    a user's `override` (tplparse.probe.overrides.read_override) applied to its spec."""
    spec = probe(template, override=override)
    with blamed_on(override):
        proof = prove(template, spec, override=override)
        if not proof.ok and not allow_partial:
            return Compiled(spec, proof, {})
        spec.unproved = [f"{t.turn}: {t.detail}" for t in proof.unproved] \
            + ([proof.error] if proof.error else [])
        return Compiled(spec, proof, artifacts(template, spec, standalone))


def artifacts(template: ChatTemplate, spec: ProtocolSpec,
              standalone: bool = False) -> dict[str, str]:
    """Relative path -> text of the files of one template's spec."""
    tables = reading_tables(spec, template.special_tokens)
    family = spec.family
    files = {f"grammars/{family}.{form.value}": _grammar(template, spec, form)
             for form in (GrammarForm.PEG, GrammarForm.GBNF, GrammarForm.LARK)}
    files[f"grammars/{family}.spec.json"] = spec.to_json()
    module = f"generated/{module_name(family)}.py"
    if standalone:
        files[module] = standalone_module(spec, tables)
    else:
        files[module] = family_module(spec, tables)
        files[f"generated/{RUNTIME_MODULE}.py"] = runtime_source()
        files["generated/__init__.py"] = package_init()
    return files


def export_vllm(template: ChatTemplate) -> tuple[Compiled, VllmPlugin | None]:
    """The vLLM plugin of one template (tplparse.export.vllm_plugin), from a proved compile
    only: (the compile, its plugin; None when the parser did not prove)."""
    return _exported(template,
                     lambda spec: vllm_plugin(spec, reading_tables(spec, template.special_tokens)))


def export_response_template(template: ChatTemplate) -> tuple[Compiled, dict | None]:
    """The family's transformers response_template (tplparse.export.response_template), from a
    proved compile only: (the compile, the template; None when the parser did not prove).
    CannotExport names a construct the format cannot express."""
    return _exported(template, response_template)


def _exported(template: ChatTemplate, export):
    """Probe and prove (an export needs no grammar or module files), then `export(spec)`."""
    spec = probe(template)
    compiled = Compiled(spec, prove(template, spec), {})
    return compiled, export(spec) if compiled.proof.ok else None


def _grammar(template: ChatTemplate, spec: ProtocolSpec, form: GrammarForm) -> str:
    """The family's grammar (any output, any tool) in `form`; a Lark grammar compiled by
    llguidance when it is installed (the proof checks the GBNF grammar; this keeps a Lark
    grammar llguidance refuses from being written)."""
    try:
        return grammar_for(template, spec, GrammarRequest(form),
                           check=form == GrammarForm.LARK).text
    except GrammarRefused as e:
        raise InputError(f"{spec.family}: {e}") from None


def write_text_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename, so
    an error or an interrupt never leaves a half-written file behind. A path that cannot be
    written (a file where a folder should be, no permission, a read-only file system) is an
    InputError naming it."""
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        # (mkstemp makes the file 0600: give it the mode of the file it replaces, or what a
        # plain open() would have given it)
        os.chmod(temporary, path.stat().st_mode & 0o7777 if path.is_file() else 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException as e:
        if temporary is not None:
            try:
                os.unlink(temporary)
            except OSError:
                pass
        if isinstance(e, OSError):
            raise InputError(f"{path}: cannot write: "
                             f"{e.strerror or e}{_not_a_folder(path)}") from None
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _not_a_folder(path: Path) -> str:
    """Names the ancestor of `path` that is a file where a folder must be, if there is one."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            return f" ({parent} is not a folder)"
    return ""


def write_files(files: dict[str, str], out_dir: Path) -> list[Path]:
    """Write `files` (relative path -> text) under `out_dir`, each atomically; every text is
    checked to be Unicode first, so that a file that cannot be written stops the write before
    a folder or a file is made, not halfway through."""
    for relative, text in files.items():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InputError(f"{out_dir / relative}: not written: it would hold a lone surrogate "
                             f"({text[e.start]!r} at character {e.start}), which is not Unicode "
                             "text; nothing was written") from None
    written = []
    for relative, text in files.items():
        path = out_dir / relative
        write_text_atomically(path, text)
        written.append(path)
    return written


# --- the manifest ------------------------------------------------------------------------


@dataclass
class Family:
    name: str
    source: Path
    tokens: dict
    # a source that may be absent (skipped, said): data that is not always checked out
    optional: bool = False
    # a user's override file, relative to the manifest's folder (as the manifest writes it)
    override: str = ""


# A family name becomes file names (grammars/<name>.gbnf, generated/<module>.py): lower-case
# words joined by "-", as the loader names a family it is given.
FAMILY_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
RESERVED_MODULES = {RUNTIME_MODULE, "__init__"}
MANIFEST_KEYS = {"name", "source", "optional", "override"}


def read_manifest(path: Path) -> list[Family]:
    """The [[family]] entries of a manifest: name, source (relative to the manifest's
    folder: a .jinja, a tokenizer_config.json, a model folder or a GGUF), bos_token /
    eos_token (for a source that names none), optional, override (a user's override file,
    relative to the manifest's folder)."""
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a manifest")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such manifest") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: the manifest is not UTF-8") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read the manifest: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: invalid TOML: {e}") from None
    entries = data.get("family", [])
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{path}: no [[family]] entries")
    families: list[Family] = []
    for number, entry in enumerate(entries, 1):
        where = f"{path}: [[family]] {number}"
        if not isinstance(entry, dict) or "name" not in entry or "source" not in entry:
            raise InputError(f"{where}: needs a name and a source")
        name, source = entry["name"], entry["source"]
        if not isinstance(name, str) or not FAMILY_NAME.fullmatch(name):
            raise InputError(f"{where}: name {name!r} must be lower-case letters and digits in "
                             "words joined by '-' (it names the family's files)")
        if module_name(name) in RESERVED_MODULES:
            raise InputError(f"{where}: name {name!r} is taken by a file every build writes")
        if not isinstance(source, str) or not source:
            raise InputError(f"{where} ({name}): source must be a path")
        unknown = [k for k in entry if k not in MANIFEST_KEYS and not k.endswith("_token")]
        if unknown:
            raise InputError(f"{where} ({name}): unknown key(s) {', '.join(map(repr, unknown))} "
                             f"(known: name, source, optional, override, bos_token, eos_token)")
        tokens = {k: v for k, v in entry.items() if k.endswith("_token")}
        bad = [k for k, v in tokens.items() if not isinstance(v, str)]
        if bad:
            raise InputError(f"{where} ({name}): {', '.join(bad)} must be a string")
        optional = entry.get("optional", False)
        if not isinstance(optional, bool):
            raise InputError(f"{where} ({name}): optional must be true or false")
        override = entry.get("override", "")
        if not isinstance(override, str) or ("override" in entry and not override):
            raise InputError(f"{where} ({name}): override must be the path of an override file")
        if any(f.name == name for f in families):
            raise InputError(f"{where}: the family name {name!r} is used twice")
        families.append(Family(name, path.parent / source, tokens, optional, override))
    return families


def family_template(family: Family) -> ChatTemplate:
    template = load(family.source, family=family.name)
    return template.with_tokens(**family.tokens) if family.tokens else template


def family_override(family: Family, manifest: Path) -> Override | None:
    """The family's override file, read and checked; the spec records it by the path the
    manifest gives (the same on every machine)."""
    if not family.override:
        return None
    return read_override(manifest.parent / family.override, name=family.override)


@dataclass
class BuildResult:
    built: list[str] = field(default_factory=list)  # families built (or checked)
    # optional families whose source is not here
    skipped: list[Family] = field(default_factory=list)
    # their parser does not read back their renders
    unproved: list[Proof] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # files written (or, with check, stale)
    # generated files no family makes any more (or would remove)
    removed: list[str] = field(default_factory=list)
    # family -> the protocol fields that changed
    protocol_changed: dict[str, list[str]] = field(default_factory=dict)


_STAMP = "@generated by tplparse"  # (after "#" or "//": the comment of each file kind)


def _family_files(family: Family) -> set[str]:
    """The files a family's build writes, whatever its template says."""
    return {f"grammars/{family.name}.{ext}" for ext in ("peg", "gbnf", "lark", "spec.json")} | {
        f"generated/{module_name(family.name)}.py"}


def _orphans(root: Path, made: set[str]) -> list[str]:
    """Files tplparse generated under root that no family makes now (a renamed or dropped
    family)."""
    found = []
    for folder, patterns in (("grammars", ("*.peg", "*.gbnf", "*.lark", "*.spec.json")),
                             ("generated", ("*.py",))):
        for pattern in patterns:
            for path in sorted((root / folder).glob(pattern)):
                relative = f"{folder}/{path.name}"
                if relative in made:
                    continue
                head = path.read_text(encoding="utf-8", errors="replace")[:4096]
                if _STAMP in head or (path.name.endswith(".spec.json")
                                      and '"template_sha256"' in head):
                    found.append(relative)
    return found


def _protocol_changes(written: str, spec: ProtocolSpec) -> list[str]:
    """The protocol fields in which `spec` differs from the spec file written before; a
    file that is not a spec of this version says so as its one change."""
    try:
        before = ProtocolSpec.from_json(written)
    except (ValueError, TypeError, KeyError, AttributeError, SpecError) as e:
        return [f"(the spec file written before does not read: {e})"]
    return [d.field for d in protocol_differences(before, spec)]


# --- one family's compile, cached, in parallel -------------------------------------------

@dataclass
class _Outcome:
    """What compiling one family of a manifest came to."""

    files: dict[str, str] = field(default_factory=dict)  # relative path -> text, when it proved
    proof: Proof | None = None  # when it did not prove
    spec_json: str = ""  # the spec file's text, when it proved (for the protocol-change report)
    error: str = ""  # the template did not load or probe: the message


def _compile_family(family: Family, manifest: Path, cache: BuildCache | None) -> _Outcome:
    """One family's files: from the cache where the same template, tokens and override were
    compiled by this same tplparse, else compiled (and, proved, cached)."""
    try:
        template = family_template(family)
        override = family_override(family, manifest)
        key = cache.key(family, template, override) if cache else ""
        found = cache.get(key) if cache else None
        if found is not None and f"grammars/{family.name}.spec.json" in found:
            return _Outcome(files=found, spec_json=found[f"grammars/{family.name}.spec.json"])
        compiled = compile_template(template, override=override)
    except TplparseError as e:
        return _Outcome(error=f"{manifest}: family {family.name}: {e}")
    if not compiled.proof.ok:
        return _Outcome(proof=compiled.proof)
    if cache:
        cache.put(key, compiled.files)
    return _Outcome(files=compiled.files,
                    spec_json=compiled.files[f"grammars/{family.name}.spec.json"])


def _compile_all(families: list[Family], manifest: Path, cache: BuildCache | None, jobs: int,
                 progress) -> list[_Outcome]:
    """Each family's outcome, in the manifest's order, compiled `jobs` at a time (forked
    workers: each compile is independent, so the files are the same as one by one)."""
    if jobs <= 1 or len(families) <= 1:
        outcomes = []
        for family in families:
            outcomes.append(_compile_family(family, manifest, cache))
            progress(family)
        return outcomes
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(min(jobs, len(families)),
                             mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(_compile_family, family, manifest, cache) for family in families]
        outcomes = []
        for family, future in zip(families, futures, strict=True):
            outcomes.append(future.result())
            progress(family)
        return outcomes


class BuildCache:
    """Compiled files by what decides them: a digest of the template (its text, tokens and
    names), the family's manifest entry, its override file, and this tplparse (its version and
    the bytes of its own source: a changed compiler never reads a stale entry). One JSON file
    per entry under `folder` (default: $TPLPARSE_CACHE_DIR, else ~/.cache/tplparse/build)."""

    def __init__(self, folder: Path | None = None):
        cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        default = cache_home / "tplparse" / "build"
        self.folder = folder or Path(os.environ.get("TPLPARSE_CACHE_DIR") or default)
        self.identity = _tplparse_identity()

    def key(self, family: Family, template: ChatTemplate, override: Override | None) -> str:
        import hashlib
        import json

        decided_by = {
            "tplparse": self.identity,
            "family": [family.name, sorted(family.tokens.items()), family.override],
            "template": [template.source, template.name, template.family, template.origin,
                         template.model_slug, sorted(template.named_tokens.items()),
                         sorted(template.token_lists.items()),
                         list(template.end_of_turn),
                         list(template.special_tokens), list(template.control_tokens),
                         template.variant, sorted(template.variants.items())],
            "override": None if override is None
            else [override.name, override.file_sha256, override.patch],
        }
        text = json.dumps(decided_by, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> dict[str, str] | None:
        import json

        try:
            files = json.loads((self.folder / f"{key}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # (none yet, or unreadable: compiled again)
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            return None
        return files

    def put(self, key: str, files: dict[str, str]) -> None:
        import json

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_text_atomically(self.folder / f"{key}.json",
                                  json.dumps(files, ensure_ascii=False))
        except OSError:
            pass  # (a cache that cannot be written only costs the next build its time)


def _tplparse_identity() -> str:
    """This tplparse: its version, jinja2's (which renders the templates), and a digest of
    the package's own source files."""
    import hashlib

    import jinja2

    from .version import __version__

    digest = hashlib.sha256()
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".json", ".txt") \
                and "__pycache__" not in path.parts:
            name = str(path.relative_to(package)).encode()
            digest.update(name + b"\0" + path.read_bytes() + b"\0")
    return f"{__version__} jinja2 {jinja2.__version__} {digest.hexdigest()}"


def build(manifest: Path, check: bool = False, progress=lambda family: None,
          out_dir: Path | None = None, jobs: int = 1,
          cache: BuildCache | None = None) -> BuildResult:
    """Every family of the manifest, into `out_dir` (default: the manifest's folder):
    written, or (check) compared. Sources are relative to the manifest's folder. `jobs`
    families compile at a time; `cache` keeps what a family compiled to (None: compile all)."""
    root = out_dir if out_dir is not None else manifest.parent
    result = BuildResult()
    # shared files (the runtime, __init__.py) are the same for every family
    done: dict[str, str] = {}
    kept: set[str] = set()  # the files of families whose source is not here: left as they are
    present = []
    for family in read_manifest(manifest):
        if family.source.exists():
            present.append(family)
            continue
        if not family.optional:
            raise InputError(f"{manifest}: family {family.name}: {family.source}: no such file or "
                             "folder (mark the family optional = true if its source may be absent)")
        progress(family)
        result.skipped.append(family)
        kept |= _family_files(family)
    outcomes = _compile_all(present, manifest, cache, jobs, progress)
    for family, outcome in zip(present, outcomes, strict=True):
        if outcome.error:
            raise InputError(outcome.error)
        if outcome.proof is not None:
            result.unproved.append(outcome.proof)
            kept |= _family_files(family)
            continue
        for relative, text in outcome.files.items():
            if done.get(relative) == text:
                continue
            done[relative] = text
            path = root / relative
            written = path.read_bytes() if path.is_file() else None
            if written == text.encode("utf-8"):
                continue
            current = written.decode("utf-8", errors="replace") if written is not None else None
            if relative.endswith(".spec.json") and current is not None:
                changed = _protocol_changes(current, ProtocolSpec.from_json(outcome.spec_json))
                if changed:
                    result.protocol_changed[family.name] = changed
            if not check:
                write_text_atomically(path, text)
            result.changed.append(relative)
        result.built.append(family.name)
    for relative in _orphans(root, set(done) | kept):
        if not check:
            (root / relative).unlink()
        result.removed.append(relative)
    return result


__all__ = ["BuildCache", "BuildResult", "Compiled", "Family", "artifacts", "build",
           "compile_template", "family_override", "family_template", "read_manifest", "write_files",
           "write_text_atomically"]
