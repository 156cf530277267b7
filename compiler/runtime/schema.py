"""The dispatch stream's JSON Schema check, standard library only (a generated parser cannot
import jsonschema). It checks the keywords tool schemas use:

    any        type, enum, const, anyOf, oneOf, allOf, not, $ref (to this schema: "#/..."),
               nullable (OpenAPI's: null is allowed)
    string     minLength, maxLength (in code points), pattern (Python's re.search)
    number     minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, or draft 4's
               booleans), multipleOf
    array      items (a schema, or draft 4's list), prefixItems, minItems, maxItems, uniqueItems
    object     properties, required, additionalProperties, patternProperties, minProperties,
               maxProperties

and reads these as annotations, as JSON Schema 2020-12 does: title, description, default,
examples, format, deprecated, readOnly, writeOnly, $schema, $id, $anchor, $comment,
contentMediaType, contentEncoding ($defs and definitions hold what $ref points to). A schema
with any other keyword is refused when the parser is made (`SchemaError`, naming the tool
and the keyword): a keyword is never skipped in silence. tplparse's library passes its own
check instead (jsonschema, every keyword: `tplparse.bridge.dispatch_check`).
"""

from __future__ import annotations

###{standalone
import math
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeGuard

# A JSON Schema: an object, or a boolean (true: anything; false: nothing).
JSONSchema = dict[str, Any] | bool
# What one of _CHECKS finds wrong with a value (None: nothing): (value, schema, root, path,
# depth) -> a problem.
_Check = Callable[[Any, dict[str, Any], JSONSchema, str, int], str | None]

CHECKED_KEYWORDS = frozenset({
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "not", "$ref", "nullable",
    "minLength", "maxLength", "pattern",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
    "properties", "required", "additionalProperties", "patternProperties", "minProperties",
    "maxProperties",
})
ANNOTATION_KEYWORDS = frozenset({
    "title", "description", "default", "examples", "format", "deprecated", "readOnly", "writeOnly",
    "$schema", "$id", "$anchor", "$comment", "contentMediaType", "contentEncoding", "$defs",
    "definitions",
})
_SCHEMA_DEPTH = 64  # $ref chains and nesting past this are a loop, not a schema


class SchemaError(ValueError):
    """A tool schema the dispatch stream cannot check (a keyword it does not know, a bad $ref
    or pattern)."""


class SchemaCheck:
    """The check of one tool's `parameters`: `problem(value)` is None when the value is
    valid, else what is wrong and where (`$.path: ...`)."""

    __slots__ = ("_root",)

    _root: JSONSchema  # the tool's `parameters`

    def __init__(self, schema: JSONSchema, where: str = "parameters") -> None:
        _refuse_unchecked(schema, schema, where, 0)
        self._root = schema

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` (a decoded JSON value: Any), and where; None: nothing."""
        return _problem(value, self._root, self._root, "$", 0)


def _subschemas(schema: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(keyword, a subschema) for each schema inside `schema`."""
    for key in ("additionalProperties", "not", "items"):
        if isinstance(schema.get(key), (dict, bool)):
            yield key, schema[key]
    for key in ("properties", "patternProperties", "$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                yield f"{key}.{name}", sub
    for key in ("anyOf", "oneOf", "allOf", "prefixItems", "items"):
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                yield f"{key}[{i}]", sub


def _refuse_unchecked(schema: object, root: JSONSchema, where: str, depth: int) -> None:
    """SchemaError where `schema` (at `where`, `depth` schemas down from `root`) is not one the
    check reads: not an object or a boolean, too deep, an unknown keyword, a $ref to nothing, a
    pattern that is not one."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError(f"{where}: a schema must be an object or a boolean, "
                          f"not {type(schema).__name__}")
    if depth > _SCHEMA_DEPTH:
        raise SchemaError(f"{where}: nested more than {_SCHEMA_DEPTH} deep")
    for key in schema:
        if key not in CHECKED_KEYWORDS and key not in ANNOTATION_KEYWORDS:
            raise SchemaError(f"{where}: the JSON Schema keyword {key!r} is not one the dispatch "
                              f"stream's own check knows (give the parser a check that does: "
                              f"tplparse.bridge.dispatch_check)")
    if "$ref" in schema:
        resolve_ref(schema["$ref"], root, where)
    if "pattern" in schema:
        _pattern(schema["pattern"], where)
    for key, sub in _subschemas(schema):
        _refuse_unchecked(sub, root, f"{where}.{key}", depth + 1)


def resolve_ref(ref: object, root: JSONSchema, where: str = "parameters") -> Any:
    """The schema `ref` points to: a JSON pointer into this schema ("#", "#/$defs/x"). (Any:
    a pointer may reach any JSON value; a check of it refuses what is not a schema.)"""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise SchemaError(f"{where}: $ref {ref!r} points outside the tool's schema "
                          f"(only '#/...' is read)")
    node: Any = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise SchemaError(f"{where}: $ref {ref!r} points to nothing in the tool's schema")
    return node


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _pattern(pattern: str, where: str = "parameters") -> re.Pattern[str]:
    """A schema's `pattern`, compiled (cached; SchemaError: not a regular expression)."""
    if pattern not in _PATTERNS:
        try:
            _PATTERNS[pattern] = re.compile(pattern)
        except (re.error, TypeError) as e:
            raise SchemaError(f"{where}: pattern {pattern!r} is not a regular expression Python "
                              f"reads ({e})") from None
    return _PATTERNS[pattern]


_JSON_TYPES: dict[type, str] = {str: "string", list: "array", dict: "object"}


def _json_type(value: Any) -> str:
    """The JSON type of a decoded value ("unknown": not a JSON value)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return _JSON_TYPES.get(type(value), "unknown")


def _is_type(value: Any, name: str) -> bool:
    """Whether a decoded value is of the JSON Schema type `name` (1.0 is an integer too)."""
    kind = _json_type(value)
    if name == "number":
        return kind in ("integer", "number")
    if name == "integer":
        if kind == "number":  # (a float: one without a fraction is an integer too, 1.0)
            number: float = value
            return math.isfinite(number) and number == int(number)
        return kind == "integer"
    return kind == name


def _same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, 1 is 1.0."""
    ka, kb = _json_type(a), _json_type(b)
    if {ka, kb} <= {"integer", "number"}:
        return bool(a == b)  # (numbers: a bool; `Any == Any` is Any to a type checker)
    if ka != kb:
        return False
    if ka == "array":
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if ka == "object":
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)  # (strings, booleans, null)


def _problem(value: Any, schema: JSONSchema, root: JSONSchema, path: str,
             depth: int) -> str | None:
    """What is wrong with `value` under `schema` (None: nothing)."""
    if schema is True or schema == {}:
        return None
    if schema is False:
        return f"{path}: no value is allowed here"
    if depth > _SCHEMA_DEPTH:
        return f"{path}: the schema nests (or refers to itself) more than {_SCHEMA_DEPTH} deep"
    if value is None and schema.get("nullable") is True:
        return None
    for check in _CHECKS:
        problem = check(value, schema, root, path, depth)
        if problem is not None:
            return problem
    return None


def _check_ref(value: Any, schema: dict[str, Any], root: JSONSchema, path: str,
               depth: int) -> str | None:
    """The schema a $ref points to."""
    if "$ref" in schema:
        return _problem(value, resolve_ref(schema["$ref"], root), root, path, depth + 1)
    return None


def _check_type(value: Any, schema: dict[str, Any], root: JSONSchema, path: str,
                depth: int) -> str | None:
    """type (a name, or a list of names)."""
    types = schema.get("type")
    if types is None:
        return None
    names = types if isinstance(types, list) else [types]
    if not any(_is_type(value, name) for name in names):
        return f"{path}: {_json_type(value)} is not of type {' or '.join(map(str, names))}"
    return None


def _check_values(value: Any, schema: dict[str, Any], root: JSONSchema, path: str,
                  depth: int) -> str | None:
    """enum, const."""
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        return f"{path}: {_short(value)} is not one of {_short(schema['enum'])}"
    if "const" in schema and not _same(value, schema["const"]):
        return f"{path}: {_short(value)} is not {_short(schema['const'])}"
    return None


def _check_combined(value: Any, schema: dict[str, Any], root: JSONSchema, path: str,
                    depth: int) -> str | None:
    """allOf, anyOf, oneOf, not."""
    for sub in schema.get("allOf") or ():
        problem = _problem(value, sub, root, path, depth + 1)
        if problem is not None:
            return problem
    if "anyOf" in schema and all(_problem(value, sub, root, path, depth + 1) is not None
                                 for sub in schema["anyOf"]):
        return f"{path}: {_short(value)} matches none of anyOf's schemas"
    if "oneOf" in schema:
        matching = sum(_problem(value, sub, root, path, depth + 1) is None
                       for sub in schema["oneOf"])
        if matching != 1:
            return f"{path}: {_short(value)} matches {matching} of oneOf's schemas, not exactly one"
    if "not" in schema and _problem(value, schema["not"], root, path, depth + 1) is None:
        return f"{path}: {_short(value)} matches the schema under 'not'"
    return None


def _check_string(value: Any, schema: dict[str, Any], root: JSONSchema, path: str,
                  depth: int) -> str | None:
    """minLength, maxLength, pattern (of a string)."""
    if not isinstance(value, str):
        return None
    if "minLength" in schema and len(value) < schema["minLength"]:
        return f"{path}: {_short(value)} is shorter than {schema['minLength']} characters"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"{path}: {_short(value)} is longer than {schema['maxLength']} characters"
    if "pattern" in schema and not _pattern(schema["pattern"]).search(value):
        return f"{path}: {_short(value)} does not match {schema['pattern']!r}"
    return None


def _check_number(value: Any, schema: dict[str, Any], root: JSONSchema, path: str,
                  depth: int) -> str | None:
    """minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf (of a number)."""
    if _json_type(value) not in ("integer", "number"):
        return None
    low, high = schema.get("minimum"), schema.get("maximum")
    low_out, high_out = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if low_out is True:  # (draft 4: a flag on minimum)
        low_out, low = low, None
    if high_out is True:
        high_out, high = high, None
    if _is_number(low) and value < low:
        return f"{path}: {value} is less than the minimum {low}"
    if _is_number(high) and value > high:
        return f"{path}: {value} is more than the maximum {high}"
    if _is_number(low_out) and value <= low_out:
        return f"{path}: {value} is not more than {low_out}"
    if _is_number(high_out) and value >= high_out:
        return f"{path}: {value} is not less than {high_out}"
    step = schema.get("multipleOf")
    if _is_number(step) and step > 0:
        quotient = value / step
        if not math.isfinite(quotient) or quotient != int(quotient):
            return f"{path}: {value} is not a multiple of {step}"
    return None


def _is_number(value: Any) -> TypeGuard[int | float]:
    """Whether a decoded value is a number (true is not one)."""
    return _json_type(value) in ("integer", "number")


def _check_array(value: Any, schema: dict[str, Any], root: JSONSchema, path: str,
                 depth: int) -> str | None:
    """minItems, maxItems, uniqueItems, prefixItems, items (of an array)."""
    if not isinstance(value, list):
        return None
    if "minItems" in schema and len(value) < schema["minItems"]:
        return f"{path}: {len(value)} items, fewer than {schema['minItems']}"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return f"{path}: {len(value)} items, more than {schema['maxItems']}"
    if schema.get("uniqueItems") is True:
        for i, item in enumerate(value):
            if any(_same(item, other) for other in value[:i]):
                return f"{path}[{i}]: {_short(item)} is there already (uniqueItems)"
    prefix = schema.get("prefixItems")
    items = schema.get("items")
    if isinstance(items, list):  # (draft 4's tuple form: later items are free)
        prefix, items = items, None
    prefix = prefix or []
    for i, item in enumerate(value):
        sub = prefix[i] if i < len(prefix) else items
        if sub is not None:
            problem = _problem(item, sub, root, f"{path}[{i}]", depth + 1)
            if problem is not None:
                return problem
    return None


def _check_object(value: Any, schema: dict[str, Any], root: JSONSchema, path: str,
                  depth: int) -> str | None:
    """required, minProperties, maxProperties, then each property's schema (of an object)."""
    if not isinstance(value, dict):
        return None
    for name in schema.get("required") or ():
        if name not in value:
            return f"{path}: the property {name!r} is required"
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        return f"{path}: {len(value)} properties, fewer than {schema['minProperties']}"
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        return f"{path}: {len(value)} properties, more than {schema['maxProperties']}"
    properties = schema.get("properties") or {}
    patterns = schema.get("patternProperties") or {}
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        where = f"{path}.{name}"
        matched = False
        if name in properties:
            matched = True
            problem = _problem(item, properties[name], root, where, depth + 1)
            if problem is not None:
                return problem
        for pattern, sub in patterns.items():
            if _pattern(pattern).search(name):
                matched = True
                problem = _problem(item, sub, root, where, depth + 1)
                if problem is not None:
                    return problem
        if not matched:
            if extra is False:
                return (f"{path}: the property {name!r} is not allowed "
                        f"(additionalProperties is false)")
            problem = _problem(item, extra, root, where, depth + 1)
            if problem is not None:
                return problem
    return None


_CHECKS: tuple[_Check, ...] = (_check_ref, _check_type, _check_values, _check_combined,
                               _check_string, _check_number, _check_array, _check_object)


def _short(value: Any, limit: int = 60) -> str:
    """A value's repr, cut to `limit` characters (for a problem's text)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def tool_checks(tools: Iterable[dict[str, Any]] | None) -> dict[str, SchemaCheck]:
    """name -> SchemaCheck of each offered tool's parameters (SchemaError naming the tool)."""
    checks: dict[str, SchemaCheck] = {}
    for i, tool in enumerate(tools or ()):
        function = tool.get("function", tool)
        name = function["name"]
        where = f"tools[{i}] ({name}): parameters"
        checks[name] = SchemaCheck(function.get("parameters") or {}, where)
    return checks


def schema_validator(
        tools: Iterable[dict[str, Any]] | None) -> Callable[[str, Any], str | None]:
    """validate(name, arguments) for the dispatch stream: None when the arguments are valid
    under the tool's schema, else what is wrong (SchemaError now for a schema it cannot check)."""
    checks = tool_checks(tools)

    def validate(name: str, arguments: Any) -> str | None:
        """What is wrong with a call's arguments (a decoded JSON value: Any); None: nothing."""
        check = checks.get(name)
        return None if check is None else check.problem(arguments)

    return validate
###}
