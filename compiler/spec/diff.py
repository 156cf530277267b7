"""What changed in a protocol: two specs compared field by field.

Only the protocol is compared: what a model writes and how it is read (the generation-prompt
modes and their start states, reasoning markers and policy, the content wrapper, the turn
layouts, the calls section and call layouts, the argument encoding and value encoders, the
parallel-call policy, the end-of-turn markers, the thinking switch, the input shape). Where
the knowledge came from (evidence, overrides, warnings) and which template it was (name,
sha256, family) are not protocol.

A field is a dotted path into the spec's plain data (`tool_calls.arguments.style`,
`modes.thinking.start`); a layout is compared whole, and shown as its literals (repr) and
its slots (bare names).
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import ProtocolSpec

NOT_PROTOCOL = frozenset({"template_name", "template_sha256", "family", "evidence", "overrides",
                          "warnings", "unproved", "version"})
# Fields of a mode that are the protocol (the rest says how the probe found it).
MODE_FIELDS = ("start", "tail", "variables", "system_flag")


@dataclass(frozen=True)
class Difference:
    field: str  # a dotted path into the spec's data
    old: object  # the value (plain data), or None when the field is absent
    new: object


def _is_slot(value) -> bool:
    return isinstance(value, dict) and set(value) == {"slot"}


def protocol_data(spec: ProtocolSpec) -> dict:
    """The spec's protocol as plain data."""
    data = {k: v for k, v in spec.to_dict().items() if k not in NOT_PROTOCOL}
    data["modes"] = {name: {k: mode[k] for k in MODE_FIELDS}
                     for name, mode in data["modes"].items()}
    return data


def _compare(a, b, path: str, out: list[Difference]) -> None:
    """Dicts present on both sides are compared key by key; anything else (a layout, a string,
    a part present on one side only) is one value."""
    if isinstance(a, dict) and isinstance(b, dict) and not _is_slot(a) and not _is_slot(b):
        for key in list(a) + [k for k in b if k not in a]:
            _compare(a.get(key), b.get(key), f"{path}.{key}" if path else key, out)
    elif a != b:
        out.append(Difference(path, a, b))


def protocol_differences(old: ProtocolSpec, new: ProtocolSpec) -> list[Difference]:
    """The fields whose values differ, in the order the spec lists them (old's first)."""
    out: list[Difference] = []
    _compare(protocol_data(old), protocol_data(new), "", out)
    return out


def show(value) -> str:
    """A field's value for a person: a layout or list as its literals (repr) and slot names,
    a part as its fields, "-" for absent."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return " ".join(p["slot"] if _is_slot(p) else show(p) for p in value) if value else "[]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    return repr(value)


__all__ = ["Difference", "protocol_data", "protocol_differences", "show"]
