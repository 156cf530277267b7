"""How a call's arguments are written: one encoded object, or one layout per argument.

Calls with zero, one and two arguments show the argument region; an encoded object (JSON,
a Python literal, ...) is tried first, then key/value layouts: one argument with a string
that shows escaping, two arguments for the order and separator, and one argument of every
other JSON type for its layout and value encoder.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..spec import ArgumentFormat, ArgumentStyle, Piece, fill, kv_parts, slot
from ..spec.encodings import ENCODERS, encode
from .conversations import Call, Sentinels, Turn
from .renders import assistant_spans
from .spans import Boundaries, word_slots

TRICKY = 'say "hi"\\now\nthen'

# A value of each JSON type, recognisable in a render.
TYPED_VALUES = {
    "integer": 7301,
    "number": 2.75,
    "boolean": True,
    "null": None,
    "object": {"unit": "km", "scale": 7301},
    "array": [7301, "km", False],
}

# Variables that commonly switch thinking on and off, with their (on, off) values, tried
# when the template reads them. The template's own variables are found by parsing it.


def _call_turn(s: Sentinels, arguments: dict, name_index: int = 0) -> Turn:
    return Turn(calls=(Call(s.names[name_index], arguments, s.ids[0]),))


def _object_format(spans: dict[str, str], args: dict[str, dict]) -> ArgumentFormat | None:
    """Arguments written as one encoded object (JSON, Python repr, ...), if they are.

    An indented JSON object inside an indented layout has its line breaks followed by the
    indentation of the line it starts on; that indentation is tried too.
    """
    base = spans["one"]
    for order in ("given", "sorted"):
        for encoder in ENCODERS:
            candidate = ArgumentFormat(style=ArgumentStyle.OBJECT, encoder=encoder, order=order)
            first_line = candidate.format(args["one"]).split("\n", 1)[0]
            indents = {""}
            at = base.find(first_line)
            while at != -1:
                line_start = base.rfind("\n", 0, at) + 1
                line = base[line_start:]
                indents.add(line[: len(line) - len(line.lstrip(" \t"))])
                at = base.find(first_line, at + 1)
            for line_indent in sorted(indents, key=len):
                candidate.line_indent = line_indent
                one = candidate.format(args["one"])
                at = base.find(one)
                if at == -1:
                    continue
                before, after = base[:at], base[at + len(one):]
                if all(spans[k] == before + candidate.format(args[k]) + after for k in spans):
                    return candidate
    return None


def _argument_regions(spans: dict[str, str], boundaries: Boundaries) -> tuple[int, int]:
    """(prefix, suffix) lengths shared by the zero-, one- and two-argument spans."""
    zero, one, two = spans["zero"], spans["one"], spans["two"]
    a = min(boundaries.split_common_prefix(zero, one), boundaries.split_common_prefix(one, two))
    b = min(boundaries.split_common_suffix(zero[a:], one[a:]),
            boundaries.split_common_suffix(one[a:], two[a:]))
    return a, b


def _kv_argument(region: str, key: str, value, encoders: dict) -> tuple[list[Piece], str] | None:
    """One argument's layout (key and value slots) and the encoder that wrote its value.

    `encoders` maps names to functions; when several match, the one that accounts for the
    most text wins (quotes inside the value rather than in the layout).
    """
    at = region.find(key)
    if at == -1:
        return None
    prefix, rest = region[:at], region[at + len(key):]
    best = None
    for name, fn in encoders.items():
        try:
            text = fn(value)
        except Exception:  # noqa: BLE001 - an encoder that cannot write this value does not match
            continue
        where = rest.find(text)
        if where == -1:
            continue
        if best is None or len(text) > len(best[2]):
            best = (name, where, text)
    if best is None:
        return None
    name, where, text = best
    middle, suffix = rest[:where], rest[where + len(text):]
    layout = [p for p in (prefix, slot("key"), middle, slot("value")) if p != ""]
    # The key written again after the value (a closing tag named for it: <key>v</key>).
    layout += word_slots(suffix, key, "key")
    return layout, name


def _standard_encoders(value) -> dict:
    """The encoders to try for `value` (for a string, "raw" stands for Jinja's plain print)."""
    encoders: dict[str, Callable[[Any], Any]] = {name: partial(encode, name) for name in ENCODERS}
    if isinstance(value, str):
        del encoders["jinja"]
        encoders = {"raw": lambda v: v, **encoders}
    return encoders


def _split_quotes(string_layout: list[Piece], plain_layout: list[Piece]):
    """If the string layout is the plain one with quotes around the value, those quotes."""
    p_s, m_s, s_s = kv_parts(string_layout)
    p_p, m_p, s_p = kv_parts(plain_layout)
    if p_s != p_p or not m_s.startswith(m_p) or not s_s.endswith(s_p):
        return None
    opening, closing = m_s[len(m_p):], s_s[: len(s_s) - len(s_p)]
    return (opening, closing) if opening and closing else None


# Characters a template may quote a raw string for (an XML CDATA block for <, & and line breaks).
QUOTE_TRIGGERS = "<&\n\"'\\>"


def _one_argument_region(renderer, user, s: Sentinels, value, pre: str, post: str) -> str | None:
    rendered = assistant_spans(renderer, user, {"v": _call_turn(s, {s.key1: value})})
    span = rendered[2].get("v") if rendered else None
    if span is None or not (span.startswith(pre) and span.endswith(post)):
        return None
    return span[len(pre):len(span) - len(post)]


def _quoted_when_needed(renderer, user, s: Sentinels, arg_format: ArgumentFormat, pre: str,
                        post: str) -> None:
    """A raw string layout found with a value full of special characters may be a layout that
    quotes only such values (<![CDATA[ ... ]]>): compare with a plain value, and find which
    characters make the template quote."""
    plain = _one_argument_region(renderer, user, s, s.value1, pre, post)
    found = _kv_argument(plain, s.key1, s.value1, {"raw": lambda v: v}) if plain else None
    if found is None:
        return
    quotes = _split_quotes(arg_format.argument["string"], found[0])
    if quotes is None:
        return
    triggers = ""
    for ch in QUOTE_TRIGGERS:
        value = f"a{ch}b"
        region = _one_argument_region(renderer, user, s, value, pre, post)
        if region is not None and quotes[0] + value + quotes[1] in region:
            triggers += ch
    if not triggers:
        return
    arg_format.argument["string"] = found[0]
    arg_format.value_encoders["string"] = "raw-or-quoted"
    arg_format.quotes, arg_format.quote_when = list(quotes), triggers


def _kv_format(renderer, user, s: Sentinels, spans: dict[str, str], boundaries: Boundaries,
               warnings) -> ArgumentFormat | None:
    regions = _argument_regions(spans, boundaries)
    a, b = regions
    one = spans["one"][a:len(spans["one"]) - b]
    two = spans["two"][a:len(spans["two"]) - b]
    if spans["zero"][a:len(spans["zero"]) - b]:
        warnings.append("a call without arguments writes something in the "
                        "argument region; not modelled")
        return None
    found = _kv_argument(one, s.key1, TRICKY, _standard_encoders(TRICKY))
    if found is None:
        return None
    string_layout, string_encoder = found
    arg_format = ArgumentFormat(style=ArgumentStyle.KV, argument={"string": string_layout},
                                value_encoders={"string": string_encoder})
    if string_encoder == "raw":
        _quoted_when_needed(renderer, user, s, arg_format, spans["zero"][:a],
                            spans["zero"][len(spans["zero"]) - b:])
        string_layout = arg_format.argument["string"]
        string_encoder = arg_format.value_encoders["string"]
    # Order and separator, from the two-argument render.
    first = fill(string_layout,
                 {"key": s.key1, "value": arg_format.encode_value(string_encoder, TRICKY)})
    second = fill(string_layout, {"key": s.key2,
                                  "value": arg_format.encode_value(string_encoder, s.value2)})
    if two.startswith(first) and two.endswith(second) and len(two) >= len(first) + len(second):
        arg_format.order, arg_format.separator = "given", two[len(first):len(two) - len(second)]
    elif two.startswith(second) and two.endswith(first) and len(two) >= len(first) + len(second):
        arg_format.order, arg_format.separator = "sorted", two[len(second):len(two) - len(first)]
    else:
        warnings.append("could not find how two arguments are joined")
        return None
    # Every other JSON type: its own layout and encoder (scalars first: containers may be
    # written in the format's own notation, which uses the scalars' encoders).
    pre, post = spans["zero"][:a], spans["zero"][len(spans["zero"]) - b:]
    for kind, value in TYPED_VALUES.items():
        rendered = assistant_spans(renderer, user, {"typed": _call_turn(s, {s.key1: value})})
        if rendered is None or "typed" not in rendered[2]:
            warnings.append(f"a {kind} argument did not render")
            continue
        typed = rendered[2]["typed"]
        if not (typed.startswith(pre) and typed.endswith(post)):
            warnings.append(f"a {kind} argument changes the call around it; not modelled")
            continue
        encoders = _standard_encoders(value)
        if kind in ("object", "array"):
            for opening, closing in (("{", "}"), ("[", "]")):
                def native(v, o=opening, c=closing, k=kind):
                    trial = ArgumentFormat(**{**arg_format.__dict__,
                                              "brackets": {**arg_format.brackets, k: [o, c]}})
                    return trial.encode_value("native", v)
                encoders[f"native{opening}{closing}"] = native
        found = _kv_argument(typed[len(pre):len(typed) - len(post)], s.key1, value, encoders)
        if found is None:
            warnings.append(f"could not find how a {kind} argument is written")
            continue
        layout, encoder = found
        if encoder.startswith("native"):
            arg_format.brackets[kind] = [encoder[6], encoder[7]]
            encoder = "native"
        arg_format.argument[kind] = layout
        arg_format.value_encoders[kind] = encoder
        if kind == "integer":
            # Strings quoted by the layout ("<|"|>" around the value) use those quotes as
            # their encoding, so strings inside arrays and objects get them too.
            quotes = _split_quotes(string_layout, layout)
            if quotes is not None and string_encoder == "raw":
                arg_format.quotes = list(quotes)
                arg_format.argument["string"] = string_layout = layout
                arg_format.value_encoders["string"] = "quoted"
    # Collapse per-type layouts equal to the string layout.
    for kind in list(arg_format.argument):
        if kind != "string" and arg_format.argument[kind] == string_layout:
            del arg_format.argument[kind]
    return arg_format


def argument_format(renderer, user, s: Sentinels, boundaries: Boundaries,
                    warnings) -> ArgumentFormat | None:
    args = {
        "zero": {},
        "one": {s.key1: TRICKY},
        "two": {s.key1: TRICKY, s.key2: s.value2},
    }
    rendered = assistant_spans(renderer, user, {k: _call_turn(s, v) for k, v in args.items()})
    if rendered is None or len(rendered[2]) < 3:
        warnings.append("calls with zero, one and two arguments did not all render")
        return None
    spans = rendered[2]
    found = _object_format(spans, args)
    if found is not None:
        # An encoded object must also carry every other type the same way.
        return found
    return _kv_format(renderer, user, s, spans, boundaries, warnings)
