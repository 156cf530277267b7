"""Overrides: small declarative patches for what rendering cannot reveal, or gets wrong.

Each file in `family_overrides/` names the templates it applies to (by sha256, so a new
template revision is probed afresh, not patched blindly), says why rendering cannot show
the fact (`why`) and where the fact comes from instead (`source`, when it is not the
template's own text), and holds a patch that is merged over the derived spec (objects
merge key by key; any other value replaces). The spec lists the overrides applied.

A user's override (`tplparse compile --override FILE`, a family's `override` in a build
manifest) has the same format and is read by `read_override`: checked field by field (an
unknown key, a value of the wrong type or a field that is not the protocol's is an error
naming its dotted path), refused when its `template_sha256` does not list the template's,
and applied after the shipped ones. It is applied twice (`apply_overrides`, then
`settle_override`): where the shipped ones are, so that what the probe derives from the
markers afterwards (each mode's start state, the thinking modes' names) follows it; and
once the spec is complete, so that each field it sets keeps its value (a mode's start).
"""

from __future__ import annotations

import hashlib
import json
import re
import types
import typing
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, fields, is_dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path

from ..errors import InputError, TplparseError
from ..jsontext import loads
from ..runtime import Slot
from ..spec import ArgumentStyle, ProtocolSpec, SpecError
from ..spec.diff import NOT_PROTOCOL
from ..spec.encodings import ENCODERS

OVERRIDES_DIR = Path(__file__).resolve().parent / "family_overrides"

SHA256 = re.compile(r"[0-9a-f]{64}")
FILE_KEYS = ("why", "patch", "template_sha256", "source")


@dataclass(frozen=True)
class Override:
    """One override: the patch, the templates it is for, why, and where the fact comes from."""

    name: str  # the file's name (shipped), or the path the user gave
    why: str
    patch: dict
    template_sha256: tuple[str, ...]
    source: str = ""
    user: bool = False  # given by the user (--override, a manifest's override), not shipped
    file_sha256: str = ""  # the file's own sha256 (a user's: the spec records it)

    def record(self) -> str:
        """The line the spec's `overrides` holds for it."""
        source = f" (source: {self.source})" if self.source else ""
        if not self.user:
            return f"{self.name}: {self.why}{source}"
        return (f"user override {self.name} (sha256 {self.file_sha256[:16]}, sets "
                f"{', '.join(patched_paths(self.patch))}): {self.why}{source}")


# --- reading an override file -------------------------------------------------------------


def read_override(path: Path, name: str | None = None) -> Override:
    """A user's override file, checked (InputError naming the file and what is wrong). `name`
    is how the spec records it (default: the path as given)."""
    what = "an override file"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file ({what})") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, not {what}") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read {what}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: {what} is not UTF-8 (byte {e.start} is "
                         f"{raw[e.start]:#04x})") from None
    data = loads(text, str(path), InputError, what)
    return parse_override(data, name or str(path), user=True,
                          file_sha256=hashlib.sha256(raw).hexdigest())


def parse_override(data, name: str, user: bool = False, file_sha256: str = "") -> Override:
    """An override from its file's JSON, every field checked (InputError naming `name`)."""
    if not isinstance(data, dict):
        raise InputError(f"{name}: an override is a JSON object with why, patch, "
                         "template_sha256 and optionally source")
    unknown = [key for key in data if key not in FILE_KEYS]
    if unknown:
        raise InputError(f"{name}: unknown key(s) {', '.join(map(repr, unknown))} (an override has "
                         f"{', '.join(FILE_KEYS)})")
    missing = [key for key in ("why", "patch", "template_sha256") if key not in data]
    if missing:
        raise InputError(f"{name}: missing {', '.join(missing)} (an override has why: the reason "
                         "no render shows the fact, patch: the spec's fields to set, "
                         "template_sha256: the templates it is for)")
    why, source = data["why"], data.get("source", "")
    shas, patch = data["template_sha256"], data["patch"]
    if not isinstance(why, str) or not why.strip():
        raise InputError(f"{name}: why must be a non-empty string (why the "
                         "probe cannot find the fact)")
    if not isinstance(source, str):
        raise InputError(f"{name}: source must be a string (where the fact comes from)")
    if not isinstance(shas, list) or not shas \
            or not all(isinstance(s, str) and SHA256.fullmatch(s) for s in shas):
        raise InputError(f"{name}: template_sha256 must be a list of sha256 hex digests (lower "
                         "case), as `tplparse info` prints a template's")
    if not isinstance(patch, dict) or not patch:
        raise InputError(f"{name}: patch must be a non-empty JSON object of the spec's fields "
                         "(tplparse probe --json)")
    check_patch(patch, name)
    return Override(name, why, patch, tuple(shas), source, user, file_sha256)


# --- the patch's fields ---------------------------------------------------------------------


def check_patch(patch: dict, name: str) -> None:
    """Every key of `patch` is a protocol field of ProtocolSpec.to_dict() and every value has
    its field's type (objects the spec lacks may be partial here: see `patched_spec`)."""
    for key in patch:
        if key in NOT_PROTOCOL:
            raise InputError(f"{name}: patch: {key!r} is not a protocol field (what the probe "
                             "records about the template, not what the model writes): an "
                             "override cannot set it")
    _check(patch, ProtocolSpec, "", name, partial=True)


def _check(value, hint, path: str, name: str, partial: bool) -> None:
    """`value` (plain data) has type `hint`; else an InputError naming `path`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        options = [a for a in args if a is not type(None)]
        if options == [str, Slot]:  # a layout's piece
            return _check_piece(value, path, name)
        errors = []
        for option in options:
            try:
                return _check(value, option, path, name, partial)
            except InputError as e:
                errors.append(e)
        raise errors[0]
    if is_dataclass(hint):
        return _check_object(value, hint, path, name, partial)
    if isinstance(hint, type) and issubclass(hint, Enum):
        allowed = [m.value for m in hint]
        if value not in allowed:
            raise InputError(f"{name}: {path}: {value!r} is not one of "
                             f"{', '.join(map(repr, allowed))}")
        return
    if origin is list or hint is list:
        _expect(value, list, path, name)
        for i, item in enumerate(value):
            if args:
                _check(item, args[0], f"{path}[{i}]", name, partial)
        return
    if origin is dict or hint is dict:
        _expect(value, dict, path, name)
        for key, item in value.items():
            if args:
                _check(item, args[1], f"{path}.{key}", name, partial)
        return
    _expect(value, hint, path, name)


def _check_object(value, cls, path: str, name: str, partial: bool) -> None:
    _expect(value, dict, path, name)
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if key not in known:
            listed = [k for k in known if path or k not in NOT_PROTOCOL]
            raise InputError(f"{name}: {where}: no such field (the "
                             f"fields{' of ' + path if path else ''}: {', '.join(listed)})")
        _check(item, hints[key], where, name, partial)
    if not partial:
        missing = [f.name for f in known.values() if f.name not in value
                   and f.default is MISSING and f.default_factory is MISSING]
        if missing:
            raise InputError(f"{name}: {path}: the spec has none, so the patch must give all of it "
                             f"(missing: {', '.join(missing)})")


def _check_piece(value, path: str, name: str) -> None:
    """A layout's piece: a literal, or a slot {"slot": NAME} of the layout's slots."""
    if isinstance(value, str):
        return
    slots = _slots(path)
    if not (isinstance(value, dict) and set(value) == {"slot"} and value["slot"] in slots):
        raise InputError(f"{name}: {path}: a layout's piece is a string or {{\"slot\": NAME}} with "
                         f"NAME one of {', '.join(slots)}")


def _slots(path: str) -> tuple[str, ...]:
    """The slots of the layout at `path` (ProtocolSpec's docstring)."""
    if path.startswith("tool_calls.call["):
        return ("name", "arguments", "id", "index", "index1")
    if path.startswith("tool_calls.arguments.argument."):
        return ("key", "value")
    return ("reasoning", "content", "calls", "call_list")


def _expect(value, kind: type, path: str, name: str) -> None:
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise InputError(f"{name}: {path}: expected {_kind(kind)}, not "
                         f"{json.dumps(value, ensure_ascii=False)[:60]}")


def _kind(kind: type) -> str:
    names = {str: "a string", bool: "true or false", int: "an integer", list: "a list",
             dict: "an object"}
    return names.get(kind, kind.__name__)


# How one value may be written (ArgumentFormat): an encoder of the whole value, or these.
VALUE_WRITINGS = ("raw", "quoted", "raw-or-quoted", "native")


def _check_calls(calls: dict, name: str) -> None:
    """What every later stage needs of a calls format: a call layout with the name and the
    arguments, known encoders, and (arguments written one by one) a layout for strings,
    each layout with the key and the value."""
    for needed in ("name", "arguments"):
        if {"slot": needed} not in calls["call"]:
            raise InputError(f"{name}: tool_calls.call: the call's layout has no "
                             f"{{\"slot\": \"{needed}\"}}")
    # (a field the patch of a new calls format leaves out has its default)
    arguments = calls["arguments"]
    encoder = arguments.get("encoder", "json")
    if encoder not in ENCODERS:
        raise InputError(f"{name}: tool_calls.arguments.encoder: {encoder!r} is not one of "
                         f"{', '.join(ENCODERS)}")
    for kind, writing in arguments.get("value_encoders", {}).items():
        if writing not in ENCODERS and writing not in VALUE_WRITINGS:
            raise InputError(f"{name}: tool_calls.arguments.value_encoders.{kind}: {writing!r} is "
                             f"not one of {', '.join(list(ENCODERS) + list(VALUE_WRITINGS))}")
    if arguments["style"] != ArgumentStyle.KV:
        return
    layouts = arguments.get("argument", {})
    if "string" not in layouts:
        raise InputError(f"{name}: tool_calls.arguments.argument: arguments written one by "
                         "one need a layout for strings (argument.string), the one every "
                         "type without its own uses")
    for kind, layout in layouts.items():
        for needed in ("key", "value"):
            if {"slot": needed} not in layout:
                raise InputError(f"{name}: tool_calls.arguments.argument.{kind}: the layout has no "
                                 f"{{\"slot\": \"{needed}\"}}")


@contextmanager
def blamed_on(override: Override | None):
    """Work with a spec a user's override patched: an error that is no TplparseError (the
    patch made a spec a later stage cannot use, which the checks above did not foresee) is
    an InputError naming the override, one line, not a traceback."""
    if override is None:
        yield
        return
    try:
        yield
    except (TplparseError, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - what a user's patch made is bad input
        raise InputError(f"{override.name}: the patched spec cannot be compiled "
                         f"({type(e).__name__}: {e}); the fields it sets: "
                         f"{', '.join(patched_paths(override.patch))} (if the patch is right, this "
                         "is a tplparse bug: please report it)") from None


def patched_paths(patch: dict, path: str = "") -> list[str]:
    """The dotted paths `patch` sets (down to its values that are not objects)."""
    found: list[str] = []
    for key, value in patch.items():
        where = f"{path}.{key}" if path else key
        found += patched_paths(value, where) \
            if isinstance(value, dict) and value and set(value) != {"slot"} else [where]
    return found


# --- applying ------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def load_overrides() -> tuple[Override, ...]:
    return tuple(parse_override(json.loads(path.read_text(encoding="utf-8")), path.name)
                 for path in sorted(OVERRIDES_DIR.glob("*.json")))


def _merge(base, patch):
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = _merge(base.get(key), value)
        return merged
    return patch


def patched_spec(spec: ProtocolSpec, patch: dict, name: str) -> ProtocolSpec:
    """`spec` with `patch` merged over it; a result that is no ProtocolSpec is an InputError
    naming the field."""
    data = _merge(spec.to_dict(), patch)
    _check(data, ProtocolSpec, "", name, partial=False)
    if data["tool_calls"] is not None:
        _check_calls(data["tool_calls"], name)
    try:
        return ProtocolSpec.from_dict(data)
    except (SpecError, TypeError, ValueError, KeyError) as e:
        # (the check above should have said which field)
        raise InputError(f"{name}: the patched spec does not read ({e})") from None


def check_template(override: Override, sha256: str) -> None:
    """A user's override is for this template (its sha256), or an InputError naming both hashes."""
    if sha256 not in override.template_sha256:
        listed = ", ".join(override.template_sha256)
        raise InputError(f"{override.name}: the override is for template sha256 {listed}, not this "
                         f"template's {sha256} (a new revision of a template is probed afresh: "
                         "check the patch against `tplparse probe`, then list the new sha256)")


def apply_overrides(spec: ProtocolSpec, user: Override | None = None) -> ProtocolSpec:
    """The shipped overrides for the spec's template, then the user's (its modes wait for
    `settle_override`: their names are known only at the end of the probe)."""
    for override in load_overrides():
        if spec.template_sha256 not in override.template_sha256:
            continue
        spec = _applied(spec, override, override.patch)
    if user is not None:
        check_template(user, spec.template_sha256)
        spec = _applied(spec, user, {k: v for k, v in user.patch.items() if k != "modes"})
    return spec


def settle_override(spec: ProtocolSpec, user: Override | None) -> ProtocolSpec:
    """The user's patch once more over the finished spec: each field it sets has its value."""
    if user is None:
        return spec
    return patched_spec(spec, user.patch, user.name)  # (recorded once, by apply_overrides)


def _applied(spec: ProtocolSpec, override: Override, patch: dict) -> ProtocolSpec:
    patched = patched_spec(spec, patch, override.name)
    patched.overrides = list(spec.overrides) + [override.record()]
    if override.user:
        # (the probe's evidence for a value the user replaced is no evidence for the new one)
        patched.evidence = {key: why for key, why in patched.evidence.items()
                            if not any(_under(key, path) for path in patched_paths(override.patch))}
    return patched


def _under(key: str, path: str) -> bool:
    """An evidence key (`reasoning.start`, `end_of_turn '<|im_end|>'`) is about the field at
    `path` or in it."""
    return key == path or key.startswith((path + ".", path + " ", path + "["))


__all__ = ["OVERRIDES_DIR", "Override", "apply_overrides", "blamed_on", "check_patch",
           "check_template", "load_overrides", "parse_override", "patched_paths", "patched_spec",
           "read_override", "settle_override"]
