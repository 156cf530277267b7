"""Run exported tplparse plugins inside the real vLLM, the way its chat-completion server does.

Run with the Python of the virtual environment that has vLLM (not tplparse's):

    python tests/vllm_driver.py CASES.json RESULTS.json

CASES.json: {"plugins": [{"plugin": path, "name": parser name, "reasoning": bool,
"special_tokens": [...], "cases": [{"id", "text", "tools", "tool_choice" (or none: "auto"),
"prompt", "template_kwargs", "system" (the system message, or none), "chunks": [sizes]}]}]}.

For each case it writes what vLLM assembles: one-shot (`Parser.parse`, as the non-streaming
server calls it) and streamed in deltas of each size (`Parser.parse_delta`, with the prompt's
token ids, `finished` on the last), each as {"content", "reasoning", "tool_calls": [{"id",
"name", "arguments"}], "argument_deltas": [count per call], "reasoning_tokens"
(count_reasoning_tokens)}; streamed also "dropped", the indexes of the calls that a tool-call
delta's `tplparse_error` dropped. With a reasoning parser, also "reasoning_end" (what it
tells vLLM's structured-output gate: see reasoning_end_checks) and "tool_only" (the same with
the tool parser alone: one-shot, and streamed by 3); with a system message,
"responses_one_shot" (the request in the Responses API's shape).

A plugin entry with "tokenizer": [folder, gguf_file] runs each case instead with that real
tokenizer (transformers', from a GGUF vocabulary): the output's token ids detokenized one at a
time as vLLM does, special tokens dropped unless adjust_request kept them ("detokenized").

The plugins are loaded by vLLM's own loaders (ToolParserManager.import_tool_parser,
ReasoningParserManager.import_reasoning_parser) and composed by its ParserManager.get_parser.
No model runs: the tokenizer is one token per character (the parsers decode ids only to read
the prompt's state; the text vLLM hands them is the output itself), with the template's
special tokens listed as special so that `adjust_request` sees them.
"""

from __future__ import annotations

import json
import sys
import traceback


class CharTokenizer:
    """One token per character: ids are code points."""

    def __init__(self, special_tokens):
        self.all_special_tokens = list(special_tokens)

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)

    def get_vocab(self):
        return {}


def _request(case):
    """The chat-completion request of a case: its tools and tool_choice (default "auto"), its
    template kwargs, and its system message."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    tools, kwargs = case["tools"], case["template_kwargs"]
    system = [{"role": "system", "content": case["system"]}] if case.get("system") else []
    body = {"model": "m", "messages": [*system, {"role": "user", "content": "hi"}], "chat_template_kwargs": kwargs or None}
    if tools:
        body |= {"tools": tools, "tool_choice": case.get("tool_choice") or "auto"}
    return ChatCompletionRequest(**body)


def _responses_request(case):
    """The same request in the Responses API's shape (the system message as instructions)."""
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest

    tools = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
             for t in case["tools"] or []]
    return ResponsesRequest(model="m", input="hi", instructions=case.get("system") or None, tools=tools)


def _message(reasoning, content, calls):
    return {"content": content or None, "reasoning": reasoning or None,
            "tool_calls": [{"id": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in calls],
            "argument_deltas": [c.get("deltas", 0) for c in calls]}


def one_shot(parser_cls, tokenizer, case, request=None):
    request = _request(case) if request is None else request
    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs=case["template_kwargs"])
    request = parser.adjust_request(request)
    reasoning, content, calls = parser.parse(case["text"], request, enable_auto_tools=True)
    result = _message(reasoning, content, [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls or []])
    result["reasoning_tokens"] = parser.count_reasoning_tokens(tokenizer.encode(case["text"]))
    return result


def streamed(parser_cls, tokenizer, case, size):
    request = _request(case)
    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs=case["template_kwargs"])
    request = parser.adjust_request(request)
    text = case["text"]
    pieces = [(text[i:i + size], tokenizer.encode(text[i:i + size])) for i in range(0, len(text), size)] or [("", [])]
    return _assembled(parser, request, tokenizer.encode(case["prompt"]), pieces)


def detokenized(parser_cls, tokenizer, case):
    """A real tokenizer's ids, as vLLM's detokenizer turns them into text: one delta per token
    (the text the sequence has grown by), special tokens dropped unless the parsers'
    adjust_request kept them; and the one-shot parse of the whole detokenized text."""
    request = _request(case)
    parser = parser_cls(tokenizer, request.tools, chat_template_kwargs=case["template_kwargs"])
    request = parser.adjust_request(request)
    skip = request.skip_special_tokens
    ids = tokenizer.encode(case["text"], add_special_tokens=False)
    pieces, before = [], ""
    for i in range(len(ids)):
        now = tokenizer.decode(ids[:i + 1], skip_special_tokens=skip)
        if now.endswith("\ufffd"):  # (a character still cut: the detokenizer holds it back)
            pieces.append(("", ids[i:i + 1]))
            continue
        pieces.append((now[len(before):], ids[i:i + 1]))
        before = now
    result = _assembled(parser, request, tokenizer.encode(case["prompt"], add_special_tokens=False), pieces)
    result["skip_special_tokens"] = skip
    whole = parser_cls(tokenizer, request.tools, chat_template_kwargs=case["template_kwargs"])
    reasoning, content, calls = whole.parse(before, request, enable_auto_tools=True)
    result["one_shot"] = _message(reasoning, content, [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                                       for c in calls or []])
    return result


def _assembled(parser, request, prompt_ids, pieces):
    """Feed (delta text, delta token ids) pieces through Parser.parse_delta; what a client assembles."""
    content, reasoning, calls, errors = [], [], {}, []
    text = "".join(piece for piece, _ in pieces)
    for n, (piece, piece_ids) in enumerate(pieces):
        delta = parser.parse_delta(delta_text=piece, delta_token_ids=list(piece_ids), request=request,
                                   prompt_token_ids=prompt_ids, finished=n == len(pieces) - 1)
        if delta is None:
            continue
        content.append(delta.content or "")
        reasoning.append(delta.reasoning or "")
        for tc in delta.tool_calls:
            error = getattr(tc, "tplparse_error", None)
            if error:
                errors.append(error)
                continue
            call = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": "", "deltas": 0})
            if tc.id is not None:
                if call["id"] is not None and call["id"] != tc.id:
                    raise AssertionError(f"call {tc.index}: a second id {tc.id!r} after {call['id']!r}")
                call["id"] = tc.id
            if tc.function is not None:
                if tc.function.name:
                    if call["name"] is not None:
                        raise AssertionError(f"call {tc.index}: a second name {tc.function.name!r}")
                    call["name"] = tc.function.name
                if tc.function.arguments:
                    if call["name"] is None:
                        raise AssertionError(f"call {tc.index}: arguments before its name")
                    call["arguments"] += tc.function.arguments
                    call["deltas"] += 1
    dropped = {e["index"] for e in errors}
    kept = [calls[i] for i in sorted(calls) if i not in dropped]
    result = _message("".join(reasoning), "".join(content), kept)
    result["dropped"] = sorted(dropped)
    result["reasoning_tokens"] = parser.count_reasoning_tokens([i for _, ids in pieces for i in ids])
    return result


def reasoning_end_checks(parser_cls, tokenizer, case):
    """What the reasoning parser tells vLLM's structured-output gate: whether the prompt ended
    the reasoning, and the first output token (one per character) after which, fed one at a
    time as the engine does, `is_reasoning_end_streaming` says the reasoning ended."""
    parser = parser_cls(tokenizer, None, chat_template_kwargs=case["template_kwargs"])
    reasoner = parser.reasoning_parser
    prompt_ids, output_ids = tokenizer.encode(case["prompt"]), tokenizer.encode(case["text"])
    first = None
    for i in range(len(output_ids)):
        if reasoner.is_reasoning_end_streaming(prompt_ids + output_ids[:i + 1], output_ids[i:i + 1]):
            first = i
            break
    return {"prompt_ended": reasoner.is_reasoning_end(prompt_ids), "first_end_token": first}


def main(cases_path, results_path):
    from vllm.parser.parser_manager import ParserManager
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    data = json.loads(open(cases_path, encoding="utf-8").read())
    results = {}
    for plugin in data["plugins"]:
        ToolParserManager.import_tool_parser(plugin["plugin"])
        if plugin["reasoning"]:
            ReasoningParserManager.import_reasoning_parser(plugin["plugin"])
        name = plugin["name"]
        tokenizer = CharTokenizer(plugin["special_tokens"])
        if plugin.get("tokenizer"):  # a real one: transformers' tokenizer of a GGUF vocabulary
            from transformers import AutoTokenizer

            folder, gguf_file = plugin["tokenizer"]
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
        try:
            parser_cls = ParserManager.get_parser(tool_parser_name=name,
                                                  reasoning_parser_name=name if plugin["reasoning"] else None,
                                                  enable_auto_tools=True, tokenizer=tokenizer)
            tool_only_cls = ParserManager.get_parser(tool_parser_name=name, enable_auto_tools=True, tokenizer=tokenizer)
        except Exception:
            results[name] = {"error": traceback.format_exc()}
            continue
        for case in plugin["cases"]:
            key = f"{name}/{case['id']}"
            if plugin.get("tokenizer"):
                try:
                    results[f"{key}/detokenized"] = detokenized(parser_cls, tokenizer, case)
                except Exception:
                    results[f"{key}/detokenized"] = {"error": traceback.format_exc()}
                continue
            try:
                results[key] = {"one_shot": one_shot(parser_cls, tokenizer, case),
                                "streamed": {str(size): streamed(parser_cls, tokenizer, case, size)
                                             for size in case["chunks"]}}
                if plugin["reasoning"]:
                    results[key]["reasoning_end"] = reasoning_end_checks(parser_cls, tokenizer, case)
                    # --tool-call-parser alone: the whole output, from the mode the request selects
                    results[key]["tool_only"] = {"one_shot": one_shot(tool_only_cls, tokenizer, case),
                                                 "streamed": {"3": streamed(tool_only_cls, tokenizer, case, 3)}}
                if case.get("system"):
                    results[key]["responses_one_shot"] = one_shot(parser_cls, tokenizer, case, _responses_request(case))
            except Exception:
                results[key] = {"error": traceback.format_exc()}
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
