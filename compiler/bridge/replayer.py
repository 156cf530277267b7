"""Replay: read recorded outputs again with another parser, and say what changed.

The check to run before switching a template revision, a tplparse version or a runtime:
each transcript's output is fed to the new parser once whole and once in the chunks it
arrived in, from the state the recorded parser started in (the output was generated after
that prompt, whatever a new template would write). What is compared:

    content, reasoning_content    the texts
    tool_calls                    each call's name and arguments, in order (ids are not compared:
                                  a call without an id of the model's gets a number)
    errors                        each error's kind, in order
    finish_reason                 the message's
    stream                        the chunked replay's message against the one-shot replay's

A change in the deltas alone (the same message, split into other deltas) is said, not
counted: a client that concatenates deltas sees the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .transcripts import Chunk, DeltaDigest, Transcript

# make(tools, generation_prompt, start) -> a parser with feed, end and message
ParserFactory = Callable[..., Any]

COMPARED = ("content", "reasoning_content", "tool_calls", "errors", "finish_reason")


@dataclass
class Change:
    """One field the replay reads differently."""

    field: str  # one of COMPARED, or "stream" (the chunked replay differs from the one-shot)
    recorded: Any
    replayed: Any


@dataclass
class Replayed:
    """One transcript read again."""

    where: str  # file:line
    transcript: Transcript
    changes: list[Change] = field(default_factory=list)
    deltas_changed: bool = False  # the chunked replay's deltas differ from the recorded ones
    message: dict | None = None  # the one-shot replay's message

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def replay(transcript: Transcript, make: ParserFactory, where: str = "",
           start: str | None = None) -> Replayed:
    """`transcript` read again by parsers from `make`, one-shot and in its recorded chunks;
    `start` overrides the recorded start state."""
    start = start or transcript.start
    one_shot, _ = _read(transcript, make, transcript.whole(), start)
    chunked, digest = _read(transcript, make, transcript.chunks, start)
    result = Replayed(where, transcript, message=one_shot)
    recorded = _compared(transcript.message)
    replayed = _compared(one_shot)
    result.changes = [Change(name, recorded[name], replayed[name]) for name in COMPARED
                      if recorded[name] != replayed[name]]
    if chunked != one_shot:
        result.changes.append(Change("stream", one_shot, chunked))
    result.deltas_changed = digest != transcript.deltas_digest
    return result


def _read(transcript: Transcript, make: ParserFactory, chunks: list[Chunk],
          start: str | None) -> tuple[dict, str]:
    """The message a new parser reads from `chunks`, and the digest of its deltas."""
    parser = make(tools=transcript.tools, generation_prompt=transcript.generation_prompt,
                  start=start)
    digest = DeltaDigest()
    for chunk in chunks:
        digest.add(parser.feed(chunk))
    digest.add(parser.end(transcript.finish_reason))
    return parser.message, digest.hexdigest()


def _compared(message: dict) -> dict:
    """The parts of a message a replay compares."""
    calls = [{"name": (c.get("function") or {}).get("name"),
              "arguments": (c.get("function") or {}).get("arguments")}
             for c in message.get("tool_calls") or []]
    return {"content": message.get("content"),
            "reasoning_content": message.get("reasoning_content"), "tool_calls": calls,
            "errors": [e.get("kind") for e in message.get("errors") or []],
            "finish_reason": message.get("finish_reason")}


def report_json(results: list[Replayed]) -> dict:
    """The replay as JSON (`tplparse replay --json`)."""
    return {"transcripts": len(results), "changed": sum(r.changed for r in results),
            "results": [{"where": r.where, "family": r.transcript.family,
                         "template_sha256": r.transcript.template_sha256, "changed": r.changed,
                         "deltas_changed": r.deltas_changed,
                         "changes": [{"field": c.field, "recorded": c.recorded,
                                      "replayed": c.replayed}
                                     for c in r.changes]} for r in results]}
