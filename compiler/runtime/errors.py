"""What the rules raise when the output leaves the format, ends too early, or a call's
arguments do not read. The parser turns each into an entry of the message's `errors`
(`invalid_tool_call`, `truncated_tool_call`, `invalid_arguments`); none escapes `feed`."""

from __future__ import annotations

###{standalone


class InvalidOutput(Exception):
    """The output leaves the format."""


class InvalidWhole(InvalidOutput):
    """Something read whole (balanced, decoded) that is not what the format needs there (a call
    object without a name): invalid whatever the output's end looks like."""


class TruncatedOutput(Exception):
    """The output ended in the middle of something."""


class BadArguments(Exception):
    """A complete call whose arguments do not read (invalid JSON, a value of the wrong type)."""


###}
