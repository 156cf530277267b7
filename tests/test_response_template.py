"""`tplparse export response-template`: transformers' own response parser, given the export,
reads every template's renders as tplparse's parser does.

For each corpus template and shipped example: where the export succeeds, a transformers
tokenizer carrying it (`response_template`, as tokenizer_config.json gives it) parses each
standard turn's model output (tests/corpus_outputs.py: the template's own renders) one-shot
(`tokenizer.parse_response`) and streamed in chunks of 1, 3 and 7 characters
(`tokenizer.get_response_parser` … `feed` … `finalize`), and must read the message tplparse's
parser reads. Where it refuses, the CLI exits 2 with one line naming the construct.
transformers' response parsing needs no torch.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache

import pytest

import tplparse
from tplparse.export import CannotExport, response_template
from tplparse.probe import PLACEHOLDER_TOKENS, probe, standard_turns
from tplparse.probe.conversations import FRESH, SHAPES, ShapedRenderer, tool_definition
from tplparse.spec import ProtocolSpec, Start

from conftest import CORPUS, EXAMPLES, corpus_templates, needs_corpus, run_cli
from corpus_outputs import FRESH_TOOLS, outputs, parser_module, readable

transformers = pytest.importorskip("transformers")
from tokenizers import Tokenizer, models  # noqa: E402  (installed with transformers)

EXAMPLE_SOURCES = sorted(EXAMPLES.glob("*.gguf")) + sorted((EXAMPLES / "templates").glob("*.jinja"))
SOURCES = EXAMPLE_SOURCES + corpus_templates()
CHUNKS = (1, 3, 7)

# Corpus families whose protocol the format expresses (each read back below), and families it
# cannot, with the construct: what a reader of the two formats expects, not what the exporter printed.
EXPORTS = {"Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "Qwen-Qwen3-Coder", "Qwen-Qwen3.5-4B",
           "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "Mistral-Nemo-Instruct-2407",
           "Mistral-Small-3.2-24B-Instruct-2506", "Moonshot-Kimi-K2", "ZAI-GLM-4.6", "LiquidAI-LFM2.5-8B-A1B",
           "Cohere-Command-R7B-12-2024-tool_use", "Cohere-Cohere2MoE", "DeepSeek-V3.2", "MiniMax-M2",
           "MeetKai-Functionary-medium-v3.1", "Google-Gemma-2-2b-it"}
REFUSES = {
    "OpenAI-gpt-oss-120b": "channel messages",  # harmony: a message's kind is in its header
    "Meta-Llama-3.1-8B-Instruct": "a call written as a bare JSON object",  # nothing opens the region
    "MiniMax-M1-rev2": "a call written as a bare JSON object",
    "Meta-Llama-4-Instruct": "content inside the calls section",
    "MiniMax-M3": "key/value arguments with objects or arrays written as nested tags",
}


def label(path) -> str:
    """A source's name in the table and the test ids: the corpus template's stem, or the example's path."""
    return f"examples/{path.relative_to(EXAMPLES)}" if EXAMPLES in path.parents else path.stem


def tokenizer(template_dict: dict | None):
    """A transformers tokenizer carrying `template_dict` as its response_template (its vocabulary is irrelevant)."""
    backend = Tokenizer(models.WordLevel(vocab={"<unk>": 0}, unk_token="<unk>"))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>",
                                                response_template=template_dict)


@lru_cache(maxsize=None)
def family(path):
    """(template, spec, the export or the CannotExport it raised)."""
    template = tplparse.load(path)
    spec = probe(template)
    try:
        exported = response_template(spec)
    except CannotExport as e:
        exported = e
    return template, spec, exported


def generation_prompts(template, spec: ProtocolSpec) -> dict[str, str]:
    """mode name -> the prompt the template writes for the probe's user message in that mode
    (the same renderer and shape the outputs were rendered with)."""
    template = template.with_tokens(**{k: v for k, v in PLACEHOLDER_TOKENS.items() if k not in template.named_tokens})
    label = spec.shape.partition(", reasoning as thinking blocks")[0]
    renderer = ShapedRenderer(template, [tool_definition(n, [FRESH.key1, FRESH.key2]) for n in FRESH.names],
                              shape=next((s for s in SHAPES if s.label == label), None),
                              reasoning_blocks=spec.shape.endswith("thinking blocks"))
    turn = next(iter(standard_turns().values()))
    prompts = {}
    for name, mode in spec.modes.items():
        rendered = renderer.render_turn(FRESH.user, turn, variables=mode.variables, system=mode.system_flag or None)
        if rendered is not None:
            prompts[name] = rendered.prompt
    return prompts


def prefix_for(spec: ProtocolSpec, prompts: dict[str, str], start: Start) -> str:
    """The prompt of a mode that leaves the model where the output starts. Where no mode does
    (the template drops the reasoning from its renders, so a turn of a reasoning-first model
    reads from content), `""`: transformers' own way of saying the output starts the message."""
    for name, mode in spec.modes.items():
        if mode.start == start and name in prompts:
            return prompts[name]
    assert start == Start.CONTENT, f"no mode of {spec.family} starts in {start}"
    return ""


def tplparse_message(message: dict) -> dict:
    return normal(readable(message))


def transformers_message(message: dict) -> dict:
    # transformers writes a call's arguments as an object (tplparse: a JSON string, which
    # readable() decodes) and leaves out a field it found nothing for (tplparse: None / []):
    # both by design, so both sides are brought to the same shape, nothing else.
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return normal({"content": message.get("content"), "reasoning_content": message.get("reasoning_content"),
                   "tool_calls": calls})


def normal(message: dict) -> dict:
    return {"content": message["content"] or None, "reasoning_content": message["reasoning_content"] or None,
            "tool_calls": [list(c) for c in message["tool_calls"]]}


def read_with_transformers(tok, text: str, prefix: str, chunk: int | None) -> dict:
    """The message transformers reads from `text`: one-shot, or fed `chunk` characters at a time."""
    if chunk is None:
        return transformers_message(tok.parse_response(text, prefix=prefix, tools=FRESH_TOOLS))
    parser = tok.get_response_parser(prefix=prefix, tools=FRESH_TOOLS)
    for i in range(0, len(text), chunk):
        parser.feed(text[i:i + chunk])
    message, _ = parser.finalize()
    return transformers_message(message)


# --- every family: read back, or refused by name -----------------------------------------


@pytest.mark.parametrize("path", SOURCES, ids=[label(p) for p in SOURCES])
def test_transformers_reads_the_renders_as_tplparse_does(path):
    template, spec, exported = family(path)
    if isinstance(exported, CannotExport):
        result = run_cli("export", "response-template", path)
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
        assert exported.construct in result.stderr, result.stderr
        return
    found = outputs(template, spec)
    assert found, f"{path.stem}: the template renders no standard turn"
    tok = tokenizer(exported)
    parser = parser_module(spec, template.special_tokens)
    prompts = generation_prompts(template, spec)
    # Key/value arguments are typed by the tool's schema in both parsers (transformers: tools=).
    for output in found:
        expected = tplparse_message(parser.parse(output.text, tools=FRESH_TOOLS, start=output.start))
        prefix = prefix_for(spec, prompts, output.start)
        for chunk in (None, *CHUNKS):
            got = read_with_transformers(tok, output.text, prefix, chunk)
            how = "one-shot" if chunk is None else f"streamed in chunks of {chunk}"
            assert got == expected, f"{path.stem}, {output.turn} ({how}): {output.text!r}"


@pytest.mark.parametrize("path", SOURCES, ids=[label(p) for p in SOURCES])
def test_the_output_starts_where_the_prompt_leaves_it(path):
    """Each mode's real generation prompt, as the prefix: transformers starts the output where
    tplparse's parser, given the same prompt, starts it (inside reasoning, or in content),
    and reads nothing of the prompt's history (its calls and reasoning) into the message."""
    template, spec, exported = family(path)
    if isinstance(exported, CannotExport):
        pytest.skip(f"not exported: {exported}")
    tok, parser = tokenizer(exported), parser_module(spec, template.special_tokens)
    ends = [m for m in spec.end_of_turn if m.strip()]
    answer = spec.content_start + "The answer." + spec.content_end + (ends[0] if ends else "")
    prompts = generation_prompts(template, spec)
    assert prompts
    for name, prompt in prompts.items():
        # (the rest of a turn from where the mode leaves the model: some reasoning first, or not)
        text = ("Some thoughts." + spec.reasoning.end if spec.modes[name].start == Start.REASONING else "") + answer
        expected = tplparse_message(parser.parse(text, tools=FRESH_TOOLS, generation_prompt=prompt))
        assert expected["content"] == "The answer.", f"{path.stem}, mode {name}: {expected}"
        assert read_with_transformers(tok, text, prompt, None) == expected, f"{path.stem}, mode {name}"


def export_table() -> dict[str, str]:
    rows = {}
    for path in SOURCES:
        _, _, exported = family(path)
        rows[label(path)] = "exports" if isinstance(exported, dict) else f"no: {exported.construct}"
    return rows


def test_which_families_export(capsys):
    """The table of every source: exports, or the construct it cannot express. The shipped
    examples export (and are read back above)."""
    rows = export_table()
    with capsys.disabled():
        print(f"\n{'family':<48} response_template")
        for name, row in sorted(rows.items()):
            print(f"{name:<48} {row}")
        print(f"{sum(r == 'exports' for r in rows.values())} of {len(rows)} export")
    examples = {label(p): rows[label(p)] for p in EXAMPLE_SOURCES}
    assert len(examples) == 4 and set(examples.values()) == {"exports"}, examples


@needs_corpus
def test_the_corpus_families_believed_expressible_export():
    """The corpus families whose protocol the format expresses export, those it cannot name
    the construct (a family that stopped exporting is a regression, not a pass)."""
    rows = export_table()
    assert len(corpus_templates()) >= 69
    assert {name: rows.get(name) for name in EXPORTS} == dict.fromkeys(EXPORTS, "exports")
    assert {name: rows.get(name) for name in REFUSES} == {name: f"no: {c}" for name, c in REFUSES.items()}


# --- the CLI and tokenizer_config.json ----------------------------------------------------


def test_the_cli_prints_the_export_and_tokenizer_config_carries_it(tmp_path):
    """`-o FILE` writes the JSON; put under "response_template" in a tokenizer_config.json,
    transformers loads it with the tokenizer and parses a call of the template's render."""
    source = EXAMPLES / "chatml-think-tools.gguf"
    printed = run_cli("export", "response-template", source)
    assert printed.returncode == 0, printed.stderr
    template, spec, exported = family(source)
    assert json.loads(printed.stdout) == exported
    out = tmp_path / "response_template.json"
    written = run_cli("export", "response-template", source, "-o", out)
    assert written.returncode == 0 and written.stdout == f"wrote {out}\n", written.stderr
    assert out.read_text(encoding="utf-8") == printed.stdout

    tokenizer(None).save_pretrained(tmp_path / "model")
    config_path = tmp_path / "model" / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["response_template"] = json.loads(out.read_text(encoding="utf-8"))
    config_path.write_text(json.dumps(config), encoding="utf-8")
    loaded = transformers.AutoTokenizer.from_pretrained(tmp_path / "model")
    assert loaded.response_template == exported
    call = next(o for o in outputs(template, spec) if o.turn == "reasoning+call")
    expected = tplparse_message(parser_module(spec).parse(call.text, tools=FRESH_TOOLS, start=call.start))
    assert expected["tool_calls"] and expected["reasoning_content"]
    assert read_with_transformers(loaded, call.text, "", None) == expected


def test_a_construct_the_format_cannot_express_is_exit_2_naming_it(tmp_path):
    """A harmony-style template (channel messages) from the corpus, or else a template written here whose calls
    are bare JSON objects: one line naming the construct, nothing on stdout."""
    source = tmp_path / "bare.jinja"
    source.write_text(
        "{% for m in messages %}<|start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}"
        '{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}'
        "{% endfor %}{% else %}{{ m.content }}{% endif %}<|end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}", encoding="utf-8")
    result = run_cli("export", "response-template", source)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("tplparse: error: response_template cannot express ") and \
        result.stderr.count("\n") == 1, result.stderr
    harmony = CORPUS / "OpenAI-gpt-oss-120b.jinja"
    if harmony.is_file():
        result = run_cli("export", "response-template", harmony)
        assert result.returncode == 2 and "cannot express channel messages" in result.stderr, result.stderr


# --- markers are data, never regex ---------------------------------------------------------


def test_markers_with_regex_characters_are_matched_as_written():
    """A family whose markers are full of regex metacharacters (the example's, rewritten):
    transformers reads the turns the spec writes as tplparse's parser does, and a prompt that
    opens reasoning with such a marker starts the output inside it. A marker left unescaped
    would match other text (`(.*)`), or not itself (`[0-9]`, `$`, `|`)."""
    _, spec, _ = family(EXAMPLES / "chatml-think-tools.gguf")
    data = json.dumps(spec.to_dict())
    for old, new in (("<tool_call>", "<(.*)|call>"), ("</tool_call>", "</(.*)|call>"), ("</think>", "</think[0-9]>"),
                     ("<think>", "<think[0-9]>"), ("<|im_end|>", "<|im_end$|>")):
        data = data.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    odd = ProtocolSpec.from_dict(json.loads(data))
    assert odd.reasoning.start == "<think[0-9]>" and odd.end_of_turn == ["<|im_end$|>"]
    odd.modes["thinking"].tail, odd.modes["thinking"].start = "<think[0-9]>\n", Start.REASONING
    tok, parser = tokenizer(response_template(odd)), parser_module(odd)
    turns = [
        {"role": "assistant", "content": "Plain .* text (with) [brackets] and | bars"},
        {"role": "assistant", "reasoning_content": "Think $ twice", "content": "Answer ^ here"},
        {"role": "assistant", "content": "Calling.", "tool_calls": [
            {"type": "function", "function": {"name": "get_rate", "arguments": {"target": "USD", "count": 2}}},
            {"type": "function", "function": {"name": "fetch_news", "arguments": {"tags": ["a", "b"]}}}]},
    ]
    history = odd.format(copy.deepcopy(turns[2]))  # (calls and markers in the prompt: none of it is read)
    for turn in turns:
        text = odd.format(copy.deepcopy(turn))
        expected = tplparse_message(parser.parse(text, tools=FRESH_TOOLS, start=Start.CONTENT))
        assert expected["content"] == turn["content"]
        for chunk in (None, *CHUNKS):
            assert read_with_transformers(tok, text, "<|user|>hi" + history + "<|assistant|>", chunk) == expected, \
                (text, chunk)
    prompt = "<|user|>hi" + history + "<|assistant|>\n<think[0-9]>\n"
    text = "Think $ twice</think[0-9]>Answer ^ here<|im_end$|>"
    expected = tplparse_message(parser.parse(text, tools=FRESH_TOOLS, generation_prompt=prompt))
    assert expected["reasoning_content"] == "Think $ twice"
    for chunk in (None, *CHUNKS):
        assert read_with_transformers(tok, text, prompt, chunk) == expected, chunk
