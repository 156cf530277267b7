"""Build the example GGUF files in this folder (vocab-only models with our own chat templates).

    python examples/make_examples.py

Each file is a real GGUF that llama.cpp can load as a vocabulary (`vocab_only`), written
by `tplparse.byte_vocab`: all 256 single-byte tokens plus the special tokens the template
uses, and the chat template from `templates/`. The output is deterministic: the same
script writes the same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tplparse.check.byte_vocab import write_byte_vocab

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


def write_example(name: str, spec: dict, out_dir: Path) -> Path:
    template = (HERE / "templates" / spec["template"]).read_text(encoding="utf-8")
    return write_byte_vocab(
        out_dir / f"{name}.gguf",
        title=spec["title"],
        basename=name,
        control=spec["control"],
        user_defined=spec["user_defined"],
        bos=spec["bos"],
        eos=spec["eos"],
        eot=spec["eot"],
        chat_template=template,
    )


def main(argv: list[str]) -> None:
    out_dir = Path(argv[1]) if len(argv) > 1 else HERE
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, spec in EXAMPLES.items():
        path = write_example(name, spec, out_dir)
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv)
