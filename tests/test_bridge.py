"""The bridge side: prompts tied to parsers, validation with paths, feedback and retries."""

from __future__ import annotations

import json

import pytest

import tplparse
from tplparse import GaveUp, Success, feedback_messages, validate_content, validate_tool_calls, with_retries

from conftest import CORPUS, EXAMPLES, needs_corpus, run_cli

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer"}},
    "required": ["city"],
    "additionalProperties": False,
}}}


def corpus_template(stem):
    path = CORPUS / f"{stem}.jinja"
    if not path.is_file():
        pytest.skip(f"{stem} is not in the corpus")
    return tplparse.load(path)


def read(prompt, output):
    parser = prompt.parser()
    parser.feed(output)
    parser.end()
    return parser.message


# --- Thinking modes: the parser's start state follows the prompt -----------------------


def test_switch_variable_example():
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    off = tplparse.prompt(template, USER, thinking=False)
    assert off.text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") and off.start == "content"
    assert read(off, "Sunny.<|im_end|>")["content"] == "Sunny."
    default = tplparse.prompt(template, USER)
    assert default.text.endswith("<|im_start|>assistant\n") and default.start == "content"
    assert read(default, "<think>warm?</think>Sunny.<|im_end|>")["reasoning_content"] == "warm?"
    assert off.stop == ["<|im_end|>"]


@needs_corpus
def test_forced_open_thinking_starts_the_parser_in_reasoning():
    template = corpus_template("Qwen-Qwen3.5-4B")
    on = tplparse.prompt(template, USER, thinking=True)
    assert on.generation_prompt.endswith("<think>\n") and on.start == "reasoning"
    message = read(on, "Let me think.\n</think>\n\nSunny.<|im_end|>")
    assert (message["reasoning_content"], message["content"]) == ("Let me think.", "Sunny.")
    off = tplparse.prompt(template, USER, thinking=False)  # the template's own switch
    assert off.generation_prompt.endswith("</think>\n\n") and off.start == "content"
    assert "enable_thinking=False" in off.notes[0]


@needs_corpus
def test_no_switch_closes_the_block_so_the_answer_is_not_reasoning():
    template = corpus_template("DeepSeek-R1-Distill-Qwen-32B")  # always opens <think>, has no switch
    default = tplparse.prompt(template, USER)
    assert default.start == "reasoning"
    off = tplparse.prompt(template, USER, thinking=False)
    assert off.text.endswith("<think>\n</think>\n\n") and off.start == "content"
    # The model answers without a closing tag: the answer is content, not reasoning.
    message = read(off, "It is sunny in Paris.<｜end▁of▁sentence｜>")
    assert message["content"] == "It is sunny in Paris." and message["reasoning_content"] is None
    # The same output read from the default prompt is (unfinished) reasoning.
    assert read(default, "It is sunny in Paris.")["reasoning_content"] == "It is sunny in Paris."


@needs_corpus
def test_system_flag_switch():
    template = corpus_template("NVIDIA-Nemotron-Nano-9B-v2")
    off = tplparse.prompt(template, USER, thinking=False)
    assert "/no_think" in off.notes[0] and off.start == "content"
    assert off.generation_prompt.endswith("<think></think>")
    assert tplparse.prompt(template, USER, thinking=True).start == "reasoning"


# --- Validation --------------------------------------------------------------------------


def _message(*calls, content=None, errors=()):
    return {"role": "assistant", "content": content, "reasoning_content": None, "errors": list(errors),
            "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
                           for i, (n, a) in enumerate(calls)]}


@pytest.mark.parametrize("calls, kind, path, expected", [
    ([("drop_tables", "{}")], "unknown_tool", "$", "one of get_weather"),
    ([("get_weather", '{"city": ')], "invalid_json", "$", "a JSON object"),
    ([("get_weather", '{"unit": "celsius"}')], "schema", "$", "property 'city'"),
    ([("get_weather", '{"city": 3}')], "schema", "$.city", 'type "string"'),
    ([("get_weather", '{"city": "Paris", "unit": "kelvin"}')], "schema", "$.unit", 'enum ["celsius", "fahrenheit"]'),
    ([("get_weather", '{"city": "Paris", "mood": "happy"}')], "schema", "$", "no properties beyond city, days, unit"),
])
def test_each_error_kind_names_the_call_the_path_and_what_was_expected(calls, kind, path, expected):
    errors = validate_tool_calls(_message(("get_weather", '{"city": "Lyon"}'), *calls), [WEATHER])
    assert len(errors) == 1
    error = errors[0]
    assert (error.call_index, error.kind, error.path) == (1, kind, path)
    assert expected in error.expected


def test_a_valid_call_has_no_errors():
    assert validate_tool_calls(_message(("get_weather", '{"city": "Paris", "days": 2}')), [WEATHER]) == []


def test_parse_errors_are_validation_errors_too():
    errors = validate_tool_calls(_message(errors=[{"kind": "truncated_tool_call", "message": "cut", "offset": 9}]), [WEATHER])
    assert [e.kind for e in errors] == ["parse"]


SCHEMA = {"type": "object", "properties": {"intent": {"enum": ["refund", "question"]}, "order_id": {"type": "string"}},
          "required": ["intent"]}


@pytest.mark.parametrize("content, path, message", [
    ('Sure! {"intent": "refund"}', "$", "not JSON"),
    ('{"intent": "complaint"}', "$.intent", "is not one of"),
    ('{"order_id": "A1"}', "$", "'intent' is a required property"),
    ('{"intent": ' + "[" * 50_000 + "]" * 50_000 + "}", "$", "nested too deeply"),
])
def test_structured_output_errors(content, path, message):
    errors = validate_content({"content": content}, SCHEMA)
    assert errors and errors[0].path == path and message in errors[0].message


def test_structured_output_valid():
    assert validate_content({"content": '{"intent": "refund", "order_id": "A1"}'}, SCHEMA) == []


def test_feedback_states_the_errors():
    message = _message(("get_weather", '{"city": 3}'))
    turns = feedback_messages(message, validate_tool_calls(message, [WEATHER]))
    assert turns[0]["role"] == "assistant" and turns[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert turns[1]["role"] == "user"
    assert "tool call 0: 3 is not of type 'string' (at $.city); expected type \"string\"" in turns[1]["content"]


# --- Retries -----------------------------------------------------------------------------


def scripted(*outputs):
    """A generator that returns the given messages in order, recording what it was asked."""
    seen = []

    def generate(messages):
        seen.append(list(messages))
        message = outputs[len(seen) - 1]
        return json.dumps(message), message

    return generate, seen


GOOD = _message(("get_weather", '{"city": "Paris"}'))
BAD = _message(("get_weather", '{"town": "Paris"}'))


def test_valid_at_the_first_attempt():
    generate, seen = scripted(GOOD)
    result = with_retries(generate, USER, tools=[WEATHER])
    assert isinstance(result, Success) and len(result.attempts) == 1 and len(seen) == 1


def test_valid_at_the_second_attempt_after_feedback():
    generate, seen = scripted(BAD, GOOD)
    result = with_retries(generate, USER, tools=[WEATHER])
    assert isinstance(result, Success) and len(result.attempts) == 2
    feedback = seen[1][-1]["content"]
    assert "'city' is a required property" in feedback and seen[1][:1] == USER


def test_gives_up_after_three_attempts_with_every_attempt_on_record():
    generate, seen = scripted(BAD, BAD, BAD)
    result = with_retries(generate, USER, tools=[WEATHER], max_attempts=3)
    assert isinstance(result, GaveUp) and len(result.attempts) == 3 and len(seen) == 3
    assert all(a.errors and a.raw and a.message for a in result.attempts)


def test_structured_output_retry():
    generate, _ = scripted({"content": "It is a refund.", "tool_calls": [], "errors": []},
                           {"content": '{"intent": "refund"}', "tool_calls": [], "errors": []})
    result = with_retries(generate, USER, schema=SCHEMA)
    assert isinstance(result, Success) and result.message["content"] == '{"intent": "refund"}'


# --- Real streams from llama.cpp + SmolLM2 (recorded by examples/llama_cpp_bridge.py --record) ---

import random  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from tplparse.check import llama as llama_check  # noqa: E402
from tplparse.source.template import ChatTemplate  # noqa: E402

from conftest import REPO, SMOLLM2  # noqa: E402

TRANSCRIPTS = sorted((REPO / "tests" / "fixtures" / "transcripts").glob("*.jsonl"))
# The templates the transcripts were recorded under, by sha256: SmolLM2's own, the example's.
RECORDED_UNDER = {"872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788": SMOLLM2,
                  "f84d41636d34b52206992d8dd3e7202287b6d52e8810bc200602803ec93dc557": EXAMPLES / "chatml-think-tools.gguf"}


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.name for p in TRANSCRIPTS])
def test_recorded_streams_replay_in_every_chunking(path):
    (record,) = tplparse.read_transcripts(path)
    source = RECORDED_UNDER[record.template_sha256]
    if not source.is_file():
        pytest.skip(f"{source.name} not fetched (run tests/fetch_fixtures.py)")
    template = tplparse.load(source)
    assert template.sha256 == record.template_sha256
    prompt = tplparse.prompt(template, [{"role": "user", "content": "x"}], tools=record.tools, thinking=False)
    assert prompt.start == record.start and prompt.generation_prompt.endswith(record.generation_prompt)
    text = "".join(record.chunks)
    rng = random.Random(7)
    chunkings = {
        "as the model emitted them": record.chunks,
        "one character": list(text),
        "random spans": _random_spans(text, rng),
    }
    for label, chunks in chunkings.items():
        parser = prompt.parser()
        for chunk in chunks:
            parser.feed(chunk)
        parser.end(record.finish_reason)
        assert parser.message == record.message, label
    data = text.encode("utf-8")
    parser = prompt.parser()
    for i in range(len(data)):
        parser.feed(data[i:i + 1])
    parser.end(record.finish_reason)
    assert parser.message == record.message, "bytes"
    # and what was recorded validates, and `tplparse replay` finds nothing changed
    if record.tools:
        assert validate_tool_calls(record.message, record.tools) == []
    replayed = run_cli("replay", source, path)
    assert replayed.returncode == 0 and "0 of 1 transcripts changed" in replayed.stdout, replayed.stdout + replayed.stderr


def _random_spans(text, rng):
    cuts = sorted(rng.sample(range(1, len(text)), min(12, len(text) - 1)))
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]


@pytest.mark.e2e
@pytest.mark.skipif(not llama_check.available(), reason="llama-cpp-python is not installed")
@pytest.mark.skipif(not SMOLLM2.is_file(), reason="the SmolLM2 model is not fetched (tests/fetch_fixtures.py)")
def test_end_to_end_with_llama_cpp_and_a_real_model(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "examples" / "llama_cpp_bridge.py"), "--model", str(SMOLLM2),
                             "--record", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    verdicts = [line for line in result.stdout.splitlines() if "valid after" in line or "gave up" in line]
    assert len(verdicts) == 3 and all("valid after" in v for v in verdicts), result.stdout
    structured = json.loads(verdicts[0].split(": ", 1)[1])
    assert validate_content(structured, TRIAGE_SCHEMA) == []
    call = json.loads(verdicts[1].split(": ", 1)[1])
    assert call["tool_calls"] and validate_tool_calls(call, [WEATHER]) == []
    # one transcript per attempt, in the one format, each replaying unchanged under its template
    transcripts = {path: tplparse.read_transcripts(path)[0] for path in sorted(tmp_path.glob("*.jsonl"))}
    assert len(transcripts) >= 3 and transcripts[next(iter(transcripts))].model == SMOLLM2.name
    for path, transcript in transcripts.items():
        source = RECORDED_UNDER[transcript.template_sha256]
        replayed = run_cli("replay", source, path)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr


TRIAGE_SCHEMA = {"type": "object", "properties": {"intent": {"enum": ["refund", "question", "complaint"]},
                                                  "order_id": {"type": "string"}, "urgent": {"type": "boolean"},
                                                  "summary": {"type": "string"}},
                 "required": ["intent", "order_id", "urgent", "summary"]}


# --- An OpenAI-shaped conversation, written as each template reads one ----------------------

# A tool call as OpenAI's API carries it: the arguments are JSON text. (The call's id has the
# nine letters and digits Mistral's templates ask for, which any id may be.)
OPENAI_CALL = {"id": "abc123def", "type": "function",
               "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
DESCRIBED = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                              "parameters": {"type": "object", "properties": {
                                                  "city": {"type": "string", "description": "The city"}},
                                                  "required": ["city"]}}}


def agent_turns(call: dict) -> list[dict]:
    return [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "And tomorrow?"}]


def _with_stand_in_tokens(template):
    from tplparse.probe import PLACEHOLDER_TOKENS

    return template.with_tokens(**{k: v for k, v in PLACEHOLDER_TOKENS.items() if k not in template.named_tokens})


@needs_corpus
@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.jinja")) if CORPUS.is_dir() else [],
                         ids=lambda p: p.stem)
def test_an_openai_conversation_renders_with_every_template_that_renders_calls(path):
    """A past call's arguments as OpenAI sends them (JSON text) render with every corpus
    template that renders calls: given as the object it holds to a template that reads an
    object (GLM 4.6 iterates them: as text it was refused), as text to one that reads text; the
    prompt is the one the same conversation with the arguments already in that form renders."""
    template = _with_stand_in_tokens(tplparse.load(path))
    from tplparse.bridge import compile_in_memory

    spec, _ = compile_in_memory(template)
    if spec.tool_calls is None:
        pytest.skip(f"{path.stem} renders no calls")
    prompt = tplparse.prompt(template, agent_turns(OPENAI_CALL), tools=[DESCRIBED])
    assert "get_weather" in prompt.text and "Paris" in prompt.text
    as_object = {**OPENAI_CALL, "function": {**OPENAI_CALL["function"], "arguments": {"city": "Paris"}}}
    assert tplparse.prompt(template, agent_turns(as_object), tools=[DESCRIBED]).text == prompt.text


@needs_corpus
def test_glm_reads_a_past_calls_arguments_as_an_object():
    template = corpus_template("ZAI-GLM-4.6")
    prompt = tplparse.prompt(template, agent_turns(OPENAI_CALL), tools=[DESCRIBED])
    assert "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>" in prompt.text
