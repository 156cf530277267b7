"""Differential fuzz of the streaming parser: fed whole and fed in pieces, the same message.

    python tests/fuzz_stream.py --minutes 10 --seed 1 [--family STEM ...] [--unseen K] [--out FILE]

For every corpus template with a streaming parser (compiled in memory: the runtime, not the
committed modules), the seeds are the template's own renders of the standard turns, their
deviated forms (the tolerance rules, `tplparse.check.deviations`) and calls written by the
family's writer whose string value holds a marker of the format. Each run mutates a seed a
few times, with the format's own literals (the markers and the words they are made of):

    a marker, or a prefix of one, inserted (at a marker's edge, or anywhere)
    a marker written twice                   a marker cut (its end, or its start, left out)
    whitespace before or after a marker      a character that means something in a value
    the output cut (near a marker, or anywhere)
    a piece of another seed spliced in        whitespace inside a marker
    a long run of text (past where the parser drops what it consumed)

and reads it one-shot and fed in pieces: one character at a time, one byte at a time (UTF-8
sequences split), random cuts of the text, random cuts of its bytes. Under a finish reason
("stop", "length", "tool_calls"), with the standard tools or none, from the turn's start (or
another). The message must be the same (errors and offsets included), the deltas must add
up to it, and nothing may escape. A failure is shrunk (characters left out while it still
fails) and printed as a JSON reproducer, to keep as a test beside the rule it breaks;
tests/test_fuzz_stream.py runs a bounded, seeded part of this fuzz in CI.

`--unseen K` adds K formats per family that the corpus does not have: the family's spec with
the whitespace at and inside its literals changed (calls, arguments, section, turn layouts)
and, half the time, a marker or two renamed to begin as another marker does; its reading
tables made anew and its turns written by the spec's own writer, as an unseen template's
would be.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tplparse  # noqa: E402
from tplparse import runtime  # noqa: E402
from tplparse.bridge import compile_in_memory  # noqa: E402
from tplparse.check.deviations import deviations  # noqa: E402
from tplparse.check.outputs import STANDARD_TOOLS, model_outputs  # noqa: E402
from tplparse.spec import SpecError  # noqa: E402

from conftest import corpus_templates  # noqa: E402
from test_stream import check_deltas_add_up  # noqa: E402

FINISHES = ("stop", "length", "tool_calls")
EXTRA_TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
STARTS = ("content", "reasoning", None)
# Characters that mean something inside a value or between markers.
JUNK = ['"', "'", "\\", "{", "}", "[", "]", ",", ":", "=", "<", ">", "/", "|", "\n", " ", "é", "😀", "\u2028", "\r\n"]
SPACES = [" ", "\n", "\t", "  ", "\n\n", " \n"]


@dataclass
class Family:
    stem: str
    protocol: runtime.Protocol
    literals: list[str]  # the format's literals and their words, stripped
    seeds: list[tuple[str, str | None]] = field(default_factory=list)  # (text, start)
    spec: object = None
    special_tokens: tuple = ()


@dataclass
class Case:
    stem: str
    text: str
    start: str | None
    finish: str
    tools: bool

    def kwargs(self):
        return {"tools": STANDARD_TOOLS + EXTRA_TOOLS if self.tools else None, "start": self.start}


def load_family(path: Path) -> Family | None:
    """A corpus template's parser and seeds (None: it does not compile)."""
    template = tplparse.load(path)
    try:
        spec, protocol = compile_in_memory(template)
    except Exception:  # (a template the compiler refuses is not this fuzz's business)
        return None
    return family_from(path.stem, spec, protocol, model_outputs(template, spec), template.special_tokens)


def family_from(stem, spec, protocol, outputs, special_tokens=()) -> Family:
    """A family's fuzz seeds: its renders (`outputs`), their deviations, and calls its writer
    writes with a marker of the format inside a string value."""
    family = Family(stem, protocol, _literal_words(spec, protocol), spec=spec, special_tokens=special_tokens)
    for output in outputs:
        family.seeds.append((output.text, output.start.value))
        for deviation in deviations(output, spec):
            family.seeds.append((deviation.text, deviation.start.value))
    family.seeds += _written_calls(spec, family.literals)
    return family


def _literal_words(spec, protocol):
    words = {w for literal in protocol.literals for w in (literal, *literal.split())}
    return sorted(words | {m.strip() for m in spec.end_of_turn if m.strip()})


def _written_calls(spec, literals):
    found = []
    if spec.tool_calls is not None:
        for word in literals:
            if word.isalnum():
                continue
            try:
                text = spec.tool_calls.format([{"name": "convert_currency", "id": "a1b2c3d4e",
                                                "arguments": {"amount": f"EUR {word} 12", "target": "USD"}}])
            except SpecError:
                continue
            found.append((text, "content"))
    return found


# --- formats the corpus does not have: a family's spec with its literals' whitespace changed ---

MESSAGES = [
    {"role": "assistant", "content": "Twelve euros."},
    {"role": "assistant", "reasoning_content": "A conversion.", "content": "Twelve euros."},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "a1b2c3d4e", "type": "function", "function": {
        "name": "convert_currency", "arguments": {"amount": "EUR 12", "count": 3, "exact": False, "note": None,
                                                  "options": {"round": True}, "tags": ["fx"]}}}]},
    {"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "a1b2c3d4e", "type": "function", "function": {"name": "convert_currency", "arguments": {"amount": "x"}}},
        {"id": "f5g6h7i8j", "type": "function", "function": {"name": "get_time", "arguments": {"target": "y"}}}]},
    {"role": "assistant", "reasoning_content": "A call.", "content": "", "tool_calls": [{"id": "a1b2c3d4e",
        "type": "function", "function": {"name": "convert_currency", "arguments": {"amount": "EUR 12"}}}]},
]
WHITESPACE_EDITS = [
    lambda t: t + "\n", lambda t: "\n" + t, lambda t: t + " ", lambda t: " " + t, lambda t: t.strip(),
    lambda t: t.replace("\n", " "), lambda t: t.replace("\n", "\n\n"), lambda t: t.replace(">", "> ", 1),
    lambda t: t.replace("<", " <", 1), lambda t: t.rstrip() + "\n\n",
]


# A marker in a spec's literals: a special token, a tag, a bracketed word.
MARKER = re.compile(r"<\|[^|<>\"\\]+\|>|<｜[^｜<>\"\\]+｜>|</?[A-Za-z_:][A-Za-z0-9_:.-]*>|\[[A-Z_]+\]|<[a-z_]+\|>|<\|[a-z_]+>")


def _renamed_markers(rng, data):
    """The spec (as data) with one or two of its markers renamed to share a start with another
    (`<tool_call>` as `<|im_end|>x`, `<|im_enxd|>`, ...): stops that begin alike, one the
    start of another."""
    parts = {k: data.get(k) for k in ("tool_calls", "reasoning", "end_of_turn", "turns", "content_start", "content_end")}
    marks = sorted(set(MARKER.findall(json.dumps(parts, ensure_ascii=False))))
    blob = json.dumps(data, ensure_ascii=False)
    for _ in range(rng.randrange(1, 3) if len(marks) > 1 else 0):
        old, other = rng.sample(marks, 2)
        new = rng.choice([other + "x", other[:-1] + "x" + other[-1], other[:3] + old[3:], other[:-1] + old[1:]])
        if new != old and new not in marks:
            blob = blob.replace(json.dumps(old, ensure_ascii=False)[1:-1], json.dumps(new, ensure_ascii=False)[1:-1])
    return json.loads(blob)


def _edit_literals(rng, pieces, p):
    return [rng.choice(WHITESPACE_EDITS)(piece) if isinstance(piece, str) and piece.strip() and rng.random() < p
            else piece for piece in pieces]


def unseen_family(rng: random.Random, family: Family, n: int) -> Family | None:
    """`family` with its format changed where templates differ (whitespace at and inside the
    literals of its calls, arguments, section and turn layouts; markers renamed to begin as
    another does, half the time): its reading tables made anew,
    its seeds written by its own writer (None: the changed spec does not read its own turns)."""
    from tplparse.grammar.reading import reading_tables
    from tplparse.spec import ProtocolSpec

    data = family.spec.to_dict()
    p = rng.choice((0.2, 0.4, 0.7))
    tc = data.get("tool_calls")
    if tc:
        tc["call"] = _edit_literals(rng, tc["call"], p)
        for key in ("section_start", "section_end", "separator"):
            if tc[key].strip() and rng.random() < p:
                tc[key] = rng.choice(WHITESPACE_EDITS)(tc[key])
        tc["arguments"]["argument"] = {k: _edit_literals(rng, v, p) for k, v in tc["arguments"]["argument"].items()}
    data["turns"] = {k: _edit_literals(rng, v, p) for k, v in data["turns"].items()}
    if rng.random() < 0.5:
        data = _renamed_markers(rng, data)
    try:
        spec = ProtocolSpec.from_dict(data)
        protocol = runtime.Protocol(reading_tables(spec, family.special_tokens))
    except Exception:
        return None
    variant = Family(f"{family.stem}~{n}", protocol, _literal_words(spec, protocol), spec=spec,
                     special_tokens=family.special_tokens)
    for message in MESSAGES:
        try:
            text = spec.format(message)
        except (SpecError, KeyError, ValueError):
            continue
        for start in ("content", "reasoning"):
            try:
                read = runtime.parse(protocol, text, tools=STANDARD_TOOLS + EXTRA_TOOLS, start=start)
            except Exception:
                continue
            if not read["errors"] and (read["tool_calls"] or not message.get("tool_calls")):
                variant.seeds.append((text, start))  # (a turn the changed format reads as a turn)
                break
    variant.seeds += _written_calls(spec, variant.literals)
    return variant if variant.seeds else None


def load_families(stems=None) -> list[Family]:
    found = []
    for path in corpus_templates():
        if stems and path.stem not in stems:
            continue
        family = load_family(path)
        if family is not None and family.seeds:
            found.append(family)
    return found


# --- mutations ------------------------------------------------------------------------------


def _occurrences(text, literals):
    """(start, literal) of every literal of the format written in `text`."""
    found = []
    for literal in literals:
        at = text.find(literal)
        while at != -1:
            found.append((at, literal))
            at = text.find(literal, at + 1)
    return found


def mutate(rng: random.Random, text: str, literals: list[str], seeds=()) -> str:
    """One mutation of `text` (see the module's docstring)."""
    found = _occurrences(text, literals)
    kind = rng.randrange(9) if rng.random() > 0.04 else 9
    if kind == 9:  # a long run of text (past the length where the parser drops what it consumed)
        at = rng.randrange(len(text) + 1)
        return text[:at] + "".join(rng.choice(("lorem ", "ipsum ", "\n", "a < b ", "x")) for _ in range(900)) + text[at:]
    if kind == 7 and seeds:  # a piece of another seed of the family spliced in
        other = rng.choice(seeds)[0]
        a = rng.randrange(len(other) + 1)
        b = min(len(other), a + rng.randrange(1, 80))
        at = rng.randrange(len(text) + 1)
        return text[:at] + other[a:b] + text[at:]
    if kind == 8 and found:  # whitespace inside a marker, where its words meet or anywhere
        at, literal = rng.choice(found)
        k = rng.randrange(1, len(literal)) if len(literal) > 1 else 0
        return text[:at + k] + rng.choice(SPACES) + text[at + k:]
    if found and kind in (1, 2, 3):
        at, literal = rng.choice(found)
        end = at + len(literal)
        if kind == 1:  # written twice
            return text[:end] + (rng.choice(SPACES) if rng.random() < 0.3 else "") + literal + text[end:]
        if kind == 2:  # cut: its end, its start, or all of it left out
            k = rng.randrange(len(literal) + 1)
            return text[:at] + literal[:k] + text[end:] if rng.random() < 0.6 else text[:at] + literal[k:] + text[end:]
        space = rng.choice(SPACES)  # whitespace before or after it
        return text[:at] + space + text[at:] if rng.random() < 0.5 else text[:end] + space + text[end:]
    if kind in (0, 1, 2, 3):  # a marker, or a prefix of one, inserted
        literal = rng.choice(literals) if literals else "<"
        if rng.random() < 0.4:
            literal = literal[:rng.randrange(1, len(literal) + 1)]
        at = rng.choice([a for a, _ in found] + [a + len(m) for a, m in found]) if found and rng.random() < 0.6 \
            else rng.randrange(len(text) + 1)
        return text[:at] + literal + text[at:]
    if kind == 4:  # a character that means something in a value
        at = rng.randrange(len(text) + 1)
        return text[:at] + rng.choice(JUNK) + text[at + rng.randrange(2):]
    if kind == 5 and found:  # cut near a marker
        at, literal = rng.choice(found)
        return text[: max(0, at + rng.randrange(-2, len(literal) + 3))]
    return text[: rng.randrange(len(text) + 1)]  # cut anywhere


def soup(rng: random.Random, family: Family) -> str:
    """Text made of the format's pieces: its literals and their prefixes, whitespace, characters
    that mean something in a value, a tool's name, words, numbers."""
    pieces = []
    for _ in range(rng.randrange(3, 30)):
        r = rng.random()
        if r < 0.4 and family.literals:
            literal = rng.choice(family.literals)
            pieces.append(literal if rng.random() < 0.7 else literal[:rng.randrange(1, len(literal) + 1)])
        elif r < 0.55:
            pieces.append(rng.choice(SPACES))
        elif r < 0.75:
            pieces.append(rng.choice(JUNK))
        elif r < 0.85:
            pieces.append(rng.choice(["convert_currency", "amount", "target", '"amount"', "EUR 12", "x"]))
        else:
            pieces.append(rng.choice(["12", "-1.5e3", "true", "null", "None", "{}", "[]", '{"a": 1}']))
    return "".join(pieces)


def draw_case(rng: random.Random, family: Family) -> Case:
    text, start = rng.choice(family.seeds)
    if rng.random() < 0.1:
        text = soup(rng, family)
    for _ in range(rng.choice((0, 1, 1, 2, 2, 3, 4))):
        text = mutate(rng, text, family.literals, family.seeds)
    if rng.random() < 0.2:
        start = rng.choice(STARTS)
    return Case(family.stem, text, start, rng.choice(FINISHES), rng.random() < 0.8)


# --- the oracle -------------------------------------------------------------------------------


def chunkings(rng: random.Random, text: str):
    """(label, chunks) of `text`: characters, bytes, random cuts of each."""
    data = text.encode("utf-8")
    yield "characters", list(text)
    yield "bytes", [data[i:i + 1] for i in range(len(data))]
    cuts = sorted(set(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randrange(1, 13))))) if len(text) > 1 else []
    yield f"cuts {cuts}", [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
    cuts = sorted(set(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(1, 13))))) if len(data) > 1 else []
    yield f"byte cuts {cuts}", [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


def streamed(protocol, chunks, case: Case):
    parser = runtime.StreamParser(protocol, **case.kwargs())
    deltas = []
    for chunk in chunks:
        deltas += parser.feed(chunk)
    deltas += parser.end(case.finish)
    return deltas, parser.message


def failure(protocol, case: Case, chunks_list) -> str | None:
    """What goes wrong reading `case` in each of `chunks_list` (None: nothing)."""
    try:
        one_shot = runtime.parse(protocol, case.text, finish_reason=case.finish, **case.kwargs())
    except Exception:
        return "one-shot raised: " + traceback.format_exc(limit=3)
    if any("tplparse bug" in e["message"] for e in one_shot["errors"]):
        return f"one-shot: {one_shot['errors']}"
    for label, chunks in chunks_list:
        try:
            deltas, message = streamed(protocol, chunks, case)
        except Exception:
            return f"{label} raised: " + traceback.format_exc(limit=3)
        if message != one_shot:
            return f"{label}: {message!r} != one-shot {one_shot!r}"
        try:
            check_deltas_add_up(deltas, message)
        except AssertionError as e:
            return f"{label}: the deltas do not add up: {e}"
    return None


def shrink(protocol, case: Case, label: str) -> Case:
    """`case` with characters left out for as long as it still fails fed one character (or,
    `label` "bytes", one byte) at a time."""
    def fails(text):
        c = Case(case.stem, text, case.start, case.finish, case.tools)
        data = text.encode("utf-8")
        chunks = list(text) if not label.startswith("byte") else [data[i:i + 1] for i in range(len(data))]
        return failure(protocol, c, [(label, chunks)]) is not None
    text = case.text
    if not fails(text):
        return case
    size = max(1, len(text) // 2)
    while size >= 1:
        i = 0
        while i < len(text):
            shorter = text[:i] + text[i + size:]
            if shorter != text and fails(shorter):
                text = shorter
            else:
                i += size
        size //= 2
    return Case(case.stem, text, case.start, case.finish, case.tools)


def run(families: list[Family], seed: int, seconds: float = None, runs: int = None, out=None, log=sys.stdout):
    """Fuzz for `seconds` or `runs` (per family, round robin); the failures found, as
    reproducers ({stem, text, start, finish, tools, chunking, what})."""
    rng = random.Random(seed)
    found, seen = [], set()
    count = 0
    deadline = time.monotonic() + seconds if seconds else None
    by_stem = {f.stem: f for f in families}
    started = time.monotonic()
    while True:
        for family in families:
            if deadline is not None and time.monotonic() > deadline:
                return found, count
            case = draw_case(rng, family)
            tried = list(chunkings(rng, case.text))
            what = failure(family.protocol, case, tried)
            count += 1
            if what is None:
                continue
            reproducer = {"stem": family.stem, "text": case.text, "start": case.start, "finish": case.finish,
                          "tools": case.tools}
            for label in ("characters", "bytes"):  # (shrunk while one character or byte at a time fails)
                small = shrink(family.protocol, case, label)
                data = small.text.encode("utf-8")
                chunks = list(small.text) if label == "characters" else [data[i:i + 1] for i in range(len(data))]
                found_here = failure(family.protocol, small, [(label, chunks)])
                if found_here is not None:
                    reproducer.update(text=small.text, chunking=label, what=found_here[:600])
                    break
            else:  # (only the random chunking fails: kept as it is)
                label, chunks = next(((lab, ch) for lab, ch in tried if what.startswith(lab)), ("one-shot", []))
                reproducer.update(chunking=label, chunks=[c if isinstance(c, str) else c.hex() for c in chunks],
                                  what=what[:600])
            key = (family.stem, reproducer["text"])
            if key in seen:
                continue
            seen.add(key)
            found.append(reproducer)
            line = json.dumps(reproducer, ensure_ascii=False)
            print(line, file=log, flush=True)
            if out is not None:
                out.write(line + "\n")
                out.flush()
        if runs is not None and count >= runs * len(by_stem):
            return found, count
        if log is not None and count % (len(families) * 50) < len(families):
            print(f"# {count} runs, {len(found)} failures, {time.monotonic() - started:.0f}s", file=log, flush=True)


def family_seed(stem: str, seed: int) -> int:
    return zlib.crc32(f"{stem}:{seed}".encode())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", action="append", help="a corpus template's stem (repeatable; default: all)")
    parser.add_argument("--out", type=Path, help="append the reproducers (JSON lines) to this file")
    parser.add_argument("--unseen", type=int, default=0, metavar="K",
                        help="also K formats per family the corpus does not have (its spec's whitespace changed)")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    families = load_families(args.family)
    corpus = len(families)
    rng = random.Random(args.seed)
    for family in list(families):
        for n in range(args.unseen):
            variant = unseen_family(rng, family, n) if family.spec is not None else None
            if variant is not None:
                families.append(variant)
    print(f"# {corpus} families and {len(families) - corpus} unseen formats, {sum(len(f.seeds) for f in families)} "
          f"seeds, loaded in {time.monotonic() - t0:.0f}s; seed {args.seed}", flush=True)
    out = args.out.open("a", encoding="utf-8") if args.out else None
    t1 = time.monotonic()
    found, count = run(families, args.seed, seconds=args.minutes * 60, out=out)
    print(f"# done: {count} runs over {len(families)} families in {time.monotonic() - t1:.0f}s, "
          f"{len(found)} failures", flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
