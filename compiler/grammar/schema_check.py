"""Whether a JSON Schema is one tplparse can force, checked before a grammar is built.

`check_schema(schema)` raises a `SchemaError` naming the place (a JSON pointer) and the
reason for a schema that

- some value must satisfy and none can: a `false` schema where a value must be (a required
  property, the items of an array with `minItems`), bounds that cross (`minLength` above
  `maxLength`, `minimum` above `maximum`, ...), an `enum` or a `const` whose values the rest
  of the schema refuses, an `anyOf` / `oneOf` none of whose options holds a value, a
  required property that `additionalProperties: false` leaves no room for, `not: {}`;
- comes back to itself before any value is written, through any keyword (`$ref`, `allOf`,
  `anyOf`, `oneOf`, `not`, `if` / `then` / `else`): a loop that neither a grammar nor a
  validator can follow (jsonschema recursed without end on `allOf: [{$ref: "#"}]`);
- asks for what neither the grammar nor the check reads: `$dynamicRef` / `$recursiveRef`
  (and their anchors), an `$id` below the root (it changes what the `$ref`s under it point
  to);
- is larger than `SchemaLimits` allows: properties in all, and `pattern`s (their length, and
  their alternatives, which count towards the `enum` values' limit: a pattern of 20,000
  alternatives is an `enum` of 20,000 values to a grammar engine).

A schema that passes has a value, and every `$ref` in it points into it (`check_refs`). The
`enum` / `const` checks search patterns within a time bound (grammar.patterns).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import regex

from .json_schema import (
    _ONE_SUBSCHEMA,
    _SUBSCHEMA_LIST,
    _SUBSCHEMA_MAP,
    SchemaError,
    check_refs,
    resolve_ref,
)
from .patterns import PatternBudget, PatternTooCostly, iter_errors


@dataclass(frozen=True)
class SchemaLimits:
    """How large one schema may be (docs/serving.md's table of limits)."""

    properties: int = 5000  # in all its objects together (OpenAI's, for structured outputs)
    # all its enums' values and its patterns' alternatives together
    enum_values: int = 1000
    pattern_chars: int = 1000  # one pattern's length
    # what the checks of its enum and const values against their patterns may take
    pattern_seconds: float = 0.25


LIMITS = SchemaLimits()

# Keywords whose references neither the grammar nor the checks follow.
_DYNAMIC = ("$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor")
# The keywords through which a schema applies another to the same value: following only
# these, a schema met again is a loop that writes nothing.
_SAME_VALUE_LISTS = ("allOf", "anyOf", "oneOf")
_SAME_VALUE_ONES = ("not", "if", "then", "else")


def check_schema(schema: Any, limits: SchemaLimits = LIMITS) -> None:
    """SchemaError (path, reason) for a schema tplparse cannot force (see the module's
    docstring); nothing for one it can."""
    check_refs(schema)
    _check_keywords_and_sizes(schema, limits)
    _check_loops(schema)
    reason = _Values(schema, PatternBudget(limits.pattern_seconds)).never(schema, "#")
    if reason is not None:
        path, why = reason
        raise SchemaError(path, why)


def subschemas(schema: Any, path: str = "#") -> Iterator[tuple[str, Any]]:
    """(path, subschema) of `schema` and every schema inside it, without recursion."""
    pending = [(path, schema)]
    while pending:
        where, node = pending.pop()
        yield where, node
        if not isinstance(node, dict):
            continue
        for keyword, value in node.items():
            at = f"{where}/{keyword}"
            if keyword in _SUBSCHEMA_MAP and isinstance(value, dict):
                pending.extend((f"{at}/{name}", sub) for name, sub in value.items())
            elif keyword in _SUBSCHEMA_LIST and isinstance(value, list):
                pending.extend((f"{at}/{i}", sub) for i, sub in enumerate(value))
            elif keyword in _ONE_SUBSCHEMA and isinstance(value, (dict, bool)):
                pending.append((at, value))


def _check_keywords_and_sizes(schema: Any, limits: SchemaLimits) -> None:
    properties = alternatives = 0
    for path, node in subschemas(schema):
        if not isinstance(node, dict):
            continue
        for keyword in _DYNAMIC:
            if keyword in node:
                raise SchemaError(path, f"{keyword} is not supported: neither the grammar nor "
                                        "the check follows dynamic references")
        if "$id" in node and path != "#":
            raise SchemaError(path, "an $id below the root is not supported: it changes what "
                                    "the $refs under it point to")
        if isinstance(node.get("properties"), dict):
            properties += len(node["properties"])
        if isinstance(node.get("enum"), list):
            alternatives += len(node["enum"])
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            if len(pattern) > limits.pattern_chars:
                raise SchemaError(path, f"a pattern of {len(pattern)} characters; the limit "
                                        f"is {limits.pattern_chars}")
            alternatives += _alternatives(pattern)
    if properties > limits.properties:
        raise SchemaError("#", f"{properties} properties in all; the limit is "
                               f"{limits.properties}")
    if alternatives > limits.enum_values:
        raise SchemaError("#", f"{alternatives} enum values and pattern alternatives in all; "
                               f"the limit is {limits.enum_values}")


def _alternatives(pattern: str) -> int:
    """How many alternatives a pattern lists (its `|` outside classes and escapes, plus one)."""
    count, escaped, in_class = 1, False, False
    for ch in pattern:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "[":
            in_class = True
        elif ch == "]":
            in_class = False
        elif ch == "|" and not in_class:
            count += 1
    return count


def _same_value_edges(schema: dict, path: str, root: Any) -> Iterator[tuple[str, Any]]:
    """(path, schema) of the schemas `schema` applies to its own value (not to a value inside
    it): its $ref's target, allOf / anyOf / oneOf, not, if / then / else."""
    if isinstance(schema.get("$ref"), str):
        target = schema["$ref"]
        yield target, resolve_ref(root, target, path)
    for keyword in _SAME_VALUE_LISTS:
        if isinstance(schema.get(keyword), list):
            for i, sub in enumerate(schema[keyword]):
                yield f"{path}/{keyword}/{i}", sub
    for keyword in _SAME_VALUE_ONES:
        if isinstance(schema.get(keyword), dict):
            yield f"{path}/{keyword}", schema[keyword]


def _check_loops(root: Any) -> None:
    """SchemaError at a schema that comes back to itself without writing a value: a cycle
    among the same-value edges (a depth-first search, on a stack of its own)."""
    done: set[int] = set()
    for start_path, start in subschemas(root):
        if not isinstance(start, dict) or id(start) in done:
            continue
        on_path: dict[int, str] = {id(start): start_path}
        stack = [(start_path, start, _same_value_edges(start, start_path, root))]
        while stack:
            path, node, edges = stack[-1]
            step = next(edges, None)
            if step is None:
                stack.pop()
                on_path.pop(id(node), None)
                done.add(id(node))
                continue
            at, sub = step
            if not isinstance(sub, dict) or id(sub) in done:
                continue
            if id(sub) in on_path:
                raise SchemaError(at, f"a loop: {on_path[id(sub)]} comes back to itself "
                                      "before any value is written (through $ref, allOf, "
                                      "anyOf, oneOf, not or if)")
            on_path[id(sub)] = at
            stack.append((at, sub, _same_value_edges(sub, at, root)))


class _Values:
    """Whether a schema holds some value (`never`: where and why not), following $refs (a
    loop of them was refused before)."""

    def __init__(self, root: Any, budget: PatternBudget):
        self.root = root
        self.budget = budget
        self.seen: dict[int, tuple[str, str] | None] = {}

    def never(self, schema: Any, path: str) -> tuple[str, str] | None:
        if schema is False:
            return path, "false: no value is valid here"
        if not isinstance(schema, dict):
            return None
        key = id(schema)
        if key in self.seen:
            return self.seen[key]
        self.seen[key] = None  # (recursion through properties or items: it has a value)
        found = self._never(schema, path)
        self.seen[key] = found
        return found

    def _never(self, schema: dict, path: str) -> tuple[str, str] | None:
        if "$ref" in schema:
            found = self.never(resolve_ref(self.root, schema["$ref"], path), schema["$ref"])
            if found is not None:
                return found
        if schema.get("not") is True or schema.get("not") == {}:
            return path, "not: {} (no value is valid)"
        if schema.get("type") == []:
            return path, "type lists no type"
        for check in (self._crossing_bounds, self._values, self._options, self._all_of,
                      self._object, self._array):
            found = check(schema, path)
            if found is not None:
                return found
        return None

    def _crossing_bounds(self, schema: dict, path: str) -> tuple[str, str] | None:
        for low, high in (("minLength", "maxLength"), ("minItems", "maxItems"),
                          ("minProperties", "maxProperties"), ("minimum", "maximum"),
                          ("exclusiveMinimum", "maximum"), ("minimum", "exclusiveMaximum"),
                          ("exclusiveMinimum", "exclusiveMaximum")):
            a, b = schema.get(low), schema.get(high)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and _number(a) \
                    and _number(b) and (a > b or a == b and "exclusive" in low + high):
                return path, f"{low} {a} and {high} {b}: no value is between them"
        return None

    def _values(self, schema: dict, path: str) -> tuple[str, str] | None:
        """An enum or a const whose values the rest of the schema refuses."""
        if "const" in schema:
            values, keyword = [schema["const"]], "const"
        elif isinstance(schema.get("enum"), list):
            values, keyword = schema["enum"], "enum"
        else:
            return None
        rest = {k: v for k, v in schema.items() if k not in ("const", "enum")}
        if not values:
            return path, "enum is empty: no value is valid"
        if not rest:
            return None
        try:
            if any(not iter_errors(self._rooted(rest), v, self.budget) for v in values):
                return None
        except PatternTooCostly as e:
            return path, f"{keyword}: {e}"
        except (regex.error, TypeError, ValueError) as e:
            return path, f"{keyword} cannot be checked against the rest of the schema: {e}"
        return path, (f"const {schema['const']!r} is not valid under the rest of its schema"
                      if keyword == "const" else
                      "no value of its enum is valid under the rest of its schema")

    def _rooted(self, schema: dict) -> dict:
        """`schema` with the root's $defs beside it, so that its $refs resolve."""
        if isinstance(self.root, dict):
            return {**{k: self.root[k] for k in ("$defs", "definitions") if k in self.root},
                    **schema}
        return schema

    def _options(self, schema: dict, path: str) -> tuple[str, str] | None:
        for keyword in ("anyOf", "oneOf"):
            options = schema.get(keyword)
            if isinstance(options, list):
                if not options:
                    return path, f"{keyword} lists no option"
                found = [self.never(option, f"{path}/{keyword}/{i}")
                         for i, option in enumerate(options)]
                first = found[0]
                if first is not None and all(f is not None for f in found):
                    return path, f"no option of {keyword} holds a value ({first[1]} at " \
                                 f"{first[0]}, ...)"
        return None

    def _all_of(self, schema: dict, path: str) -> tuple[str, str] | None:
        for i, part in enumerate(schema.get("allOf") or []):
            found = self.never(part, f"{path}/allOf/{i}")
            if found is not None:
                return found
        return None

    def _object(self, schema: dict, path: str) -> tuple[str, str] | None:
        listed = schema.get("properties")
        properties: dict[str, Any] = listed if isinstance(listed, dict) else {}
        closed = schema.get("additionalProperties") is False and not schema.get("patternProperties")
        for name in schema.get("required") or []:
            if not isinstance(name, str):
                continue
            if name in properties:
                found = self.never(properties[name], f"{path}/properties/{name}")
                if found is not None:
                    return path, f"the required property {name!r} holds no value ({found[1]} " \
                                 f"at {found[0]})"
            elif closed:
                return path, f"the required property {name!r} is not among its properties, " \
                             "and additionalProperties is false"
        return None

    def _array(self, schema: dict, path: str) -> tuple[str, str] | None:
        low = schema.get("minItems") or 0
        if not (isinstance(low, int) and low > 0):
            return None
        given = schema.get("prefixItems")
        prefix: list[Any] = given if isinstance(given, list) else []
        for i, item in enumerate(prefix[:low]):
            found = self.never(item, f"{path}/prefixItems/{i}")
            if found is not None:
                return path, f"minItems {low}, and item {i} holds no value ({found[1]})"
        if low > len(prefix) and "items" in schema:
            found = self.never(schema["items"], f"{path}/items")
            if found is not None:
                return path, f"minItems {low}, and its items hold no value ({found[1]})"
        return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


__all__ = ["LIMITS", "SchemaLimits", "check_schema", "subschemas"]
