"""Transcripts: a model's output as it streamed, kept so it can be read again later.

A transcript holds what a parse depends on and what it gave: the template (sha256, name,
family), tplparse's version, the model's name when known, the generation prompt (what the
template wrote to open the assistant turn, not the conversation) and the state the parser
started in, the tools offered, the raw chunks with their boundaries as they arrived, the
finish reason, the parsed message, and a digest of the deltas. `tplparse replay` reads them
again with another parser (a new template revision, a new tplparse) and says what changed.

One format for every writer (`tplparse parse --record`, `tplparse serve --record`, the
`Recorder` of the Python API): JSON Lines, one transcript per line, each an object whose
`format` is "tplparse-transcript" and whose `version` is `TRANSCRIPT_VERSION`. A chunk is a
JSON string, or `{"bytes": BASE64}` for a chunk fed as bytes (which may split a UTF-8
sequence: kept as it was fed). Raw output can hold secrets: a transcript is written only
where a user asks, and `TranscriptFolder` bounds how many are kept and for how long.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..jsontext import loads
from ..version import __version__

TRANSCRIPT_FORMAT = "tplparse-transcript"
TRANSCRIPT_VERSION = 1

Chunk = str | bytes
# the parser's start states (runtime/protocol.py)
STARTS = ("reasoning", "content", "after_reasoning", None)


@dataclass
class Transcript:
    """One output, as it streamed, and what the parser read from it."""

    template_sha256: str
    template_name: str
    family: str
    chunks: list[Chunk]  # as they arrived (the boundaries are part of the record)
    finish_reason: str
    # the parsed message (role, content, reasoning_content, tool_calls, errors, finish_reason)
    message: dict
    deltas_digest: str  # sha256 of the deltas, one canonical JSON line each, in order
    tools: list | None = None
    # "reasoning", "content" or "after_reasoning": where the parser started
    start: str | None = None
    generation_prompt: str | None = None  # what the template wrote to open the assistant turn
    model: str | None = None
    writer: str = "python"  # parse, serve, python
    tplparse_version: str = __version__
    time: str = ""  # UTC, ISO 8601, when the output ended

    def whole(self) -> list[Chunk]:
        """The output in as few chunks as its kinds allow: one, unless text and bytes chunks
        alternate (then each run of a kind joined)."""
        return list(_joined(self.chunks))

    def to_json(self) -> dict:
        return {"format": TRANSCRIPT_FORMAT, "version": TRANSCRIPT_VERSION, "time": self.time,
                "tplparse_version": self.tplparse_version, "writer": self.writer,
                "template_sha256": self.template_sha256, "template_name": self.template_name,
                "family": self.family, "model": self.model,
                "generation_prompt": self.generation_prompt, "start": self.start,
                "tools": self.tools, "chunks": [_chunk_json(c) for c in self.chunks],
                "finish_reason": self.finish_reason, "message": self.message,
                "deltas_digest": self.deltas_digest}

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Transcript:
        """A transcript from its JSON object; an object that is not one is an InputError
        naming `where` and the field."""
        if not isinstance(obj, dict):
            raise InputError(f"{where}: not a transcript (a JSON object is expected)")
        if obj.get("format") != TRANSCRIPT_FORMAT:
            raise InputError(f"{where}: not a transcript (format is {obj.get('format')!r}, not "
                             f"{TRANSCRIPT_FORMAT!r})")
        if obj.get("version") != TRANSCRIPT_VERSION:
            raise InputError(f"{where}: transcript version {obj.get('version')!r}: this tplparse "
                             f"reads version {TRANSCRIPT_VERSION}")
        for key, kinds in _FIELDS.items():
            if not isinstance(obj.get(key), kinds):
                raise InputError(f"{where}: {key}: expected {_kind_names(kinds)}, not "
                                 f"{type(obj.get(key)).__name__}")
        if obj["start"] not in STARTS:
            raise InputError(f"{where}: start: expected one of {', '.join(map(repr, STARTS[:-1]))} "
                             f"or null, not {obj['start']!r}")
        chunks = [_chunk_of(c, f"{where}: chunks[{i}]") for i, c in enumerate(obj["chunks"])]
        return cls(obj["template_sha256"], obj["template_name"], obj["family"], chunks,
                   obj["finish_reason"], obj["message"], obj["deltas_digest"], obj["tools"],
                   obj["start"], obj["generation_prompt"],
                   obj["model"], obj["writer"], obj["tplparse_version"], obj["time"])


_FIELDS: dict[str, tuple] = {
    "time": (str,), "tplparse_version": (str,), "writer": (str,), "template_sha256": (str,),
    "template_name": (str,), "family": (str,), "model": (str, type(None)),
    "generation_prompt": (str, type(None)), "start": (str, type(None)), "tools": (list, type(None)),
    "chunks": (list,), "finish_reason": (str,),
    "message": (dict,), "deltas_digest": (str,),
}


def _kind_names(kinds: tuple) -> str:
    names = {str: "a string", list: "a list", dict: "an object", type(None): "null"}
    return " or ".join(names[k] for k in kinds)


def _chunk_json(chunk: Chunk):
    return chunk if isinstance(chunk, str) else {"bytes": base64.b64encode(chunk).decode("ascii")}


def _chunk_of(value: Any, where: str) -> Chunk:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"bytes"} and isinstance(value["bytes"], str):
        try:
            return base64.b64decode(value["bytes"], validate=True)
        except ValueError:
            raise InputError(f"{where}: bytes: not base64") from None
    raise InputError(f"{where}: expected a string or {{\"bytes\": BASE64}}")


def _joined(chunks: list[Chunk]) -> Iterator[Chunk]:
    """Each run of chunks of one kind (text, bytes) joined into one."""
    run: list[Chunk] = []
    for chunk in chunks:
        if run and type(chunk) is not type(run[0]):
            yield _join(run)
            run = []
        run.append(chunk)
    if run:
        yield _join(run)


def _join(run: list[Chunk]) -> Chunk:
    return "".join(run) if isinstance(run[0], str) else b"".join(run)  # type: ignore[arg-type]


class DeltaDigest:
    """sha256 over deltas, each as one canonical JSON line (sorted keys), in order."""

    def __init__(self):
        self._hash = hashlib.sha256()

    def add(self, deltas: list[dict]) -> None:
        for delta in deltas:
            self._hash.update(json.dumps(delta, sort_keys=True, ensure_ascii=False).encode("utf-8")
                              + b"\n")

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


@dataclass
class Identity:
    """What a transcript says of where the parser came from."""

    template_sha256: str
    template_name: str
    family: str
    model: str | None = None


# The characters of the generation prompt a transcript keeps: its tail (the assistant turn's
# header and what opens its reasoning), not the conversation before it.
PROMPT_TAIL = 256


class Recorder:
    """A streaming parser that keeps a transcript of what it is fed: `feed` and `end` as the
    parser's (the same deltas), then `transcript()`. Works with any parser that has `feed`,
    `end` and `message` (the runtime's, a generated module's); the start state recorded is
    the parser's own (`start_state`), else `start` as given. Of `generation_prompt` only its
    last PROMPT_TAIL characters are kept."""

    def __init__(self, parser, identity: Identity, tools: list | None = None,
                 start: str | None = None, generation_prompt: str | None = None,
                 writer: str = "python"):
        self.parser = parser
        self._identity, self._tools, self._writer = identity, tools, writer
        self._start = getattr(parser, "start_state", None) or start
        self._generation_prompt = generation_prompt[-PROMPT_TAIL:] \
            if generation_prompt is not None else None
        self._chunks: list[Chunk] = []
        self._digest = DeltaDigest()
        self._finish: str | None = None

    def feed(self, chunk: Chunk) -> list[dict]:
        deltas = self.parser.feed(chunk)
        if chunk:
            self._chunks.append(chunk if isinstance(chunk, str) else bytes(chunk))
        self._digest.add(deltas)
        return deltas

    def end(self, finish_reason: str = "stop") -> list[dict]:
        deltas = self.parser.end(finish_reason)
        self._digest.add(deltas)
        self._finish = finish_reason
        return deltas

    @property
    def message(self) -> dict:
        return self.parser.message

    def transcript(self) -> Transcript:
        """The transcript of the output fed so far (after `end`)."""
        if self._finish is None:
            raise ValueError("a transcript is complete only after end()")
        i = self._identity
        return Transcript(i.template_sha256, i.template_name, i.family, list(self._chunks),
                          self._finish, self.parser.message, self._digest.hexdigest(), self._tools,
                          self._start,
                          self._generation_prompt, i.model, self._writer, time=_now())


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def append_transcript(path: str | Path, transcript: Transcript) -> None:
    """Append `transcript` to the JSON Lines file `path` (an OSError is the caller's to say)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(transcript.to_json(), ensure_ascii=False) + "\n")


def read_transcripts(path: str | Path) -> list[Transcript]:
    """Every transcript of the JSON Lines file `path` (blank lines skipped); a line that is not
    one is an InputError naming the file and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        obj = loads(line, f"{path}:{number}", InputError)
        out.append(Transcript.from_json(obj, f"{path}:{number}"))
    return out


@dataclass
class Retention:
    """How many transcripts a folder keeps, and for how long (None: no bound of that kind)."""

    keep: int | None = 1000
    max_age_days: float | None = 7.0


@dataclass
class TranscriptFolder:
    """A folder of transcripts, one file per output (`tplparse serve --record DIR`), pruned to
    its `retention` after each write: the oldest past `keep`, and any older than
    `max_age_days`."""

    path: Path
    retention: Retention = field(default_factory=Retention)
    _count: int = field(default=0, init=False, repr=False)  # files this writer wrote

    def __post_init__(self):
        self.path = Path(self.path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"{self.path}: cannot make the transcript folder: "
                             f"{e.strerror or e}") from None

    def write(self, transcript: Transcript, name: str) -> Path:
        """Write `transcript` as `<time>-<n>-<name>.jsonl` (file names sort by time), then prune."""
        self._count += 1
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        target = self.path / f"{stamp}-{os.getpid()}-{self._count:06d}-{name}.jsonl"
        append_transcript(target, transcript)
        self.prune()
        return target

    def prune(self) -> None:
        files = sorted(self.path.glob("*.jsonl"))
        retention = self.retention
        if retention.max_age_days is not None:
            oldest = time.time() - retention.max_age_days * 86400
            for f in list(files):
                if _mtime(f) < oldest:
                    _remove(f)
                    files.remove(f)
        if retention.keep is not None and len(files) > retention.keep:
            for f in files[:len(files) - retention.keep]:
                _remove(f)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return float("inf")  # gone already (another writer pruned it)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
