"""The ProtocolSpec: how a model family writes an assistant turn, as plain data.

The probe derives it; every later stage (grammar, reading tables, emitters, checkers,
bridge) reads it. `encodings` names the ways a template writes one argument value.
"""

from .encodings import json_type
from .model import (
    SPEC_VERSION,
    TURN_KINDS,
    ArgumentFormat,
    ArgumentStyle,
    Parallel,
    Piece,
    PromptMode,
    ProtocolSpec,
    Reasoning,
    SpecError,
    Start,
    ToolCallFormat,
    fill,
    kv_after,
    kv_parts,
    slot,
    sorted_keys,
    turn_kind,
)

__all__ = [
    "SPEC_VERSION", "TURN_KINDS", "ArgumentFormat", "ArgumentStyle", "Parallel", "Piece",
    "PromptMode", "ProtocolSpec", "Reasoning", "SpecError", "Start", "ToolCallFormat", "fill",
    "json_type", "kv_after", "kv_parts", "slot", "sorted_keys", "turn_kind",
]
