"""How a template writes one argument value: the candidate encoders the probe tests.

Each encoder turns a JSON value into text. The probe renders a value of each JSON type and
keeps the encoder whose output is what the template printed; the spec stores the names.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

JSON_TYPES = ("string", "integer", "number", "boolean", "null", "object", "array")


def json_type(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    raise TypeError(f"not a JSON value: {value!r}")


def _jinja_str(value: Any) -> str:
    """What `{{ value }}` prints: the string itself, else Python's str()."""
    return value if isinstance(value, str) else str(value)


# name -> encoder. Order matters: the probe keeps the first that matches, so the most
# specific (quoting, escaping) encoders come before "raw".
ENCODERS: dict[str, Callable[[Any], str]] = {
    "json": lambda v: json.dumps(v, ensure_ascii=False),
    "json-ascii": lambda v: json.dumps(v),
    "json-compact": lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")),
    "json-indent2": lambda v: json.dumps(v, ensure_ascii=False, indent=2),
    "json-indent4": lambda v: json.dumps(v, ensure_ascii=False, indent=4),
    "python": repr,
    "jinja": _jinja_str,
}


def encode(encoder: str, value: Any) -> str:
    return ENCODERS[encoder](value)


def matching_encoders(value: Any, text: str) -> list[str]:
    """The encoders that write `value` exactly as `text`."""
    return [name for name, fn in ENCODERS.items() if fn(value) == text]
