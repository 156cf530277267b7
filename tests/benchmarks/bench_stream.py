"""Streaming parser cost, as ratios (a benchmark, not a test).

    python tests/benchmarks/bench_stream.py [TEMPLATES_DIR] [--against REVISION]

For one family per argument encoding (a JSON object; key/value tags; pythonic calls), two
outputs of about 4k and 32k characters, written by the family's own spec: "calls" is a
realistic turn (reasoning + content + several calls with long arguments); "one argument" is
one call whose single string argument is the whole length (a file being written). Timed:
one-shot `parse`; fed in 4-character chunks; fed one character at a time; and a baseline that
re-parses the whole buffer at every 4-character chunk (what a non-incremental server does).
Floors: for one-shot, one `re.finditer` over the markers plus `json.loads` of each argument
object; for streaming, that plus a loop calling a no-op method once per chunk. Each is timed
in rounds beside its floor (the best round of each kept), so that a slow spell of a shared
machine weighs on both. Printed: ratios to the floors, and the 32k / 4k cost ratio of
4-character streaming (linear is 8).

For the 32k "calls" turn, per call: how many times feeding it 4 characters at a time resumes
the parse (what feed() cannot settle by itself), and the turn's cost over its calls.

Argument streaming: for "one argument" (a file being written), where the first argument delta
arrives (in characters fed, 4 at a time) and how many argument deltas there are. Per chunk:
the cost of a 4-character chunk of plain prose, of prose dense in `<` (code, HTML, `a < b`:
only a `<` that can still begin one of the family's markers should cost more), and of a chunk
inside a streamed string argument (each one an argument delta, where before streaming it
was kept without one; of the "one argument" turn, and of one whose argument is plain prose),
against the no-op floor's; and the least any parser can do with a
chunk of plain text (one search for a marker's first character, the chunk out as a delta) and
with a chunk of a string argument (one search, the chunk out as an argument delta), against
the floor: the room a per-chunk target over the floor leaves. Then each shape against the least
a parser can do with it when nothing it gives out is taken back and the deltas add up to the
one-shot result (issue #32's per-chunk target: within 1.3 times): text holds a marker's start
and the whitespace at a chunk's end until the next chunk tells (_LeastText, on the same plain
and dense prose, with the family's marker search); a file's argument rewrites its escapes and
holds a split one, or in a key/value string the start of its closing text (_LeastEscaping, with
the searches of the family's own argument stream, on the "one argument" turn); a prose argument
needs one search (_LeastKept); each keeps the argument's text, as a parser must, joined every
1024 chunks (not a list many times its size).

With --against REVISION (a commit of this repository, from f90afe9 on, where the runtime is
given its tables), the parser as it was then is timed in the same rounds, on the same
outputs and floors, each family read by that revision's own probe and runtime: how a change
moved the ratios, measured on one machine at one time (ratios to these floors move between
machines and between ways of timing: compare a revision with another in one run); and per
shape, the one-shot parse's time over that parser's, to two decimals.
"""

from __future__ import annotations

import importlib
import io
import json
import json.encoder
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import types
from pathlib import Path

import tplparse
from tplparse import runtime
from tplparse.grammar.reading import reading_tables
from tplparse.probe import probe
from tplparse.runtime.text import text_stops

DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "templates"
FAMILIES = {"JSON object": "Qwen-Qwen3-0.6B", "key/value tags": "Qwen-Qwen3-Coder", "pythonic": "LiquidAI-LFM2.5-8B-A1B"}


def module_for(spec, special_tokens=()):
    """The family's parser with a generated module's face (StreamParser, parse), in process."""
    protocol = runtime.Protocol(reading_tables(spec, special_tokens))
    return types.SimpleNamespace(
        StreamParser=lambda **kwargs: runtime.StreamParser(protocol, **kwargs),
        parse=lambda text, **kwargs: runtime.parse(protocol, text, **kwargs),
        protocol=protocol,
    )


REASONING = "Thinking it through. " * 40


def written(spec, calls: list[dict]) -> str:
    """The turn as the template writes it, after a reasoning block as the model writes one."""
    text = spec.format({"role": "assistant", "content": "Here is what I will do. " * 20, "tool_calls": calls})
    if spec.reasoning and spec.reasoning.start:
        start, end = spec.reasoning.start, spec.reasoning.end
        body = text.lstrip()
        if body.startswith(start) and end in body:  # the template's own (empty) block: the model's replaces it
            body = body[body.index(end) + len(end):].lstrip()
        text = f"{start}\n{REASONING}\n{end}\n\n" + body
    return text


def output(spec, size: int, shape: str = "calls") -> tuple[str, list[dict], list[str]]:
    """A turn of about `size` characters: reasoning, content, and calls with long string
    arguments ("calls") or one call with one argument as long as the turn ("one argument")."""
    calls, i = [], 0
    text = ""
    if shape == "one argument":
        line = "    print(\"lorem ipsum\", {\"dolor\": [1, 2]})  # sit amet\n"
        calls = [{"id": "c00000001x", "type": "function", "function": {"name": "tool_0", "arguments": {
            "query": line * (size // len(line)), "note": "write it"}}}]
        text = written(spec, calls)
    while len(text) < size:
        i += 1
        calls.append({"id": f"c{i:08d}x", "type": "function", "function": {"name": f"tool_{i % 3}", "arguments": {
            "query": ("lorem ipsum dolor sit amet " * 12)[: 200], "note": f"call {i} with <markers> and \"quotes\""}}})
        text = written(spec, calls)
    tools = [{"type": "function", "function": {"name": f"tool_{k}", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "note": {"type": "string"}}}}} for k in range(3)]
    arguments = [json.dumps(c["function"]["arguments"]) for c in calls]  # what the floor decodes
    return text, tools, arguments


def timed(*fns, rounds=12) -> list[float]:
    """Best time of one call of each of `fns`, over `rounds` rounds that run each in turn
    (enough calls to take 5 ms or more): a parser and its floor are timed side by side, so a
    slow spell of this shared machine weighs on both, and the best round of each is kept."""
    numbers = []
    for fn in fns:
        number = 1
        while True:
            start = time.perf_counter()
            for _ in range(number):
                fn()
            if time.perf_counter() - start >= 0.005 or number >= 1000:
                break
            number *= 2
        numbers.append(number)
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, (fn, number) in enumerate(zip(fns, numbers)):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / number)
    return best


class _Sink:
    def feed(self, chunk):
        return None


def package_at(revision: str, into: Path):
    """The tplparse package as it was at `revision` of this repository (its compiler/ folder,
    from git), imported beside the current one as `tplparse_against`."""
    repository = Path(__file__).resolve().parents[2]
    archive = subprocess.run(["git", "-C", str(repository), "archive", "--format=tar", revision, "compiler"],
                             capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"--against {revision}: {archive.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    (into / "compiler").rename(into / "tplparse_against")
    sys.path.insert(0, str(into))
    try:
        package = importlib.import_module("tplparse_against")
        return types.SimpleNamespace(load=package.load, probe=importlib.import_module("tplparse_against.probe").probe,
                                     reading_tables=importlib.import_module("tplparse_against.grammar.reading").reading_tables,
                                     runtime=importlib.import_module("tplparse_against.runtime"))
    except (ImportError, AttributeError) as e:
        raise SystemExit(f"--against {revision}: its package has no runtime that is given its tables ({e}); "
                         "name a revision from f90afe9 on") from None


def module_at(package, path):
    """The family's parser at that revision: its own load, probe, tables and runtime."""
    template = package.load(path)
    protocol = package.runtime.Protocol(package.reading_tables(package.probe(template), template.special_tokens))
    return types.SimpleNamespace(
        StreamParser=lambda **kwargs: package.runtime.StreamParser(protocol, **kwargs),
        parse=lambda text, **kwargs: package.runtime.parse(protocol, text, **kwargs),
    )


def main(folder: Path, against: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        package = package_at(against, Path(scratch)) if against else None
        header = (f"{'encoding':<15} {'shape':<13} {'chars':>6} {'one-shot/floor':>15} {'4-char/floor':>13} "
                  f"{'1-char/floor':>13} {'reparse/4-char':>15}")
        if against:
            print(f"'then': the parser at {against}, timed in the same rounds")
        print(header + (f"   {'then: one-shot/floor':>20} {'4-char/floor':>13}" if against else ""))
        for label, stem in FAMILIES.items():
            family(folder, label, stem, package)


def family(folder: Path, label: str, stem: str, package) -> None:
    path = folder / f"{stem}.jinja"
    if not path.is_file():
        print(f"{label:<15} skipped: {path} is not here")
        return
    template = tplparse.load(path)
    spec = probe(template)
    module = module_for(spec, template.special_tokens)
    before = module_at(package, path) if package is not None else None
    markers = [m for m in [spec.reasoning.start if spec.reasoning else "", spec.reasoning.end if spec.reasoning else "",
                           *spec.end_of_turn] if m]
    markers += [p.strip() for p in spec.tool_calls.call if isinstance(p, str) and p.strip()]
    pattern = re.compile("|".join(re.escape(m) for m in markers))
    for shape in ("calls", "one argument"):
        measure(spec, module, pattern, label, shape, before)
    dispatch_cost(spec, module, label)
    per_chunk(spec, module, label)


def dispatch_cost(spec, module, label) -> None:
    """The dispatch stream (calls="complete": each call once, whole and schema-checked) against
    the UI stream, on the 32k "calls" turn fed 4 characters at a time, in the same rounds."""
    text, tools, args = output(spec, 32_000, "calls")
    parser = module.StreamParser(tools=tools, start="content", calls="complete")
    sent = [d for i in range(0, len(text), 4) for d in parser.feed(text[i:i + 4]) if "tool_calls" in d]
    sent += [d for d in parser.end() if "tool_calls" in d]
    if len(sent) != len(args):
        raise SystemExit(f"{label}: the dispatch stream sent {len(sent)} calls of {len(args)}")

    def fed(calls):
        parser = module.StreamParser(tools=tools, start="content", calls=calls)
        for i in range(0, len(text), 4):
            parser.feed(text[i:i + 4])
        parser.end()

    ui, dispatch = timed(lambda: fed("deltas"), lambda: fed("complete"))
    chunks = len(text) / 4
    print(f"{label:<15} dispatch stream (calls=\"complete\", {len(args)} calls, each schema-checked): "
          f"{dispatch / chunks * 1e9:.0f} ns per 4-character chunk against the UI stream's {ui / chunks * 1e9:.0f} "
          f"({dispatch / ui:.2f}x)")


PROSE = "The quick brown fox jumps over the lazy dog while the model thinks. "
DENSE = "if a < b and c <d: x = y<z; <div>p</div> <span>1 < 2</span> "


def per_chunk(spec, module, label) -> None:
    """ns per 4-character chunk: plain prose, prose dense in `<`, inside a streamed argument (of
    the "one argument" turn, and of one whose argument is plain prose)."""
    text, tools, _ = output(spec, 32_000, "one argument")
    parser = module.StreamParser(tools=tools, start="content")
    first, pieces = None, 0
    for i in range(0, len(text), 4):
        for delta in parser.feed(text[i:i + 4]):
            for call in delta.get("tool_calls", []):
                if "id" not in call and call["function"]["arguments"]:
                    pieces += 1
                    first = i + 4 if first is None else first
    parser.end()
    print(f"{label:<15} one argument: first argument delta after {first} of {len(text)} characters, "
          f"{pieces} argument deltas")
    sink = _Sink()

    def no_op():
        for i in range(0, len(text), 4):
            sink.feed(text[i:i + 4])

    plain, dense = (body * (32_000 // len(body)) for body in (PROSE, DENSE))
    prose_argument = spec.format({"role": "assistant", "content": "", "tool_calls": [{
        "id": "c00000001x", "type": "function", "function": {"name": "tool_0", "arguments": {"query": plain}}}]})
    content_stops, stream = text_stops(module.protocol.content_stops), open_string(module, text, tools)
    least, least_argument, least_text, escaping, kept = (types.SimpleNamespace(StreamParser=make) for make in (
        _Least, _LeastArgument, lambda **kwargs: _LeastText(content_stops), lambda **kwargs: _LeastEscaping(stream),
        _LeastKept))
    # (the "one argument" turn is almost all one streamed string argument)
    times = timed(lambda: feed_all(module, plain, tools), lambda: feed_all(module, dense, tools),
                  lambda: feed_all(module, text, tools), lambda: feed_all(module, prose_argument, tools), no_op,
                  lambda: feed_all(least, plain, tools), lambda: feed_all(least_argument, plain, tools),
                  lambda: feed_all(least_text, plain, tools), lambda: feed_all(least_text, dense, tools),
                  lambda: feed_all(escaping, text, tools), lambda: feed_all(kept, plain, tools),
                  rounds=30)  # (ratios of a few tenths: more rounds than the turns' timings)
    per_chunk_ns = [t / (len(turn) / 4) * 1e9 for t, turn in zip(
        times, (plain, dense, text, prose_argument, text, plain, plain, plain, dense, text, plain))]
    costs = dict(zip(("plain prose", "dense in <", "in an argument", "in a prose argument"), per_chunk_ns))
    floor, least, least_argument, text_plain, text_dense, escaping, kept = per_chunk_ns[4:]
    print(f"{label:<15} ns per 4-character chunk: no-op floor {floor:.0f}, "
          + ", ".join(f"{k} {v:.0f}" for k, v in costs.items())
          + f"; dense/plain {costs['dense in <'] / costs['plain prose']:.2f}; an argument chunk costs "
          f"{costs['in an argument'] - costs['plain prose']:+.0f} ns against a content chunk")
    print(f"{label:<15} the least a parser can do per chunk (search it for a marker's first character, emit it "
          f"as a delta): {least:.0f} ns, {least / floor:.1f}x the no-op floor; plain prose costs "
          f"{costs['plain prose'] / least:.1f}x that; inside a string argument (search it for what ends the "
          f"string, emit it as an argument delta): {least_argument:.0f} ns, {least_argument / floor:.1f}x the "
          f"floor; a prose argument's chunk costs {costs['in a prose argument'] / least_argument:.2f}x that")
    against = {"plain prose": text_plain, "dense in <": text_dense, "in an argument": escaping,
               "in a prose argument": kept}
    print(f"{label:<15} each shape against the least a parser can do with it when nothing it gives out is "
          f"taken back and what it keeps is bounded (text, a marker's start and whitespace at its end held: "
          f"{text_plain:.0f} ns plain, {text_dense:.0f} ns dense; an argument, escapes rewritten: "
          f"{escaping:.0f} ns; a prose argument: {kept:.0f} ns): "
          + ", ".join(f"{k} {costs[k] / v:.2f}x" for k, v in against.items()))


def resumes(module, text, tools) -> int:
    """How many times feeding `text` 4 characters at a time resumes the parse (the rules'
    coroutine: what feed() cannot settle by itself)."""
    parser = module.StreamParser(tools=tools, start="content")
    count, resume = 0, parser._in.resume

    def counting(value):
        nonlocal count
        count += 1
        return resume(value)

    parser._in.resume = counting
    for i in range(0, len(text), 4):
        parser.feed(text[i:i + 4])
    parser.end()
    return count


class _Least:
    """The least a streaming parser can do with a chunk of plain text: one search for the first
    character of a marker, then the chunk out as its delta (the reference for plain prose)."""

    def __init__(self, **kwargs):
        self._search = re.compile("<").search
        self._parts = []

    def feed(self, chunk):
        if self._search(chunk) is None:
            self._parts.append(chunk)
            return [{"content": chunk}]
        return []

    def end(self, finish_reason="stop"):
        return []


class _LeastArgument:
    """The least a streaming parser can do with a chunk inside a string argument: one search for
    what may end the string or begin an escape, then the chunk out as an OpenAI-style argument
    delta (four nested containers): the reference for a chunk of a file being written."""

    def __init__(self, **kwargs):
        self._search = re.compile(r'["\\\x00-\x1f]').search
        self._parts = []

    def feed(self, chunk):
        if self._search(chunk) is None:
            self._parts.append(chunk)
            return [{"tool_calls": [{"index": 0, "function": {"arguments": chunk}}]}]
        return []

    def end(self, finish_reason="stop"):
        return []


class _LeastText:
    """The least a streaming parser can do with a chunk of content when nothing it gives out is
    taken back and the deltas add up to the one-shot result: one search for where one of the
    family's markers may begin (its first three characters, or a start of one at the chunk's
    end: the search the family's parser runs); such a start at the end held for the next chunk
    to tell; the whitespace at the end held until more text follows (a field does not end with
    the whitespace before a call or the turn's end); the rest out as its delta. (A marker's head
    inside a chunk is where a parser's real work begins: this one stops there.) The reference
    for text, plain or dense in `<`."""

    def __init__(self, stops):
        self._search, self._partials = stops.quiet, stops.partials
        self._parts, self._start, self._space = [], "", ""

    def feed(self, chunk):
        if self._start:
            chunk, self._start = self._start + chunk, ""
        found = self._search(chunk)
        if found is not None:
            if found.end() < len(chunk) or found.group() not in self._partials:
                return []
            chunk, self._start = chunk[:found.start()], chunk[found.start():]
        body = chunk.rstrip()
        if body:
            out = self._space + body
            self._space = chunk[len(body):]
            self._parts.append(out)
            return [{"content": out}]
        self._space += chunk
        return []

    def end(self, finish_reason="stop"):
        return []


_ENCODE = json.encoder.encode_basestring  # (C: the string as a JSON string literal)


class _LeastKept(_LeastArgument):
    """_LeastArgument, keeping the argument's text as a parser must (the call's arguments are
    read from it once the value ends) without holding a long value as a list of short chunks,
    many times its size: the chunks kept are joined every 1024. The reference for a chunk of a
    prose argument."""

    def feed(self, chunk):
        if self._search(chunk) is None:
            parts = self._parts
            if len(parts) > 1024:
                self._parts = parts = ["".join(parts)]
            parts.append(chunk)
            return [{"tool_calls": [{"index": 0, "function": {"arguments": chunk}}]}]
        return []


class _LeastEscaping(_LeastArgument):
    """The least a streaming parser can do with a chunk of a string argument in which escapes
    come every few characters (code, a file): one search, with the string's own (`stream`, the
    family's argument stream open in the string: what may end it or begin an escape); a chunk
    in which it finds something rewritten by one pass in C (json's string encoder), after, in
    a raw string (key/value), the search for where its closing text may begin (at the chunk's
    end, held for the next chunk to tell; inside it, where a parser's real work begins: this
    one stops there), or, in a JSON string, with a backslash at its end held
    (the escape's letter comes with the next chunk); then out as an argument delta, kept as
    _LeastKept keeps it. The reference for a chunk of a file being written."""

    def __init__(self, stream):
        super().__init__()
        self._search = stream.value_special if hasattr(stream, "value_special") else stream.special
        self._closing = getattr(stream, "stop_starts", None)  # (a raw string's)
        self._held = ""

    def feed(self, chunk):
        if self._held:
            chunk, self._held = self._held + chunk, ""
        if self._search(chunk) is not None:
            closing = self._closing(chunk) if self._closing is not None else None
            if closing is not None:
                if closing.end() < len(chunk):
                    return []  # (its closing text's head: where a parser's real work begins)
                chunk, self._held = chunk[:closing.start()], chunk[closing.start():]
            elif chunk.endswith("\\"):
                chunk, self._held = chunk[:-1], "\\"
            chunk = _ENCODE(chunk)[1:-1]
        parts = self._parts
        if len(parts) > 1024:
            self._parts = parts = ["".join(parts)]
        parts.append(chunk)
        return [{"tool_calls": [{"index": 0, "function": {"arguments": chunk}}]}]


def open_string(module, text, tools):
    """The family's argument stream, open in the "one argument" turn's string (fed up to its
    first thousand characters): what _LeastEscaping searches with."""
    parser = module.StreamParser(tools=tools, start="content")
    at = text.index("lorem ipsum")
    for i in range(0, at + 1000, 4):
        parser.feed(text[i:i + 4])
    stream = parser._in._fast
    if stream is None:
        raise SystemExit("the argument stream is not open in the string: bench_stream needs updating")
    return stream


def feed_all(module, text, tools):
    parser = module.StreamParser(tools=tools, start="content")
    for i in range(0, len(text), 4):
        parser.feed(text[i:i + 4])
    parser.end()


def measure(spec, module, pattern, label: str, shape: str, before=None) -> None:
    sizes = {}
    for size in (4_000, 32_000):
        text, tools, args = output(spec, size, shape)
        for parser in (module, before) if before else (module,):
            message = parser.parse(text, tools=tools, start="content")
            if message["errors"] or len(message["tool_calls"]) != len(args):  # timing a failed parse says nothing
                raise SystemExit(f"{label} {shape}: the parse does not read the output back: {message['errors']}")
        sizes[size] = (text, tools, args)
    # Both sizes timed in the same rounds, so their ratio says how the cost grows (not how the
    # machine was doing when each was timed); the revision --against names, in them too.
    per_size = 8 if before else 6
    fns = [fn for size in sizes for fn in _timings(module, pattern, *sizes[size], before)]
    times = timed(*fns)
    costs, against = {}, []
    for k, size in enumerate(sizes):
        text = sizes[size][0]
        t_one, f_one, t_4, f_4, t_1, f_1 = times[per_size * k:per_size * k + 6]
        reparse = _reparse(module, *sizes[size])
        t_re = timed(reparse, rounds=1)[0] if size <= 6_000 else float("nan")
        costs[size] = t_4
        then = ""
        if before:
            b_one, b_4 = times[per_size * k + 6:per_size * k + 8]
            then = f"   {b_one / f_one:>20.1f} {b_4 / f_4:>13.1f}"
            against.append(f"{t_one / b_one:.2f}x at {len(text)} characters")
        print(f"{label:<15} {shape:<13} {len(text):>6} {t_one / f_one:>15.1f} {t_4 / f_4:>13.1f} {t_1 / f_1:>13.1f} "
              f"{t_re / t_4:>15.1f}" + then)
    print(f"{label:<15} {shape:<13} 32k/4k cost ratio (4-char chunks): {costs[32_000] / costs[4_000]:.1f} "
          f"(linear: about 8)")
    if against:
        print(f"{label:<15} {shape:<13} one-shot against then (same rounds): {', '.join(against)}")
    if shape == "calls":
        text, tools, args = sizes[32_000]
        t_one, t_4 = times[per_size], times[per_size + 2]
        print(f"{label:<15} {shape:<13} 32k, per call ({len(args)} calls): "
              f"{resumes(module, text, tools) / len(args):.1f} resumes of the parse fed 4 characters at a time; "
              f"the turn costs {t_one / len(args) * 1e6:.1f} us one-shot, {t_4 / len(args) * 1e6:.1f} us fed 4 "
              f"characters at a time")


def _timings(module, pattern, text, tools, args, before=None):
    """One-shot, fed 4 characters at a time, fed one: each beside its floor (and the parser at
    the revision --against names: one-shot, fed 4 characters at a time)."""

    def floor_one():
        for _ in pattern.finditer(text):
            pass
        for a in args:
            json.loads(a)

    def floor_stream(n):
        sink = _Sink()
        floor_one()
        for i in range(0, len(text), n):
            sink.feed(text[i:i + n])

    def one_shot(parser=module):
        parser.parse(text, tools=tools, start="content")

    def fed(n, parser=module):
        parser = parser.StreamParser(tools=tools, start="content")
        for i in range(0, len(text), n):
            parser.feed(text[i:i + n])
        parser.end()

    timings = [one_shot, floor_one, lambda: fed(4), lambda: floor_stream(4), lambda: fed(1), lambda: floor_stream(1)]
    if before is not None:
        timings += [lambda: one_shot(before), lambda: fed(4, before)]
    return timings


def _reparse(module, text, tools, args):
    """What a server that is not incremental does: parse the whole buffer at every chunk."""

    def reparse():
        for i in range(4, len(text) + 4, 4):
            module.parse(text[:i], tools=tools, start="content")

    return reparse


if __name__ == "__main__":
    arguments = sys.argv[1:]
    against = None
    if "--against" in arguments:
        at = arguments.index("--against")
        if at + 1 >= len(arguments):
            raise SystemExit("--against needs a revision (a commit of this repository)")
        against = arguments.pop(at + 1)
        arguments.pop(at)
    main(Path(arguments[0]) if arguments else DEFAULT, against)
