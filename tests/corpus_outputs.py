"""Model outputs taken from the template's own renders, for round-trip tests; and a family's
streaming parser in process, for the tests that read them.

The outputs are the proof's (`tplparse.check.outputs.model_outputs`): for each standard turn
(fresh values), what a model would have written after the generation prompt, the start
state to read it from, and the message it should read back as: what the render preserves
(templates drop reasoning, content, arguments or extra calls, write content as reasoning,
or render one message as two turns; each such turn lists why in `lossy`, and
tests/test_proof.py holds that detection to the templates that show it).
"""

from __future__ import annotations

import types

from tplparse import runtime
from tplparse.check.outputs import STANDARD_TOOLS, ModelOutput, model_outputs, readable
from tplparse.grammar.reading import reading_tables
from tplparse.spec import ProtocolSpec

FRESH_TOOLS = STANDARD_TOOLS
Output = ModelOutput
outputs = model_outputs


def parser_module(spec: ProtocolSpec, special_tokens: tuple[str, ...] = ()) -> types.SimpleNamespace:
    """The family's parser in process, with a generated module's face: `.StreamParser(tools=...,
    generation_prompt=..., start=...)` and `.parse(text, ...)`, bound to the spec's reading
    tables (the runtime and tables a generated module carries; nothing is generated or run)."""
    protocol = runtime.Protocol(reading_tables(spec, special_tokens))

    def stream_parser(tools=None, generation_prompt=None, start=None):
        return runtime.StreamParser(protocol, tools=tools, generation_prompt=generation_prompt, start=start)

    def parse(text, tools=None, generation_prompt=None, start=None, finish_reason="stop"):
        return runtime.parse(protocol, text, tools=tools, generation_prompt=generation_prompt, start=start,
                             finish_reason=finish_reason)

    return types.SimpleNamespace(StreamParser=stream_parser, parse=parse, protocol=protocol, family=spec.family)


__all__ = ["FRESH_TOOLS", "Output", "outputs", "parser_module", "readable"]
