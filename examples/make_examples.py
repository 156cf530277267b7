"""Build the example GGUF files in this folder (vocab-only models with our own chat templates).

    python examples/make_examples.py

Each file is a real GGUF that llama.cpp can load as a vocabulary (`vocab_only`): a
byte-level BPE vocabulary (all 256 bytes, as GPT-2 spells them) plus the special tokens
the template uses, the minimal model hyper-parameters llama.cpp reads before it skips
the tensors, and the chat template from `templates/`. The output is deterministic: the
same script writes the same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gguf

HERE = Path(__file__).resolve().parent

# name -> (template file, special tokens (control), marker tokens (user-defined), bos, eos, eot)
EXAMPLES = {
    "chatml-think-tools": {
        "title": "tplparse example: ChatML, <think>, <tool_call> JSON",
        "template": "chatml-think-tools.jinja",
        "control": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "user_defined": ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"],
        "bos": "<|endoftext|>",
        "eos": "<|im_end|>",
        "eot": "<|im_end|>",
    },
    "bracket-tools": {
        "title": "tplparse example: [INST], [THINK], [TOOL_CALLS]name[ARGS]",
        "template": "bracket-tools.jinja",
        "control": ["<unk>", "<s>", "</s>"],
        "user_defined": [
            "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[THINK]", "[/THINK]",
            "[TOOL_CALLS]", "[ARGS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
        ],
        "bos": "<s>",
        "eos": "</s>",
        "eot": None,
    },
}


def byte_tokens() -> list[str]:
    """The 256 single-byte tokens, spelled as GPT-2's byte-level BPE spells them."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    mapping = {}
    extra = 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return [mapping[b] for b in range(256)]


def write_example(name: str, spec: dict, out_dir: Path) -> Path:
    template = (HERE / "templates" / spec["template"]).read_text(encoding="utf-8")
    tokens = byte_tokens()
    types = [gguf.TokenType.NORMAL] * len(tokens)
    # One merge, so the BPE vocabulary has the merges table llama.cpp requires.
    tokens.append("Ġt")
    types.append(gguf.TokenType.NORMAL)
    for text in spec["control"]:
        tokens.append(text)
        types.append(gguf.TokenType.CONTROL)
    for text in spec["user_defined"]:
        tokens.append(text)
        types.append(gguf.TokenType.USER_DEFINED)

    path = out_dir / f"{name}.gguf"
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name(spec["title"])
    writer.add_basename(name)
    writer.add_context_length(4096)
    writer.add_embedding_length(64)
    writer.add_block_count(1)
    writer.add_feed_forward_length(128)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(32)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(["Ġ t"])
    writer.add_bos_token_id(tokens.index(spec["bos"]))
    writer.add_eos_token_id(tokens.index(spec["eos"]))
    if spec["eot"]:
        writer.add_eot_token_id(tokens.index(spec["eot"]))
    writer.add_add_bos_token(False)
    writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main(argv: list[str]) -> None:
    out_dir = Path(argv[1]) if len(argv) > 1 else HERE
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, spec in EXAMPLES.items():
        path = write_example(name, spec, out_dir)
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv)
