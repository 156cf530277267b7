"""The reading tables: the shape of the data a family module hands the runtime.

`tplparse.grammar.reading.reading_tables(spec)` writes them at build time (plain data: str,
bool, int, list, dict, None, so a family module embeds them as one literal), and
`Protocol(tables)` reads them. Both sides use the types below, so the layout is written once.
A layout piece is a literal (str) or a slot ({"slot": "name"}: name, id, index, index1,
arguments; key and value in an argument layout).
"""

from __future__ import annotations

###{standalone
from typing import TypedDict


class Slot(TypedDict):
    """A slot of a layout: what the model writes there (a tool name, its arguments, ...)."""

    slot: str


LayoutPiece = str | Slot
Layout = list[LayoutPiece]


class ModeTable(TypedDict):
    """A mode of the template (thinking on, off, ...): its generation prompt and the state the
    output starts in after it."""

    tail: str  # what the generation prompt writes after the assistant header
    start: str  # "reasoning" or "content"
    header: str  # the assistant header


class ReasoningTable(TypedDict):
    start: str  # opens a reasoning block ("" when only the prompt opens it)
    end: str  # ends it
    call_ends_reasoning: bool  # a call opener inside reasoning ends the block (the policy)
    end_opens_content: str  # the part of a compound end that opens the content block


class ContentTable(TypedDict):
    start: str  # the content wrapper's opener ("" without one)
    end: str  # and its end
    space_before: dict[str, str]  # marker ("" = the output's end) -> whitespace written before it


class SegmentsTable(TypedDict):
    """A turn written as segments, each with a header of its own."""

    end: str  # ends a segment the turn goes on after
    header: str  # opens the next segment
    calls: bool  # that header is the calls section's own


class ArgumentsTable(TypedDict, total=False):
    """How a call's arguments are written: one object ("object": JSON, or a Python dict), or
    key/value arguments ("key_value": each by the layout of its value's kind)."""

    style: str  # "object" or "key_value" (always present)
    encoder: str  # object: "json" or "python"
    argument: dict[str, Layout]  # key/value: value kind ("string", "number", ...) -> its layout
    value_encoders: dict[str, str]  # value kind -> "json", "raw", "quoted", "native", ...
    separator: str  # between arguments
    quotes: list[str]  # [open, close] around a quoted string
    brackets: dict[str, list[str]]  # "native" encoder: kind -> [open, close]


class SelfClosingTable(TypedDict):
    """A call element written self-closing when it has no arguments (`<invoke name="f"/>`)."""

    at: int  # the call step of the literal that ends the element's opening tag
    written: str  # that literal self-closed (`" />`)
    resume: int  # the call step of the literal that starts with the closing tag
    rest: str  # what that literal writes after the closing tag


class BareCallsTable(TypedDict):
    """Calls written without the marker that opens the calls, from the call's own marker on."""

    opener: str
    call: Layout
    closer: str
    self_closing: SelfClosingTable | None


class BareListTable(TypedDict):
    """A pythonic list of calls written without the markers that wrap it (`[f(a=1)]`)."""

    open: str
    close: str
    call: str  # what follows a call's name


class ToolCallsTable(TypedDict):
    opener: str  # what opens the calls (the section's first marker, or the call's)
    call_head: str  # what starts each call
    section_start: str
    section_end: str
    section_inner: list[str] | None  # a section whose start holds content: [its start, its end]
    content_prefix: str  # without an opener: what content turns start with
    inline_opener: str  # without an opener: the text between content and calls
    call: Layout  # one call
    separator: str  # between calls
    parallel: str  # "all", or another policy
    arguments: ArgumentsTable
    bare: BareCallsTable | None
    self_closing: SelfClosingTable | None
    bare_list: BareListTable | None
    wrappers: list[str]  # markers written in front of some kinds of call only
    # the instructions tell the model to write calls without the section's markers
    instructed_bare: bool
    instructed_separators: list[str]  # the separators between calls the instructions name


class MessagesTable(TypedDict):
    """A turn written as messages with headers (harmony)."""

    start: str  # opens each message after the first
    channel: str  # starts the header's channel part
    body: str  # ends the header
    end: str  # ends a message the turn goes on after
    call_end: str  # ends a call's message
    channels: dict[str, str]  # channel -> "reasoning", "content" or "calls"
    recipient: str  # the header field that addresses a message to a tool
    namespace: str  # the offered tools' names are in it


class _RequiredTables(TypedDict):
    version: int  # TABLES_VERSION
    modes: dict[str, ModeTable]  # "default" and the template's others
    reasoning: ReasoningTable | None
    content: ContentTable
    end_of_turn: list[str]
    tool_calls: ToolCallsTable | None
    segments: SegmentsTable | None
    repeated_headers: list[str]  # what the generation prompt wrote that a model may write again


class ReadingTables(_RequiredTables, total=False):
    """One family's tables."""

    messages: MessagesTable | None  # (written with tool_calls)


###}
