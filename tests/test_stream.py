"""Generated streaming parsers: same result on every chunking, the reference's result, and each
streaming rule by name."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tplparse
from tplparse.check.reference import ReferenceParser
from tplparse.emit.module import family_module, module_name, runtime_source, standalone_module
from tplparse.grammar.reading import reading_tables
from tplparse.probe import probe
from tplparse.spec import ProtocolSpec

from conftest import CORPUS, EXAMPLES, REPO, ROUND_TRIP, corpus_compiled, corpus_ids, corpus_stems, corpus_templates, examples, needs_corpus, proved_corpus_stems, run_cli
from corpus_outputs import FRESH_TOOLS, outputs, parser_module, readable

TEMPLATES = corpus_templates()


def module_for(spec: ProtocolSpec, special_tokens: tuple[str, ...] = ()):
    return parser_module(spec, special_tokens)


def stream(module, text, chunks, **kwargs):
    """Feed `text` cut at `chunks` (positions); return (deltas, message)."""
    finish = kwargs.pop("finish_reason", "stop")
    parser = module.StreamParser(**kwargs)
    deltas = []
    last = 0
    for cut in list(chunks) + [len(text)]:
        if cut > last:
            deltas += parser.feed(text[last:cut])
            last = cut
    deltas += parser.end(finish)
    return deltas, parser.message


def joined(deltas) -> dict:
    """What the deltas add up to: the text fields, and per call index its header, its
    argument text and whether a `tool_call_error` delta dropped it."""
    out = {"content": "", "reasoning_content": "", "calls": {}}
    for delta in deltas:
        for key in ("content", "reasoning_content"):
            out[key] += delta.get(key, "")
        for call in delta.get("tool_calls", []):
            entry = out["calls"].get(call["index"])
            if "id" in call:  # the header
                assert entry is None, f"a second header for call {call['index']}"
                assert call["function"]["arguments"] == ""
                entry = out["calls"][call["index"]] = {"name": call["function"]["name"], "id": call["id"],
                                                       "arguments": "", "dropped": False}
            else:
                assert entry is not None, f"arguments of call {call['index']} before its header"
                assert not entry["dropped"], f"arguments of call {call['index']} after it was dropped"
                entry["arguments"] += call["function"]["arguments"]
        if "tool_call_error" in delta:
            error = delta["tool_call_error"]
            entry = out["calls"].get(error["index"])
            assert entry is not None and not entry["dropped"], f"a drop of call {error['index']}, not open"
            assert error["kind"] and error["message"]
            entry["dropped"] = True
    return out


def check_deltas_add_up(deltas, message) -> None:
    """The deltas are the message: its text, and each call's header and argument deltas (in
    index order, a dropped call left out), concatenated, are its calls."""
    total = joined(deltas)
    assert (total["content"] or None) == message["content"]
    assert (total["reasoning_content"] or None) == message["reasoning_content"]
    kept = [(e["id"], e["name"], e["arguments"]) for _, e in sorted(total["calls"].items()) if not e["dropped"]]
    assert kept == [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]


def marker_cuts(spec: ProtocolSpec, text: str) -> list[int]:
    """Every position one before, at and after where a marker of the spec starts or ends."""
    markers = [m for m in spec.end_of_turn if m]
    if spec.reasoning:
        markers += [spec.reasoning.start, spec.reasoning.end]
    if spec.tool_calls:
        markers += [spec.tool_calls.section_start.strip(), spec.tool_calls.section_end.strip()]
        markers += [p.strip() for p in spec.tool_calls.call if isinstance(p, str)]
    cuts = set()
    for marker in filter(None, markers):
        at = text.find(marker)
        while at != -1:
            for edge in (at, at + len(marker)):
                cuts.update({edge - 1, edge, edge + 1})
            at = text.find(marker, at + 1)
    return sorted(c for c in cuts if 0 < c < len(text))


@pytest.fixture(scope="module")
def corpus(compiled_corpus):
    """stem -> (template, spec, the family's parser in process): the session's compiles
    (tests/conftest.py; each the first time it is read), shown briefly in reports."""
    return compiled_corpus.view(lambda entry: (entry.template, entry.spec, entry.module))


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(ROUND_TRIP))
def test_round_trip_on_every_chunking(corpus, stem):
    template, spec, module = corpus[stem]
    reference = {}
    for output in corpus_compiled(stem).outputs:
        text, kwargs = output.text, {"tools": FRESH_TOOLS, "start": output.start}
        one_shot = module.parse(text, **kwargs)
        assert one_shot["errors"] == [], (output.turn, text, one_shot["errors"])
        assert readable(one_shot) == output.expected, (output.turn, text)
        if output.start not in reference:
            reference[output.start] = ReferenceParser(spec, FRESH_TOOLS, start=output.start,
                                                      special_tokens=template.special_tokens)
        assert reference[output.start].parse(text) == one_shot
        chunkings = {
            "one character": range(1, len(text)),
            "marker edges": marker_cuts(spec, text),
            "halves": [len(text) // 2],
        }
        for label, cuts in chunkings.items():
            deltas, message = stream(module, text, cuts, **kwargs)
            assert message == one_shot, (output.turn, label)
            check_deltas_add_up(deltas, message)
        # bytes, one at a time (splitting UTF-8 sequences)
        data = text.encode("utf-8")
        parser = module.StreamParser(**kwargs)
        deltas = []
        for i in range(len(data)):
            deltas += parser.feed(data[i:i + 1])
        deltas += parser.end()
        assert parser.message == one_shot, (output.turn, "bytes")


def _ended_at(module, text, cuts, **kwargs):
    """`reasoning_ended_at` once it is known, feeding `text` cut at `cuts`, and at the end."""
    parser = module.StreamParser(**kwargs)
    first_known, last = None, 0
    for cut in list(cuts) + [len(text)]:
        if cut > last:
            parser.feed(text[last:cut])
            last = cut
        if first_known is None and parser.reasoning_ended_at is not None:
            first_known = parser.reasoning_ended_at
    parser.end("stop")
    return first_known, parser.reasoning_ended_at


@needs_corpus
@pytest.mark.parametrize("stem", [p.stem for p in TEMPLATES], ids=corpus_ids(TEMPLATES))
def test_what_follows_the_reasoning_reads_alone(corpus, stem):
    """`reasoning_ended_at` (vLLM's reasoning-then-tools split): the same offset on every
    chunking, never changed once known, at or before the text after the reasoning; and a parser
    started "after_reasoning" on the output from there reads the content and calls the whole
    parse reads."""
    template, spec, module = corpus[stem]
    for output in corpus_compiled(stem).outputs:
        text, kwargs = output.text, {"tools": FRESH_TOOLS, "start": output.start}
        message = module.parse(text, **kwargs)
        offsets = {_ended_at(module, text, cuts, **kwargs)
                   for cuts in (range(1, len(text)), marker_cuts(spec, text), [])}
        assert len(offsets) == 1, (output.turn, offsets)
        (first_known, ended), = offsets
        assert first_known in (None, ended), (output.turn, first_known, ended)
        if ended is None:
            assert message["content"] is None and message["tool_calls"] == [], output.turn
            continue
        if message["reasoning_content"]:
            assert message["reasoning_content"] in text[:ended], output.turn
        rest = module.parse(text[ended:], tools=FRESH_TOOLS, start="after_reasoning")
        assert (rest["content"], rest["tool_calls"]) == (message["content"], message["tool_calls"]), output.turn
        if ended < len(text) and not text[ended:].lstrip().startswith(spec.reasoning.start if spec.reasoning else "\0"):
            # (started in content, it reads the same, unless the text there opens a block)
            alone = module.parse(text[ended:], tools=FRESH_TOOLS, start="content")
            assert (alone["content"], alone["tool_calls"]) == (message["content"], message["tool_calls"]), output.turn
        # (reasoning after a call, in messages with headers, is read there too: a part of the whole's)
        assert (rest["reasoning_content"] or "") in (message["reasoning_content"] or ""), output.turn


@needs_corpus
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_chunkings(corpus, data):
    stem = data.draw(st.sampled_from(proved_corpus_stems()))
    template, spec, module = corpus[stem]
    found = corpus_compiled(stem).outputs
    if not found:
        return
    output = data.draw(st.sampled_from(found))
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(output.text) - 1)), max_size=12)))
    kwargs = {"tools": FRESH_TOOLS, "start": output.start}
    deltas, message = stream(module, output.text, cuts, **kwargs)
    assert message == module.parse(output.text, **kwargs)
    check_deltas_add_up(deltas, message)


EDITS = st.sampled_from(["", " ", "\n", "  ", "\t", "'", '"', "\\", "}", "]", ",", "<", ">", "/", "=", "é"])


@needs_corpus
@settings(max_examples=examples(120), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_edited_outputs_read_the_same_streamed_and_one_shot(corpus, data):
    """Model output is untrusted: rendered turns with random edits (whitespace around literals,
    stray quotes, brackets, backslashes, cut-offs), mostly no longer as rendered and often
    invalid, give the same message one-shot (plain readers) and fed one character at a time
    (waiting readers), errors and offsets included."""
    stem = data.draw(st.sampled_from(proved_corpus_stems()))
    template, spec, module = corpus[stem]
    found = [o for o in corpus_compiled(stem).outputs if o.expected["tool_calls"]]
    if not found:
        return
    output = data.draw(st.sampled_from(found))
    text = output.text
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 2))
        text = text[:at] + data.draw(EDITS) + text[at + cut:]
    if data.draw(st.booleans()):
        text = text[: data.draw(st.integers(0, len(text)))]  # truncated
    kwargs = {"tools": FRESH_TOOLS, "start": output.start, "finish_reason": data.draw(st.sampled_from(["stop", "length"]))}
    one_shot = module.parse(text, **kwargs)
    deltas, streamed = stream(module, text, range(1, len(text)), **kwargs)
    assert streamed == one_shot, text
    check_deltas_add_up(deltas, streamed)


# --- Random messages through real templates (names sharing prefixes, hard values) -------

HARD_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=30).filter(
    lambda s: s.strip() == s and s.strip()) | st.sampled_from(
    ['say "hi"', "a } b", "</tool_call> inside", "a <think> inside", "é✓🙂", "back\\slash", "{\"k\": 1}"])
NAMES = ["roll_back", "roll_back_release", "get", "get_time"]
SAMPLED = ["Qwen-Qwen3-0.6B", "Qwen-Qwen3-Coder", "LiquidAI-LFM2.5-8B-A1B", "Moonshot-Kimi-K2-Instruct",
           "Mistral-Small-3.2-24B-Instruct-2506", "ZAI-GLM-4.6"]


@needs_corpus
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_messages_read_back(corpus, data):
    from tplparse.probe.conversations import Call, Turn

    stem = data.draw(st.sampled_from([s for s in SAMPLED if s in corpus]))
    template, spec, module = corpus[stem]
    n_calls = data.draw(st.integers(0, 3))
    calls = tuple(
        Call(data.draw(st.sampled_from(NAMES)),
             {k: data.draw(HARD_TEXT) for k in data.draw(st.sets(st.sampled_from(["q", "note", "x_y"]), max_size=2))},
             f"a{i}b2c3d4e")
        for i in range(n_calls)
    )
    content = data.draw(st.none() | HARD_TEXT) if n_calls else data.draw(HARD_TEXT)
    # Content that holds a marker is ambiguous by the protocol itself (arguments may hold them).
    markers = [spec.reasoning.start, spec.reasoning.end] if spec.reasoning else []
    markers += list(spec.end_of_turn) + ([spec.tool_calls.section_start.strip()] if spec.tool_calls else [])
    assume(not content or not any(m and m in content for m in markers))
    # ... and content that also occurs inside a call cannot be told apart when a template drops it.
    assume(not content or not any(content in f"{c.name} {c.id} {json.dumps(c.arguments, ensure_ascii=False)}"
                                  for c in calls))
    # ... nor a quoted value holding its closing quote when the template writes it unescaped
    # (LFM2.5 renders the value ' as q=''', which no parser can read back).
    arguments_format = spec.tool_calls.arguments if spec.tool_calls else None
    if arguments_format and arguments_format.value_encoders.get("string") == "quoted":
        assume(not any(arguments_format.quotes[1] in v for c in calls for v in c.arguments.values()))
    turn = Turn(content=content, calls=calls)
    found = outputs(template, spec, {"random": turn})
    if not found or not found[0].expected["tool_calls"] and calls:
        return  # the template dropped what we wanted to see
    output = found[0]
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
        k: {"type": "string"} for k in ("q", "note", "x_y")}}}} for n in NAMES]
    message = module.parse(output.text, tools=tools, start=output.start)
    cuts = range(1, len(output.text))
    deltas, streamed = stream(module, output.text, cuts, tools=tools, start=output.start)
    assert streamed == message
    assert message["errors"] == [], (output.text, message["errors"])
    assert readable(message) == output.expected, output.text


# --- Each streaming rule, by name ------------------------------------------------------------


@pytest.fixture(scope="module")
def chatml():
    """JSON arguments in tags, <think> reasoning: the shipped example."""
    return module_for(probe(tplparse.load(EXAMPLES / "chatml-think-tools.gguf")))


def corpus_module(corpus, stem):
    if stem not in corpus:
        pytest.skip(f"{stem} is not in the corpus")
    return corpus[stem][2]


def test_hold_back_releases_a_marker_prefix_that_is_not_a_marker(chatml):
    parser = chatml.StreamParser()
    assert parser.feed("Use <tool_") == [{"content": "Use"}]  # " <tool_" might open a call
    assert parser.feed("box> here") == [{"content": " <tool_box> here"}]
    parser.end()
    assert parser.message["content"] == "Use <tool_box> here"


def test_a_less_than_sign_that_cannot_start_a_marker_is_not_held(chatml):
    parser = chatml.StreamParser(start="reasoning")
    assert parser.feed("if a <") == [{"reasoning_content": "if a"}]  # "<" may open </think>
    assert parser.feed("b and </") == [{"reasoning_content": " <b and"}]  # "<b" opens none; "</" may
    assert parser.feed("div> end") == [{"reasoning_content": " </div> end"}]
    parser.end()
    assert parser.message["reasoning_content"] == "if a <b and </div> end"


def test_offsets_count_what_was_held_at_chunk_ends_once(chatml):
    """A marker's start held at a chunk's end (without waking the parse) and given out with the
    next chunk: where the reasoning ends and where an error is are the same on every chunking."""
    text = "a < b and c <d: x<y </think>Then <b>bold</b> text <|im_end|>trailing"
    one_shot = chatml.StreamParser(start="reasoning")
    one_shot.feed(text)
    one_shot.end()
    assert one_shot.reasoning_ended_at == text.index("</think>") + len("</think>")
    assert [e["offset"] for e in one_shot.message["errors"]] == [text.index("trailing")]
    for size in (1, 2, 3, 4, 5, 7):
        parser = chatml.StreamParser(start="reasoning")
        for i in range(0, len(text), size):
            parser.feed(text[i:i + size])
        parser.end()
        assert parser.message == one_shot.message, size
        assert parser.reasoning_ended_at == one_shot.reasoning_ended_at, size


FRAGMENTS = st.sampled_from(["<", "</", "</t", "</think", "</think>", "<tool", "<tool_call>", "<|", "<|im_end|>",
                             "a", " ", "\n", "<div>", "x < y", "<t", "<th"])


@settings(max_examples=examples(120), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_text_dense_in_marker_starts_reads_the_same_streamed(chatml, data):
    """Reasoning and content full of `<` and of the starts of markers, cut anywhere: the same
    message streamed as one-shot, and the deltas add up to it."""
    text = "".join(data.draw(st.lists(FRAGMENTS, max_size=30)))
    start = data.draw(st.sampled_from(["reasoning", "content"]))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=12))))
    one_shot = chatml.parse(text, start=start)
    deltas, streamed = stream(chatml, text, cuts, start=start)
    assert streamed == one_shot, text
    check_deltas_add_up(deltas, streamed)


def test_a_tool_name_is_announced_only_when_complete(chatml):
    tools = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in ("roll_back_", "roll_back_release")]
    parser = chatml.StreamParser(tools=tools)
    deltas = parser.feed('<tool_call>\n{"name": "roll_back_')
    assert not any("tool_calls" in d for d in deltas)
    deltas = parser.feed('release", "arguments": {}}\n</tool_call>')
    names = [c["function"]["name"] for d in deltas for c in d.get("tool_calls", []) if c["function"].get("name")]
    assert names == ["roll_back_release"]


def test_markers_inside_json_strings_are_argument_data(chatml):
    text = '<tool_call>\n{"name": "f", "arguments": {"s": "use </tool_call> and <|im_end|> here"}}\n</tool_call><|im_end|>'
    deltas, message = stream(chatml, text, range(1, len(text)))
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"s": "use </tool_call> and <|im_end|> here"}
    assert message["errors"] == []


def test_a_call_opener_inside_reasoning_ends_it_by_policy(chatml):
    message = chatml.parse('<think>I will call\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>')
    assert message["reasoning_content"] == "I will call"
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["f"]


def test_without_the_policy_the_opener_stays_reasoning():
    spec = probe(tplparse.load(EXAMPLES / "chatml-think-tools.gguf"))
    spec.reasoning.tool_call_ends_reasoning = False
    module = module_for(spec)
    message = module.parse("<think>maybe <tool_call> later</think>Done<|im_end|>")
    assert message["reasoning_content"] == "maybe <tool_call> later" and message["content"] == "Done"


@needs_corpus
def test_key_value_arguments_are_typed_by_the_schema(corpus):
    module = corpus_module(corpus, "Qwen-Qwen3-Coder")
    text = ("<tool_call>\n<function=lookup>\n<parameter=code>\n5123123\n</parameter>\n<parameter=count>\n5123123\n"
            "</parameter>\n</function>\n</tool_call><|im_end|>")
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {
        "code": {"type": "string"}, "count": {"type": "integer"}}}}}]
    deltas, message = stream(module, text, range(1, len(text)), tools=tools)
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"code": "5123123", "count": 5123123}
    check_deltas_add_up(deltas, message)



@needs_corpus
def test_a_boolean_or_missing_schema_types_nothing(corpus):
    # `true` as an argument's schema (any value), or no properties at all: the value stays the
    # text the model wrote, as a string; the tool's own dicts are not changed by the parser.
    module = corpus_module(corpus, "Qwen-Qwen3-Coder")
    text = ("<tool_call>\n<function=lookup>\n<parameter=code>\n5123123\n</parameter>\n<parameter=count>\n7\n"
            "</parameter>\n</function>\n</tool_call><|im_end|>")
    for properties in ({"code": True, "count": {"type": "integer"}}, None):
        parameters = {"type": "object"} if properties is None else {"type": "object", "properties": properties}
        tools = [{"type": "function", "function": {"name": "lookup", "parameters": parameters}}]
        before = json.dumps(tools)
        message = module.parse(text, tools=tools)
        count = 7 if properties else "7"
        assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"code": "5123123", "count": count}
        assert stream(module, text, range(1, len(text)), tools=tools)[1] == message
        assert json.dumps(tools) == before


@pytest.mark.parametrize("tools, message", [
    ({"name": "f"}, "tools must be a list of tool definitions, not dict"),
    ([{"function": {"description": "no name"}}], "tools[0] must be a tool definition with a function name"),
    ([{"name": "f"}, 3], "tools[1] must be a tool definition"),
    ([{"name": "f", "parameters": "x"}], "tools[0] (f): parameters must be a JSON Schema object, not str"),
    ([{"name": "f", "parameters": {"properties": []}}], "tools[0] (f): parameters.properties must be an object, not list"),
    ([{"name": "f", "parameters": {"properties": {"a": "string"}}}], "tools[0] (f): the schema of 'a' must be an object, not str"),
    ([{"name": "f", "parameters": {"properties": {"a": True, "b": 3}}}], "tools[0] (f): the schema of 'b' must be an object, not int"),
])
def test_tool_definitions_that_are_not_are_refused_by_name(chatml, tools, message):
    with pytest.raises(TypeError) as info:
        chatml.StreamParser(tools=tools)
    assert message in str(info.value)
    with pytest.raises(TypeError):
        chatml.parse("Hi<|im_end|>", tools=tools)

@needs_corpus
def test_pythonic_arguments_become_json(corpus):
    module = corpus_module(corpus, "LiquidAI-LFM2.5-8B-A1B")
    message = module.parse("<|tool_call_start|>[f(a='x, y', n=3), g()]<|tool_call_end|><|im_end|>",
                           tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
                               "a": {"type": "string"}, "n": {"type": "integer"}}}}},
                                  {"type": "function", "function": {"name": "g", "parameters": {"type": "object", "properties": {}}}}])
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
        ("f", {"a": "x, y", "n": 3}), ("g", {})]


def test_truncation_is_an_error_not_a_guess(chatml):
    complete = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n'
    cuts = ('<tool_call>\n{"name": "b', '<tool_call>\n{"name": "b", "arguments": {"x": 1',
            '<tool_call>\n{"name": "b", "arguments": {"x": 1}', '<tool_call>\n{"name": "b", "arguments": {"x": 1}}\n</tool')
    for cut in cuts:
        for finish in ("stop", "length"):
            message = chatml.parse(complete + cut, finish_reason=finish)
            assert [c["function"]["name"] for c in message["tool_calls"]] == ["a"], (cut, finish)
            assert [e["kind"] for e in message["errors"]] == ["truncated_tool_call"]
    # Cut where only the call's closing marker is left: truncated at the length limit; at a
    # natural stop the engine stopped on the marker (rule "closing markers the engine ate").
    cut = '<tool_call>\n{"name": "b", "arguments": {"x": 1}}'
    assert [e["kind"] for e in chatml.parse(complete + cut, finish_reason="length")["errors"]] == ["truncated_tool_call"]
    message = chatml.parse(complete + cut, finish_reason="stop")
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["a", "b"] and message["errors"] == []


def test_reasoning_cut_by_the_length_limit(chatml):
    message = chatml.parse("<think>still thinking", finish_reason="length")
    assert message["content"] is None and message["reasoning_content"] == "still thinking"
    assert [e["kind"] for e in message["errors"]] == ["reasoning_truncated"]


def test_invalid_arguments_drop_the_call(chatml):
    message = chatml.parse('<tool_call>\n{"name": "f", "arguments": {"a": tru}}\n</tool_call><|im_end|>')
    assert message["tool_calls"] == [] and [e["kind"] for e in message["errors"]] == ["invalid_arguments"]


def test_whitespace_around_markers_is_tolerated(chatml):
    message = chatml.parse('<think>\nhm</think>\nAnswer <tool_call>{"name":"f","arguments":{}}</tool_call><|im_end|>')
    # (the template writes "\n\n" before <tool_call>: the space is the model's, and the content keeps it)
    assert message["reasoning_content"] == "hm" and message["content"] == "Answer "
    assert chatml.parse('Answer\n<tool_call>{"name":"f","arguments":{}}</tool_call>')["content"] == "Answer"
    assert message["tool_calls"][0]["function"]["arguments"] == "{}"


def test_end_of_turn_ends_the_message(chatml):
    message = chatml.parse("Hi<|im_end|>\n<|im_start|>user\nmore")
    assert message["content"] == "Hi" and [e["kind"] for e in message["errors"]] == ["text_after_end_of_turn"]


def test_content_around_calls_is_kept(chatml):
    text = 'Before\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\nAfter<|im_end|>'
    assert chatml.parse(text)["content"] == "Before\n\nAfter"


@needs_corpus
def test_start_state_follows_the_generation_prompt(corpus):
    template = tplparse.load(CORPUS / "Qwen-Qwen3.5-4B.jinja")
    module = corpus_module(corpus, "Qwen-Qwen3.5-4B")
    on = template.render([{"role": "user", "content": "hi"}])  # ends with an open <think>
    off = template.render([{"role": "user", "content": "hi"}], enable_thinking=False)  # opens and closes it
    assert module.parse("Let me see.\n</think>\n\nHello.", generation_prompt=on)["reasoning_content"] == "Let me see."
    answer = module.parse("Hello, no closing tag here.<|im_end|>", generation_prompt=off)
    assert answer["content"] == "Hello, no closing tag here." and answer["reasoning_content"] is None


@pytest.mark.parametrize("stem", [None, "DeepSeek-R1-Distill-Qwen-32B", "Cohere-Cohere2MoE", "MiniMax-M2", "Qwen-Qwen3.5-4B",
                                  "StepFun-Step-3.5-Flash"])
def test_a_reasoning_opener_after_a_prompt_that_opened_the_block_is_absorbed(request, stem):
    """The generation prompt opened the block (the parser starts in reasoning) and the model
    writes the block's opener again: it is not reasoning. Streamed as one-shot; a text that
    only starts like the opener stays. (Qwen 3.5 and Step 3.5 write the opener only as the
    end of the assistant header every turn shares: the probe names it as the end marker's pair.)"""
    if stem is None:
        module, opener, end = request.getfixturevalue("chatml"), "<think>", "</think>"
    else:
        corpus = request.getfixturevalue("corpus")
        module = corpus_module(corpus, stem)
        opener, end = corpus[stem][1].reasoning.start, corpus[stem][1].reasoning.end
    for text, reasoning, content in [
        (f"{opener}Let me see.{end}Hello.", "Let me see.", "Hello."),
        (f"\n {opener}\nLet me see.{end}Hello.", "Let me see.", "Hello."),
        (f"Let me see.{end}Hello.", "Let me see.", "Hello."),  # the usual case, unchanged
        (f"{opener[:-1]}ing, I see.{end}Hello.", f"{opener[:-1]}ing, I see.", "Hello."),
    ]:
        one_shot = module.parse(text, start="reasoning")
        assert (one_shot["reasoning_content"], one_shot["content"]) == (reasoning, content), (stem, text)
        assert stream(module, text, range(1, len(text)), start="reasoning")[1] == one_shot


def test_bytes_chunks_may_split_utf8(chatml):
    data = "Déjà vu 🙂<|im_end|>".encode("utf-8")
    parser = chatml.StreamParser()
    for i in range(len(data)):
        parser.feed(data[i:i + 1])
    parser.end()
    assert parser.message["content"] == "Déjà vu 🙂"
    assert chatml.parse(data)["content"] == "Déjà vu 🙂"  # (one-shot: bytes whole)


def test_whitespace_held_stays_held_across_a_split_character(chatml):
    # A space held at the content's end, then bytes that begin a character and end before it
    # (chunks that decode to nothing): they give nothing out, the space stays held until the
    # text after it, and the stream adds up to the one-shot result.
    for text in ["Hi there \u2028ok<|im_end|>", "Hi there \u2028", "Hi there \u2603!"]:
        data = text.encode("utf-8")
        cut = len("Hi there ".encode("utf-8")) + 1  # (inside the character after the space)
        parser = chatml.StreamParser()
        deltas = parser.feed(data[:cut])
        assert deltas == [{"content": "Hi there"}]
        assert parser.feed(data[cut:cut]) == [] and parser.feed(data[cut:cut + 1]) == []
        deltas += parser.feed(data[cut + 1:]) + parser.end()
        one_shot = chatml.parse(data)["content"]
        assert "".join(d.get("content", "") for d in deltas) == parser.message["content"] == one_shot


def test_one_shot_bytes_decode_as_streamed_bytes(chatml):
    # Cut UTF-8 at the end and an invalid byte inside: replaced the same way, read whole or fed
    # a byte at a time; a str or bytes is all a chunk may be.
    data = "Déjà 🙂".encode("utf-8") + b"\xff ok " + "🙂".encode("utf-8")[:2]
    parser = chatml.StreamParser()
    for i in range(len(data)):
        parser.feed(data[i:i + 1])
    parser.end()
    assert chatml.parse(data) == chatml.parse(bytearray(data)) == parser.message
    assert parser.message["content"] == "Déjà 🙂\ufffd ok \ufffd"
    with pytest.raises(TypeError, match="str or bytes"):
        chatml.parse(["Hi"])


# --- The committed modules ------------------------------------------------------------------


BARE_CODE = """
import importlib.util, sys
{setup}
print(m.parse('Hi<|im_end|>')['content'], sorted(k for k in sys.modules if k.startswith('tplparse.') or k == 'tplparse'))
"""


def run_bare(setup: str) -> subprocess.CompletedProcess:
    """Python without site-packages (-S) or the environment and the current folder (-I)."""
    return subprocess.run([sys.executable, "-S", "-I", "-c", BARE_CODE.format(setup=setup)], capture_output=True,
                          text=True)


@pytest.mark.parametrize("how", ["package", "side by side", "file path"])
def test_generated_module_runs_in_a_bare_interpreter(how):
    """The committed module imports only the standard library and its runtime beside it: as a
    member of the generated/ package, as two files on sys.path, and loaded from its path."""
    folder = REPO / "generated"
    setup = {
        "package": f"sys.path.insert(0, {str(REPO)!r}); from generated import chatml_think_tools as m",
        "side by side": f"sys.path.insert(0, {str(folder)!r}); import chatml_think_tools as m",
        "file path": (f"s = importlib.util.spec_from_file_location('m', {str(folder / 'chatml_think_tools.py')!r}); "
                      f"sys.path.insert(0, {str(folder)!r}); m = importlib.util.module_from_spec(s); s.loader.exec_module(m)"),
    }[how]
    result = run_bare(setup)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Hi []"


def test_standalone_module_runs_alone_in_a_bare_interpreter(tmp_path):
    """`compile --standalone` writes one file that needs nothing beside it."""
    result = run_cli("compile", EXAMPLES / "chatml-think-tools.gguf", "-o", tmp_path, "--standalone")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "generated").iterdir()) == ["chatml_think_tools.py"]
    path = tmp_path / "generated" / "chatml_think_tools.py"
    setup = f"s = importlib.util.spec_from_file_location('m', {str(path)!r}); m = importlib.util.module_from_spec(s); s.loader.exec_module(m)"
    outcome = run_bare(setup)
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.strip() == "Hi []"
    # the same parser as the thin module on the shared runtime
    text = '<think>x</think>Ok\n<tool_call>\n{"name": "f", "arguments": {"a": [1, "é"]}}\n</tool_call><|im_end|>'
    namespace = {}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    spec = probe(tplparse.load(EXAMPLES / "chatml-think-tools.gguf"))
    assert namespace["parse"](text) == parser_module(spec).parse(text)


def test_generation_is_deterministic():
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    spec = probe(template)
    again = ProtocolSpec.from_json(spec.to_json())
    tables = reading_tables(spec, template.special_tokens)
    assert family_module(spec, tables) == family_module(again, reading_tables(again, template.special_tokens))
    assert standalone_module(spec, tables) == standalone_module(again, tables)
    assert runtime_source() == runtime_source()
    generated = REPO / "generated"
    assert (generated / f"{module_name(spec.family)}.py").read_text(encoding="utf-8") == family_module(spec, tables)
    assert (generated / "tplparse_runtime.py").read_text(encoding="utf-8") == runtime_source()


def test_generated_folder_is_thin():
    """One shared runtime file; each family module holds its tables and a few lines of binding."""
    generated = REPO / "generated"
    runtime_lines = len((generated / "tplparse_runtime.py").read_text(encoding="utf-8").splitlines())
    families = [p for p in generated.glob("*.py") if p.name not in ("tplparse_runtime.py", "__init__.py")]
    assert families
    for path in families:
        text = path.read_text(encoding="utf-8")
        assert "class Input" not in text and "def _turn" not in text, path.name  # no copy of the engine
        assert len(text.splitlines()) < runtime_lines / 4, path.name


@needs_corpus
def test_build_check_passes_on_the_committed_outputs():
    result = run_cli("build", "--check")
    assert result.returncode == 0, result.stderr
    assert "families are current" in result.stdout


def test_compile_and_parse_commands(tmp_path):
    result = run_cli("compile", EXAMPLES / "chatml-think-tools.gguf", "-o", tmp_path)
    assert result.returncode == 0 and result.stdout.count("wrote ") == 7
    assert sorted(p.name for p in (tmp_path / "generated").iterdir()) == [
        "__init__.py", "chatml_think_tools.py", "tplparse_runtime.py"]
    module = tmp_path / "generated" / "chatml_think_tools.py"
    text = 'Ok\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    parsed = json.loads(run_cli("parse", module, stdin=text).stdout)
    assert parsed["content"] == "Ok" and parsed["tool_calls"][0]["function"]["name"] == "get_weather"
    lines = run_cli("parse", EXAMPLES / "chatml-think-tools.gguf", "--stream", stdin=text).stdout.splitlines()
    assert json.loads(lines[0]) == {"content": "Ok"}
    assert json.loads(lines[-1])["message"] == parsed


def test_parse_rejects_a_file_that_is_not_a_parser(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("VALUE = 1\n")
    result = run_cli("parse", bad, stdin="hi")
    assert result.returncode == 2 and "not a generated parser module" in result.stderr


@needs_corpus
@pytest.mark.parametrize("stem", ["Qwen-Qwen3-0.6B", "Qwen-Qwen3-Coder", "LiquidAI-LFM2.5-8B-A1B"])
def test_long_outputs_stream_like_one_shot(corpus, stem):
    """Outputs of 25k+ characters (the engine drops consumed text as it goes)."""
    _, spec, module = corpus[stem] if stem in corpus else pytest.skip(f"{stem} is not in the corpus")
    calls = [{"id": f"c{i:08d}x", "type": "function", "function": {"name": f"tool_{i % 3}", "arguments": {
        "query": "lorem ipsum " * 20, "note": f"call {i} with <markers> and \"quotes\""}}} for i in range(90)]
    text = spec.format({"role": "assistant", "content": "Doing it. " * 50, "tool_calls": calls})
    assert len(text) > 25_000
    tools = [{"type": "function", "function": {"name": f"tool_{k}", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "note": {"type": "string"}}}}} for k in range(3)]
    one_shot = module.parse(text, tools=tools)
    assert one_shot["errors"] == [] and len(one_shot["tool_calls"]) == 90
    for size in (1, 4, 7, 333):
        _, message = stream(module, text, range(size, len(text), size), tools=tools)
        assert message == one_shot, size


def read_counting_waits(module, text, **kwargs):
    """One-shot parse that records which calls had steps the waiting readers (`_call_steps_waiting`) read."""
    parser = module.StreamParser(**kwargs)
    rules = type(parser._rules)  # (the rules layer's class: the method is counted there, then restored)
    waited, waiting_steps = [], rules._call_steps_waiting

    def counting(self, index, call, k):
        waited.append(index)
        return waiting_steps(self, index, call, k)

    rules._call_steps_waiting = counting
    try:
        parser.feed(text)
        parser.end()
    finally:
        rules._call_steps_waiting = waiting_steps
    return parser.message, waited


@needs_corpus
@pytest.mark.parametrize("stem, variant, waits", [
    # (family, a rewrite, whether a step of it needs the waiting readers: they read it, to the same result)
    ("Qwen-Qwen3-0.6B", [('{"name": "', '{"name":"')], True),
    ("Qwen-Qwen3-Coder", [("</function>\n</tool_call>", "</function> </tool_call>")], True),
    # the value in double quotes, as Python also writes it (a Python literal: the waiting value reader)
    ("LiquidAI-LFM2.5-8B-A1B", [("query='", 'query="'), ('"quotes"\'', '\\"quotes\\""')], True),
])
def test_a_call_that_is_all_here_is_read_without_waiting(corpus, stem, variant, waits):
    """One-shot parses read a call written as rendered with the plain readers only (each step of
    the call layout from what is here); a step written otherwise is read by the waiting readers,
    which one-character feeds use for every step. Both are the same loop over the same steps."""
    _, spec, module = corpus[stem] if stem in corpus else pytest.skip(f"{stem} is not in the corpus")
    tools = [{"type": "function", "function": {"name": "tool_1", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}}}}}]
    calls = [{"id": f"c{i:08d}x", "type": "function", "function": {"name": "tool_1", "arguments": {
        "query": f"value {i} with </tool_call> and \"quotes\""}}} for i in range(3)]
    text = spec.format({"role": "assistant", "content": "Doing it.", "tool_calls": calls})
    message, waited = read_counting_waits(module, text, tools=tools, start="content")
    assert waited == [] and message["errors"] == [] and len(message["tool_calls"]) == 3
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
        c["function"]["arguments"] for c in calls]
    varied = text
    for old, new in variant:
        assert old in varied
        varied = varied.replace(old, new)
    message, waited = read_counting_waits(module, varied, tools=tools, start="content")
    assert waited == ([0, 1, 2] if waits else []) and message["errors"] == [] and len(message["tool_calls"]) == 3
    _, streamed = stream(module, varied, range(1, len(varied)), tools=tools, start="content")
    assert streamed == message


@pytest.mark.parametrize("stem, arguments", [
    ("chatml-think-tools", '{"a": NaN}'),
    ("chatml-think-tools", '{"a": 1e999}'),
    ("InternLM-InternLM2.5-chat-vllm-tool", "{'a': {1, 2}}"),
    ("InternLM-InternLM2.5-chat-vllm-tool", "{(1, 2): 3}"),
    ("InternLM-InternLM2.5-chat-vllm-tool", "{'a': 1j}"),
    ("InternLM-InternLM2.5-chat-vllm-tool", "{'a': {[1]: 2}}"),  # literal_eval: TypeError, unhashable
])
def test_arguments_json_cannot_hold_are_an_error_not_a_crash(corpus, chatml, stem, arguments):
    """Decoders accept what JSON has no text for (NaN, 1e999 -> inf; Python sets, complex numbers,
    tuple keys): the call is dropped with invalid_arguments, the same way in every reader."""
    if stem == "chatml-think-tools":
        module, text = chatml, '<tool_call>\n{"name": "f", "arguments": ' + arguments + '}\n</tool_call>'
        spec = probe(tplparse.load(EXAMPLES / "chatml-think-tools.gguf"))
    else:
        module = corpus_module(corpus, stem)
        spec = corpus[stem][1]
        text = '<|action_start|><|plugin|>\n{"name": "f", "arguments": ' + arguments + '}<|action_end|>'
    one_shot = module.parse(text, start="content")
    assert one_shot["tool_calls"] == [] and [e["kind"] for e in one_shot["errors"]] == ["invalid_arguments"]
    _, streamed = stream(module, text, range(1, len(text)), start="content")
    assert streamed == one_shot
    # The reference drops the call too (its JSON grammar has no NaN: there it is invalid output).
    reference = ReferenceParser(spec, start="content").parse(text)
    assert reference["tool_calls"] == []
    assert [e["kind"] for e in reference["errors"]] in (["invalid_arguments"], ["invalid_output"])


@needs_corpus
@pytest.mark.parametrize("cut", ["none", "one character", "inside the whitespace"])
def test_whitespace_at_a_literals_end_takes_all_there(corpus, cut):
    """A literal's end whitespace run matches all the whitespace there, whether the literal
    arrived whole or not (Command R+'s section end is "\n]```\n")."""
    module = corpus_module(corpus, "Cohere-Command-R-Plus-tool_use")
    text = ('Hi\nAction:\n```json\n[\n    {\n        "tool_name": "get",\n        "parameters": {}\n    }\n\n]```'
            '\n\nBye<|END_OF_TURN_TOKEN|>')
    cuts = {"none": [], "one character": range(1, len(text)), "inside the whitespace": [text.index("\n]") + 1]}[cut]
    _, message = stream(module, text, cuts, start="content")
    assert message["errors"] == [] and message["content"] == "Hi\nBye"
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get"]


DEEP = 50_000  # far past the decoders' recursion limits


@pytest.mark.parametrize("stem, call", [
    ("chatml-think-tools", '<tool_call>\n{"name": "f", "arguments": {"a": ' + "[" * DEEP + "]" * DEEP + '}}\n</tool_call>'),
    ("Qwen-Qwen3-Coder", "<tool_call>\n<function=f>\n<parameter=a>\n" + "[" * DEEP + "]" * DEEP
     + "\n</parameter>\n</function>\n</tool_call>"),
    ("LiquidAI-LFM2.5-8B-A1B", "<|tool_call_start|>[f(a=" + "[" * DEEP + "]" * DEEP + ")]<|tool_call_end|>"),
])
def test_arguments_nested_too_deeply_are_an_error_not_a_crash(corpus, chatml, stem, call):
    """Untrusted output may nest past the decoders' recursion limits: the call is dropped with an error."""
    module = chatml if stem == "chatml-think-tools" else corpus_module(corpus, stem)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "array"}}}}}]
    text = call + "Done."
    one_shot = module.parse(text, tools=tools, start="content")
    assert one_shot["tool_calls"] == [] and [e["kind"] for e in one_shot["errors"]] == ["invalid_arguments"]
    assert "deeply" in one_shot["errors"][0]["message"]
    for size in (1, 4096):
        _, message = stream(module, text, range(size, len(text), size), tools=tools, start="content")
        assert message == one_shot, size
    if stem == "chatml-think-tools":  # the reference parser says no too, without a crash
        reference = ReferenceParser(probe(tplparse.load(EXAMPLES / "chatml-think-tools.gguf")), tools=tools, start="content")
        message = reference.parse(text)
        assert message["tool_calls"] == [] and "deeply" in message["errors"][0]["message"]
