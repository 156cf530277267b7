"""The rules of a turn written as messages with headers (harmony): a part of StreamParser.

The family's tables name the markers (Protocol.messages, from the template's renders by
tplparse.grammar.reading.message_format); no format is named here.

    turn      message ((message-end)? message-start message)* (end-of-turn)?
    message   header? body     (the prompt may have written the first header, or none)
    header    role-fields channel-marker channel fields body-marker
    body      reasoning / content text up to what ends it, or a call's arguments

A header is read by its fields, wherever they sit: the recipient (`to=functions.NAME`) in
the role part or in the channel part, with or without whitespace next to a marker; the
fields it does not need (a content type, a constraint marker) are skipped. A message with
a recipient is a call, on any channel; without one it is reasoning on the reasoning
channel and content on the others the template writes (a preamble on the calls' channel is
visible content); a message on a channel the template never writes is reported and its body
left out. A recipient outside the tools' namespace (`to=python`) is a built-in tool: a call
of that name when such a tool is offered, reported otherwise. A header that something
else cuts off before its body marker is reported and left out.
"""

from __future__ import annotations

from .errors import InvalidOutput, TruncatedOutput
from .output import OpenCall
from .protocol import CONTENT, NATURAL_STOPS, REASONING, MessageFormat
from .rules import Rules

# isort: split
###{standalone
from collections.abc import Generator

# The characters a message header may take: a longer one is not a header (and a stream of
# text after a channel marker costs linear time).
_HEADER_LIMIT = 512
# What a header's body holds: (reasoning / content / a call / left out, the call's name, whether
# it is a built-in).
_CALL, _SKIPPED = "calls", "skipped"


class Messages(Rules):
    """The rules of a turn written as messages with headers (harmony): Rules, with the turn
    read by messages where the family's format writes them."""

    __slots__ = ()

    def _turn_body(self) -> Generator[None, None, None]:
        """The turn: of messages where the format writes them, else by its layout (Rules)."""
        m = self._p.messages
        if m is not None:
            return self._messages(m)
        return super()._turn_body()

    def _messages(self, m: MessageFormat) -> Generator[None, None, None]:
        """turn: message (message-end? message-start message)* end-of-turn? (`m`: the format's
        messages)"""
        inp = self._in
        p = self._p
        opened = self.state == REASONING  # the prompt wrote the first header: a reasoning body
        first = True
        # (what the message's body holds, its call's name, whether a built-in: see _header)
        kind: str | None
        name: str | None
        builtin: bool
        while True:
            message_at = inp.offset()
            if not (first and self.continued):  # (a continued body's whitespace is its own)
                yield from inp.skip_ws()
            if not first and not inp.available():
                # (the output ended after a message: the engine stopped on what ends the turn)
                return
            if first and (opened or self.continued) and not (yield from inp.peek(m.channel)):
                # (the prompt wrote the first header, or began the answer's body)
                kind, name, builtin = REASONING if opened else CONTENT, None, False
            else:
                # (the prompt usually writes it: here, absorbed)
                if (yield from inp.peek(m.start)):
                    inp.pos += len(m.start)
                if (yield from inp.peek_any_after_ws((m.channel, m.recipient))):
                    kind, name, builtin = yield from self._header(m)
                    if kind is None:
                        # (the output ended inside a header that addresses no tool: see _header)
                        return
                else:
                    kind, name, builtin = CONTENT, None, False  # text without a header: content
            first = False
            self.continued = False  # (only the first body continues the prefill)
            self.state = REASONING if kind == REASONING else CONTENT
            if kind != REASONING and self.reasoning_ended_at is None:
                self.reasoning_ended_at = message_at  # (the first message that is not reasoning)
            stop = yield from self._message_body(m, kind, name, builtin)
            if stop is None:
                return
            if stop in p.end_of_turn:
                yield from self._after_end(stop)
                return
            if stop == m.channel:
                continue  # (the next header, with no message end or start before it)
            inp.pos += len(stop)
            # (the next message: its start, or its header without one)
            if stop == m.start or (
                    yield from inp.peek_any_after_ws((m.start, m.channel, m.recipient))):
                continue
            end = next((e for e in p.end_of_turn if inp.text.startswith(e, inp.pos)), None)
            if end is None and p.end_of_turn and (
                    yield from inp.peek_any_after_ws(p.end_of_turn)):
                end = next(e for e in p.end_of_turn if inp.text.startswith(e, inp.pos))
            if end is not None:
                yield from self._after_end(end)  # (a message's end, then the turn's)
            elif inp.available():
                yield from self._after_end("")  # (a message end, then text that starts no message)
            return

    def _message_body(self, m: MessageFormat, kind: str, name: str | None,
                      builtin: bool) -> Generator[None, None, str | None]:
        """message body: a call's arguments, a left-out body, or reasoning or content text;
        what ended it (None: the output's end)."""
        out = self._out
        if kind == _CALL:
            assert name is not None  # (a call's header names it: see _header_fields)
            return (yield from self._message_call(m, name, builtin))
        if kind == _SKIPPED:
            return (yield from self._skipped_body(m))
        field = out.reasoning if kind == REASONING else out.content
        written = len(field.parts)
        stop = yield from self._text_until(m.body_stops, field)
        space = self._p.space_before.get("" if stop is None else stop.strip())
        if kind == CONTENT and space is not None and len(field.parts) > written:
            # (as in a layout's content: see Rules._content)
            out.keep_trailing_space(field, space)
        return stop

    def _header(self, m: MessageFormat
                ) -> Generator[None, None, tuple[str | None, str | None, bool]]:
        """header: up to its body marker; (what the body holds, a call's name, built-in). A
        header that a message's end, the turn's end or the next message cuts off before its
        body marker is reported and left out (a call's is an invalid call)."""
        inp = self._in
        out = self._out
        start = inp.pos
        while True:
            found = m.header_end(inp.text, start, start + _HEADER_LIMIT + m.longest)
            if found is not None:
                break
            if len(inp.text) - start > _HEADER_LIMIT:
                raise InvalidOutput(f"a message header without {m.body!r}: "
                                    f"{inp.text[start:start + 40]!r}")
            if inp.eof:
                inp.pos = len(inp.text)
                if m.recipient_field.search(inp.text, start):
                    raise TruncatedOutput("the output ended inside a call's message header")
                if inp.finish in NATURAL_STOPS:  # (cut by the length limit, it was only cut)
                    out.error("invalid_message_header",
                                "the output ended inside a message header, left out: "
                                f"{inp.text[start:start + 60]!r}", inp.offset_base + start)
                return None, None, False
            inp.quiet = m.header_waker
            yield
        header = inp.text[start:found.start()]
        if found.group() != m.body:
            if m.recipient_field.search(header):
                raise InvalidOutput(f"a call's message header without {m.body!r}: "
                                    f"{header[:60]!r}")
            inp.pos = found.start()  # (what cut it off is read next)
            out.error("invalid_message_header",
                        f"a message header without {m.body!r}, left out: {header[:60]!r}",
                        inp.offset_base + start)
            return _SKIPPED, None, False
        inp.pos = found.end()
        return self._header_fields(m, header)

    def _header_fields(self, m: MessageFormat, header: str) -> tuple[str, str | None, bool]:
        """The header's fields: the recipient (wherever it sits) and the channel."""
        inp = self._in
        out = self._out
        found = list(m.recipient_field.finditer(header))
        if len(found) > 1:
            raise InvalidOutput(f"a message header with two recipients: {header[:80]!r}")
        if found:
            value = found[0].group(1)
            if value in m.no_name:  # (nothing, or the namespace and no name in it)
                raise InvalidOutput("a message header whose recipient names no tool: "
                                    f"{header[:80]!r}")
            if value.startswith(m.namespace):
                return _CALL, value[len(m.namespace):], False
            return _CALL, value, True  # (a built-in tool: python, browser.search)
        _, marked, rest = header.partition(m.channel)
        channel = rest.strip().split(None, 1)[0] if marked and rest.strip() else ""
        kind = m.channels.get(channel.partition("<")[0]) if channel else CONTENT
        if kind is None:
            out.error("unknown_channel", f"a message on channel {channel!r}, which the template "
                                           "does not write: left out", inp.offset())
            return _SKIPPED, None, False
        return (REASONING if kind == REASONING else CONTENT), None, False

    def _message_call(self, m: MessageFormat, name: str,
                      builtin: bool) -> Generator[None, None, str | None]:
        """body of a call's message: its arguments, then its end (the call's end, a message's
        end, the turn's end, the next message; at a natural stop, nothing)."""
        inp = self._in
        out = self._out
        index = len(out.calls) + out.invalid_calls
        if builtin and name not in self._tools:
            out.error("unknown_tool",
                        f"a message to {name!r}, a built-in tool that is not offered: left out",
                        inp.offset())
            return (yield from self._skipped_body(m))
        call = OpenCall(index)
        call.name = name
        self._open_call = call
        self._announce_when_settled(index, call)  # (the header is read: the name is settled)
        yield from inp.skip_ws()
        yield from self._arguments_waiting(call, m.closing)
        ends = m.body_stops
        if (yield from inp.peek_any_after_ws(ends)):
            stop: str | None = next(e for e in ends if inp.text.startswith(e, inp.pos))
        else:
            # (left out at a natural stop; else cut, or wrong)
            yield from inp.match(m.call_end, eats=True)
            stop = None
        self._end_call(index, call)
        return stop

    def _skipped_body(self, m: MessageFormat) -> Generator[None, None, str | None]:
        """A body that is left out (reported where its header is): up to what ends it."""
        inp = self._in
        stops = m.body_stops
        longest = max(len(s) for s in stops)
        while True:
            at = min((a for a in (inp.text.find(s, inp.pos) for s in stops) if a != -1),
                     default=-1)
            if at != -1:
                inp.pos = at
                return next(s for s in stops if inp.text.startswith(s, at))
            if inp.eof:
                inp.pos = len(inp.text)
                return None
            inp.pos = max(inp.pos, len(inp.text) - longest)
            inp.quiet = None
            yield


###}
