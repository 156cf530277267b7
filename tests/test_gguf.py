"""The GGUF metadata reader: agrees with the gguf package's own reader, reads no tensor data."""

from __future__ import annotations

import json
import subprocess
import sys

import gguf
import numpy as np
import pytest

from tplparse.errors import LoadError
from tplparse.source.gguf import read_gguf_metadata

from conftest import EXAMPLES, SMOLLM2, needs_smollm2, needs_vocab_files, vocab_files

# gguf.GGUFReader needs 4-26 s per file on the big vocabularies (it builds numpy views of
# every token), so the cross-check runs on the files with small vocabularies: they cover
# SPM, BPE and WordPiece vocabularies, a chat template (phi-3) and a real model (SmolLM2).
REFERENCE_GGUFS = [p for p in vocab_files() if p.stat().st_size <= 4_000_000] + (
    [SMOLLM2] if SMOLLM2.is_file() else []
)


def _reference(path):
    """What gguf.GGUFReader says about the same file (slow, but the package's own reading)."""
    reader = gguf.GGUFReader(str(path))
    scalars = {}
    for key, f in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if f.types[0] != gguf.GGUFValueType.ARRAY:
            scalars[key] = f.contents()
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    types = reader.fields.get("tokenizer.ggml.token_type")
    token_list = tokens.contents() if tokens else []
    special = []
    if tokens and types:
        special = [
            token_list[i]
            for i, t in enumerate(types.contents())
            if t in (gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED)
        ]
    return scalars, token_list, special, len(reader.tensors)


@needs_vocab_files
@pytest.mark.parametrize("path", REFERENCE_GGUFS, ids=[p.name for p in REFERENCE_GGUFS])
def test_reader_agrees_with_gguf_package(path):
    scalars, token_list, special, tensor_count = _reference(path)
    meta = read_gguf_metadata(path)
    for key, value in scalars.items():
        if isinstance(value, float):
            assert meta.values[key] == pytest.approx(value), key
        else:
            assert meta.values[key] == value, key
    assert meta.vocab_size == len(token_list)
    assert meta.special_tokens == special
    assert meta.tensor_count == tensor_count
    for role in ("bos", "eos", "eot", "unk", "pad"):
        token_id = scalars.get(f"tokenizer.ggml.{role}_token_id")
        if token_id is not None and token_id < len(token_list):
            assert meta.role_tokens[role] == token_list[token_id]


@needs_vocab_files
def test_big_vocabularies():
    """Facts about llama.cpp's large vocab files, read by tplparse in well under a second each."""
    by_name = {p.name: p for p in vocab_files()}
    command_r = read_gguf_metadata(by_name["ggml-vocab-command-r.gguf"])
    assert list(command_r.chat_templates) == ["default", "tool_use", "rag"]
    assert "<|START_OF_TURN_TOKEN|>" in command_r.chat_templates["tool_use"]
    assert command_r.role_tokens["bos"] == "<BOS_TOKEN>"
    assert "<|END_OF_TURN_TOKEN|>" in command_r.special_tokens

    gemma = read_gguf_metadata(by_name["ggml-vocab-gemma-4.gguf"])
    assert gemma.vocab_size == 262144
    assert {"<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>"} <= set(gemma.special_tokens)
    assert "<|tool_call>" in gemma.chat_templates["default"]


def _write_gguf(path, *, endianess=gguf.GGUFEndian.LITTLE, template="{{ messages[0].content }}", tensors=()):
    writer = gguf.GGUFWriter(str(path), arch="llama", endianess=endianess)
    writer.add_name("unit test model")
    writer.add_token_list(["<unk>", "<s>", "</s>", "a", "<|eot|>"])
    writer.add_token_types([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL,
                            gguf.TokenType.NORMAL, gguf.TokenType.CONTROL])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_eot_token_id(4)
    if template is not None:
        writer.add_chat_template(template)
    for name, array in tensors:
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("endianess", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_both_byte_orders(tmp_path, endianess):
    path = _write_gguf(tmp_path / "m.gguf", endianess=endianess, template="T")
    meta = read_gguf_metadata(path)
    assert meta.chat_templates == {"default": "T"}
    assert meta.role_tokens == {"bos": "<s>", "eos": "</s>", "eot": "<|eot|>"}
    assert meta.special_tokens == ["<s>", "</s>", "<|eot|>"]


def test_example_files_are_current(tmp_path):
    """The shipped example GGUFs are what examples/make_examples.py writes today."""
    result = subprocess.run([sys.executable, str(EXAMPLES / "make_examples.py"), str(tmp_path)],
                            capture_output=True, text=True, check=True)
    written = sorted(tmp_path.glob("*.gguf"))
    assert written, result.stdout
    for fresh in written:
        assert (EXAMPLES / fresh.name).read_bytes() == fresh.read_bytes(), f"{fresh.name} is stale: rerun make_examples.py"


def test_truncated_file_names_the_key(tmp_path):
    path = _write_gguf(tmp_path / "m.gguf", template="x" * 1000)
    data = path.read_bytes()
    cut = data.index(b"x" * 1000) + 10  # inside the chat template string
    (tmp_path / "cut.gguf").write_bytes(data[:cut])
    with pytest.raises(LoadError, match=r"truncated GGUF file: metadata key 'tokenizer.chat_template'"):
        read_gguf_metadata(tmp_path / "cut.gguf")


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (b"GGU", "not a GGUF file"),
    (b"PK\x03\x04rest of a zip", "not a GGUF file .* b'PK"),
    (b"GGUF\x01\x00\x00\x00" + bytes(16), "version 1 is not supported"),
])
def test_not_gguf(tmp_path, content, message):
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(LoadError, match=message):
        read_gguf_metadata(path)


# Loading measures resident memory in a fresh interpreter, so nothing else the test
# process has touched (pytest, numpy, the writer) is counted.
_MEASURE = r"""
import json, sys
import tplparse

load = tplparse.load  # (imported before the measure: the loader's modules, numpy among them, load on first use)

def rss():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) * 1024

before = rss()
template = load(sys.argv[1])
after = rss()
print(json.dumps({"grew": after - before, "template": template.source}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads resident memory from /proc (Linux)")
def test_loading_a_big_model_reads_no_tensor_data(tmp_path):
    chunk = np.arange(32 * 1024 * 1024, dtype=np.float32)  # 128 MiB per tensor, not all zero pages
    path = _write_gguf(tmp_path / "big.gguf", template="{{ bos_token }}hello",
                       tensors=[(f"blk.{i}.weight", chunk) for i in range(3)])
    del chunk
    size = path.stat().st_size
    assert size > 300 * 1024 * 1024
    result = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, check=True)
    measured = json.loads(result.stdout)
    assert measured["template"] == "{{ bos_token }}hello"
    assert measured["grew"] < 4 * 1024 * 1024, f"loading a {size >> 20} MB file grew RSS by {measured['grew']} bytes"


@needs_smollm2
def test_real_model_loads_without_touching_weights():
    result = subprocess.run([sys.executable, "-c", _MEASURE, str(SMOLLM2)], capture_output=True, text=True, check=True)
    measured = json.loads(result.stdout)
    assert "<|im_start|>" in measured["template"]
    assert measured["grew"] < 8 * 1024 * 1024
