"""The body of every vLLM plugin that `tplparse export vllm` writes: a tool parser and a
reasoning parser over one family's generated parser, in vLLM's legacy parser interfaces
(`ToolParser`, `ReasoningParser`), which vLLM's `DelegatingParser` composes per request.

tplparse never imports this file (it imports vLLM): the exporter copies its `###{imports`
section to the top of the plugin and its `###{plugin` section after the family's data
(FAMILY, REASONING_START, REASONING_END, MARKERS, CALL_IDS_FROM_MODEL, MODES, SPEC_JSON) and the
family's generated parser, loaded as `_family`; the plugin ends with `register(PARSER_NAME)`.
The plugin is tested with the real vLLM (tests/test_vllm_plugin.py, in the virtual
environment `.ci/run` makes for it).

How vLLM drives the pair, and what each side reads (one parse per side, no re-scan):
- streamed: the reasoning parser is fed vLLM's text deltas while the output is in
  reasoning; when the generated parser has left the reasoning (`reasoning_ended_at`), the
  raw text from there goes back to vLLM as this batch's content, and vLLM hands it, then
  every later delta, to the tool parser, whose parser starts in content. (When the prompt
  closed the reasoning, vLLM skips the reasoning parser and the tool parser reads the whole
  output: a block the model opens anyway is still reasoning, as the generated parser reads
  it. vLLM does not tell the tool parser which of the two it gets.) Both are engine-based
  (`engine_based_streaming`): vLLM passes each delta alone and flushes with `finish_streaming()`.
- one-shot: `extract_reasoning` parses the whole output and returns the reasoning and the raw
  text after it; `extract_tool_calls` parses that text, after the reasoning ("after_reasoning").
- the tool parser alone (`skip_reasoning_parsing`): the whole output, from the start the
  request's mode selects; the reasoning is dropped.
- the start state: from the prompt vLLM rendered (`adjust_initial_state_from_prompt`) when it
  gives one (streamed), else from the mode the request selects, as the probe found the modes
  (its `chat_template_kwargs`, or a flag in its system message such as "/no_think"), else
  the family's default mode.
"""

###{imports
import logging

from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.reasoning import ReasoningParser, ReasoningParserManager
from vllm.renderers.chat_utils import make_tool_call_id
from vllm.sampling_params import StructuredOutputsParams
from vllm.tool_parsers import ToolParser, ToolParserManager

###}

###{plugin
_log = logging.getLogger(f"vllm.tplparse.{FAMILY}")


def _decode(tokenizer, ids):
    """Token ids as text, special tokens kept (the family's markers may be special tokens)."""
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def _markers_are_special(tokenizer):
    """Whether a special token of the tokenizer is (part of) one of the family's markers: then
    vLLM must keep special tokens in the text, or the parser never sees the marker."""
    special = set(getattr(tokenizer, "all_special_tokens", None) or [])
    # (transformers lists added special tokens such as <|im_end|> apart; vLLM's detokenizer drops
    # them too)
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            special.add(getattr(token, "content", None) or str(token))
    return any(token in marker for token in special if token for marker in MARKERS)


def _field(item, name):
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _system_text(request):
    """The text of the request's system (or developer) messages: a chat request's messages, a
    Responses request's instructions and input items."""
    texts = []
    instructions = getattr(request, "instructions", None)
    if isinstance(instructions, str):
        texts.append(instructions)
    items = getattr(request, "messages", None) or getattr(request, "input", None)
    for item in items if isinstance(items, list) else ():
        if _field(item, "role") in ("system", "developer"):
            content = _field(item, "content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts += [t for t in (_field(part, "text") for part in content)
                          if isinstance(t, str)]
    return "\n".join(texts)


def _named_tool(request):
    """The function a request's tool_choice names (chat: {"function": {"name"}}; Responses:
    {"name"}), or None."""
    choice = getattr(request, "tool_choice", None)
    if choice is None or isinstance(choice, str):
        return None
    function = _field(choice, "function")
    name = _field(function, "name") if function is not None else _field(choice, "name")
    return name if isinstance(name, str) else None


def _start_for(kwargs, request=None):
    """The start state of the mode the request selects: the mode whose template variables the
    `chat_template_kwargs` all set and whose system flag ("/no_think") the system message
    carries, the most specific such mode; None when only the default mode fits (the parser
    then starts as the family's default mode does)."""
    kwargs = kwargs or {}
    system = _system_text(request)
    best, best_score = None, 0
    for mode in MODES.values():
        variables, flag = mode["variables"], mode["system_flag"]
        if not all(name in kwargs and kwargs[name] == value for name, value in variables.items()):
            continue
        if flag and flag not in system:
            continue
        score = len(variables) + (1 if flag else 0)
        if score > best_score:
            best, best_score = mode["start"], score
    return best


def _forces_a_call(request):
    """Whether the request's tool_choice asks for a call: "required", or a named tool."""
    return bool(request.tools) and (request.tool_choice == "required"
                                    or _named_tool(request) is not None)


def _special_tokens(tokenizer):
    """The served model's special tokens (what llguidance's Lark names as tokens)."""
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    names = set(getattr(tokenizer, "all_special_tokens", None) or ())
    names.update(token.content for token in added.values() if getattr(token, "special", False))
    return tuple(sorted(names))


_tplparse_missing: list = []


def _strict_grammar(tokenizer, tools, request, start, after_reasoning):
    """tplparse's Lark grammar for a request whose tool_choice asks for a call (vLLM hands it to
    its guidance backend, llguidance): from the first token the tool parser reads (`start`), or
    after the reasoning when a reasoning parser runs (vLLM applies a grammar once the reasoning
    ends). None when tplparse is not importable in vLLM's environment (said once in the log:
    the choice is then not enforced, and a reply without a call comes back as content)."""
    try:
        from tplparse.emit.lark import emit_lark
        from tplparse.grammar import GrammarOptions, build
        from tplparse.spec import ProtocolSpec
    except ImportError as e:
        if not _tplparse_missing:
            _tplparse_missing.append(e)
            _log.warning("tool_choice %r is not enforced by a grammar: tplparse, which "
                         "builds it, is not importable in vLLM's environment (%s; pip "
                         "install tplparse there)", request.tool_choice, e)
        return None
    choice = request.tool_choice
    if not isinstance(choice, str):
        choice = {"type": "function", "function": {"name": _named_tool(request)}}
    options = GrammarOptions(tools=tools, tool_choice=choice,
                             parallel=bool(getattr(request, "parallel_tool_calls", True)),
                             start="content" if after_reasoning else start,
                             reasoning_closed=after_reasoning)
    special = _special_tokens(tokenizer)
    return emit_lark(build(ProtocolSpec.from_json(SPEC_JSON), options, special), special)


class _Deltas:
    """The generated parser's deltas, as vLLM's: one DeltaMessage per batch, call ids that
    stay the same for the call, and the calls of a one-shot parse as vLLM's ToolCalls."""

    def __init__(self, keep_reasoning=True):
        self.keep_reasoning = keep_reasoning
        self._ids = {}  # call index -> the id its header went out with

    def call_id(self, index, parsed_id):
        """The model's own id when the format writes one, else one of vLLM's (random)."""
        if index not in self._ids:
            self._ids[index] = parsed_id if CALL_IDS_FROM_MODEL and parsed_id \
                else make_tool_call_id()
        return self._ids[index]

    def message(self, deltas):
        """Merge a batch of the parser's deltas into one DeltaMessage (None when empty)."""
        content: list = []
        reasoning: list = []
        calls: list = []
        for delta in deltas:
            if "content" in delta:
                content.append(delta["content"])
            elif "reasoning_content" in delta:
                if self.keep_reasoning:
                    reasoning.append(delta["reasoning_content"])
            elif "tool_calls" in delta:
                for call in delta["tool_calls"]:
                    self._add_call(calls, call)
            elif "tool_call_error" in delta:
                # A call whose header (and maybe arguments) went out is not a call after all.
                # vLLM cannot take deltas back: the client is told in an extra field of a
                # tool-call delta of that index (vLLM merges tool-call lists, not extra fields of
                # a message), and the one-shot result has no such call.
                # (the error itself is logged with the others at the end: _log_errors)
                error = delta["tool_call_error"]
                calls.append(DeltaToolCall(index=error["index"], tplparse_error=error))
        if not (content or reasoning or calls):
            return None
        return DeltaMessage(content="".join(content) or None, reasoning="".join(reasoning) or None,
                            tool_calls=calls)

    def _add_call(self, calls, call):
        function = call.get("function") or {}
        if "id" in call:  # the call's header: id and name
            header = DeltaFunctionCall(name=function["name"],
                                       arguments=function.get("arguments", ""))
            calls.append(DeltaToolCall(index=call["index"],
                                       id=self.call_id(call["index"], call["id"]), type="function",
                                       function=header))
        elif calls and calls[-1].index == call["index"] and calls[-1].function is not None:
            # more of its arguments
            calls[-1].function.arguments = (calls[-1].function.arguments or "") \
                + function["arguments"]
        else:
            calls.append(DeltaToolCall(index=call["index"],
                                       function=DeltaFunctionCall(arguments=function["arguments"])))

    def tool_calls(self, message):
        """A one-shot message's calls as vLLM's ToolCalls."""
        return [ToolCall(id=self.call_id(i, call["id"]), type="function",
                         function=FunctionCall(name=call["function"]["name"],
                                               arguments=call["function"]["arguments"]))
                for i, call in enumerate(message["tool_calls"])]


def _log_errors(message):
    for error in message["errors"]:
        _log.warning("tplparse: %s at offset %s: %s", error["kind"], error["offset"],
                     error["message"])


class TplparseReasoningParser(ReasoningParser):
    """The family's reasoning, read by its generated parser (see the module's docstring)."""

    engine_based_streaming = True

    def __init__(self, tokenizer, *args, **kwargs):
        super().__init__(tokenizer, *args, **kwargs)
        self._template_kwargs = kwargs.get("chat_template_kwargs") or {}
        self._prompt = None  # the rendered prompt, when vLLM gives it
        self._reader = None  # the generated parser of the stream, made at its first delta
        self._counted = None  # the parser of the last output read (streamed or one-shot)
        self._fed = []  # the raw deltas fed so far (the text after the reasoning goes back raw)
        self._handed_over = False  # the text after the reasoning went to vLLM (the tool parser)
        self._deltas = _Deltas()
        self._reasoning_tokens = None  # (count_reasoning_tokens, once the reasoning ended)

    @property
    def reasoning_start_str(self):
        return REASONING_START or None

    @property
    def reasoning_end_str(self):
        return REASONING_END or None

    def _parser(self, request=None):
        if self._prompt is not None:
            return _family.StreamParser(generation_prompt=self._prompt)
        kwargs = self._template_kwargs or getattr(request, "chat_template_kwargs", None) or {}
        return _family.StreamParser(start=_start_for(kwargs, request))

    # --- the prompt, and the token-id checks of structured outputs ---------------------

    def is_reasoning_end(self, input_ids):
        """Whether the text of `input_ids` (a prompt, or a prompt and output) ends after the
        reasoning: its last reasoning marker is the end marker, with only whitespace after it
        (a prompt that closed the block: the output starts in content)."""
        if not REASONING_END:
            return True
        text = _decode(self.model_tokenizer, input_ids).rstrip()
        return text.endswith(REASONING_END)

    def is_reasoning_end_streaming(self, input_ids, delta_ids):
        """Whether the reasoning's end marker is in the newest tokens (`delta_ids`, the end of
        `input_ids`): decoded with as many tokens before them as the marker has characters."""
        if not REASONING_END:
            return True
        delta_ids = list(delta_ids)
        if not delta_ids:
            return False
        # (a slice of the window only: input_ids is the whole sequence)
        start = len(input_ids) - len(delta_ids)
        before = list(input_ids[max(0, start - len(REASONING_END)):start])
        window = _decode(self.model_tokenizer, before + delta_ids)
        return REASONING_END in window \
            and REASONING_END not in _decode(self.model_tokenizer, before)

    def extract_content_ids(self, input_ids):
        """The ids after the token that completes the reasoning's end marker (all of them
        when the marker is not there: no reasoning to take out)."""
        ids = list(input_ids)
        if not REASONING_END:
            return ids
        text = ""
        for i, token in enumerate(ids):
            piece = _decode(self.model_tokenizer, [token])
            text += piece
            if text.find(REASONING_END, max(0, len(text) - len(piece) - len(REASONING_END))) != -1:
                return ids[i + 1:]
        return ids

    def adjust_request(self, request):
        """Keep special tokens in the text when one of the family's markers is one."""
        if _markers_are_special(self.model_tokenizer):
            request.skip_special_tokens = False
        return request

    def adjust_initial_state_from_prompt(self, prompt_token_ids):
        self._prompt = _decode(self.model_tokenizer, prompt_token_ids)

    def count_reasoning_tokens(self, token_ids):
        """The tokens of the output (streamed, or parsed one-shot) before where its reasoning
        ended (all of them while it has not ended). Found once, when it has ended: the fewest
        tokens whose text reaches that offset (prefixes decoded whole, so that a token holding
        part of a character counts as the text does), by bisection."""
        reader = self._counted
        if reader is None:
            return 0
        ended = reader.reasoning_ended_at
        if ended is None:
            return len(token_ids)
        if self._reasoning_tokens is None:
            low, high = 0, len(token_ids)
            while low < high:
                middle = (low + high) // 2
                if len(_decode(self.model_tokenizer, token_ids[:middle])) >= ended:
                    high = middle
                else:
                    low = middle + 1
            self._reasoning_tokens = low
        return self._reasoning_tokens

    # --- one-shot ----------------------------------------------------------------------

    def extract_reasoning(self, model_output, request):
        """(reasoning, the raw text after it): the tool parser reads that text."""
        reader = self._parser(request)
        reader.feed(model_output)
        reader.end("stop")
        # (count_reasoning_tokens reads it next)
        self._counted, self._reasoning_tokens = reader, None
        message = reader.message
        ended = reader.reasoning_ended_at
        return message["reasoning_content"], \
            (model_output[ended:] or None) if ended is not None else None

    # --- streamed ----------------------------------------------------------------------

    def extract_reasoning_streaming(self, previous_text, current_text, delta_text,
                                    previous_token_ids, current_token_ids, delta_token_ids):
        if self._handed_over:
            # (vLLM stops calling once the reasoning ended; what comes is content)
            return DeltaMessage(content=delta_text) if delta_text else None
        if self._reader is None:
            self._reader = self._counted = self._parser()
            self._reasoning_tokens = None
        self._fed.append(delta_text)
        deltas = self._reader.feed(delta_text)
        reasoning = [d for d in deltas if "reasoning_content" in d]
        ended = self._reader.reasoning_ended_at
        if ended is None:
            return self._deltas.message(reasoning)
        self._handed_over = True
        rest = "".join(self._fed)[ended:]
        self._fed = []
        message = self._deltas.message(reasoning) or DeltaMessage()
        message.content = rest or None
        return message if (message.reasoning or message.content) else None

    def has_engine_confirmed_reasoning_end(self):
        return self._handed_over

    def finish_streaming(self):
        """At the end of a stream that never left reasoning (or was about to tell): what the
        parser still held, as it reads it."""
        if self._handed_over or self._reader is None:
            return None
        deltas = self._reader.end("stop")
        _log_errors(self._reader.message)
        return self._deltas.message(deltas)


class TplparseToolParser(ToolParser):
    """The family's content and tool calls, read by its generated parser."""

    engine_based_streaming = True
    # The model writes its calls in its own format, for every tool_choice: vLLM's JSON-list
    # grammar for "required" and named choices would force a format the family does not
    # write. adjust_request sets tplparse's grammar for them instead.
    supports_required_and_named = False

    def __init__(self, tokenizer, tools=None):
        super().__init__(tokenizer, tools)
        # vLLM sets this when no reasoning parser is configured: the parser then reads the whole
        # output from the start the request's mode leaves it in, and drops reasoning (vLLM's
        # one-shot result of a tool parser has no reasoning field, so streaming drops it too).
        self.skip_reasoning_parsing = False
        self._tools = [tool.model_dump(exclude_none=True) if hasattr(tool, "model_dump") else tool
                       for tool in self.tools]
        self._reader = None
        self._deltas: _Deltas | None = None

    def _parser(self, request, one_shot):
        """The parser of what vLLM hands this tool parser: with a reasoning parser, the text after
        the reasoning (one-shot: always; streamed: also the whole output when vLLM skipped the
        reasoning parser because the prompt closed the block, so a block the model opens anyway
        is still reasoning); alone, the whole output, from the start the request selects. A
        named tool_choice offers that tool only (a call of another is an unknown tool, dropped)."""
        if self.skip_reasoning_parsing:
            start = _start_for(getattr(request, "chat_template_kwargs", None), request)
        else:
            start = "after_reasoning" if one_shot else "content"
        named = _named_tool(request)
        tools = [t for t in self._tools if (t.get("function") or t).get("name") == named] \
            if named else self._tools
        return _family.StreamParser(tools=tools, start=start)

    def adjust_request(self, request):
        """Keep special tokens in the text when one of the family's markers is one; a required
        or named tool_choice is enforced by tplparse's grammar (`_strict_grammar`), unless the
        request brings structured outputs of its own."""
        request = super().adjust_request(request)
        if request.tools and request.tool_choice != "none" \
                and _markers_are_special(self.model_tokenizer):
            request.skip_special_tokens = False
        if _forces_a_call(request) and getattr(request, "structured_outputs", None) is None:
            start = _start_for(getattr(request, "chat_template_kwargs", None), request)
            grammar = _strict_grammar(self.model_tokenizer, self._tools, request, start,
                                      after_reasoning=not self.skip_reasoning_parsing)
            if grammar is not None:
                request.structured_outputs = StructuredOutputsParams(grammar=grammar)
        return request

    def extract_tool_calls(self, model_output, request):
        reader = self._parser(request, one_shot=True)
        reader.feed(model_output)
        reader.end("stop")
        message = reader.message
        _log_errors(message)
        calls = _Deltas().tool_calls(message)
        return ExtractedToolCallInformation(tools_called=bool(calls), tool_calls=calls,
                                            content=message["content"])

    def extract_tool_calls_streaming(self, previous_text, current_text, delta_text,
                                     previous_token_ids, current_token_ids, delta_token_ids,
                                     request):
        if self._reader is None:
            self._reader = self._parser(request, one_shot=False)
            self._deltas = _Deltas(keep_reasoning=not self.skip_reasoning_parsing)
        assert self._deltas is not None  # (made with the reader)
        return self._deltas.message(self._reader.feed(delta_text))

    def finish_streaming(self):
        if self._reader is None:
            return None
        deltas = self._reader.end("stop")
        _log_errors(self._reader.message)
        assert self._deltas is not None  # (made with the reader)
        return self._deltas.message(deltas)


def register(name):
    """Register the family's parsers under `name` (`--tool-call-parser NAME`, and
    `--reasoning-parser NAME` when the family has reasoning)."""
    ToolParserManager.register_module(name=name, module=TplparseToolParser)
    if REASONING_END:
        ReasoningParserManager.register_module(name=name, module=TplparseReasoningParser)
###}
