"""Argument values: decoding what a format writes (JSON, Python literals, raw text typed by
a schema, a format's own notation) and writing the final arguments as canonical JSON text.
The reference parser uses these too, so both parsers type a value the same way."""

from .errors import BadArguments, InvalidOutput

###{standalone
import ast
import json
import re

JSON_DECODER = json.JSONDecoder()


def _json_encoder():
    """json.dumps(value, ensure_ascii=False, allow_nan=False), built once: the C encoder when
    it is there and writes what the pure one does (its constructor is not public), else that one."""
    pure = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
    try:
        from json.encoder import c_make_encoder, encode_basestring

        c_encode = c_make_encoder(None, pure.default, encode_basestring, None, ": ", ", ", False, False, False)
        sample = {"a": [1, -2.5e-300, None, True, "é\"\\\n\u2028\x00"], "b": {}}
        if "".join(c_encode(sample, 0)) == pure.encode(sample):
            return lambda value: "".join(c_encode(value, 0))
    except Exception:  # any other Python: the pure encoder
        pass
    return pure.encode


_ENCODE_JSON = _json_encoder()


def arguments_json(value):
    """Arguments as the JSON text of the final call; what JSON cannot hold is bad arguments."""
    try:
        return _ENCODE_JSON(value)
    except (ValueError, TypeError, RecursionError) as e:  # NaN / Infinity; a value no decoder here makes
        raise BadArguments(f"the arguments hold a value JSON cannot: {e}") from None


_JSON_KINDS = (str, int, float, bool, type(None))


def python_value(text):
    """A Python literal that is a JSON value (dicts with string keys, lists, tuples, scalars)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, OverflowError):  # ({[1]: 2}: unhashable; messages may hold addresses)
        raise ValueError("not a Python literal") from None
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
    return value




def typed_raw(text, schema):
    """A value written as raw text, typed by its schema (a string when there is none)."""
    if not schema:
        return text
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None and "enum" in schema and schema["enum"]:
        kind = {bool: "boolean", int: "integer", float: "number", type(None): "null"}.get(type(schema["enum"][0]), "string")
    if kind == "string":
        return text
    try:
        if kind == "integer":
            return int(text.strip())
        if kind == "number":
            return float(text.strip()) if any(c in text for c in ".eE") else int(text.strip())
        if kind == "boolean":
            return {"true": True, "false": False}[text.strip().lower()]
        if kind == "null":
            return None
        if kind in ("object", "array"):
            try:
                return json.loads(text)
            except ValueError:
                return python_value(text.strip())
    except RecursionError:
        raise BadArguments(f"{text[:40]!r} is nested too deeply to read") from None
    except (ValueError, KeyError, SyntaxError, MemoryError) as e:
        raise BadArguments(f"{text[:40]!r} is not a {kind}: {e}") from None
    return text


def decode_native(text, fmt):
    try:
        value, end = _native(text, 0, fmt)
    except RecursionError:
        raise BadArguments(f"the value {text[:40]!r} is nested too deeply to read") from None
    except ValueError:  # a quote or a key's colon that is not there
        raise InvalidOutput(f"cannot read the value {text[:40]!r}") from None
    if end != len(text):
        raise InvalidOutput(f"unexpected {text[end:end + 20]!r} in a value")
    return value


_NATIVE_SCALAR = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|None|True|False")


def _native(text, i, fmt):
    quote_open, quote_close = fmt["quotes"]
    if quote_open and text.startswith(quote_open, i):
        end = text.index(quote_close, i + len(quote_open))
        return text[i + len(quote_open):end], end + len(quote_close)
    for kind in ("object", "array"):
        brackets = fmt.get("brackets", {}).get(kind)
        if brackets and text.startswith(brackets[0], i):
            i += len(brackets[0])
            out = {} if kind == "object" else []
            while not text.startswith(brackets[1], i):
                if kind == "object":
                    colon = text.index(":", i)
                    key = text[i:colon]
                    value, i = _native(text, colon + 1, fmt)
                    out[key] = value
                else:
                    value, i = _native(text, i, fmt)
                    out.append(value)
                if text.startswith(fmt["separator"], i):
                    i += len(fmt["separator"])
            return out, i + len(brackets[1])
    match = _NATIVE_SCALAR.match(text, i)
    if not match:
        raise InvalidOutput(f"cannot read a value at {text[i:i + 20]!r}")
    word = match.group(0)
    words = {"true": True, "True": True, "false": False, "False": False, "null": None, "None": None}
    return (words[word] if word in words else json.loads(word)), match.end()




###}
