"""`tplparse.load`: every kind of source, and what it yields."""

from __future__ import annotations

import hashlib
import json

import pytest

import tplparse
from tplparse import LoadError, TemplateError

from conftest import EXAMPLES, SMOLLM2, corpus_ids, corpus_templates, needs_corpus, needs_smollm2, needs_vocab_files, vocab_files

CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def test_example_gguf():
    template = tplparse.load(EXAMPLES / "chatml-think-tools.gguf")
    source = (EXAMPLES / "templates" / "chatml-think-tools.jinja").read_text(encoding="utf-8")
    assert template.source == source
    assert template.sha256 == hashlib.sha256(source.encode()).hexdigest()
    assert template.family == "chatml-think-tools"
    assert template.bos_token == "<|endoftext|>" and template.eos_token == "<|im_end|>"
    assert template.end_of_turn == ("<|im_end|>",)
    assert {"<think>", "</think>", "<tool_call>", "</tool_call>"} <= set(template.special_tokens)
    assert template.render([{"role": "user", "content": "hi"}]) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@needs_corpus
@pytest.mark.parametrize("path", corpus_templates(), ids=corpus_ids(corpus_templates()))
def test_every_corpus_template_loads(path):
    template = tplparse.load(path)
    assert template.source == path.read_bytes().decode("utf-8")  # exactly, CRLF included
    assert template.family == tplparse.source.template.slugify(path.stem)
    assert template.origin == str(path)


@needs_vocab_files
def test_gguf_named_variants():
    path = next(p for p in vocab_files() if p.name == "ggml-vocab-command-r.gguf")
    default = tplparse.load(path)
    assert list(default.variants) == ["default", "tool_use", "rag"]
    tool_use = tplparse.load(path, variant="tool_use")
    assert tool_use.family == "command-r-tool-use" and tool_use.source != default.source
    assert default.with_variant("rag").family == "command-r-rag"
    assert tool_use.with_variant("default").family == "command-r"
    with pytest.raises(LoadError, match="no chat template named 'nope' .*default, tool_use, rag"):
        tplparse.load(path, variant="nope")


@needs_vocab_files
def test_gguf_whose_name_is_a_hash_uses_the_file_name():
    path = next(p for p in vocab_files() if p.name == "ggml-vocab-gemma-4.gguf")
    template = tplparse.load(path)
    assert template.name == "47b6801b24d15ff9bcd8c96dfaea0be9ed3a0301"  # what general.name says
    assert template.family == "ggml-vocab-gemma-4"


@needs_smollm2
def test_real_model():
    template = tplparse.load(SMOLLM2)
    assert template.family == "smollm2"
    assert template.eos_token == "<|im_end|>"
    assert "<|im_start|>" in template.special_tokens
    out = template.render([{"role": "user", "content": "Hi"}])
    assert out.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def write_json(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_tokenizer_config_string_template(tmp_path):
    config = write_json(tmp_path / "tokenizer_config.json", {
        "chat_template": CHATML,
        "bos_token": {"__type": "AddedToken", "content": "<s>", "special": True},
        "eos_token": "<|im_end|>",
        "pad_token": None,
        "added_tokens_decoder": {
            "2": {"content": "<|im_end|>", "special": True},
            "1": {"content": "<|im_start|>", "special": True},
            "7": {"content": "hello", "special": False},
        },
        "additional_special_tokens": ["<tool_call>"],
        "name_or_path": "acme/Chat-7B",
    })
    template = tplparse.load(config)
    assert template.source == CHATML
    assert dict(template.named_tokens) == {"bos_token": "<s>", "eos_token": "<|im_end|>"}
    assert template.special_tokens == ("<|im_start|>", "<|im_end|>", "<tool_call>")
    assert template.name == "Chat-7B" and template.family == "chat-7b"


def test_tokenizer_config_named_templates(tmp_path):
    config = write_json(tmp_path / "tokenizer_config.json", {
        "chat_template": [{"name": "default", "template": "A"}, {"name": "tool_use", "template": "B"}],
    })
    assert tplparse.load(config).source == "A"
    assert tplparse.load(config, variant="tool_use").source == "B"


def test_model_directory_prefers_chat_template_jinja(tmp_path):
    write_json(tmp_path / "tokenizer_config.json", {
        "chat_template": "old", "eos_token": "<|end|>",
        "added_tokens_decoder": {"5": {"content": "<|end|>", "special": True}, "6": {"content": "<|eom|>", "special": True}},
    })
    (tmp_path / "chat_template.jinja").write_text("new {{ eos_token }}", encoding="utf-8")
    (tmp_path / "chat_templates").mkdir()
    (tmp_path / "chat_templates" / "tool_use.jinja").write_text("tools", encoding="utf-8")
    write_json(tmp_path / "generation_config.json", {"eos_token_id": [5, 6]})
    template = tplparse.load(tmp_path)
    assert template.source == "new {{ eos_token }}"
    assert list(template.variants) == ["default", "tool_use"]
    assert template.end_of_turn == ("<|end|>", "<|eom|>")
    assert template.render([]) == "new <|end|>"
    assert template.family == tplparse.source.template.slugify(tmp_path.name)


def test_family_override(tmp_path):
    path = tmp_path / "x.jinja"
    path.write_text("x", encoding="utf-8")
    assert tplparse.load(path, family="My Family").family == "my-family"


@pytest.mark.parametrize("make, error, message", [
    (lambda p: p / "missing.gguf", LoadError, "no such file or directory"),
    (lambda p: (p / "a.gguf").write_bytes(b"not a gguf at all") and p / "a.gguf", LoadError, "not a GGUF file"),
    (lambda p: (p / "t.jinja").write_text("hi\n{% for x in %}") and p / "t.jinja", TemplateError, "line 2: Jinja syntax error"),
    (lambda p: (p / "t.jinja").write_bytes(b"\xff\xfe{{ x }}") and p / "t.jinja", LoadError, "not UTF-8 text"),
    (lambda p: (p / "tokenizer_config.json").write_text("{oops") and p / "tokenizer_config.json", LoadError, "invalid JSON at line 1"),
    (lambda p: write_json(p / "tokenizer_config.json", {"eos_token": "x"}), LoadError, "holds no chat template"),
    (lambda p: write_json(p / "tokenizer_config.json", {"chat_template": 3}), LoadError, "must be a string or a list"),
    (lambda p: p, LoadError, "must hold tokenizer_config.json or chat_template.jinja"),
])
def test_bad_sources(tmp_path, make, error, message):
    with pytest.raises(error, match=message):
        tplparse.load(make(tmp_path))


# --- templates that take their markers from the tokenizer's lists (issue #53, class 3) ----

# Every marker from additional_special_tokens[i], none a literal (GigaChat 20B's shape).
LISTED_MARKERS = (
    "{%- for m in messages -%}{{ m.role + additional_special_tokens[0] + m.content"
    " + additional_special_tokens[1] }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'assistant' + additional_special_tokens[0] }}{%- endif -%}")
LISTED = ["<|role_sep|>", "<|message_sep|>"]


def test_a_tokenizer_config_gives_the_template_its_token_lists(tmp_path):
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": LISTED_MARKERS, "eos_token": "</s>",
                                  "additional_special_tokens": [{"content": LISTED[0]}, LISTED[1]]}))
    template = tplparse.load(config)
    assert template.token_lists == {"additional_special_tokens": tuple(LISTED)}
    text = template.render([{"role": "user", "content": "Hi"}])
    assert text == "user<|role_sep|>Hi<|message_sep|>assistant<|role_sep|>"
    # the same from the model's folder, and from a .jinja beside the config
    (tmp_path / "chat_template.jinja").write_text(LISTED_MARKERS)
    assert tplparse.load(tmp_path).token_lists == template.token_lists
    assert tplparse.load(tmp_path / "chat_template.jinja").token_lists == template.token_lists


def test_a_bare_template_that_needs_the_lists_says_which_file_gives_them(tmp_path):
    from conftest import run_cli

    bare = tmp_path / "listed.jinja"
    bare.write_text(LISTED_MARKERS)
    result = run_cli("compile", bare, "-o", tmp_path / "out")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "'additional_special_tokens' is undefined" in result.stderr
    assert "reads additional_special_tokens from the model's tokenizer" in result.stderr
    assert "compile the model's tokenizer_config.json or its folder" in result.stderr
    # given that file, it compiles and proves: the markers are the tokenizer's
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": LISTED_MARKERS, "eos_token": "</s>", "additional_special_tokens": LISTED}))
    result = run_cli("compile", folder, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    spec = json.loads(next((tmp_path / "out" / "grammars").glob("*.spec.json")).read_text())
    assert "<|message_sep|>" in json.dumps(spec["end_of_turn"]), spec["end_of_turn"]
