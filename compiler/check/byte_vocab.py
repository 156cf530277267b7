"""Write a small byte-level vocabulary GGUF (what llama.cpp needs to load a grammar or a template).

The vocabulary has all 256 single-byte tokens (spelled as GPT-2's byte-level BPE spells
them, so llama.cpp decodes token i to byte i), one merge (llama.cpp requires a merges
table), and the given control / user-defined tokens; the model hyper-parameters are the
minimum llama.cpp reads before it skips tensors in `vocab_only` mode. Same input, same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import gguf


def byte_tokens() -> list[str]:
    """The 256 single-byte tokens, in byte order, as GPT-2's byte-level BPE spells them."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) \
        | set(range(0xAE, 0xFF + 1))
    spelled, extra = [], 0
    for byte in range(256):
        if byte in printable:
            spelled.append(chr(byte))
        else:
            spelled.append(chr(256 + extra))
            extra += 1
    return spelled


def write_byte_vocab(
    path: str | Path,
    *,
    title: str,
    basename: str,
    control: list[str],
    user_defined: Sequence[str] = (),
    bos: str,
    eos: str,
    eot: str | None = None,
    chat_template: str | None = None,
) -> Path:
    path = Path(path)
    tokens = byte_tokens() + ["Ġt"]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for text in control:
        tokens.append(text)
        types.append(gguf.TokenType.CONTROL)
    for text in user_defined:
        tokens.append(text)
        types.append(gguf.TokenType.USER_DEFINED)
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name(title)
    writer.add_basename(basename)
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
    writer.add_bos_token_id(tokens.index(bos))
    writer.add_eos_token_id(tokens.index(eos))
    if eot:
        writer.add_eot_token_id(tokens.index(eot))
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
