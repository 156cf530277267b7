"""The output layer: content and reasoning as fields, OpenAI-style deltas, the calls, the
errors, and the final message. Nothing emitted is retracted: text goes out once it cannot
change, a call's header once its name is settled, its arguments once the call is read."""

###{standalone
import json


class TextField:
    """Content or reasoning as emitted so far: its parts, and the whitespace held at its edges."""

    __slots__ = ("key", "parts", "pending", "started")

    def __init__(self, key):
        self.key = key  # its delta key: "content" or "reasoning_content"
        self.parts = []
        # Whitespace at the end so far, emitted only if more text follows it: its pieces (a
        # list, not one growing string: a model looping on whitespace must cost linear time).
        self.pending = []
        self.started = False  # until then, whitespace at the very start is dropped


def error_entry(kind, message, offset):
    return {"kind": kind, "message": message, "offset": offset}


# The two streams one parse gives (StreamParser's `calls`): for a UI, a call's header once its
# name is settled, its arguments as they are read, and a `tool_call_error` delta that voids a
# call found broken later; for code that executes tools, each call once, whole, when it is
# complete and its arguments validate, and never anything to take back.
DELTAS = "deltas"
COMPLETE = "complete"


class Dispatched(dict):
    """A delta of the dispatch stream (a complete, valid call): how it is told from the UI
    stream's call deltas, which that stream leaves out."""

    __slots__ = ()


def dispatch_only(deltas):
    """The dispatch stream's deltas of what the UI stream gives: its text deltas, and the
    complete calls as plain dicts; no call header, argument or void delta."""
    for delta in deltas:
        if "tool_calls" in delta or "tool_call_error" in delta:
            break
    else:
        return deltas  # (text only, or nothing: as it is)
    return [dict(d) if type(d) is Dispatched else d for d in deltas
            if type(d) is Dispatched or ("tool_calls" not in d and "tool_call_error" not in d)]


class Output:
    """Deltas and the message, written by the rules (a part of StreamParser)."""

    def _emit_text(self, field, text):
        """Emit reasoning or content, without the whitespace at its very start; whitespace at
        its end is held until more of the field follows (or what ends the field shows it is
        the field's own: _keep_trailing_space)."""
        if not text:
            return
        if not field.started:
            text = text.lstrip()
            if not text:
                return
            field.started = True
        body = text.rstrip()
        if not body:
            field.pending.append(text)
            return
        out = "".join(field.pending) + body if field.pending else body
        field.pending = [text[len(body):]] if len(body) < len(text) else []
        field.parts.append(out)
        self._deltas.append({field.key: out})

    def _keep_trailing_space(self, field, written):
        """The whitespace the field ends with is its own, less its last run of the characters
        in `written` (the whitespace the template writes before what ends it here: "\n" and
        "\n\n" are its newlines, a space before them is the model's). That goes out; the
        template's run stays held (it goes out only if more of the field follows)."""
        if field.pending:
            space = "".join(field.pending)
            own = space.rstrip(written) if written else space
            field.pending = [space[len(own):]] if len(own) < len(space) else []
            space = own
            if space:
                field.parts.append(space)
                self._deltas.append({field.key: space})

    def _announce(self, index, call):
        """A call's header: its id and name (the arguments follow in later deltas)."""
        self._deltas.append({"tool_calls": [{"index": index, "id": call["id"] or f"call_{index}", "type": "function",
                                             "function": {"name": call["name"], "arguments": ""}}]})

    def _arguments_delta(self, index, piece):
        self._deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})

    def _complete_call(self, index, call, streamed=""):
        """The call is complete and its arguments (now JSON text) read: its last delta (what
        the argument deltas so far, `streamed`, did not give), and the call."""
        arguments = call["arguments"]
        rest = arguments[len(streamed):] if streamed else arguments
        if rest:
            self._arguments_delta(index, rest)
        entry = {"id": call["id"] or f"call_{index}", "type": "function",
                 "function": {"name": call["name"], "arguments": arguments}}
        if self._validate is not None and not self._dispatched(index, entry):
            return
        self._calls.append(entry)

    def _dispatched(self, index, entry):
        """The dispatch stream: a complete call whose arguments validate against its tool's
        schema goes out whole, as one delta, numbered as it is in the message; one that does
        not is dropped (its error in the message; its index stays taken, so the ids of the
        calls after it are the UI stream's)."""
        function = entry["function"]
        problem = self._validate(function["name"], json.loads(function["arguments"]))
        if problem is not None:
            self._error("invalid_arguments", f"call {index} ({function['name']}): the arguments do not validate "
                                             f"against the tool's schema: {problem}", self._offset())
            self._invalid_calls += 1
            return False
        self._deltas.append(Dispatched({"tool_calls": [{"index": len(self._calls), **entry}]}))
        return True

    def _feed_complete(self, chunk):
        """feed() of the dispatch stream (set on the instance: the UI stream's feed is untouched)."""
        deltas = self._ui_feed(chunk)
        if len(deltas) == 1:  # (most chunks: one delta, or none)
            delta = deltas[0]
            if type(delta) is Dispatched:
                return [dict(delta)]
            return [] if "tool_calls" in delta or "tool_call_error" in delta else deltas
        return dispatch_only(deltas) if deltas else deltas

    def _end_complete(self, finish_reason="stop"):
        """end() of the dispatch stream."""
        return dispatch_only(self._ui_end(finish_reason))

    def _drop_call(self, index, kind, message):
        """A call whose header went out is not a call after all: a delta says so (its
        argument deltas, if any, are void), with the error of the message."""
        self._deltas.append({"tool_call_error": {"index": index, "kind": kind, "message": message}})

    def _error(self, kind, message, offset):
        self._errors.append(error_entry(kind, message, offset))

    @property
    def message(self):
        """The assistant message (after end()): content, reasoning, the calls, the errors."""
        if self._finish is None:
            raise ValueError("the message is complete only after end()")
        content = "".join(self._content_text.parts)
        reasoning = "".join(self._reasoning_text.parts)
        return {
            "role": "assistant",
            "content": content or None,
            "reasoning_content": reasoning or None,
            "tool_calls": [dict(c) for c in self._calls],
            "errors": list(self._errors),
            "finish_reason": self._finish,
        }


###}
