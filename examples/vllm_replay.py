"""Replay a model output through an exported tplparse plugin inside vLLM, as `vllm serve` would
stream it: the plugin loaded by vLLM's own loaders, the parser composed by its ParserManager,
fed in small deltas through `Parser.parse_delta`; prints each DeltaMessage, then the one-shot
`Parser.parse` result. No model runs (check a plugin before serving with it).

    tplparse export vllm examples/chatml-think-tools.gguf -o build/vllm
    .venv-vllm/bin/python examples/vllm_replay.py build/vllm/chatml_think_tools_vllm.py OUTPUT.txt [--tools TOOLS.json]

Run it with the Python of a virtual environment that has vLLM.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


class CharTokenizer:
    """One token per character (no model here; the parsers decode ids only to read the prompt)."""

    all_special_tokens: list[str] = []

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))

    def get_vocab(self):
        return {}


def main() -> int:
    arguments = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    arguments.add_argument("plugin", type=Path)
    arguments.add_argument("output", type=Path, help="the model's raw output (text)")
    arguments.add_argument("--tools", type=Path, help="OpenAI-style tool definitions (a JSON list)")
    arguments.add_argument("--delta", type=int, default=4, help="characters per delta (default 4)")
    args = arguments.parse_args()

    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    ToolParserManager.import_tool_parser(str(args.plugin))
    ReasoningParserManager.import_reasoning_parser(str(args.plugin))
    name = next(n for n in ToolParserManager.list_registered() if n.startswith("tplparse-"))
    reasoning = name if name in ReasoningParserManager.list_registered() else None
    tokenizer = CharTokenizer()
    parser_cls = ParserManager.get_parser(tool_parser_name=name, reasoning_parser_name=reasoning,
                                          enable_auto_tools=True, tokenizer=tokenizer)
    tools = json.loads(args.tools.read_text(encoding="utf-8")) if args.tools else None
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=tools,
                                    tool_choice="auto" if tools else None)
    text = args.output.read_text(encoding="utf-8")
    print(f"parsers: --tool-call-parser {name}" + (f" --reasoning-parser {reasoning}" if reasoning else ""))

    parser = parser_cls(tokenizer, request.tools)
    pieces = [text[i:i + args.delta] for i in range(0, len(text), args.delta)]
    for n, piece in enumerate(pieces):
        delta = parser.parse_delta(delta_text=piece, delta_token_ids=tokenizer.encode(piece), request=request,
                                   prompt_token_ids=tokenizer.encode("<prompt>"), finished=n == len(pieces) - 1)
        if delta is not None:
            print("delta", delta.model_dump_json(exclude_unset=True, exclude_none=True))

    reasoning_text, content, calls = parser_cls(tokenizer, request.tools).parse(text, request, enable_auto_tools=True)
    print("one-shot", json.dumps({"reasoning": reasoning_text, "content": content,
                                  "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in calls or []]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
