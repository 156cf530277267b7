"""The parser reads what models and engines emit, not only what templates render.

Each tolerance rule (docs/tolerance.md) is exercised on the
corpus by the deviation generator (tplparse.check.deviations): every family, every standard
turn, every deviated form the rule makes of the template's own render must read back as the
render does — one-shot and in every chunking — while the grammar stays canonical. Real
outputs from peers' test suites (tests/fixtures/real_outputs.json, each with its source)
read as their expected message.
"""

from __future__ import annotations

import functools
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tplparse
from tplparse import runtime
from tplparse.bridge import compile_in_memory
from tplparse.check.deviations import (CALL_ID_LEFT_OUT, CALL_OBJECT_BY_KEY, CALLS_OPENER_LEFT_OUT, CLOSING_EATEN,
                                       LIST_WITHOUT_WRAPPER, MESSAGE_HEADERS, OPENER_REPEATED, OTHER_KINDS_WRAPPER, RULES,
                                       STRING_LITERALS, VALUES_UNQUOTED, WHITESPACE,
                                       closing_markers, deviations, value_closer)
from tplparse.check.outputs import STANDARD_TOOLS, model_outputs, readable
from tplparse.spec import ArgumentStyle, SpecError, kv_parts

from conftest import DEVIATIONS, LENGTH_CUT, NOT_YET_PROVED, SEPARATED, corpus_compiled, corpus_ids, corpus_stems, corpus_templates, examples, needs_corpus

TEMPLATES = corpus_templates()
REAL_OUTPUTS = json.loads((Path(__file__).parent / "fixtures" / "real_outputs.json").read_text(encoding="utf-8"))


def compiled(stem):
    """(spec, protocol, the family's model outputs) of a corpus template: the session's compile
    (tests/conftest.py; skipped if it is not in the corpus)."""
    entry = corpus_compiled(stem)
    return entry.spec, entry.protocol, entry.outputs


def parsed(protocol, text, start, finish_reason="stop", cuts=None):
    """The message of `text`, one-shot (cuts None) or fed in the pieces `cuts` makes of it."""
    if cuts is None:
        return runtime.parse(protocol, text, tools=STANDARD_TOOLS, start=start, finish_reason=finish_reason)
    parser = runtime.StreamParser(protocol, tools=STANDARD_TOOLS, start=start)
    last = 0
    for cut in sorted(set(cuts)) + [len(text)]:
        if last < cut <= len(text):
            parser.feed(text[last:cut])
            last = cut
    parser.end(finish_reason)
    return parser.message


def without_ids(message):
    return {**message, "tool_calls": [{**c, "id": None} for c in message["tool_calls"]]}


def every(n):
    return lambda text: range(n, len(text), n)


CHUNKINGS = [every(1), every(3), every(7)]


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(DEVIATIONS))
def test_deviated_outputs_read_as_the_render(stem):
    """Every deviated form of every standard turn: the canonical form's message (ids and
    all), one-shot and in every chunking; the expected message of the render."""
    spec, protocol, outputs = compiled(stem)
    checked = 0
    for output in outputs:
        canonical = parsed(protocol, output.text, output.start.value)
        for deviation in deviations(output, spec):
            where = (output.turn, deviation.rule, deviation.eaten)
            one_shot = parsed(protocol, deviation.text, deviation.start.value, deviation.finish_reason)
            if deviation.expected != output.expected:  # (it adds to the turn: a preamble, a call)
                assert not one_shot["errors"], where
            elif deviation.same_ids:
                assert one_shot == canonical, where
            else:  # (the ids the render wrote are left out: the parser numbers the calls)
                assert without_ids(one_shot) == without_ids(canonical), where
                assert [c["id"] for c in one_shot["tool_calls"]] == [f"call_{i}" for i in range(len(one_shot["tool_calls"]))]
            assert readable(one_shot) == deviation.expected, where
            for chunking in CHUNKINGS:
                cuts = chunking(deviation.text)
                assert parsed(protocol, deviation.text, deviation.start.value, deviation.finish_reason, cuts) == one_shot, where
            checked += 1
    if not checked:
        pytest.skip(f"{stem}: no tolerance rule applies to its standard turns")


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(LENGTH_CUT))
def test_closing_markers_missing_at_the_length_limit_are_a_cut(stem):
    """The same text as a "closing markers eaten" deviation, cut by the length limit instead
    of a stop: truncated; a call whose own closing markers are missing is not returned (one
    that lost only the section's end is complete, and stays)."""
    spec, protocol, outputs = compiled(stem)
    end_of_turn = {m.strip() for m in spec.end_of_turn}
    call = spec.tool_calls.call if spec.tool_calls is not None else []
    last_slot = max((i for i, p in enumerate(call) if not isinstance(p, str)), default=-1)
    call_closers = {w for p in call[last_slot + 1:] if isinstance(p, str) for w in p.split()}
    checked = 0
    for output in outputs:
        if not output.expected["tool_calls"]:
            continue
        for deviation in deviations(output, spec):
            if deviation.rule != CLOSING_EATEN or set(deviation.eaten) <= end_of_turn:
                continue  # (a turn that lost only its end-of-turn marker is complete either way)
            message = parsed(protocol, deviation.text, deviation.start.value, "length")
            assert "truncated_tool_call" in {e["kind"] for e in message["errors"]}, (output.turn, deviation.eaten)
            if any(marker in word for marker in deviation.eaten for word in call_closers):
                assert len(message["tool_calls"]) < len(output.expected["tool_calls"]), (output.turn, deviation.eaten)
            checked += 1
    if not checked:
        pytest.skip(f"{stem}: no call turn ends with a call's or a section's closing marker")


@needs_corpus
def test_each_rule_applies_to_two_families_or_more():
    """The rules are tested where they apply: each applies to at least two corpus families
    (so a generator that silently stopped producing a rule's deviations fails here)."""
    families = defaultdict(set)
    for path in TEMPLATES:
        spec, _, outputs = compiled(path.stem)
        for output in outputs:
            for deviation in deviations(output, spec):
                families[deviation.rule].add(path.stem)
    # (one corpus layout writes its id between literals of its own, Mistral Small 3.2's
    # [CALL_ID]: the other id left out is in a JSON call object, Mistral Nemo's "no id")
    # One corpus family writes its turns as messages with headers (gpt-oss, harmony); one
    # renders its pythonic list of calls (LFM 2.5 8B: the other LFM 2.5 template renders no
    # calls; test_a_pythonic_list_without_its_wrapper covers both); one writes its strings raw
    # beside Python literals (ToolACE: test_generalization's strings-as-literals test adds a
    # built one); none quotes every value (vLLM's Llama 4 pythonic example does: the built
    # template of test_generalization's values-without-quotes test asserts its deviations).
    least = {rule: 1 if rule in (CALL_ID_LEFT_OUT, MESSAGE_HEADERS, LIST_WITHOUT_WRAPPER, STRING_LITERALS) else 2
             for rule in RULES}
    least[VALUES_UNQUOTED] = 0
    assert {rule: len(families[rule]) >= least[rule] for rule in RULES} == {rule: True for rule in RULES}, dict(families)
    # A rule that strips the markers calls close with, not only end-of-turn markers:
    assert len({stem for stem in families[CLOSING_EATEN] if compiled(stem)[0].tool_calls is not None}) >= 2


@needs_corpus
@pytest.mark.parametrize("stem", ["Qwen-Qwen3-Coder", "MiniMax-M2", "DeepSeek-V3.2"])
def test_key_value_arguments_without_their_closing_word_are_cut(stem):
    """Key/value arguments end at the call's next literal (`</function>`): an output that
    stops right after an argument could still have had another one, so the call is cut
    even at a stop (the rule eats what comes after that word, not the word)."""
    spec, protocol, outputs = compiled(stem)
    first = next(w for p in spec.tool_calls.call[spec.tool_calls.call.index({"slot": "arguments"}) + 1:]
                 if isinstance(p, str) for w in p.split())
    assert first not in closing_markers(spec)
    turns = [o for o in outputs if o.expected["tool_calls"]]
    assert turns
    for output in turns:
        text = output.text[: output.text.rindex(first)]
        message = parsed(protocol, text, output.start.value, "stop")
        assert "truncated_tool_call" in {e["kind"] for e in message["errors"]}, output.turn
        assert len(message["tool_calls"]) == len(output.expected["tool_calls"]) - 1, output.turn


@functools.lru_cache(maxsize=None)
def deviated_cases() -> tuple:
    """(stem, output index) of every corpus turn with a closing marker to eat, for hypothesis
    to draw from."""
    cases = []
    for path in TEMPLATES:
        if path.stem in NOT_YET_PROVED:
            continue  # (its parametrized tests are strict xfails)
        spec, _, outputs = compiled(path.stem)
        for i, output in enumerate(outputs):
            if any(d.rule == CLOSING_EATEN for d in deviations(output, spec)):
                cases.append((path.stem, i))
    return tuple(cases)


@needs_corpus
@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_combined_deviations_in_random_chunkings(data):
    """Deviations drawn together (the opener written again, then some of the closing markers
    eaten) and fed in random chunks: the canonical message, as one-shot."""
    stem, i = data.draw(st.sampled_from(deviated_cases()))
    spec, protocol, outputs = compiled(stem)
    output = outputs[i]
    found = deviations(output, spec)
    eaten = [d for d in found if d.rule == CLOSING_EATEN]
    deviation = data.draw(st.sampled_from(eaten))
    text = deviation.text
    if data.draw(st.booleans()) and any(d.rule == OPENER_REPEATED for d in found):
        text = spec.reasoning.start + text
    canonical = parsed(protocol, output.text, output.start.value)
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=12))
    assert parsed(protocol, text, output.start.value, "stop", cuts) == canonical
    assert parsed(protocol, text, output.start.value, "stop") == canonical
    # ... and with the render's call objects or ids rewritten too, where a rule does that
    rewritten = [d for d in found if d.rule in (CALL_OBJECT_BY_KEY, CALL_ID_LEFT_OUT)]
    if rewritten:
        other = data.draw(st.sampled_from(rewritten))
        one_shot = parsed(protocol, other.text, output.start.value, "stop")
        assert parsed(protocol, other.text, output.start.value, "stop", cuts) == one_shot
        expected = canonical if other.same_ids else without_ids(canonical)
        assert (one_shot if other.same_ids else without_ids(one_shot)) == expected


@needs_corpus
@pytest.mark.parametrize("case", REAL_OUTPUTS, ids=[f"{c['family']}:{c['rule']}:{i}" for i, c in enumerate(REAL_OUTPUTS)])
def test_real_outputs_read_as_expected(case):
    """Outputs from peers' test suites and bug reports (source named in the fixture): their
    expected message, one-shot and one character at a time."""
    _, protocol, _ = compiled(case["family"])
    tools = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
             for name, _ in case["expected"]["tool_calls"]] or None
    for one_shot in (True, False):
        if one_shot:
            message = runtime.parse(protocol, case["output"], tools=tools, start=case["start"],
                                    finish_reason=case["finish_reason"])
        else:
            parser = runtime.StreamParser(protocol, tools=tools, start=case["start"])
            for ch in case["output"]:
                parser.feed(ch)
            parser.end(case["finish_reason"])
            message = parser.message
        expected = {**case["expected"], "tool_calls": [tuple(call) for call in case["expected"]["tool_calls"]]}
        assert readable(message) == expected, case["source"]
        assert [e["kind"] for e in message["errors"]] == case.get("errors", []), case["source"]


@functools.lru_cache(maxsize=None)
def structural_cases() -> tuple:
    """(stem, output index, deviation index) of every deviation that rewrites the call's
    structure (not its closing markers), for hypothesis to draw from."""
    kinds = {CALL_OBJECT_BY_KEY, CALL_ID_LEFT_OUT, CALLS_OPENER_LEFT_OUT, LIST_WITHOUT_WRAPPER, OTHER_KINDS_WRAPPER,
             MESSAGE_HEADERS, WHITESPACE}
    cases = []
    for path in TEMPLATES:
        if path.stem in NOT_YET_PROVED:
            continue  # (its parametrized tests are strict xfails)
        spec, _, outputs = compiled(path.stem)
        for i, output in enumerate(outputs):
            cases += [(path.stem, i, j) for j, d in enumerate(deviations(output, spec)) if d.rule in kinds]
    return tuple(cases)


@needs_corpus
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_structural_deviations_with_their_closing_markers_eaten_in_random_chunkings(data):
    """A deviation of the call's structure (opener left out, recipient moved, whitespace
    around markers, keys reordered, …), then some of the closing markers it ends with
    eaten by the engine, fed in random chunks: the deviation's expected message, no error,
    as one-shot."""
    stem, i, j = data.draw(st.sampled_from(structural_cases()))
    spec, protocol, outputs = compiled(stem)
    output = outputs[i]
    deviation = deviations(output, spec)[j]
    text = deviation.text
    markers = closing_markers(spec)
    for _ in range(data.draw(st.integers(0, 3))):
        body = text.rstrip()
        marker = next((m for m in markers if body.endswith(m)), None)
        if marker is None:
            break
        text = body[: len(body) - len(marker)]
    one_shot = parsed(protocol, text, deviation.start.value, "stop")
    assert readable(one_shot) == deviation.expected and not one_shot["errors"], (deviation.rule, deviation.eaten, text)
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=12))
    assert parsed(protocol, text, deviation.start.value, "stop", cuts) == one_shot


# --- a value left without its closing tag ---------------------------------------------------

VALUE_CLOSER_FAMILIES = ["Qwen-Qwen3-Coder", "MiniMax-M2", "ZAI-GLM-4.6", "StepFun-Step-3.5-Flash"]


def _written_call(spec, arguments):
    return spec.tool_calls.format([{"name": "convert_currency", "arguments": arguments}])


def _next_argument_opener(spec, key):
    """The text the family's argument layout writes to open the argument `key` (up to its value)."""
    (layout,) = spec.tool_calls.arguments.argument.values()
    before, middle, _ = kv_parts(layout)
    return before.strip() + key + middle.strip()


@needs_corpus
@pytest.mark.parametrize("stem", VALUE_CLOSER_FAMILIES)
def test_a_closed_value_holding_the_next_arguments_opener_has_two_readings(stem):
    """`amount` closed by its tag but holding what opens another argument: it is a value that
    holds that text, or a value whose closing tag is missing followed by the argument `target`.
    The parser does not guess: the call is not returned, the error names both readings, and
    a streaming client that had the call's header is told it is void."""
    spec, protocol, _ = compiled(stem)
    assert value_closer(spec) is not None
    held = "EUR 12\n" + _next_argument_opener(spec, "target") + "USD"
    text = _written_call(spec, {"amount": held})
    message = parsed(protocol, text, "content")
    assert message["tool_calls"] == []
    assert [e["kind"] for e in message["errors"]] == ["invalid_arguments"]
    assert "two readings of 'amount'" in message["errors"][0]["message"]
    parser = runtime.StreamParser(protocol, tools=STANDARD_TOOLS, start="content")
    deltas = [d for ch in text for d in parser.feed(ch)] + parser.end()
    assert parser.message == message
    assert [d["tool_call_error"]["kind"] for d in deltas if "tool_call_error" in d] == ["invalid_arguments"]
    # (what was streamed of `amount` stops where the other reading would end it)
    streamed = "".join(c["function"].get("arguments", "") for d in deltas for c in d.get("tool_calls", []))
    assert "USD" not in streamed


@needs_corpus
@pytest.mark.parametrize("stem", VALUE_CLOSER_FAMILIES)
def test_a_closed_value_holding_the_calls_closing_word_has_one_reading(stem):
    """A value that holds the call's closing word (`</function>`) and then its own closing
    tag reads as that value: ending the call there would leave the value's tag after it."""
    spec, protocol, _ = compiled(stem)
    call = spec.tool_calls.call
    word = next(w for p in call[call.index({"slot": "arguments"}) + 1:] if isinstance(p, str) for w in p.split())
    value = f"see {word} here"
    message = parsed(protocol, _written_call(spec, {"amount": value}), "content")
    assert message["errors"] == []
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [{"amount": value}]


@needs_corpus
@pytest.mark.parametrize("stem", VALUE_CLOSER_FAMILIES)
def test_a_value_left_open_at_the_end_of_the_output_is_cut(stem):
    """Nothing after the value settles it: the output was cut inside it, whatever the finish."""
    spec, protocol, _ = compiled(stem)
    text = _written_call(spec, {"amount": "EUR 12"})
    text = text[: text.index("EUR 12") + len("EUR 12")]
    for finish in ("stop", "length"):
        message = parsed(protocol, text, "content", finish)
        assert message["tool_calls"] == [] and [e["kind"] for e in message["errors"]] == ["truncated_tool_call"]


@needs_corpus
@pytest.mark.parametrize("stem", VALUE_CLOSER_FAMILIES + ["DeepSeek-V3.2"])
def test_a_value_cut_right_after_the_calls_closing_word_is_settled_only_at_a_stop(stem):
    """`<arg_value>Close it with </tool_call>`, the output ending there: at a natural stop the
    output is whole and the word closes the call (the value's closing tag missing); cut by the
    length limit, the word may be the start of more of the value: the call is truncated, and
    a client streaming it is told it is void."""
    spec, protocol, _ = compiled(stem)
    call = spec.tool_calls.call
    word = next(w for p in call[call.index({"slot": "arguments"}) + 1:] if isinstance(p, str) for w in p.split())
    text = _written_call(spec, {"amount": f"Close it with {word} then stop."})
    at_stop = parsed(protocol, text[: text.index(word) + len(word)], "content", "stop")
    assert [json.loads(c["function"]["arguments"]) for c in at_stop["tool_calls"]] == [{"amount": "Close it with "}]
    for cut in (text.index(word) + len(word), text.index(" then stop.") + len(" then st")):
        cut_short = parsed(protocol, text[:cut], "content", "length")
        assert cut_short["tool_calls"] == [], text[:cut]
        assert "truncated_tool_call" in [e["kind"] for e in cut_short["errors"]]
        parser = runtime.StreamParser(protocol, tools=STANDARD_TOOLS, start="content")
        deltas = [d for ch in text[:cut] for d in parser.feed(ch)] + parser.end("length")
        assert parser.message == cut_short
        assert [d["tool_call_error"]["kind"] for d in deltas if "tool_call_error" in d] == ["truncated_tool_call"]


# --- values typed by the schema -----------------------------------------------------------

RAW_VALUE_FAMILIES = ["Qwen-Qwen3-Coder", "ZAI-GLM-4.6", "MiniMax-M2"]


@needs_corpus
@pytest.mark.parametrize("stem", RAW_VALUE_FAMILIES)
@pytest.mark.parametrize("schema, raw, expected", [
    ({"type": ["integer", "null"]}, "3", 3),
    ({"type": ["integer", "null"]}, "null", None),
    ({"type": ["integer", "null"]}, "None", None),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, "3", 3),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, "three", "three"),
    ({"type": ["string", "integer"]}, "3", "3"),
    ({"oneOf": [{"type": "boolean"}, {"type": "array"}]}, "True", True),
    ({"oneOf": [{"type": "boolean"}, {"type": "array"}]}, "['a', \"b\"]", ["a", "b"]),
    ({"type": "number"}, "1e3", 1000.0),
    ({"type": "object"}, "{'a': None, 'b': True}", {"a": None, "b": True}),
    ({"type": "object"}, '{"a": null, "b": true}', {"a": None, "b": True}),
    ({"enum": [1, "auto"]}, "auto", "auto"),
])
def test_a_raw_value_is_typed_by_each_of_its_schemas_types_in_order(stem, schema, raw, expected):
    """A key/value raw value, typed by the tool's schema: each type it allows in the schema's
    order (a type list, anyOf / oneOf, an enum's values), Python and JSON literals both."""
    spec, protocol, _ = compiled(stem)
    text = _written_call(spec, {"v": raw})
    tools = [{"type": "function", "function": {"name": "convert_currency", "parameters": {
        "type": "object", "properties": {"v": schema}}}}]
    message = runtime.parse(protocol, text, tools=tools, start="content")
    assert message["errors"] == [] and [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
        {"v": expected}]
    parser = runtime.StreamParser(protocol, tools=tools, start="content")
    for ch in text:
        parser.feed(ch)
    parser.end()
    assert parser.message == message


@needs_corpus
@pytest.mark.parametrize("stem", RAW_VALUE_FAMILIES)
@pytest.mark.parametrize("schema, raw", [
    ({"type": "integer"}, "three"), ({"type": ["integer", "null"]}, "three"), ({"type": "object"}, '"a string"'),
    ({"type": "array"}, "{}"), ({"type": "boolean"}, "yes"),
])
def test_a_raw_value_none_of_its_types_reads_is_invalid(stem, schema, raw):
    spec, protocol, _ = compiled(stem)
    tools = [{"type": "function", "function": {"name": "convert_currency", "parameters": {
        "type": "object", "properties": {"v": schema}}}}]
    message = runtime.parse(protocol, _written_call(spec, {"v": raw}), tools=tools, start="content")
    assert message["tool_calls"] == [] and [e["kind"] for e in message["errors"]] == ["invalid_arguments"]


@needs_corpus
@pytest.mark.parametrize("stem", ["LiquidAI-LFM2.5-8B-A1B", "InternLM-InternLM2.5-chat-vllm-tool"])
def test_python_and_json_literals_both_read_where_the_format_writes_either(stem):
    """A format that writes Python literals (pythonic calls) reads JSON's true / null too."""
    spec, protocol, _ = compiled(stem)
    arguments = {"flag": True, "none": None, "items": [False, None]}
    text = spec.tool_calls.format([{"name": "convert_currency", "arguments": arguments}])
    assert "True" in text or "true" in text
    swapped = text.replace("True", "true").replace("False", "false").replace("None", "null") if "True" in text else \
        text.replace("true", "True").replace("false", "False").replace("null", "None")
    for written in (text, swapped):
        message = runtime.parse(protocol, written, start="content")
        assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [arguments], written


# --- values in a format's own notation --------------------------------------------------------


NATIVE_VALUES = {"array": ["x", "y"], "object": {"j": 1, "k": "v"}}


def _native_deviations(fmt):
    """kind -> (the canonical text of NATIVE_VALUES[kind] in the format's own notation, and
    that value written otherwise: a separator missing, trailing, doubled or leading, an
    empty key, a key twice), from the format's own writer."""
    sep = fmt.separator
    out = {}
    for kind, value in NATIVE_VALUES.items():
        open_, close = fmt.brackets[kind]
        if kind == "array":
            items = [fmt.encode_value(fmt.value_encoders["string"], v) for v in value]
        else:
            items = [fmt.format({k: v}) for k, v in value.items()]
        canonical = fmt.encode_value("native", value)
        assert canonical == open_ + sep.join(items) + close
        first, second = items
        deviated = {
            "no separator": open_ + first + second + close,
            "a trailing separator": open_ + first + sep + second + sep + close,
            "a separator doubled": open_ + first + sep + sep + second + close,
            "a leading separator": open_ + sep + first + sep + second + close,
            "a separator alone": open_ + sep + close,
        }
        if kind == "object":
            deviated["an empty key"] = open_ + first + sep + fmt.format({"": 2}) + close
            deviated["a key twice"] = open_ + first + sep + first + close
        out[kind] = (canonical, deviated)
    return out


@needs_corpus
@pytest.mark.parametrize("stem", [p.stem for p in TEMPLATES], ids=corpus_ids(TEMPLATES))
def test_a_native_value_written_otherwise_than_its_format_is_invalid(stem):
    """A list or object in the format's own notation (Gemma 4's `[<|"|>x<|"|>,<|"|>y<|"|>]`)
    reads as the format writes it: one separator between elements, none after the last, no
    empty element, a key once. Otherwise the arguments do not read (`invalid_arguments`, the
    call dropped), one-shot and streamed: not a guess at what was meant."""
    spec, protocol, _ = compiled(stem)
    if spec.tool_calls is None or "native" not in spec.tool_calls.arguments.value_encoders.values():
        pytest.skip(f"{stem}: no values in a notation of the format's own")
    fmt = spec.tool_calls.arguments
    for kind, (canonical, deviated) in _native_deviations(fmt).items():
        value = NATIVE_VALUES[kind]
        text = spec.tool_calls.format([{"name": "convert_currency", "arguments": {"xs": value}}])
        assert text.count(canonical) == 1
        assert _parsed_both_ways(protocol, text, None)["tool_calls"][0]["function"]["arguments"] == json.dumps({"xs": value})
        for how, written in deviated.items():
            message = _parsed_both_ways(protocol, text.replace(canonical, written), None)
            assert message["tool_calls"] == [], (kind, how, written)
            assert [e["kind"] for e in message["errors"]] == ["invalid_arguments"], (kind, how, message["errors"])


# A list and an object as JSON or a Python literal writes them (either quote), the elements
# captured: [open, first, separator, second, close].
_WRITTEN_LITERALS = {
    "array": re.compile(r"""(\[)(["']x["'])(,\s*)(["']y["'])(\])"""),
    "object": re.compile(r"""(\{)(["']j["']:\s*1)(,\s*)(["']k["']:\s*["']v["'])(\})"""),
}


def _separators_deviated(open_, first, sep, second, close):
    """how -> the two elements separated otherwise than written: the classes issue #28 names."""
    return {
        "no separator": open_ + first + second + close,
        "a trailing separator": open_ + first + sep + second + sep.strip() + close,
        "a separator doubled": open_ + first + sep.strip() + sep + second + close,
        "a leading separator": open_ + sep + first + sep + second + close,
        "a separator alone": open_ + sep.strip() + close,
    }


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(SEPARATED))
def test_a_json_or_python_value_separated_otherwise_than_written_is_invalid(stem):
    """A list or an object as the family writes it inside arguments, JSON or a Python literal
    (a JSON arguments object, a pythonic call, a key/value raw value typed by its schema): a
    separator missing (Python would join 'x' 'y' into 'xy'), trailing, doubled, leading or
    alone is not the value written: `invalid_arguments` (`invalid_tool_call` where the call is
    one JSON object, arguments and all), the call dropped, one-shot and streamed; never a guess
    at what was meant."""
    spec, protocol, _ = compiled(stem)
    if spec.tool_calls is None:
        pytest.skip(f"{stem}: no tool calls")
    tools = [{"type": "function", "function": {"name": "convert_currency", "parameters": {"type": "object", "properties": {
        "xs": {"type": "array", "items": {"type": "string"}}, "o": {"type": "object"}}}}}]
    arguments = {"xs": ["x", "y"], "o": {"j": 1, "k": "v"}}
    try:
        text = spec.tool_calls.format([{"name": "convert_currency", "id": "a1b2c3d4e", "arguments": arguments}])
    except SpecError:
        pytest.skip(f"{stem}: its writer writes no list or object argument")
    assert [json.loads(c["function"]["arguments"]) for c in _parsed_both_ways(protocol, text, tools)["tool_calls"]] == [
        arguments], text
    checked = 0
    for kind, pattern in _WRITTEN_LITERALS.items():
        found = list(pattern.finditer(text))
        if len(found) != 1:
            continue  # (written in a notation of the format's own, or as XML elements)
        checked += 1
        for how, written in _separators_deviated(*found[0].groups()).items():
            deviated = text[:found[0].start()] + written + text[found[0].end():]
            message = _parsed_both_ways(protocol, deviated, tools)
            assert message["tool_calls"] == [], (kind, how, deviated)
            kinds = [e["kind"] for e in message["errors"] if e["kind"] != "text_after_end_of_turn"]
            one_object = spec.tool_calls.arguments.style == ArgumentStyle.OBJECT and {"slot": "arguments"} not in \
                spec.tool_calls.call
            assert kinds == ["invalid_tool_call" if one_object else "invalid_arguments"], (kind, how, message["errors"])
    if not checked:
        pytest.skip(f"{stem}: its lists and objects are written in no JSON or Python notation")


@needs_corpus
@pytest.mark.parametrize("stem", corpus_stems(SEPARATED))
def test_key_value_arguments_separated_otherwise_than_written_are_no_call(stem):
    """Key/value arguments (`j=1, k='v'`, `j:1,k:<|"|>v<|"|>`, `<arg_key>j</arg_key>…`) read as
    the layout writes them: where it writes a separator between arguments, one missing,
    trailing, doubled or leading is no call but an error (`invalid_tool_call`: the layout is
    broken; or `invalid_arguments`: a value reads otherwise); an argument with an empty name is
    one too. One-shot and streamed; never a guess at what was meant."""
    spec, protocol, _ = compiled(stem)
    if spec.tool_calls is None or spec.tool_calls.arguments.style == ArgumentStyle.OBJECT:
        pytest.skip(f"{stem}: no key/value arguments")
    fmt = spec.tool_calls.arguments
    tools = [{"type": "function", "function": {"name": "convert_currency", "parameters": {"type": "object", "properties": {
        "j": {"type": "integer"}, "k": {"type": "string"}}}}}]
    arguments = {"j": 1, "k": "v"}
    text = spec.tool_calls.format([{"name": "convert_currency", "id": "a1b2c3d4e", "arguments": arguments}])
    assert [json.loads(c["function"]["arguments"]) for c in _parsed_both_ways(protocol, text, tools)["tool_calls"]] == [
        arguments], text
    first, second = fmt.format({"j": 1}), fmt.format({"k": "v"})
    canonical = fmt.format(arguments)
    assert canonical == first + fmt.separator + second and text.count(canonical) == 1, (canonical, text)
    deviated = {"an empty name": fmt.format({"": 1}) + fmt.separator + second}
    if fmt.separator.strip():
        sep = fmt.separator
        deviated.update({"no separator": first + second, "a trailing separator": canonical + sep,
                         "a separator doubled": first + sep + sep + second, "a leading separator": sep + canonical})
    for how, written in deviated.items():
        message = _parsed_both_ways(protocol, text.replace(canonical, written), tools)
        assert message["tool_calls"] == [], (how, written)
        kinds = [e["kind"] for e in message["errors"] if e["kind"] != "text_after_end_of_turn"]
        assert kinds in (["invalid_tool_call"], ["invalid_arguments"]), (how, written, message["errors"])


# --- turns written as messages with headers (harmony) ---------------------------------------

HARMONY = "OpenAI-gpt-oss-120b"
# The same template with every marker, channel and the recipient's key and namespace spelled
# otherwise: the message rules name none of them, so the renamed format reads the same way.
RENAMED = {"<|channel|>": "<|chan|>", "<|message|>": "<|body|>", "<|start|>": "<|begin|>", "<|end|>": "<|stop|>",
           "<|call|>": "<|invoke|>", "<|return|>": "<|done|>", "analysis": "thought", "final": "reply",
           "commentary": "action", "to=": "recipient=", "functions.": "tools."}
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
PYTHON_TOOL = [{"type": "function", "function": {"name": "python", "parameters": {
    "type": "object", "properties": {"code": {"type": "string"}}}}}]


def _parsed_both_ways(protocol, text, tools, finish_reason="stop"):
    """The message of `text` one-shot, after checking that one character at a time gives the same."""
    message = runtime.parse(protocol, text, tools=tools, start="content", finish_reason=finish_reason)
    parser = runtime.StreamParser(protocol, tools=tools, start="content")
    for ch in text:
        parser.feed(ch)
    parser.end(finish_reason)
    assert parser.message == message, text
    return message


@needs_corpus
def test_message_headers_are_read_by_the_templates_own_markers(tmp_path):
    paths = [p for p in TEMPLATES if p.stem == HARMONY]
    if not paths:
        pytest.skip(f"{HARMONY} is not in the corpus")
    source = paths[0].read_text(encoding="utf-8")
    for old, new in RENAMED.items():
        source = source.replace(old, new)
    renamed = tmp_path / "renamed-harmony.jinja"
    renamed.write_text(source, encoding="utf-8")
    template = tplparse.load(renamed)
    spec, protocol = compile_in_memory(template)
    messages = protocol.tables["messages"]
    assert (messages["channel"], messages["body"], messages["start"], messages["end"], messages["call_end"]) == (
        "<|chan|>", "<|body|>", "<|begin|>assistant", "<|stop|>", "<|invoke|>")
    assert messages["channels"] == {"reply": "content", "thought": "reasoning", "action": "calls"}
    assert (messages["recipient"], messages["namespace"]) == ("recipient=", "tools.")
    ways = set()
    for output in model_outputs(template, spec):
        for deviation in deviations(output, spec):
            if deviation.rule != MESSAGE_HEADERS:
                continue
            one_shot = parsed(protocol, deviation.text, deviation.start.value)
            assert readable(one_shot) == deviation.expected and not one_shot["errors"], deviation.eaten
            for chunking in CHUNKINGS:
                assert parsed(protocol, deviation.text, deviation.start.value, cuts=chunking(deviation.text)) == one_shot
            ways.add(deviation.eaten)
    assert len(ways) >= 6, ways


@needs_corpus
def test_a_built_in_recipient_is_a_call_only_when_offered():
    """`to=python` (no namespace): a call of `python` when such a tool is offered; otherwise
    reported, its body left out, and the rest of the turn read on."""
    _, protocol, _ = compiled(HARMONY)
    text = ('<|channel|>analysis<|message|>Run it.<|end|><|start|>assistant<|channel|>commentary to=python '
            '<|constrain|>json<|message|>{"code": "print(1)"}<|call|>')
    offered = _parsed_both_ways(protocol, text, PYTHON_TOOL)
    assert readable(offered)["tool_calls"] == [("python", {"code": "print(1)"})] and not offered["errors"]
    not_offered = _parsed_both_ways(protocol, text.replace("<|call|>", "<|end|><|start|>assistant<|channel|>final"
                                                           "<|message|>Done.<|return|>"), WEATHER)
    assert not_offered["tool_calls"] == [] and not_offered["content"] == "Done."
    assert [e["kind"] for e in not_offered["errors"]] == ["unknown_tool"]
    assert "built-in" in not_offered["errors"][0]["message"]
    # (no tools given: a call of a namespaced name is a call, a built-in one is not)
    assert _parsed_both_ways(protocol, text, None)["tool_calls"] == []


@needs_corpus
def test_a_message_on_a_channel_the_template_never_writes_is_reported_and_left_out():
    _, protocol, _ = compiled(HARMONY)
    text = ("<|channel|>secret<|message|>not for the user<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Hello.<|return|>")
    message = _parsed_both_ways(protocol, text, WEATHER)
    assert (message["content"], message["reasoning_content"]) == ("Hello.", None)
    assert [e["kind"] for e in message["errors"]] == ["unknown_channel"] and "'secret'" in message["errors"][0]["message"]


@needs_corpus
@pytest.mark.parametrize("header, kind", [
    # two recipients: which tool the call is for has two readings
    ("<|channel|>commentary to=functions.get_weather to=functions.other json", "invalid_tool_call"),
    # a header that holds the end of a message is not a header
    ("<|channel|>commentary to=functions.get_weather<|end|>", "invalid_tool_call"),
    # a recipient with the namespace and no name after it
    ("<|channel|>commentary to=functions. json", "invalid_tool_call"),
])
def test_a_call_header_that_does_not_read_is_an_error_not_a_call(header, kind):
    _, protocol, _ = compiled(HARMONY)
    message = _parsed_both_ways(protocol, header + '<|message|>{"city": "Paris"}<|call|>', WEATHER)
    assert message["tool_calls"] == [] and [e["kind"] for e in message["errors"]] == [kind]


@needs_corpus
def test_message_call_arguments_stream_and_a_cut_one_is_dropped():
    """The call's header goes out once its header is read, its arguments as they arrive; at
    the length limit a call cut inside its arguments is dropped, and a delta says so."""
    _, protocol, _ = compiled(HARMONY)
    text = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris, France"}<|call|>'
    parser = runtime.StreamParser(protocol, tools=WEATHER, start="content")
    deltas = [d for ch in text for d in parser.feed(ch)] + parser.end("stop")
    pieces = [c["function"]["arguments"] for d in deltas for c in d.get("tool_calls", [])]
    assert len(pieces) > 5 and "".join(pieces) == json.dumps({"city": "Paris, France"})
    cut = runtime.StreamParser(protocol, tools=WEATHER, start="content")
    deltas = [d for ch in text[:-20] for d in cut.feed(ch)] + cut.end("length")
    assert any("tool_call_error" in d for d in deltas) and cut.message["tool_calls"] == []


# --- whitespace (rule 8) --------------------------------------------------------------------

@needs_corpus
@pytest.mark.parametrize("stem, text, content", [
    # Kimi writes nothing between the content and its section marker: the space is the model's
    ("Moonshot-Kimi-K2", "Hi. <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                         '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>', "Hi. "),
    ("Moonshot-Kimi-K2", "Hi.\n<|tool_calls_section_begin|> <|tool_call_begin|> functions.get_weather:0 "
                         '<|tool_call_argument_begin|> {"city": "Paris"} <|tool_call_end|> <|tool_calls_section_end|>', "Hi.\n"),
    # Qwen 3 writes "\n" before <tool_call>: that newline is the template's, what comes before it the model's
    ("Qwen-Qwen3-0.6B", 'Hi.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "Hi."),
    ("Qwen-Qwen3-0.6B", 'Hi. \n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "Hi. "),
    ("Qwen-Qwen3-0.6B", 'Hi. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "Hi. "),
    # at the end of the turn, where the template writes nothing before its end marker
    ("Qwen-Qwen3-0.6B", "Hi.\n<|im_end|>", "Hi.\n"),
    ("Moonshot-Kimi-K2", "Hi. ", "Hi. "),
])
def test_content_keeps_its_whitespace_less_the_templates_own(stem, text, content):
    _, protocol, _ = compiled(stem)
    message = _parsed_both_ways(protocol, text, WEATHER)
    assert message["content"] == content and not message["errors"]
    assert readable(message)["tool_calls"] in ([], [("get_weather", {"city": "Paris"})])
    parser = runtime.StreamParser(protocol, tools=WEATHER, start="content")
    deltas = [d for piece in (text[:4], text[4:9], text[9:]) for d in parser.feed(piece)] + parser.end("stop")
    assert "".join(d.get("content", "") for d in deltas) == content  # (streamed: the same text, never taken back)


# --- a call element self-closed (rule 5) ----------------------------------------------------

def _self_closed(text, name):
    """`text` (a no-argument call as the format writes it) with its element self-closed:
    `<invoke name="f">\n</invoke>` -> `<invoke name="f"/>`; None where the call is no element."""
    before = text[: text.index(name)]
    tags = re.findall(r"<([A-Za-z0-9_:.\-｜]+)", before)
    if not tags:
        return None
    found = re.search(re.escape(name) + r'("?)\s*>\s*</' + re.escape(tags[-1]) + ">", text)
    return None if found is None else text[: found.start()] + name + found.group(1) + "/>" + text[found.end():]


@needs_corpus
def test_a_call_element_self_closed_is_a_call_without_arguments():
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
    families = []
    for path in TEMPLATES:
        spec, protocol, _ = compiled(path.stem)
        if spec.tool_calls is None or not spec.tool_calls.call or spec.tool_calls.arguments.style.value == "object":
            continue
        written = spec.tool_calls.format([{"name": "get_time", "arguments": {}}])
        closed = _self_closed(written, "get_time")
        if closed is None:
            continue
        canonical = _parsed_both_ways(protocol, written, tools)
        assert readable(canonical)["tool_calls"] == [("get_time", {})], path.stem
        for form in (closed, closed.replace("/>", " />")):
            assert _parsed_both_ways(protocol, form, tools) == canonical, (path.stem, form)
        families.append(path.stem)
    assert len(families) >= 2, families


# --- a pythonic list without its wrapper (rule 5) -------------------------------------------

@needs_corpus
@pytest.mark.parametrize("stem", ["LiquidAI-LFM2.5-8B-A1B", "LiquidAI-LFM2.5-Instruct"])
def test_a_pythonic_list_without_its_wrapper_is_calls_only_when_it_reads_as_offered_calls(stem):
    spec, protocol, _ = compiled(stem)
    tools = WEATHER + [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    wrapped = spec.tool_calls.format([{"name": "get_weather", "arguments": {"city": "Paris"}},
                                      {"name": "get_time", "arguments": {}}])
    bare = wrapped[wrapped.index("["): wrapped.rindex("]") + 1]
    assert bare.startswith("[get_weather(") and bare != wrapped
    canonical = _parsed_both_ways(protocol, wrapped, tools)
    assert readable(canonical)["tool_calls"] == [("get_weather", {"city": "Paris"}), ("get_time", {})]
    assert _parsed_both_ways(protocol, bare, tools) == canonical
    assert _parsed_both_ways(protocol, "\n" + bare + "\n", tools) == canonical
    not_calls = [
        (bare, None),  # no tools offered: nothing says it is a call
        (bare + " and that is all", tools),  # prose after it: the list is not the whole output
        ("[1] and [2] are sources", tools),
        (bare.replace("get_weather", "rm_rf"), tools),  # a tool nobody offered
        ('[get_weather(city=os.system("id"))]', tools),  # a value that is an expression, not a literal
        ('[get_weather("Paris")]', tools),  # a positional argument
        ('[get_weather(city="Par', tools),  # never closed
    ]
    for text, offered in not_calls:
        message = _parsed_both_ways(protocol, text, offered)
        assert message["tool_calls"] == [] and message["content"] == text.strip() and not message["errors"], text
    # (nothing of it goes out while it may be a list of calls; then it goes out as content)
    parser = runtime.StreamParser(protocol, tools=tools, start="content")
    early = [d for ch in bare[:-1] for d in parser.feed(ch)]
    assert early == []


# --- a wrapper the template writes for another kind of call (rule 4) ------------------------

@needs_corpus
@pytest.mark.parametrize("stem, call", [
    ("Meta-Llama-3.1-8B-Instruct", '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    ("MeetKai-Functionary-medium-v3.1", '<function=get_weather>{"city": "Paris"}</function>'),
])
def test_a_wrapper_of_another_call_kind_is_read_past_and_nothing_else_follows_it(stem, call):
    spec, protocol, _ = compiled(stem)
    assert spec.tool_calls.wrappers == ["<|python_tag|>"]  # (found in the template's code: no render shows it)
    plain = _parsed_both_ways(protocol, call, WEATHER)
    assert readable(plain)["tool_calls"] == [("get_weather", {"city": "Paris"})]
    assert _parsed_both_ways(protocol, "<|python_tag|>" + call, WEATHER) == plain
    # (what the template writes after it, a built-in's call or code, is a call this format does not read)
    other = _parsed_both_ways(protocol, 'Running it.<|python_tag|>print("hi")', WEATHER)
    assert other["tool_calls"] == [] and other["content"] == "Running it."
    assert [e["kind"] for e in other["errors"]] == ["invalid_tool_call"]
    cut = _parsed_both_ways(protocol, "Running it.<|python_tag|>", WEATHER)
    assert [e["kind"] for e in cut["errors"]] == ["truncated_tool_call"]


# --- edges of the rules above (found in review) ---------------------------------------------

@needs_corpus
@pytest.mark.parametrize("text, content, reasoning, kinds", [
    # a header the turn's end cuts off before its body marker: reported, not content, not a guess
    ("<|channel|>final Hello there<|return|>", None, None, ["invalid_message_header"]),
    ("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final Hello.", None, "think",
     ["invalid_message_header"]),
    # a message's end, then the next header without its start; a message's end, then the turn's
    ("<|channel|>analysis<|message|>think<|end|><|channel|>final<|message|>Hello<|return|>", "Hello", "think", []),
    ("<|channel|>analysis<|message|>think<|end|><|return|>", None, "think", []),
    # the content keeps its own trailing whitespace (the template writes none before <|return|>)
    ("<|channel|>final<|message|>Hello  <|return|>", "Hello  ", None, []),
])
def test_message_turn_edges(text, content, reasoning, kinds):
    _, protocol, _ = compiled(HARMONY)
    message = _parsed_both_ways(protocol, text, WEATHER)
    assert (message["content"], message["reasoning_content"]) == (content, reasoning)
    assert [e["kind"] for e in message["errors"]] == kinds


@needs_corpus
@pytest.mark.parametrize("text, calls", [
    (" [ get_weather(city='Paris') ]", [("get_weather", {"city": "Paris"})]),
    ("[get_weather(city = 'Paris')\n]", [("get_weather", {"city": "Paris"})]),
    ("[get_weather(city='a') , get_weather(city='b')]", [("get_weather", {"city": "a"}), ("get_weather", {"city": "b"})]),
    ("[get_weather(city=b'x')]", []),  # bytes: no JSON value
    ("[get_weather(city=-True)]", []),  # an expression
    ("[get_weather(city=1e999)]", []),  # a number JSON has no text for
    ("[get_weather(city='a', city='b')]", []),  # a keyword twice
])
def test_a_pythonic_list_without_its_wrapper_is_read_as_python(text, calls):
    _, protocol, _ = compiled("LiquidAI-LFM2.5-8B-A1B")
    message = _parsed_both_ways(protocol, text, WEATHER)
    assert readable(message)["tool_calls"] == calls and not message["errors"]
    assert message["content"] == (None if calls else text.strip())


@needs_corpus
def test_an_output_cut_inside_an_optional_closing_marker_is_not_content():
    _, protocol, _ = compiled("Moonshot-Kimi-K2")
    call = '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
    for cut in ("<|tool_calls_sect", ""):
        message = _parsed_both_ways(protocol, call + cut, WEATHER)
        assert message["content"] is None and readable(message)["tool_calls"] == [("get_weather", {"city": "Paris"})]
    _, minimax, _ = compiled("MiniMax-M2")
    message = _parsed_both_ways(minimax, '<minimax:tool_call>\n<invoke name="get_weather" /', WEATHER)
    assert [e["kind"] for e in message["errors"]] == ["truncated_tool_call"]


@needs_corpus
@pytest.mark.parametrize("text", [
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',  # "arguments" for the template's "parameters"
    '{"name": "get_weather", "type": "function", "parameters": {"city": "Paris"}}',  # an extra key
    '<|python_tag|>{"parameters": {"city": "Paris"}, "name": "get_weather"}',  # keys reversed, after the wrapper
])
def test_llama_3_1s_call_object_is_read_by_its_keys(text):
    """Llama 3.1's calls section is the one call's object (`{"name": "` … `}`): read as a call
    object by its keys, as the other JSON call formats are."""
    _, protocol, _ = compiled("Meta-Llama-3.1-8B-Instruct")
    message = _parsed_both_ways(protocol, text, WEATHER)
    assert readable(message)["tool_calls"] == [("get_weather", {"city": "Paris"})] and not message["errors"]
