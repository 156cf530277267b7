"""`tplparse export response-template`: transformers' own response parser, given the export,
reads every template's renders as tplparse's parser does.

For each corpus template and shipped example: where the export succeeds, a transformers
tokenizer carrying it (`response_template`, as tokenizer_config.json gives it) parses each
standard turn's model output (tests/corpus_outputs.py: the template's own renders) one-shot
(`tokenizer.parse_response`) and streamed in chunks of 1, 3 and 7 characters
(`tokenizer.get_response_parser` … `feed` … `finalize`), and must read the message tplparse's
parser reads: as rendered, without its end-of-turn marker, and with the template's next turn
after the marker. Where it refuses (a construct the format cannot express, or a family whose
own parser does not read its renders back, which the CLI does not export), the CLI exits 2
with one line naming why. transformers' response parsing needs no torch.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

import pytest

from tplparse.check.proof import prove
from tplparse.export import CannotExport, response_template
from tplparse.export.response_template import (AFTER_END_OF_TURN, TRANSFORMERS_SINCE, transformers_features,
                                               transformers_needed)
from tplparse.probe import PLACEHOLDER_TOKENS, standard_turns
from tplparse.probe.conversations import FRESH, ShapedRenderer, tool_definition
from tplparse.spec import ProtocolSpec, Start

from tplparse.grammar.reading import cut_at_end
from tplparse.runtime import json_call_object

from conftest import CORPUS, EXAMPLES, PROMPT_START, RESPONSE_TEMPLATE, compiled, corpus_templates, marked_sources, needs_corpus, run_cli
from corpus_outputs import FRESH_TOOLS, parser_module, readable

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
    # (its calls follow the content turn's end marker and a new header: the message ends there)
    "Naver-HyperCLOVAX-SEED-Think-14B-vllm-tool": "calls in a turn of their own after the end of turn",
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


@dataclass(frozen=True)
class Refused:
    """Why `tplparse export response-template` refuses a family: `construct` for the table,
    `said` what its one line of error must say, `message` the whole reason."""

    construct: str
    said: str
    message: str

    def __str__(self) -> str:
        return self.message


@lru_cache(maxsize=None)
def family(path):
    """(template, spec, the export or the Refused saying why not), of the session's compile
    (tests/conftest.py). As the CLI: a family whose parser does not read its renders back is
    not exported (the CLI's proof also checks the grammars, which say nothing of reading an
    output: left out here, for time)."""
    entry = compiled(path)
    template, spec = entry.template, entry.spec
    proof = prove(template, spec, grammars=False)
    if not proof.ok:
        said = f"the parser does not read back the {proof.unproved[0].turn!r} turn" if proof.turns else proof.error
        return template, spec, Refused("its own parser does not read its renders back (not proved)", said, said)
    try:
        exported = response_template(spec)
    except CannotExport as e:
        exported = Refused(e.construct, e.construct, str(e))
    return template, spec, exported


def renderer_of(template, spec: ProtocolSpec) -> ShapedRenderer:
    """The renderer, shape and placeholder tokens the outputs were rendered with."""
    template = template.with_tokens(**{k: v for k, v in PLACEHOLDER_TOKENS.items() if k not in template.named_tokens})
    return ShapedRenderer.for_label(template, [tool_definition(n, [FRESH.key1, FRESH.key2]) for n in FRESH.names],
                                    spec.shape)


def generation_prompts(template, spec: ProtocolSpec) -> dict[str, str]:
    """mode name -> the prompt the template writes for the probe's user message in that mode
    (the same renderer and shape the outputs were rendered with)."""
    renderer = renderer_of(template, spec)
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
    return transformers_message(streamed(tok, text, prefix, chunk)[0])


def streamed(tok, text: str, prefix: str, chunk: int) -> tuple[dict, list[dict]]:
    """transformers' message and events, `text` fed `chunk` characters at a time."""
    parser = tok.get_response_parser(prefix=prefix, tools=FRESH_TOOLS)
    events = list(parser.initial_events)
    for i in range(0, len(text), chunk):
        events += parser.feed(text[i:i + chunk])
    message, last = parser.finalize()
    return message, events + last


# --- every family: read back, or refused by name -----------------------------------------


@pytest.mark.parametrize("path", marked_sources(SOURCES, RESPONSE_TEMPLATE, label))
def test_transformers_reads_the_renders_as_tplparse_does(path):
    template, spec, exported = family(path)
    if isinstance(exported, Refused):
        result = run_cli("export", "response-template", path)
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
        assert exported.said in result.stderr, result.stderr
        return
    found = compiled(path).outputs
    assert found, f"{path.stem}: the template renders no standard turn"
    tok = tokenizer(exported)
    parser = compiled(path).module
    prompts = generation_prompts(template, spec)
    # Key/value arguments are typed by the tool's schema in both parsers (transformers: tools=).
    for output in found:
        expected = tplparse_message(parser.parse(output.text, tools=FRESH_TOOLS, start=output.start))
        prefix = prefix_for(spec, prompts, output.start)
        for chunk in (None, *CHUNKS):
            got = read_with_transformers(tok, output.text, prefix, chunk)
            how = "one-shot" if chunk is None else f"streamed in chunks of {chunk}"
            assert got == expected, f"{path.stem}, {output.turn} ({how}): {output.text!r}"


def exporting() -> list:
    return [p for p in SOURCES if isinstance(family(p)[2], dict)]


def exporting_where(condition) -> list:
    return [p for p in exporting() if condition(*family(p))]


def next_turn(template, spec: ProtocolSpec) -> str:
    """What the template writes after an assistant turn's end-of-turn marker when the
    conversation goes on (its render of [user, the content turn, another user message], from
    the turn's first end marker after its content): what follows the marker when a model runs
    on past it, or an engine does not stop there (a Llama-3 header, another eos)."""
    turn = standard_turns()["content"]
    followed = renderer_of(template, spec).render_followed(FRESH.user, turn, "And to pounds?")
    assert followed is not None, f"{spec.family}: the template does not render a conversation that goes on"
    after = followed.index(turn.content) + len(turn.content)
    at, marker = min((followed.find(m, after), m) for m in spec.end_of_turn if m.strip() and m in followed[after:])
    return followed[at + len(marker):]


def around_the_end(spec: ProtocolSpec, text: str, following: str) -> dict[str, str]:
    """A rendered output as engines give it: without its end-of-turn marker (the stop token
    stripped), with it, and with the template's next turn after it. (The render ends at its
    first marker; one that writes none gets the spec's first.)"""
    ends = sorted((m for m in spec.end_of_turn if m.strip()), key=len, reverse=True)
    marker = next((m for m in ends if text.endswith(m)), None)
    bare = text[:len(text) - len(marker)] if marker else text
    marked = bare + (marker or next(m for m in spec.end_of_turn if m.strip()))
    return {"without the end marker": bare, "with it": marked, "with the next turn after it": marked + following}


@pytest.mark.parametrize("path", marked_sources(exporting(), RESPONSE_TEMPLATE, label))
def test_the_end_of_turn_ends_the_message_with_or_without_its_marker(path):
    """Each render without its end-of-turn marker, with it, and with the template's own next
    turn after it (HyperCLOVAX's `<|endofturn|>`, a Llama-3 header, Mistral's `[INST]`): tplparse's
    parser reads the three alike (the message ends at the marker; the text after it is reported,
    not read), and transformers reads each as tplparse does. The text after the marker streams
    under the field that takes it, whole, and no field of the message holds any of it."""
    template, spec, exported = family(path)
    tok, parser = tokenizer(exported), compiled(path).module
    prompts, following = generation_prompts(template, spec), next_turn(template, spec)
    assert following.strip(), f"{path.stem}: the template writes nothing after an assistant turn"
    for output in compiled(path).outputs:
        prefix = prefix_for(spec, prompts, output.start)
        variants = around_the_end(spec, output.text, following)
        read = {how: parser.parse(text, tools=FRESH_TOOLS, start=output.start) for how, text in variants.items()}
        expected = tplparse_message(read["with it"])
        assert {how: tplparse_message(m) for how, m in read.items()} == dict.fromkeys(variants, expected), output.turn
        assert [e["kind"] for e in read["with the next turn after it"]["errors"]] == ["text_after_end_of_turn"]
        for how, text in variants.items():
            if text == output.text:
                continue  # (as rendered: test_transformers_reads_the_renders_as_tplparse_does)
            for chunk in (None, *CHUNKS):
                got = read_with_transformers(tok, text, prefix, chunk)
                mode = "one-shot" if chunk is None else f"streamed in chunks of {chunk}"
                assert got == expected, f"{path.stem}, {output.turn} {how} ({mode}): {text!r}"
        _, events = streamed(tok, variants["with the next turn after it"], prefix, 7)
        after = "".join(e["text"] for e in events if e["type"] == "region_chunk" and e["field"] == AFTER_END_OF_TURN)
        assert after == following, f"{path.stem}, {output.turn}"


@pytest.mark.parametrize("path", marked_sources(SOURCES, PROMPT_START, label))
def test_the_output_starts_where_the_prompt_leaves_it(path):
    """Each mode's real generation prompt, as the prefix: transformers starts the output where
    tplparse's parser, given the same prompt, starts it (inside reasoning, or in content),
    and reads nothing of the prompt's history (its calls and reasoning) into the message."""
    template, spec, exported = family(path)
    if isinstance(exported, Refused):
        pytest.skip(f"not exported: {exported}")
    tok, parser = tokenizer(exported), compiled(path).module
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
    assert printed.stderr == ("tplparse: this response_template needs transformers >= 5.16.0 (join, transform "
                              "paths: 5.16.0; response_template, text, json: 5.13.0)\n"), printed.stderr
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
    call = next(o for o in compiled(source).outputs if o.turn == "reasoning+call")
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


# --- the transformers release an export needs ---------------------------------------------


def test_the_installed_transformers_reads_every_feature_the_exports_use():
    """The recorded releases against the transformers installed here, which every test above
    parses with: it is at least each of them, and its parser has each content parser the table
    names. Every export's features are rows of the table (the exporter raises on one that is
    not), its need is the latest of theirs, and, on the corpus, every row is used."""
    from transformers.utils.chat_parsing.content_parsers import CONTENT_PARSERS

    installed = metadata.version("transformers")
    parsers = {"text", "json", "xml-inline", "python-call-list"}
    assert parsers <= TRANSFORMERS_SINCE.keys() and parsers <= CONTENT_PARSERS.keys()
    used = set()
    for path in exporting():
        features = transformers_features(family(path)[2])
        assert transformers_needed(family(path)[2]) == max(features.values(), key=release)
        used |= features.keys()
    assert {f: since for f, since in TRANSFORMERS_SINCE.items() if release(installed) < release(since)} == {}, installed
    if corpus_templates():
        assert used == TRANSFORMERS_SINCE.keys()


def release(version: str) -> tuple[int, ...]:
    """A release's numbers (5.24.0 -> (5, 24, 0); a dev or rc build's as its release's)."""
    return tuple(int(n) for n in re.match(r"\d+(?:\.\d+)*", version).group().split("."))


def release_before(version: str) -> str:
    """The minor release before `version` (5.16.0 -> 5.15.0)."""
    major, minor = release(version)[:2]
    return f"{major}.{minor - 1}.0"


def python_call_list_source():
    """A family whose export reads calls with python-call-list (the latest need), or else an example."""
    path = CORPUS / "LiquidAI-LFM2.5-8B-A1B.jinja"
    return path if path.is_file() and isinstance(family(path)[2], dict) else EXAMPLES / "chatml-think-tools.gguf"


def test_an_older_transformers_target_is_exit_2_naming_what_it_lacks(tmp_path):
    """`--transformers VERSION` older than the export needs: one line naming each feature that
    release lacks and the release that first reads it, and nothing written. The release it
    needs exports; a version that is no release number is exit 2 too."""
    source = python_call_list_source()
    exported = family(source)[2]
    needed = transformers_needed(exported)
    out = tmp_path / "response_template.json"
    result = run_cli("export", "response-template", source, "-o", out, "--transformers", release_before(needed))
    assert result.returncode == 2 and result.stdout == "" and not out.exists(), result.stdout + result.stderr
    lacks = [f for f, since in transformers_features(exported).items() if since == needed]
    assert result.stderr.startswith(f"tplparse: error: transformers {release_before(needed)} cannot read this "
                                    f"response_template ({lacks[0]} needs {needed}") and \
        result.stderr.count("\n") == 1, result.stderr
    result = run_cli("export", "response-template", source, "-o", out, "--transformers", needed)
    assert result.returncode == 0 and json.loads(out.read_text(encoding="utf-8")) == exported, result.stderr
    assert f"needs transformers >= {needed} (" in result.stderr and "warning" not in result.stderr, result.stderr
    result = run_cli("export", "response-template", source, "--transformers", "five")
    assert result.returncode == 2 and result.stdout == "" and result.stderr == \
        "tplparse: error: transformers 'five': not a release number (as 5.16.0)\n", result.stderr


def test_an_older_installed_transformers_is_a_warning(tmp_path, monkeypatch):
    """No --transformers: the installed release is checked, and one older than the export needs
    is a warning (the file is often parsed on another machine), the export written anyway.
    An older install is stood in for by its metadata, first on the path."""
    source = python_call_list_source()
    exported = family(source)[2]
    older = release_before(transformers_needed(exported))
    dist = tmp_path / "site" / f"transformers-{older}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: transformers\nVersion: {older}\n", encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    result = run_cli("export", "response-template", source)
    assert result.returncode == 0 and json.loads(result.stdout) == exported, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("tplparse: warning: ")]
    assert warnings == [f"tplparse: warning: the installed transformers {older} cannot read it "
                        f"({', '.join(f'{f} needs {s}' for f, s in transformers_features(exported).items() if release(s) > release(older))}): "
                        f"parse it with transformers >= {transformers_needed(exported)}"], result.stderr


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


# --- beyond the renders: text built from the spec's own markers -----------------------------
#
# Each compares transformers (one-shot, and streamed in chunks of 1, 3 and 7) with tplparse's
# parser, the reference, for every exporting family where the construct applies.


def calls_section(spec: ProtocolSpec, arguments: dict | None = None) -> str:
    """The spec's own writing of a calls section of one call (get_rate, the probe's id), up to
    the end of turn if the section's end writes one (the model stops there)."""
    call = {"name": "get_rate", "arguments": arguments or {"target": "USD"}, "id": "u1v2w3x4y"}
    tc = spec.tool_calls
    return tc.section_start + tc.format_list([call]) + cut_at_end(tc.section_end, list(spec.end_of_turn))


def content(spec: ProtocolSpec, text: str) -> str:
    """`text` as content, in the spec's content wrapper if it has one."""
    return spec.content_start + text + spec.content_end


def end_of_turn(spec: ProtocolSpec) -> str:
    return next((m for m in spec.end_of_turn if m.strip()), "")


def assert_read_alike(path, text: str, prefix: str = "", chunks=(None, *CHUNKS), content_words=False) -> dict:
    """transformers reads `text` (after `prefix`) as tplparse's parser does; tplparse's message.
    `content_words`: the content's words the same, its whitespace between regions may differ
    (docs/response-template.md's one difference: transformers joins content regions by a blank
    line)."""
    template, spec, exported = family(path)
    tok, parser = tokenizer(exported), compiled(path).module
    how = {"generation_prompt": prefix} if prefix else {"start": Start.CONTENT}
    expected = tplparse_message(parser.parse(text, tools=FRESH_TOOLS, **how))
    for chunk in chunks:
        got = read_with_transformers(tok, text, prefix, chunk)
        if content_words and got != expected and (got["content"] or "").split() == (expected["content"] or "").split():
            got["content"] = expected["content"]
        assert got == expected, f"{label(path)} ({'one-shot' if chunk is None else f'chunks of {chunk}'}): {text!r}"
    return expected


def _ends_reasoning(template, spec, exported) -> bool:
    return spec.reasoning is not None and spec.tool_calls is not None and spec.reasoning.tool_call_ends_reasoning


@pytest.mark.parametrize("path", marked_sources(exporting_where(_ends_reasoning), RESPONSE_TEMPLATE, label))
def test_a_call_inside_reasoning_ends_it(path):
    """Where the spec says a call ends the reasoning, a call written before the reasoning's end
    marker is a call (transformers used to read it into reasoning_content)."""
    _, spec, _ = family(path)
    text = spec.reasoning.start + "\nSome thoughts.\n\n" + calls_section(spec) + end_of_turn(spec)
    message = assert_read_alike(path, text)
    assert message["reasoning_content"] == "Some thoughts." and message["tool_calls"], message


def _id_between_literals(template, spec, exported) -> bool:
    call = spec.tool_calls.call if spec.tool_calls is not None else []
    return json_call_object(call) is None and any(
        p == {"slot": "id"} and 0 < at < len(call) - 1 and isinstance(call[at - 1], str)
        and isinstance(call[at + 1], str) and call[at + 1].strip() for at, p in enumerate(call))


@pytest.mark.parametrize("path", exporting_where(_id_between_literals),
                         ids=[label(p) for p in exporting_where(_id_between_literals)])
def test_a_call_written_without_its_id(path):
    """An id between two literals may be left out with the literal before it (the runtime reads
    `[TOOL_CALLS]name[ARGS]{…}` where the layout writes `[TOOL_CALLS]name[CALL_ID]id[ARGS]{…}`)."""
    _, spec, _ = family(path)
    call = spec.tool_calls.call
    at = next(i for i, p in enumerate(call) if p == {"slot": "id"})
    with_id = calls_section(spec)
    without = with_id.replace(call[at - 1] + "u1v2w3x4y", "", 1)
    assert without != with_id
    for text in (with_id, without):
        message = assert_read_alike(path, "Hi" + text + end_of_turn(spec))
        assert message["content"] == "Hi" and message["tool_calls"] == [["get_rate", {"target": "USD"}]], message


@pytest.mark.parametrize("path", exporting(), ids=[label(p) for p in exporting()])
def test_content_with_brackets_and_markers_read_as_text(path):
    """Content with brackets (a calls list's `]` closed content and was dropped: `x[0` for `x[0]`)."""
    _, spec, _ = family(path)
    message = assert_read_alike(path, content(spec, "Use [1, 2] or x[0].") + end_of_turn(spec))
    assert message["content"] == "Use [1, 2] or x[0].", message


def _wrapped_content(template, spec, exported) -> bool:
    return bool(spec.content_start.strip() and spec.content_end.strip())


@pytest.mark.parametrize("path", exporting_where(_wrapped_content), ids=[label(p) for p in exporting_where(_wrapped_content)])
def test_wrapped_content_the_turn_ends_without_closing(path):
    """Content in its wrapper, the turn ended before the wrapper's end (Cohere's
    `<|START_RESPONSE|>The answer.<|END_OF_TURN_TOKEN|>`), and the next turn after it: the end
    of turn ends the content there (transformers kept the marker, and the next turn, in it)."""
    template, spec, _ = family(path)
    text = spec.content_start + "The answer." + end_of_turn(spec)
    for following in ("", next_turn(template, spec)):
        assert assert_read_alike(path, text + following)["content"] == "The answer."


def _closed_calls(template, spec, exported) -> bool:
    """Calls whose region a marker of their own closes (not one closed where what follows starts)."""
    calls = exported["fields"].get("tool_calls")
    return calls is not None and ("close" in calls or not calls.get("close_pattern", "(?=").startswith("(?="))


def _closed_calls_and_bare_content(template, spec, exported) -> bool:
    """…and content outside any wrapper (a template that wraps its content writes it once, before
    the calls: a second wrapped region after them is text to tplparse's parser)."""
    return _closed_calls(template, spec, exported) and not {"open", "open_pattern"} & exported["fields"]["content"].keys()


@pytest.mark.parametrize("path", marked_sources(exporting_where(_closed_calls_and_bare_content), RESPONSE_TEMPLATE,
                                                label))
def test_content_before_and_after_a_call(path):
    """Content on both sides of a call, a newline each side: transformers used to glue the two
    (`Sure.After.`); it reads `Sure.\\n\\nAfter.`, as tplparse does where the call's layout
    writes no newline of its own around it (where it does, tplparse reads `Sure.\\nAfter.`:
    docs/response-template.md's one difference, whitespace only)."""
    _, spec, _ = family(path)
    text = content(spec, "Sure.") + "\n" + calls_section(spec).strip() + "\n" + content(spec, "After.") + end_of_turn(spec)
    message = assert_read_alike(path, text, content_words=True)
    assert message["content"].split() == ["Sure.", "After."] and message["tool_calls"], message
    assert read_with_transformers(tokenizer(family(path)[2]), text, "", None)["content"] == "Sure.\n\nAfter."


LONG = 20_000  # (tests/benchmarks/bench_response_template.py times these: each is linear in the run)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", marked_sources(exporting(), PROMPT_START, label))
def test_long_whitespace_runs_read_correctly(path):
    """Runs of LONG spaces and newlines in content, in the prompt before the output and (key/value
    calls) in a tag's value: read as tplparse reads them. (The regexes used to take time
    quadratic in such a run: a user message of spaces stalled the parser.) Streamed in chunks
    of 1000 only: transformers holds a run of whitespace back until what follows it arrives
    and re-reads it with each chunk, whatever the template (small chunks: quadratic)."""
    template, spec, exported = family(path)
    end = end_of_turn(spec)
    message = assert_read_alike(path, content(spec, "a" + " \n" * (LONG // 2) + "b") + end, chunks=(None, 1000))
    assert message["content"].startswith("a") and message["content"].endswith("b")
    prompts = generation_prompts(template, spec)
    user = FRESH.user
    for name, prompt in prompts.items():
        if user not in prompt:
            continue
        long_prompt = prompt.replace(user, user + " " * LONG, 1)
        text = ("Some thoughts." + spec.reasoning.end if spec.modes[name].start == Start.REASONING else "") + \
            spec.content_start + "The answer." + spec.content_end + end
        assert assert_read_alike(path, text, prefix=long_prompt, chunks=(None, 1000))["content"] == "The answer."
    calls = exported["fields"].get("tool_calls", {})
    if calls.get("content") == "xml-inline":
        value = "U" + " \n" * (LONG // 2) + "SD"
        message = assert_read_alike(path, calls_section(spec, {"target": value}) + end, chunks=(None, 1000))
        assert message["tool_calls"][0][1]["target"].startswith("U"), message


def _json_closed(template, spec, exported) -> bool:
    calls = exported["fields"].get("tool_calls")
    return _closed_calls(template, spec, exported) and calls["content"] in ("json", "python-call-list")


@pytest.mark.parametrize("path", exporting_where(_json_closed), ids=[label(p) for p in exporting_where(_json_closed)])
def test_a_close_marker_inside_a_json_string(path):
    """The call's closing marker inside a string argument is the argument's text (transformers
    used to cut the JSON there and raise)."""
    _, spec, _ = family(path)
    at = spec.tool_calls.call.index({"slot": "arguments"}) if {"slot": "arguments"} in spec.tool_calls.call else None
    tail = "".join(p for p in spec.tool_calls.call[at + 1:] if isinstance(p, str)) if at is not None else ""
    if not tail.strip():
        tail = spec.tool_calls.section_end
    markers = [w.lstrip("}])") for w in tail.split() if w.lstrip("}])")]
    if not markers:
        pytest.skip("the call's close is no marker of its own")
    value = "a" + markers[0] + "b"
    message = assert_read_alike(path, calls_section(spec, {"target": value}) + end_of_turn(spec))
    assert message["tool_calls"] == [["get_rate", {"target": value}]], message


def test_a_call_name_and_id_are_the_runtimes_characters():
    """The exporter's name and id classes (mirrored sets) are the runtime's NAME_CHARS and
    ID_CHARS (an id of `.` or `:` is no call id to tplparse's parser, so none to transformers either)."""
    import importlib

    import regex

    from tplparse.runtime.text import ID_CHARS, NAME_CHARS
    module = importlib.import_module("tplparse.export.response_template")
    assert (module.NAME_CHARS, module.ID_CHARS) == (NAME_CHARS, ID_CHARS)
    for chars, pattern in ((NAME_CHARS, module._NAME), (ID_CHARS, module._ID)):
        one = regex.compile(pattern[:-1])
        assert {chr(c) for c in range(0x250) if one.fullmatch(chr(c))} == set(chars), pattern


@needs_corpus
def test_bare_json_calls_after_a_section_marker_are_refused_saying_so():
    """MiniMax-M1's calls are bare JSON objects after `<tool_calls>`: the refusal says the section
    marker opens the first call only (a zero-width open on `{"name": "` would open calls in content)."""
    for stem in ("MiniMax-M1-rev2", "MiniMax-M1-vllm-tool"):
        path = CORPUS / f"{stem}.jinja"
        if path.is_file():
            _, spec, exported = family(path)
            assert isinstance(exported, Refused) and exported.construct == "a call written as a bare JSON object"
            assert spec.tool_calls.section_start.strip() in str(exported) and "first one only" in str(exported)
