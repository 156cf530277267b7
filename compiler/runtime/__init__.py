"""The streaming parser runtime: standard library only, given its family's tables.

Every generated family module binds this runtime to its tables (`generated/tplparse_runtime.py`
is this package assembled into one file, from the `###{standalone` sections of its modules,
in the order of `MODULES`). Layers, one module each:

    errors     what the rules raise (invalid, truncated, bad arguments)
    tables     the shape of the reading tables a family module hands the runtime
    text       the lexical layer: searches, literals, hold-back, the balanced-value scan
    values     argument values: decoding and the canonical JSON text
    streams    argument deltas: the canonical JSON text while a call is still arriving
    protocol   the tables, prepared once per family: `Protocol`
    schema     the dispatch stream's JSON Schema check (the keywords tool schemas use)
    output     fields, deltas, the message, the two streams (UI deltas, complete calls)
    input      the buffer, feed()'s fast paths, the readers (writes text to an Output)
    rules      the grammar of a turn, as a coroutine (reads an Input, writes an Output)
    messages   the grammar of a turn written as messages with headers (harmony)
    parser     StreamParser (the three layers, wired) and parse()

Code outside the runtime imports only the names below.
"""

from .errors import BadArguments, InvalidOutput
from .output import COMPLETE, DELTAS
from .parser import StreamParser, parse, read_all
from .protocol import (
    AFTER_REASONING,
    ARGUMENTS_ALIASES,
    CLOSES_A_VALUE,
    CONTENT,
    CONTENT_CONTINUED,
    NATURAL_STOPS,
    PARALLEL_ALL,
    REASONING,
    REASONING_CONTINUED,
    STARTS,
    TABLES_VERSION,
    JsonCallLayout,
    KeyPath,
    KeyValueFormat,
    Protocol,
    json_call_object,
    stoppable_word,
    value_at,
)
from .schema import SchemaCheck, SchemaError, schema_validator
from .tables import (
    ArgumentsTable,
    BareCallsTable,
    BareListTable,
    MessagesTable,
    ReadingTables,
    SegmentsTable,
    SelfClosingTable,
    Slot,
    ToolCallsTable,
)
from .text import MARKER_BOUNDARY
from .values import (
    arguments_json,
    decode_native,
    format_fillers,
    object_value,
    python_value,
    typed_raw,
)

# The runtime's modules in the order the standalone file stacks them (each only uses those
# before it).
MODULES = ("errors", "tables", "text", "values", "streams", "protocol", "schema", "output", "input",
           "rules", "messages", "parser")

__all__ = [
    "AFTER_REASONING", "ARGUMENTS_ALIASES", "ArgumentsTable", "BadArguments", "BareCallsTable",
    "BareListTable", "CLOSES_A_VALUE", "COMPLETE", "CONTENT", "CONTENT_CONTINUED", "DELTAS",
    "InvalidOutput",
    "JsonCallLayout", "KeyPath", "KeyValueFormat", "MARKER_BOUNDARY", "MODULES", "MessagesTable",
    "NATURAL_STOPS", "PARALLEL_ALL", "Protocol", "REASONING", "REASONING_CONTINUED",
    "ReadingTables", "STARTS", "SchemaCheck",
    "SchemaError", "SegmentsTable", "SelfClosingTable", "Slot", "StreamParser", "TABLES_VERSION",
    "ToolCallsTable", "arguments_json", "decode_native", "format_fillers", "json_call_object",
    "object_value", "parse", "python_value", "read_all", "schema_validator", "stoppable_word",
    "typed_raw", "value_at",
]
