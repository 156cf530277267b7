"""Argument values: decoding what a format writes (JSON, Python literals, raw text typed by
a schema, a format's own notation) and writing the final arguments as canonical JSON text.
The reference parser uses these too, so both parsers type a value the same way."""

from __future__ import annotations

from .errors import BadArguments
from .tables import ArgumentsTable, Layout, LayoutPiece
from .text import NAME_CHARS, run_of

# isort: split
###{standalone
import ast
import io
import json
import re
import tokenize
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

# A decoded value (dict, list, str, int, float, bool or None; a Python literal may give a
# tuple too): its shape is the data's, so Any.
JSONValue = Any
# A JSON Schema as a tool gives it (an object; a boolean; None where a property has none):
# any JSON value, so Any too. Only a non-empty object types anything here.
SchemaValue = Any


class DuplicateKey(ValueError):
    """An object that names a key twice: streamed deltas cannot take back its first value."""


def _unique_keys(pairs: list[tuple[str, JSONValue]]) -> dict[str, JSONValue]:
    """An object's members as a dict (DuplicateKey: a key twice)."""
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"the key {key!r} appears twice")
            seen.add(key)
    return found


# Arguments objects are decoded refusing duplicate keys, at every depth.
JSON_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


def _json_encoder() -> Callable[[JSONValue], str]:
    """json.dumps(value, ensure_ascii=False, allow_nan=False), built once: the C encoder when
    it is there and writes what the pure one does (its constructor is not public), else that
    one."""
    pure = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
    try:
        # (c_make_encoder is undocumented: typeshed does not declare it)
        from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]

        c_encode = c_make_encoder(None, pure.default, encode_basestring, None, ": ", ", ", False,
                                  False, False)
        sample = {"a": [1, -2.5e-300, None, True, "é\"\\\n\u2028\x00"], "b": {}}
        if "".join(c_encode(sample, 0)) == pure.encode(sample):
            return lambda value: "".join(c_encode(value, 0))
    except Exception:  # any other Python: the pure encoder
        pass
    return pure.encode


encode_json = _json_encoder()


def arguments_json(value: JSONValue) -> str:
    """Arguments as the JSON text of the final call; what JSON cannot hold is bad arguments."""
    try:
        return encode_json(value)
    # (NaN / Infinity; a value no decoder here makes)
    except (ValueError, TypeError, RecursionError) as e:
        raise BadArguments(f"the arguments hold a value JSON cannot: {e}") from None


_JSON_KINDS = (str, int, float, bool, type(None))
_JSON_WORD_VALUES = {"true": True, "false": False, "null": None}


def python_value(text: str) -> JSONValue:
    """A Python literal that is a JSON value (dicts with string keys, lists, tuples, scalars);
    JSON's true / false / null read where Python's words go."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a model's 'C:\dir' is not this program's warning)
            tree = ast.parse(text.strip(), mode="eval")
    except (ValueError, TypeError, OverflowError, MemoryError):
        raise ValueError("not a Python literal") from None
    if isinstance(tree.body, ast.Name) and tree.body.id in _JSON_WORD_VALUES:
        tree.body = ast.Constant(_JSON_WORD_VALUES[tree.body.id])
    for node in ast.walk(tree):  # (literal_eval keeps the last of two equal keys)
        _json_words_as_constants(node)
        if isinstance(node, ast.Dict):
            seen = set()
            for key in node.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    if key.value in seen:
                        raise DuplicateKey(f"the key {key.value!r} appears twice")
                    seen.add(key.value)
    _separated_as_written(text.strip())
    try:
        value = ast.literal_eval(tree)
    # ({[1]: 2}: unhashable; messages may hold addresses)
    except (ValueError, TypeError, OverflowError):
        raise ValueError("not a Python literal") from None
    _check_json_kinds(value)
    return value


def _json_words_as_constants(node: ast.AST) -> None:
    """JSON's words (true / false / null) where Python's go among a node's keys, values or
    elements, made the constants Python's would be (a model mixes them)."""
    for field in ("keys", "values", "elts"):
        items = getattr(node, field, None)
        if isinstance(items, list):
            for i, item in enumerate(items):
                if isinstance(item, ast.Name) and item.id in _JSON_WORD_VALUES:
                    items[i] = ast.Constant(_JSON_WORD_VALUES[item.id])


def _check_json_kinds(value: JSONValue) -> None:
    """ValueError unless an evaluated literal holds only what JSON holds (dicts with string
    keys, lists and tuples, strings, numbers, booleans, None)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    raise ValueError(f"the key {key!r} is not a string")
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif not isinstance(item, _JSON_KINDS):
            raise ValueError(f"a {type(item).__name__} is not a JSON value")


_LAYOUT_TOKENS = frozenset({tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT,
                            tokenize.DEDENT, tokenize.ENDMARKER})


def _separated_as_written(text: str) -> None:
    """ValueError where a Python literal's elements are separated otherwise than Python writes
    them (repr): two strings side by side, which Python joins ('x' 'y' is 'xy': a separator
    left out, not a guess to make), or a separator after the last element (but the one a
    one-element tuple is written with). `text` parses as Python."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
                  if t.type not in _LAYOUT_TOKENS]
    except (tokenize.TokenError, SyntaxError):
        raise ValueError("not a Python literal") from None
    commas: list[int] = []  # per open bracket, the separators seen in it
    previous: tokenize.TokenInfo | None = None
    for token in tokens:
        _separated_after(previous, token, commas)
        previous = token


def _separated_after(previous: tokenize.TokenInfo | None, token: tokenize.TokenInfo,
                     commas: list[int]) -> None:
    """_separated_as_written's check of one token after the one before it (`commas`: per
    open bracket, the separators seen in it, kept up to date)."""
    if token.type == tokenize.STRING and previous is not None and previous.type == tokenize.STRING:
        _, column = token.start
        raise ValueError(f"two strings side by side at {token.line[column:][:20]!r}: "
                         f"a separator missing")
    if token.type != tokenize.OP:
        return
    if token.string in ("(", "[", "{"):
        commas.append(0)
    elif token.string in (")", "]", "}"):
        seen = commas.pop() if commas else 0
        one_tuple = token.string == ")" and seen == 1  # ((1,): the comma a 1-tuple needs)
        if previous is not None and previous.string == "," and not one_tuple:
            raise ValueError(f"a separator after the last element, before {token.string!r}")
    elif token.string == "," and commas:
        commas[-1] += 1


def object_value(text: str, python: bool) -> JSONValue:
    """An encoded arguments object: JSON, or (a format that writes Python literals) a Python
    dict, or JSON after all (a model may write true / null where the template writes True /
    None). ValueError / SyntaxError when it is neither."""
    if not python:
        return JSON_DECODER.decode(text)
    try:
        return python_value(text)
    except DuplicateKey:
        raise
    except (ValueError, SyntaxError):
        try:
            return JSON_DECODER.decode(text)
        except DuplicateKey:
            raise
        except ValueError:
            pass
        raise


_KINDS = ("integer", "number", "boolean", "null", "object", "array", "string")
_ENUM_KINDS: dict[type, str] = {bool: "boolean", int: "integer", float: "number",
                                type(None): "null", dict: "object", list: "array"}


def _schema_kinds(schema: SchemaValue) -> tuple[str, ...]:
    """The types a raw value of this schema may be read as, in the schema's order (`type` as a
    list, `anyOf` / `oneOf` alternatives, a const's or an enum's values); () where it says none
    (the value is kept as written)."""
    if not isinstance(schema, dict) or not schema:
        return ()
    kind = schema.get("type")
    if isinstance(kind, str):
        return (kind,) if kind in _KINDS else ()
    if isinstance(kind, list):
        return tuple(k for k in kind if k in _KINDS)
    kinds: list[str] = []
    for option in (schema.get("anyOf") or schema.get("oneOf") or []):
        kinds += [k for k in _schema_kinds(option) if k not in kinds]
    values = _listed(schema) or []
    if not kinds:
        for value in values:  # (an enum's or a const's values type it: {"const": 7} is 7)
            k = _ENUM_KINDS.get(type(value), "string")
            if k not in kinds:
                kinds.append(k)
    return tuple(kinds)


def keeps_text(schema: SchemaValue) -> bool:
    """Whether typed_raw gives a raw value of this schema back as written (a string) whatever
    it is: the schema types nothing, or a string first."""
    kinds = _schema_kinds(schema)
    # (a nullable string may read as null)
    return not kinds or kinds[0] == "string" and "null" not in kinds


_NULL_WORDS = ("null", "None")  # (what JSON and Python write for null)
_BOOLEAN_WORDS = {"true": True, "false": False, "1": True, "0": False}


def typed_raw(text: str, schema: SchemaValue, fillers: Sequence[str] = (),
              quoted: bool = False) -> JSONValue:
    """A value written as raw text, typed by its schema (a string when there is none): each
    of the schema's types in its order (["integer", "null"]: 3, or null for `null`; anyOf
    integer then string: 3, or the text); an object or array may be JSON, a Python literal,
    or XML elements (see xml_elements); a boolean true/false in any case or 1/0, a null
    null/None — and null/None is null wherever the schema allows null, a string first too
    (unless the text was `quoted`: a string literal's text is a string where one is allowed)."""
    kinds = _schema_kinds(schema)
    if not kinds:
        return text
    if isinstance(schema, dict) and ("enum" in schema or "const" in schema) and not quoted:
        member = _member_written(text, schema)
        if member is not _NOT_A_MEMBER:
            return member
    if "null" in kinds and text.strip() in _NULL_WORDS and not (quoted and "string" in kinds):
        return None
    first: BadArguments | None = None
    for kind in kinds:
        if kind == "string":
            return text
        try:
            return _typed(text, kind, schema, fillers)
        except BadArguments as e:
            first = first or e
    assert first is not None  # (kinds is not empty, and each kind tried failed)
    raise first


_NOT_A_MEMBER = object()


def _listed(schema: dict[str, Any]) -> list[JSONValue] | None:
    """The values a schema lists: its const's, or its enum's; None where it lists none."""
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    return values if isinstance(values, list) else None


def _member_written(text: str, schema: dict[str, Any]) -> Any:
    """The one value of an enum (or the const) that `text` writes raw, where exactly one does
    (`3` is the integer 3 of ["a b", 3], `a b` the string): a raw value has no quotes to tell
    a string from another type, but the values it may be tell it. _NOT_A_MEMBER otherwise."""
    values = _listed(schema)
    if values is None:
        return _NOT_A_MEMBER
    found = [v for v in values if text in _spellings(v)]
    return found[0] if len(found) == 1 else _NOT_A_MEMBER


def _spellings(value: JSONValue) -> tuple[str, ...]:
    """How a value is written raw: a string as it is; null, booleans and numbers as JSON and
    as Python write them; an object or array as JSON."""
    if isinstance(value, str):
        return (value,)
    if value is None or isinstance(value, bool):
        return (json.dumps(value), repr(value))
    if isinstance(value, (int, float)):
        return (json.dumps(value), repr(value))
    return (json.dumps(value, ensure_ascii=False),)


def _type_of(value: JSONValue) -> tuple[str, ...]:
    """The JSON Schema types a decoded literal is (an integer is a number too)."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("boolean",)
    if isinstance(value, int):
        return ("integer", "number")
    if isinstance(value, float):
        return ("number", "integer") if value.is_integer() else ("number",)
    return (_LITERAL_TYPES.get(type(value), ""),)


_LITERAL_TYPES: dict[type, str] = {str: "string", list: "array", tuple: "array", dict: "object"}


def schema_value(value: JSONValue, schema: SchemaValue) -> JSONValue:
    """A value written as a JSON or Python literal, read as its schema types it: as it is
    where the schema allows its type (or types nothing); a string of another type's text as
    typed_raw reads it (`'{"a": 1}'` for an object, `'3'` for an integer); 1/0 for a
    boolean true/false; else BadArguments (never a guess)."""
    kinds = _schema_kinds(schema)
    types = _type_of(value)
    if not kinds or any(kind in kinds for kind in types):
        return value
    if types[0] == "string":
        return typed_raw(value, schema, quoted=True)
    if "boolean" in kinds and types[0] == "integer" and value in (0, 1):
        return bool(value)
    raise BadArguments(f"{json.dumps(value)[:40]} is not {' or '.join(kinds)}")


def _typed(text: str, kind: str, schema: SchemaValue, fillers: Sequence[str]) -> JSONValue:
    """A raw value as one type (BadArguments: not one)."""
    try:
        if kind == "integer":
            return int(text.strip())
        if kind == "number":
            return float(text.strip()) if any(c in text for c in ".eE") else int(text.strip())
        if kind == "boolean":
            return _BOOLEAN_WORDS[text.strip().lower()]
        if kind == "null":
            if text.strip().lower() not in ("null", "none", ""):
                raise ValueError("not null")
            return None
        if kind in ("object", "array"):
            return _typed_container(text, kind, schema, fillers)
    except RecursionError:
        raise BadArguments(f"{text[:40]!r} is nested too deeply to read") from None
    except (ValueError, KeyError, SyntaxError, MemoryError) as e:
        article = "an" if kind[0] in "aeiou" else "a"
        raise BadArguments(f"{text[:40]!r} is not {article} {kind}: {e}") from None
    return text


def _typed_container(text: str, kind: str, schema: SchemaValue,
                     fillers: Sequence[str]) -> JSONValue:
    """A raw value as an object or an array (`kind`): JSON, a Python literal, or XML elements
    (ValueError, SyntaxError: none of them, or not of that kind)."""
    try:
        value = JSON_DECODER.decode(text)  # (a key twice is an error, as in arguments objects)
    except ValueError:
        try:
            value = python_value(text.strip())
        except (ValueError, SyntaxError):
            value = xml_elements(text, schema, kind, fillers)
            if value is None:
                raise
    if not isinstance(value, dict if kind == "object" else list):
        raise ValueError(f"not an {kind}")
    return value


_ELEMENT = re.compile(r"<([A-Za-z_][\w.:-]*)>")
_TAG_ENDS = re.compile(r"^(?:</|<|>)+|(?:</|<|>)+$")


def format_fillers(layouts: Iterable[Layout]) -> tuple[str, ...]:
    """The tokens a key/value format writes around its elements, besides tag syntax (a
    separator token between every element): the literals of its argument layouts, with
    the tags' own < </ > cut from their ends. An XML-nested value may hold them between
    and around its elements."""
    found = set()
    for layout in layouts:
        for piece in layout:
            if isinstance(piece, str):
                core = _TAG_ENDS.sub("", piece.strip()).strip()
                if core and not core.isalnum():
                    found.add(core)
    return tuple(sorted(found, key=len, reverse=True))


def xml_elements(text: str, schema: SchemaValue, kind: str, fillers: Sequence[str] = (),
                 depth: int = 0) -> JSONValue | None:
    """An object or array written as XML elements, as XML-style formats nest values:
    <key>value</key> children (an object), or <item>value</item> children (an array).
    Between the elements only whitespace and the format's filler tokens may stand.
    None when `text` is not such a list of elements."""
    if depth > 100:
        raise RecursionError
    children: list[tuple[str, str]] = []  # (name, text) of each element
    pos = 0
    while True:
        found = _ELEMENT.search(text, pos)
        if found is None:
            break
        if _strip_fillers(text[pos:found.start()], fillers):
            return None
        name, start = found.group(1), found.end()
        end = _matching_close(text, name, start)
        if end == -1:
            return None
        children.append((name, text[start:end]))
        pos = end + len(name) + 3
    if not children or _strip_fillers(text[pos:], fillers):
        return None
    if kind == "array":
        items = (schema or {}).get("items") or {}
        return [_element_value(value, items, fillers, depth) for _, value in children]
    properties = (schema or {}).get("properties") or {}
    return {name: _element_value(value, properties.get(name), fillers, depth)
            for name, value in children}


def _strip_fillers(text: str, fillers: Sequence[str]) -> str:
    """`text` without whitespace and filler tokens at its ends."""
    text = text.strip()
    changed = True
    while changed and text:
        changed = False
        for filler in fillers:
            if text.startswith(filler):
                text, changed = text[len(filler):].strip(), True
            if text.endswith(filler):
                text, changed = text[: len(text) - len(filler)].strip(), True
    return text


def _matching_close(text: str, name: str, start: int) -> int:
    """Where the </name> closing the element opened just before `start` begins (-1: none)."""
    depth, pos = 1, start
    opener, closer = f"<{name}>", f"</{name}>"
    while True:
        next_close = text.find(closer, pos)
        if next_close == -1:
            return -1
        next_open = text.find(opener, pos, next_close)
        if next_open != -1:
            depth, pos = depth + 1, next_open + len(opener)
            continue
        depth -= 1
        if depth == 0:
            return next_close
        pos = next_close + len(closer)


def _element_value(text: str, schema: SchemaValue, fillers: Sequence[str],
                   depth: int) -> JSONValue:
    """A child element's text: nested elements, or a scalar typed by its schema (without
    one, as JSON reads it, else a string)."""
    kind = (schema or {}).get("type")
    if kind in ("object", "array") or (not schema and _ELEMENT.search(text)):
        nested = xml_elements(text, schema, kind or "object", fillers, depth + 1)
        if nested is not None:
            return nested
    value = _strip_fillers(text, fillers)
    if schema:
        return typed_raw(value, schema, fillers)
    try:
        return json.loads(value)
    except ValueError:
        return value


def decode_native(text: str, fmt: ArgumentsTable) -> JSONValue:
    """A value in the format's own notation (objects as the format's argument lists, arrays as
    item lists: ArgumentFormat.encode_value), read as the format writes it: one separator
    between elements, none after the last, no empty element, each key a name. Anything else
    is bad arguments (its extent was read: the call's layout is in step), never a guess."""
    try:
        value, end = _native(text, 0, fmt)
    except RecursionError:
        raise BadArguments(f"the value {text[:40]!r} is nested too deeply to read") from None
    except ValueError as e:  # (a quote, a key, a separator that is not there; a key twice)
        raise BadArguments(f"cannot read the value {text[:40]!r}: {e}") from None
    if end != len(text):
        raise BadArguments(f"unexpected {text[end:end + 20]!r} in the value {text[:40]!r}")
    return value


_NATIVE_SCALAR = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|None|True|False")
_NATIVE_WORDS = {"true": True, "True": True, "false": False, "False": False, "null": None,
                 "None": None}
_NATIVE_KEY = run_of(NAME_CHARS)  # (a key, as an argument's name is read)


def _native_member(fmt: ArgumentsTable) -> tuple[str, str, str]:
    """What the format writes around an object's key and value: (before the key, between the
    key and the value, after the value), from its argument layout (one layout: `key:value`)."""
    layouts = list((fmt.get("argument") or {}).values())
    if len(layouts) == 1:
        pieces = layouts[0]
        k, v = pieces.index({"slot": "key"}), pieces.index({"slot": "value"})
        before, middle = _literals(pieces[:k]), _literals(pieces[k + 1:v])
        after = _literals(pieces[v + 1:])
        if k < v and before is not None and middle is not None and after is not None:
            return before, middle, after
    return "", ":", ""


def _literals(pieces: Sequence[LayoutPiece]) -> str | None:
    """Layout pieces joined, when all of them are literals (None: a slot among them)."""
    texts = [piece for piece in pieces if isinstance(piece, str)]
    return "".join(texts) if len(texts) == len(pieces) else None


def _native_key(text: str, i: int, fmt: ArgumentsTable) -> tuple[str, int]:
    """An object's key at i, and where it ends: a name, or a string in the format's quotes (the
    template's other writer of the notation quotes keys: Gemma 4's `escape_keys`)."""
    quoted = _quoted(text, i, fmt, "a key")
    if quoted is not None:
        return quoted
    key = _NATIVE_KEY.match(text, i)
    return key.group(), key.end()  # type: ignore[union-attr]  # (a `*` run: always matches)


def _quoted(text: str, i: int, fmt: ArgumentsTable, what: str) -> tuple[str, int] | None:
    """A string in the format's quotes at i, and where it ends; None when no quote opens there."""
    quote_open, quote_close = fmt["quotes"]
    if not quote_open or not text.startswith(quote_open, i):
        return None
    end = text.find(quote_close, i + len(quote_open))
    if end == -1:
        raise ValueError(f"{what} without its closing quote")
    return text[i + len(quote_open):end], end + len(quote_close)


def _native(text: str, i: int, fmt: ArgumentsTable) -> tuple[JSONValue, int]:
    """The value at `i` in the format's own notation, and where it ends (ValueError: none)."""
    quoted = _quoted(text, i, fmt, "a string")
    if quoted is not None:
        return quoted
    separator = fmt["separator"]
    for kind in ("object", "array"):
        brackets = fmt.get("brackets", {}).get(kind)
        if not brackets:
            continue
        opener, closer = brackets
        if text.startswith(opener, i):
            i += len(opener)
            if kind == "object":
                return _native_object(text, i, closer, separator, fmt)
            return _native_array(text, i, closer, separator, fmt)
    match = _NATIVE_SCALAR.match(text, i)
    if not match:
        raise ValueError(f"cannot read a value at {text[i:i + 20]!r}")
    word = match.group(0)
    return (_NATIVE_WORDS[word] if word in _NATIVE_WORDS else json.loads(word)), match.end()


def _native_object(text: str, i: int, closer: str, separator: str,
                   fmt: ArgumentsTable) -> tuple[dict[str, JSONValue], int]:
    """An object's members from `i` (after its opening bracket) to its closing bracket, and
    where that ends."""
    out: dict[str, JSONValue] = {}
    before, middle, after = _native_member(fmt)
    if text.startswith(closer, i):
        return out, i + len(closer)
    while True:  # member (separator member)*, then the closing bracket
        if not text.startswith(before, i):
            raise ValueError(f"expected {before!r} at {text[i:i + 20]!r}")
        key, key_end = _native_key(text, i + len(before), fmt)
        if not key or not text.startswith(middle, key_end):
            raise ValueError(f"expected a key and {middle!r} at {text[i:i + 20]!r}")
        if key in out:
            raise DuplicateKey(f"the key {key!r} appears twice")
        out[key], i = _native(text, key_end + len(middle), fmt)
        if not text.startswith(after, i):
            raise ValueError(f"expected {after!r} at {text[i:i + 20]!r}")
        i += len(after)
        if text.startswith(closer, i):
            return out, i + len(closer)
        i = _native_separator(text, i, separator, closer)


def _native_array(text: str, i: int, closer: str, separator: str,
                  fmt: ArgumentsTable) -> tuple[list[JSONValue], int]:
    """An array's items from `i` (after its opening bracket) to its closing bracket, and where
    that ends."""
    out: list[JSONValue] = []
    if text.startswith(closer, i):
        return out, i + len(closer)
    while True:  # item (separator item)*, then the closing bracket
        value, i = _native(text, i, fmt)
        out.append(value)
        if text.startswith(closer, i):
            return out, i + len(closer)
        i = _native_separator(text, i, separator, closer)


def _native_separator(text: str, i: int, separator: str, closer: str) -> int:
    """Where the separator at `i` between two elements ends (ValueError: it is not there)."""
    if not separator or not text.startswith(separator, i):
        raise ValueError(f"expected {separator!r} or {closer!r} at {text[i:i + 20]!r}")
    return i + len(separator)


###}
