"""JSON Schema to grammar IR (for tool arguments and structured output).

Supported: `type` (and unions), `enum`, `const`, `properties` + `required`,
`additionalProperties` (see below), nested objects, `items`,
`minItems` / `maxItems`, `anyOf` / `oneOf`, local `$ref` (`#`, or a JSON pointer into the
schema, `$defs` / `definitions`), string `minLength` / `maxLength`, integer / number bounds
where expressible (the sign, and small integer ranges exactly), `pattern` (an anchored
regular-expression subset).

Properties are accepted in the schema's order, each required one present, each optional
one present or not; extra properties follow when allowed. Any keyword that constrains
values and is not supported is reported as a warning naming the keyword and its path,
never dropped silently.

A schema the grammar cannot be written for is a `SchemaError` naming where: an `enum` with
no value, a `$ref` that is not local or does not resolve, a `$ref` that comes back to itself
before any value is written (`{"$ref": "#"}`: no grammar holds it), and a lower bound
(`minItems`, `minLength`) above `MAX_REPETITION`. An upper bound above it is not enforced by
the grammar (a warning says so; validation still checks it).

Extra (undeclared) properties follow llama.cpp's converter (common/json-schema-to-grammar.cpp)
and OpenAI's strict mode, not JSON Schema's own default: a schema that lists `properties`
allows no other unless `additionalProperties` is true or a schema; one that lists none (a
bare {"type": "object"}) allows any object unless `additionalProperties` is false. A model
given JSON Schema's default wanders into keys nobody asked for (SmolLM2 wrote `"type":
"object", "properties": {...}` into a weather call's arguments, and repeated keys up to the
token limit). `open_objects` restores JSON Schema's rule: extras unless false.
`closed_objects` writes a schema so that an engine that follows JSON Schema's rule
(llguidance's `%json`) follows this convention too.

No key is written twice by the grammar: declared properties come in order, each at most
once, and an extra key is none of the declared names, however it is spelled (a JSON escape
such as `c\\u0069ty` is the name `city`). Two extra keys cannot be told apart by a
context-free grammar (that would take a rule per set of names written so far), so
`{"x": 1, "x": 2}` is accepted where extras are; the parser refuses duplicate keys on read
(`invalid_arguments`).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from ..spec.encodings import json_type
from .ir import (
    Alt,
    AnyChar,
    Chars,
    Grammar,
    Lit,
    Node,
    Ref,
    Rep,
    Seq,
    TextUntil,
    alt,
    chars,
    children,
    opt,
    seq,
)
from .json_values import add_json, add_python_literal, add_ws

# Keywords that describe but do not constrain: no warning when they are not enforced.
ANNOTATIONS = frozenset({
    "description", "title", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", "contentMediaType", "contentEncoding",
})
HANDLED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems",
    "maxItems", "anyOf", "oneOf", "$ref", "minLength", "maxLength", "minimum", "maximum", "pattern",
})

# Integer ranges up to this many values are enumerated exactly.
MAX_ENUMERATED_RANGE = 256
# The largest repetition bound a grammar holds: llama.cpp's GBNF parser refuses a lower bound
# above 2000 and reads an upper bound above it as none (src/llama-grammar.cpp,
# MAX_REPETITION_THRESHOLD); it also refuses a repeated group whose rules times the bound pass
# 2000, so what repeats with a bound here is one named rule.
MAX_REPETITION = 2000


class SchemaError(ValueError):
    """A schema the grammar cannot be written for: `path` is where (a JSON pointer into the
    schema, `#` its root), `reason` what is wrong there."""

    def __init__(self, path: str, reason: str):
        self.path = path or "#"
        self.reason = reason
        super().__init__(f"{reason} (at {self.path})")

    def __reduce__(self):
        # (rebuilt from its own arguments: it crosses from a command's child process)
        return SchemaError, (self.path, self.reason)


def primary_type(schema: dict) -> str:
    """The JSON type a schema's values have ("string" when it does not say)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else "string")
    if kind:
        return kind
    if "enum" in schema and schema["enum"]:
        return json_type(schema["enum"][0])
    if "const" in schema:
        return json_type(schema["const"])
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def extra_properties(schema: dict, open_objects: bool = False):
    """What an undeclared property of `schema`'s objects may hold: a schema (True: any value),
    or False: no undeclared property at all.

    `additionalProperties` decides when the schema has it. Without it, llama.cpp's and OpenAI
    strict mode's convention: a schema that lists `properties` (even none, `{}`) is closed,
    one that does not is open; `open_objects` keeps every such object open, as JSON Schema
    itself does."""
    if "additionalProperties" in schema:
        return schema["additionalProperties"]
    return open_objects or "properties" not in schema


# Where a schema holds subschemas: one, a list of them (`items` too, in drafts before
# 2020-12), or a map of names to them. (`enum`, `const`, `default`, ... hold values, never
# walked: a value may look like a schema.)
_ONE_SUBSCHEMA = frozenset({
    "additionalProperties", "items", "additionalItems", "contains", "not", "if", "then", "else",
    "propertyNames", "unevaluatedProperties", "unevaluatedItems",
})
_SUBSCHEMA_LIST = frozenset({"anyOf", "oneOf", "allOf", "prefixItems", "items"})
_SUBSCHEMA_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions",
                            "dependentSchemas", "dependencies"})


def closed_objects(schema):
    """A copy of `schema` in which every schema that lists `properties` and says nothing of
    `additionalProperties` says `false`: the convention of `extra_properties`, written for an
    engine that follows JSON Schema's own rule (llguidance, given `%json`, lets such an object
    take any other key). Keys keep their order; the user's schema is not changed (values that
    are not schemas are shared, not copied)."""
    if not isinstance(schema, dict):
        return schema
    out = {keyword: _closed_at(keyword, value) for keyword, value in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema:
        out["additionalProperties"] = False
    return out


def _closed_at(keyword: str, value):
    """The value of `keyword` with the schemas it holds closed (`closed_objects`)."""
    if keyword in _SUBSCHEMA_MAP and isinstance(value, dict):
        return {name: closed_objects(sub) for name, sub in value.items()}
    if keyword in _SUBSCHEMA_LIST and isinstance(value, list):
        return [closed_objects(sub) for sub in value]
    if keyword in _ONE_SUBSCHEMA:
        return closed_objects(value)
    return value


class _Converter:
    """Schema -> IR. flavor "json" writes JSON; "python" writes Python literals as repr() does
    (strings in single quotes, True / False / None), for templates that print arguments so."""

    def __init__(self, g: Grammar, root_schema: dict, warnings: list[str], flavor: str = "json",
                 open_objects: bool = False):
        self.g = g
        self.root_schema = root_schema
        self.warnings = warnings
        self.flavor = flavor
        self.open_objects = open_objects
        self.ws = add_ws(g)
        self.refs: dict[str, Ref] = {}
        # The $refs being expanded since the last character a value writes ({ or [): one met
        # again is a loop that writes nothing (left recursion, which no grammar engine takes).
        self.unguarded: set[str] = set()

    def dump(self, value) -> str:
        return repr(value) if self.flavor == "python" else json.dumps(value, ensure_ascii=False)

    def any_value(self) -> Node:
        return add_python_literal(self.g) if self.flavor == "python" else add_json(self.g)

    def warn(self, keyword: str, path: str, why: str = "not supported") -> None:
        message = (f"JSON Schema keyword {keyword!r} at {path or '#'}: {why}; not "
                   "enforced by the grammar")
        if message not in self.warnings:
            self.warnings.append(message)

    def rule(self, name: str, schema, path: str) -> Ref:
        return self.g.add(name, self.node(schema, name, path))

    def node(self, schema, name: str, path: str) -> Node:
        if schema is True or schema == {}:
            return self.any_value()
        if schema is False:
            # (where a value may be left out, a false schema's is: an optional property, an
            # option of anyOf, an array's items; here one must be written)
            raise SchemaError(path, "false: no value is valid here")
        if not isinstance(schema, dict):
            self.warn(type(schema).__name__, path, "not a schema")
            return add_json(self.g)
        for keyword in schema:
            if keyword not in HANDLED and keyword not in ANNOTATIONS:
                self.warn(keyword, path)
        if "$ref" in schema:
            return self.ref(schema["$ref"], path)
        if "const" in schema:
            return Lit(self.dump(schema["const"]))
        if "enum" in schema:
            return alt(*[Lit(self.dump(v)) for v in _enum_values(schema, path)])
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                options = [self.rule(f"{name}-{i}", sub, f"{path}/{keyword}/{i}")
                           for i, sub in enumerate(schema[keyword]) if sub is not False]
                if not options:
                    raise SchemaError(path, f"no option of {keyword} holds a value")
                return alt(*options)
        kind = schema.get("type")
        if isinstance(kind, list):
            return alt(*[self.typed({**schema, "type": k}, k, f"{name}-{k}", path) for k in kind])
        if kind is None:
            kind = primary_type(schema) if ("properties" in schema or "items" in schema) else None
        if kind is None:
            return add_json(self.g)
        return self.typed(schema, kind, name, path)

    def ref(self, target, path: str) -> Node:
        if target in self.refs:
            if target in self.unguarded:
                raise SchemaError(path, f"$ref {target!r} comes back to itself before any "
                                        "value is written (a loop)")
            return self.refs[target]
        node = resolve_ref(self.root_schema, target, path)
        parts = [p for p in target[2:].split("/")
                 if p not in ("$defs", "definitions")] if target != "#" else ["root"]
        name = _unique_rule(self.g, "ref-" + "-".join(_slug(p) for p in parts))
        ref = Ref(name)
        self.refs[target] = ref
        self.g.add(name, Lit(""))  # placeholder, so recursive references resolve
        self.unguarded.add(target)
        try:
            self.g.add(name, self.node(node, name, target))
        finally:
            self.unguarded.discard(target)
        return ref

    def written(self, convert, *args) -> Node:
        """`convert(*args)` for what a value holds after its first character: a $ref met
        again there is recursion, not a loop."""
        unguarded, self.unguarded = self.unguarded, set()
        try:
            return convert(*args)
        finally:
            self.unguarded = unguarded

    def bounds(self, schema: dict, keywords: tuple[str, str], path: str) -> tuple[int, int | None]:
        """A schema's (minimum, maximum) count (`minItems` / `maxItems`, `minLength` /
        `maxLength`): a minimum above MAX_REPETITION is a SchemaError, a maximum above it is
        left unenforced (a warning says so)."""
        low, high = (_count(schema, keyword, path) for keyword in keywords)
        low = low or 0
        if low > MAX_REPETITION:
            raise SchemaError(path, f"{keywords[0]} {low} is more than the {MAX_REPETITION} "
                                    "repetitions a grammar holds")
        if high is not None and high > MAX_REPETITION:
            self.warn(keywords[1], path, f"{high} is more than the {MAX_REPETITION} "
                                         "repetitions a grammar holds")
            high = None
        return low, high

    def repeated(self, item: Node, low: int, high: int | None, name: str) -> Rep:
        """`item` from `low` to `high` times (None: no bound); a bounded repetition of more
        than one character or rule repeats a named rule (see MAX_REPETITION)."""
        if not isinstance(item, (Ref, Chars, AnyChar, Lit)) \
                and (low, high) not in ((0, None), (1, None), (0, 1)):
            same = self.g.has(name) and self.g.rules[name].body == item
            item = Ref(name) if same else self.g.add(_unique_rule(self.g, name), item)
        return Rep(item, low, high)

    def typed(self, schema: dict, kind: str, name: str, path: str) -> Node:
        if kind == "string":
            if self.flavor == "python":
                return seq(Lit("'"), self.string_content(schema, name, path, json_escapes=False,
                                                         python=True), Lit("'"))
            return seq(Lit('"'), self.string_content(schema, name, path, json_escapes=True),
                       Lit('"'))
        if kind == "integer":
            return self.integer(schema, path)
        if kind == "number":
            self.check_bounds(schema, path, integer=False)
            add_json(self.g)
            number = Ref("json-number")
            if isinstance(schema.get("minimum"), (int, float)) and schema["minimum"] >= 0:
                return seq(alt(Lit("0"), seq(chars("1-9"), Rep(chars("0-9")))),
                           opt(seq(Lit("."), Rep(chars("0-9"), 1))),
                           opt(seq(chars("eE"), opt(chars("-+")), Rep(chars("0-9"), 1))))
            return number
        if kind == "boolean":
            if self.flavor == "python":
                return alt(Lit("True"), Lit("False"))
            return alt(Lit("true"), Lit("false"))
        if kind == "null":
            return Lit("None") if self.flavor == "python" else Lit("null")
        if kind == "array":
            return self.written(self.array, schema, name, path)
        if kind == "object":
            return self.written(self.object, schema, name, path)
        self.warn("type", path, f"unknown type {kind!r}")
        return add_json(self.g)

    def array(self, schema: dict, name: str, path: str) -> Node:
        ws = self.ws
        low, high = self.bounds(schema, ("minItems", "maxItems"), path)
        if schema.get("items") is False:
            if low:
                raise SchemaError(path, f"minItems {low}, and its items hold no value (false)")
            high = 0
        if high == 0:
            return seq(Lit("["), ws, Lit("]"))
        item = self.rule(f"{name}-item", schema.get("items", {}), f"{path}/items")
        if high == 0:
            return seq(Lit("["), ws, Lit("]"))
        rest = self.repeated(seq(ws, Lit(","), ws, item), max(low - 1, 0),
                             None if high is None else high - 1, f"{name}-more")
        items = seq(item, rest)
        return seq(Lit("["), ws, items if low > 0 else opt(items), ws, Lit("]"))

    def object(self, schema: dict, name: str, path: str) -> Node:
        ws = self.ws
        # (a property whose schema is false is never written: it holds no value)
        properties = {k: v for k, v in (schema.get("properties") or {}).items() if v is not False}
        required = [k for k in schema.get("required", []) if k in properties]
        for never in [k for k in schema.get("required", []) if (schema.get("properties") or {})
                      .get(k, True) is False]:
            raise SchemaError(f"{path}/properties/{never}", f"the required property {never!r} "
                                                            "holds no value (false)")
        for missing in set(schema.get("required", [])) - set(properties):
            self.warn("required", path, f"{missing!r} is required but has no schema in properties")
        extra = extra_properties(schema, self.open_objects)
        add_json(self.g)
        members = []
        for key, sub in properties.items():
            # (properties a-b and a_b slug alike: each gets its own rule)
            value: Node = self.rule(_unique_rule(self.g, f"{name}-{_slug(key)}"), sub,
                              f"{path}/properties/{key}")
            members.append((key, seq(Lit(self.dump(key)), ws, Lit(":"), ws, value),
                            key in required))
        pair = None
        if extra is not False:
            value = self.any_value() if extra is True \
                else self.rule(f"{name}-extra", extra, f"{path}/additionalProperties")
            # An extra property's name is none of the declared ones (a declared name must
            # be written as the declared property, by its own schema, and at most once). Two
            # extras may still share a name: a context-free grammar cannot remember the set
            # of names written so far; the parser refuses the duplicate when it reads it.
            if not properties:
                key = Ref("py-string") if self.flavor == "python" else Ref("json-string")
            else:
                quote = "'" if self.flavor == "python" else '"'
                key = self.g.add(f"{name}-extra-key",
                                 _string_not_in(self.g, list(properties), quote),
                                 "a name not declared")
            pair = seq(key, ws, Lit(":"), ws, value)
        extras = Rep(seq(ws, Lit(","), ws, pair)) if pair is not None else Lit("")
        if not members:
            body = opt(seq(pair, extras)) if pair is not None else Lit("")
        else:
            listed = self._members(members, name, ws)
            if required:
                body = seq(listed, extras)
            else:
                body = opt(alt(seq(listed, extras), seq(pair, extras) if pair is not None
                               else listed))
        return seq(Lit("{"), ws, body, ws, Lit("}"))

    def _members(self, members, name: str, ws) -> Node:
        """At least one member, in order; optional ones may be skipped; commas between."""
        # after-i: members i.. once one was written (a named rule each, so size stays linear)
        after: Node = Lit("")
        for i in range(len(members) - 1, -1, -1):
            _, member, is_required = members[i]
            with_it = seq(ws, Lit(","), ws, member, after)
            after = self.g.add(f"{name}-after-{i}", with_it if is_required else alt(with_it, after))
        options = []
        for j, (_, member, is_required) in enumerate(members):
            following = Ref(f"{name}-after-{j + 1}") if j + 1 < len(members) else Lit("")
            options.append(seq(member, following))
            if is_required:
                break
        return alt(*options)

    def integer(self, schema: dict, path: str) -> Node:
        self.check_bounds(schema, path, integer=True)
        low, high = schema.get("minimum"), schema.get("maximum")
        if isinstance(low, int) and isinstance(high, int) \
                and 0 <= high - low <= MAX_ENUMERATED_RANGE:
            return alt(*[Lit(str(v)) for v in range(low, high + 1)])
        digits = alt(Lit("0"), seq(chars("1-9"), Rep(chars("0-9"))))
        if isinstance(low, (int, float)) and low >= 0:
            return digits
        if isinstance(high, (int, float)) and high < 0:
            return seq(Lit("-"), chars("1-9"), Rep(chars("0-9")))
        return seq(opt(Lit("-")), digits)

    def check_bounds(self, schema: dict, path: str, integer: bool) -> None:
        low, high = schema.get("minimum"), schema.get("maximum")
        exact = integer and isinstance(low, int) and isinstance(high, int) \
            and 0 <= high - low <= MAX_ENUMERATED_RANGE
        if exact:
            return
        if high is not None and not (isinstance(high, (int, float)) and high < 0):
            self.warn("maximum", path, "only the sign (or a small integer range) is enforced")
        if low is not None and not (isinstance(low, (int, float)) and low in (0, 0.0)):
            self.warn("minimum", path, "only the sign (or a small integer range) is enforced")

    def string_content(self, schema: dict, name: str, path: str, json_escapes: bool,
                       python: bool = False) -> Node:
        """The characters of a string (without its quotes): as JSON text writes them
        (`json_escapes`), as a Python literal in single quotes does (`python`), or raw. Each
        character of the grammar is one character of the string (an escape writes one), so
        that lengths and patterns are the string's."""
        if "pattern" in schema:
            node = pattern_to_ir(schema["pattern"], lambda why: self.warn("pattern", path, why))
            if node is not None:
                if "minLength" in schema or "maxLength" in schema:
                    self.warn("minLength/maxLength", path, "ignored next to a pattern")
                # (a pattern is about a string's characters; in a literal some are escapes)
                if python:
                    return python_spelled(node)
                return json_spelled(node) if json_escapes else node
        if python:
            # a character as repr() writes it in single quotes, or one escape of one character
            char = alt(chars("'\\\n\r", negate=True),
                       seq(Lit("\\"), alt(chars("\\'\"abfnrtv"), seq(Lit("x"), _HEX, _HEX),
                                           seq(Lit("u"), _HEX, _HEX, _HEX, _HEX))))
            low, high = self.bounds(schema, ("minLength", "maxLength"), path)
            return self.repeated(char, low, high, "py-char")
        return self._chars(schema, json_escapes, path)

    def _chars(self, schema: dict, json_escapes: bool, path: str) -> Node:
        if json_escapes:
            char = alt(chars('"\\\x00-\x1f', negate=True),
                       seq(Lit("\\"), alt(chars('"\\/bfnrt'),
                                          seq(Lit("u"), *[chars("0-9a-fA-F")] * 4))))
        else:
            char = AnyChar()
        low, high = self.bounds(schema, ("minLength", "maxLength"), path)
        return self.repeated(char, low, high, "json-char" if json_escapes else "raw-char")


# What a string literal must escape, per quote: JSON's, and Python's in single quotes.
_MUST_ESCAPE = {'"': (('"', '"'), ("\\", "\\"), ("\x00", "\x1f")),
                "'": (("'", "'"), ("\\", "\\"), ("\n", "\n"))}
_HEX = chars("0-9a-fA-F")
_ANY_ESCAPE = {'"': alt(chars('"\\/bfnrt'), seq(Lit("u"), _HEX, _HEX, _HEX, _HEX)), "'": AnyChar()}
# The one-letter escapes, and the character each writes.
_SHORT_ESCAPES = {
    '"': {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"},
    "'": {"\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
          "t": "\t", "v": "\v"},
}
# Python's escapes that write a character by its number or name (\x63 \u0063 \143 \N{...}),
# and the line continuation (a backslash before a newline writes nothing).
_PYTHON_NUMBERED = "xuUN01234567\n"


def _string_not_in(g: Grammar, names: list[str], quote: str = '"') -> Node:
    """A string literal (JSON, or Python in single quotes) whose text is none of `names`,
    however it is spelled: `"c\\u0069ty"` is the name `city` (the parser decodes keys before
    it compares them), so it is refused where `city` is."""
    rest = _string_rest(g, quote)
    trie: dict = {}
    for name in names:
        node = trie
        for ch in name:
            node = node.setdefault(ch, {})
        node[""] = {}  # end of a name

    def visit(node: dict) -> Node:
        options: list[Node] = []
        if "" not in node:
            options.append(Lit(""))  # the text may end here: it is no name
        children = sorted(k for k in node if k)
        for ch in children:
            options.append(seq(_spellings(ch, quote), visit(node[ch])))
        # any other character (or an escape of one) leaves every name behind
        options.append(seq(_leaving(children, quote), rest))
        return alt(*options)

    return seq(Lit(quote), visit(trie), Lit(quote))


def _string_rest(g: Grammar, quote: str) -> Ref:
    """The rest of a string literal, any characters and escapes (one rule: every way out of a
    name's prefix ends in it)."""
    name = "json-string-rest" if quote == '"' else "py-string-rest"
    if g.has(name):
        return Ref(name)
    any_char = alt(Chars(_MUST_ESCAPE[quote], negate=True), seq(Lit("\\"), _ANY_ESCAPE[quote]))
    return g.add(name, Rep(any_char), "the rest of a string")


def _plain(ch: str, quote: str) -> bool:
    """Whether the literal may hold `ch` unescaped."""
    return not any(a <= ch <= b for a, b in _MUST_ESCAPE[quote])


def _utf16(ch: str) -> list[int]:
    """The code units JSON's \\u escapes write `ch` in (two, a surrogate pair, above U+FFFF)."""
    code = ord(ch)
    if code < 0x10000:
        return [code]
    return [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)]


def _hex_digit(digit: str) -> Node:
    return chars(digit + digit.upper()) if digit.isalpha() else Lit(digit)


def _u_escape(unit: int) -> Node:
    """\\uXXXX of one code unit, its hex digits in either case. (The backslash a literal of
    its own, as in every escape here: llguidance's lexer, which takes the longest match,
    would otherwise read `\\u` where `\\` then `u` was meant.)"""
    return seq(Lit("\\"), Lit("u"), *[_hex_digit(d) for d in f"{unit:04x}"])


def _spellings(ch: str, quote: str) -> Node:
    """Every way the literal writes `ch`: as it is, by a one-letter escape, and (JSON) by its
    \\u escape."""
    forms: list[Node] = [Lit(ch)] if _plain(ch, quote) else []
    forms += [seq(Lit("\\"), Lit(letter)) for letter, written in _SHORT_ESCAPES[quote].items()
              if written == ch]
    if quote == '"':
        forms.append(seq(*[_u_escape(unit) for unit in _utf16(ch)]))
    return alt(*forms)


def _leaving(children: list[str], quote: str) -> Node:
    """One character, or one escape, that writes none of `children`: the text is then none of
    the names. Two spellings are refused here rather than followed, so that no name gets
    through in them: JSON's high surrogate of a child above U+FFFF not followed by a \\u
    escape, and Python's numbered and named escapes (\\x63 for `c`)."""
    plain = Chars(_MUST_ESCAPE[quote] + _char_set(children).ranges, negate=True)
    letters = [letter for letter, written in _SHORT_ESCAPES[quote].items()
               if written not in children]
    escapes: list[Node] = [_char_set(letters)] if letters else []
    options: list[Node] = [plain]
    if quote == '"':
        taken = {_utf16(c)[0] for c in children}  # a child's code, or its high surrogate
        escapes.append(seq(Lit("u"), _hex_not_in(taken)))
        lows: dict[int, set[int]] = {}
        for c in children:
            if len(_utf16(c)) == 2:
                lows.setdefault(_utf16(c)[0], set()).add(_utf16(c)[1])
        options += [seq(_u_escape(high), Lit("\\"), Lit("u"), _hex_not_in(low))
                    for high, low in sorted(lows.items())]
    elif "\\" not in children:
        # an escape Python does not know (\\q) writes the backslash itself, then the letter
        escapes.append(_char_set(list(_SHORT_ESCAPES[quote]) + list(_PYTHON_NUMBERED), negate=True))
    if escapes:
        options.append(seq(Lit("\\"), alt(*escapes)))
    return alt(*options)


def _hex_not_in(units: set[int]) -> Node:
    """Four hex digits (either case) that are none of `units`."""
    trie: dict = {}
    for unit in units:
        node = trie
        for digit in f"{unit:04x}":
            node = node.setdefault(digit, {})

    def visit(node: dict, depth: int) -> Node | None:
        if depth == 4:
            return None  # all four digits of an excluded unit
        options: list[Node] = []
        for digit in sorted(node):
            rest = visit(node[digit], depth + 1)
            if rest is not None:
                options.append(seq(_hex_digit(digit), rest))
        others = [d for d in "0123456789abcdef" if d not in node]
        if others:
            other = _char_set(others + [d.upper() for d in others])
            options.append(seq(other, Rep(_HEX, 3 - depth, 3 - depth) if depth < 3 else None))
        return alt(*options) if options else None

    found = visit(trie, 0)
    assert found is not None  # (not every one of the 65536 units is excluded)
    return found


def _char_set(characters, negate: bool = False) -> Chars:
    """A class of the characters, runs of consecutive ones as ranges (never read back from a
    spec, where a `-` among them would make a range)."""
    ranges: list[list[int]] = []
    for code in sorted({ord(c) for c in characters}):
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return Chars(tuple((chr(a), chr(b)) for a, b in ranges), negate)


def _count(schema: dict, keyword: str, path: str) -> int | None:
    """A count keyword's value (`minItems`, `maxLength`, ...): a non-negative integer (2.0 is
    one, as JSON Schema reads it), or None when the schema has none."""
    value = schema.get(keyword)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if value is None or isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise SchemaError(path, f"{keyword} must be a non-negative integer, not {value!r}")


def _enum_values(schema: dict, path: str) -> list:
    """The values of `enum` (an empty one accepts nothing: no grammar can be written for it)."""
    values = schema["enum"]
    if not values:
        raise SchemaError(path, "enum is empty: no value is valid")
    return values


def resolve_ref(root, target, path: str = "#"):
    """The subschema a `$ref` names: `#` (the whole schema) or a JSON pointer into it. Any other
    reference (a URL, an anchor), or one that names nothing, is a SchemaError: nothing is
    fetched, and nothing is guessed."""
    if not isinstance(target, str) or not (target == "#" or target.startswith("#/")):
        raise SchemaError(path, f"$ref {target!r} is not a local reference (# or #/...): only "
                                "those are read, nothing is fetched")
    node = root
    for part in target[2:].split("/") if target != "#" else []:
        # (a URI fragment: %-escaped, RFC 6901)
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise SchemaError(path, f"$ref {target!r} does not resolve: the "
                                    "schema has nothing there")
    return node


def check_refs(schema, path: str = "#", root=None) -> None:
    """Every `$ref` in `schema` (in its subschemas, not in values such as `enum`) is local and
    resolves (`resolve_ref`); SchemaError at the first that does not."""
    root = schema if root is None else root
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        resolve_ref(root, schema["$ref"], path)
    for keyword, value in schema.items():
        where = f"{path}/{keyword}"
        if keyword in _SUBSCHEMA_MAP and isinstance(value, dict):
            for name, sub in value.items():
                check_refs(sub, f"{where}/{name}", root)
        elif keyword in _SUBSCHEMA_LIST and isinstance(value, list):
            for i, sub in enumerate(value):
                check_refs(sub, f"{where}/{i}", root)
        elif keyword in _ONE_SUBSCHEMA:
            check_refs(value, where, root)


def _unique_rule(g: Grammar, name: str) -> str:
    """`name`, or `name-2`, ... when the grammar already has a rule of that name."""
    unique, n = name, 1
    while g.has(unique):
        n += 1
        unique = f"{name}-{n}"
    return unique


def _slug(text: str) -> str:
    out = "".join(c if c.isascii() and c.isalnum() else "-" for c in str(text).lower())
    return "-".join(p for p in out.split("-") if p) or "x"


def inlined(schema, warnings: list[str], root=None, path: str = "#", seen: tuple = ()):
    """`schema` with each local `$ref` replaced by what it points to (its other keywords kept
    beside), for a notation whose values are typed property by property, without the whole
    schema at hand (key/value, XML, a format's own notation). A `$ref` met again inside its
    own expansion (recursion) becomes any value, and a warning says so."""
    root = schema if root is None else root
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = schema["$ref"]
        if target in seen:
            message = (f"JSON Schema keyword '$ref' at {path}: a recursive reference in this "
                       "notation is any value; not enforced by the grammar")
            if message not in warnings:
                warnings.append(message)
            return True
        resolved = resolve_ref(root, target, path)
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        merged = {**resolved, **rest} if isinstance(resolved, dict) else resolved
        return inlined(merged, warnings, root, target, seen + (target,))
    out: dict[str, Any] = {}
    for keyword, value in schema.items():
        if keyword in ("$defs", "definitions"):
            continue
        if keyword in _SUBSCHEMA_MAP and isinstance(value, dict):
            out[keyword] = {k: inlined(v, warnings, root, f"{path}/{keyword}/{k}", seen)
                            for k, v in value.items()}
        elif keyword in _SUBSCHEMA_LIST and isinstance(value, list):
            out[keyword] = [inlined(v, warnings, root, f"{path}/{keyword}/{i}", seen)
                            for i, v in enumerate(value)]
        elif keyword in _ONE_SUBSCHEMA:
            out[keyword] = inlined(value, warnings, root, f"{path}/{keyword}", seen)
        else:
            out[keyword] = value
    return out


def add_schema(g: Grammar, schema: dict, name: str, warnings: list[str], flavor: str = "json",
               open_objects: bool = False) -> Ref:
    """Add rules for values valid under `schema` (JSON, or Python literals); returns the rule.

    The rule records the schema its text is JSON of, for an emitter that hands the schema to
    an engine instead: closed as the rule is (`closed_objects`) unless `open_objects`."""
    # (this schema's warnings: an emitter that writes the schema itself drops them)
    own: list[str] = []
    converter = _Converter(g, schema if isinstance(schema, dict) else {}, own, flavor, open_objects)
    ref = converter.rule(name, schema, "#")
    warnings.extend(w for w in own if w not in warnings)
    if flavor == "json" and isinstance(schema, (dict, bool)):
        g.rules[name].json_schema = schema if open_objects else closed_objects(schema)
        g.rules[name].schema_warnings = tuple(own)
    return ref


def add_string_content(g: Grammar, schema: dict, name: str, warnings: list[str],
                       stops: tuple[str, ...] = ()) -> Ref:
    """The text of a string (no quotes, no escapes): for formats that write strings raw, or
    between quotes of their own (`stops`: the closing quote, which the text must not hold)."""
    converter = _Converter(g, schema, warnings)
    if "enum" in schema or "const" in schema:
        values = [schema["const"]] if "const" in schema else _enum_values(schema, "#")
        for value in values:
            _refuse_stops(str(value), stops, "#")
        return g.add(name, alt(*[Lit(str(v)) for v in values]))
    node = converter.string_content(schema, name, "#", json_escapes=False)
    return g.add(name, _without_stop_starts(node, stops) if stops else node)


def add_raw_value(g: Grammar, schema: dict, name: str, warnings: list[str], flavor: str = "json",
                  open_objects: bool = False, stops: tuple[str, ...] = ()) -> Node:
    """A value written as raw text (a template printed it with {{ value }}): its schema's type.

    Objects and arrays are written as JSON or, by templates that print them as they are, as
    Python literals (`flavor`); their undeclared properties as `extra_properties` says.
    `stops`: what ends a raw value where it is written (a parser reads the value up to the
    first): a const or an enum value that holds one cannot be written (SchemaError), and a
    string the schema constrains (a pattern, a length) holds none of their first characters."""
    for keyword in ("anyOf", "oneOf"):
        if isinstance(schema.get(keyword), list):
            # (each option as a raw value of its own; the parser types the text by the options'
            # types in their order)
            options = [add_raw_value(g, option if isinstance(option, dict) else {}, name,
                                     warnings, flavor, open_objects, stops)
                       for option in schema[keyword] if option is not False]
            if not options:
                raise SchemaError("#", f"no option of {keyword} holds a value")
            return alt(*options)
    kind = primary_type(schema)
    converter = _Converter(g, schema, warnings, flavor if kind in ("object", "array") else "json",
                           open_objects)
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else _enum_values(schema, "#")
        texts = [v if isinstance(v, str) else converter.dump(v) for v in values]
        for text in texts:
            _refuse_stops(text, stops, "#")
        return alt(*[Lit(t) for t in texts])
    if kind == "integer":
        return converter.integer(schema, "#")
    if kind == "number":
        return converter.typed(schema, "number", name, "#")
    if kind == "boolean":
        # (1/0: as the runtime reads them)
        return alt(Lit("true"), Lit("false"), Lit("True"), Lit("False"), Lit("1"), Lit("0"))
    if kind == "null":
        return alt(Lit("null"), Lit("None"))
    if kind == "string":
        node = converter.string_content(schema, name, "#", json_escapes=False)
        return _without_stop_starts(node, stops) if stops else node
    return converter.node(schema, name, "#")


def _refuse_stops(text: str, stops: tuple[str, ...], path: str) -> None:
    for stop in stops:
        if stop and stop in text:
            raise SchemaError(path, f"the value {text!r} holds {stop!r}, which ends a value "
                                    "in this family's notation: it cannot be written there")


def _without_stop_starts(node: Node, stops: tuple[str, ...]) -> Node:
    """A raw string's node that writes none of the stops' first characters: its classes lose
    them; a literal that holds one is a SchemaError (a literal `<` and the characters after it
    could spell `</arg_value>`: the value would read back cut)."""
    firsts = sorted({stop[0] for stop in stops if stop})
    if isinstance(node, Lit):
        for ch in firsts:
            if ch in node.text:
                stop = next(s for s in stops if s.startswith(ch))
                raise SchemaError("#", f"the pattern writes {ch!r}, which begins {stop!r}, the "
                                       "end of a value in this family's notation")
        return node
    if isinstance(node, AnyChar):
        return Chars(tuple((c, c) for c in firsts), negate=True)
    if isinstance(node, Chars):
        if node.negate:
            return Chars(node.ranges + tuple((c, c) for c in firsts), negate=True)
        return Chars(_ranges_without(node.ranges, firsts), negate=False)
    if isinstance(node, Seq):
        return seq(*[_without_stop_starts(item, stops) for item in node.items])
    if isinstance(node, Alt):
        return alt(*[_without_stop_starts(item, stops) for item in node.items])
    if isinstance(node, Rep):
        return Rep(_without_stop_starts(node.item, stops), node.min, node.max)
    return node


def _ranges_without(ranges: tuple[tuple[str, str], ...],
                    taken: list[str]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for a, b in ranges:
        start = ord(a)
        for code in sorted(ord(c) for c in taken if a <= c <= b):
            if start < code:
                out.append((chr(start), chr(code - 1)))
            start = code + 1
        if start <= ord(b):
            out.append((chr(start), b))
    return tuple(out)


# ---------------------------------------------------------------------------
# Regular-expression subset for `pattern`


def pattern_to_ir(pattern: str, warn) -> Node | None:
    """An anchored pattern (^...$) as IR; None (after a warning) when outside the subset.

    The subset: literals, escapes (\\d \\w \\s and escaped punctuation), classes [...] and
    [^...], ".", groups (...), alternation |, and the quantifiers * + ? {m} {m,} {m,n}.
    """
    if not (pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$")):
        warn(f"only anchored patterns (^...$) are supported, not {pattern!r}")
        return None
    try:
        parser = _PatternParser(pattern[1:-1])
        node = parser.alternation()
        if parser.i != len(parser.text):
            raise ValueError(f"unexpected {parser.text[parser.i]!r}")
        return node
    except ValueError as e:
        warn(f"{pattern!r} is outside the supported subset ({e})")
        return None


_ESCAPE_CLASSES = {"d": "0-9", "w": "A-Za-z0-9_", "s": " \t\n\r\f\v"}
_CONTROL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\x00",
                    "b": "\b"}


# What a JSON string must escape, and the escape json.dumps writes for each (JSON text: a
# pattern's `"` is `\"` there).
_JSON_MUST_ESCAPE = ['"', "\\"] + [chr(c) for c in range(0x20)]


def json_spelled(node: Node) -> Node:
    """A pattern's node as the JSON text of the characters it writes: each character JSON must
    escape (a quote, a backslash, a control character) as the escape json.dumps writes, the
    others as they are."""
    if isinstance(node, Lit):
        return Lit(json.dumps(node.text, ensure_ascii=False)[1:-1])
    if isinstance(node, (Chars, AnyChar)):
        allowed = [ch for ch in _JSON_MUST_ESCAPE if _in_class(node, ch)]
        ranges = () if isinstance(node, AnyChar) else node.ranges
        plain = Chars(ranges + tuple((c, c) for c in _JSON_MUST_ESCAPE), negate=True) \
            if isinstance(node, AnyChar) or node.negate \
            else Chars(_ranges_without(ranges, _JSON_MUST_ESCAPE), negate=False)
        escapes = [Lit(json.dumps(ch)[1:-1]) for ch in allowed]
        return alt(*([plain] if plain.negate or plain.ranges else []), *escapes)
    if isinstance(node, Seq):
        return seq(*[json_spelled(item) for item in node.items])
    if isinstance(node, Alt):
        return alt(*[json_spelled(item) for item in node.items])
    if isinstance(node, Rep):
        return Rep(json_spelled(node.item), node.min, node.max)
    return node


# What a single-quoted Python literal must escape, and the escape it writes for each.
_PYTHON_ESCAPES = {"'": "\\'", "\\": "\\\\", "\n": "\\n", "\r": "\\r"}
_PYTHON_MUST_ESCAPE = list(_PYTHON_ESCAPES)


def python_spelled(node: Node) -> Node:
    """A pattern's node as the text of a single-quoted Python literal of the characters it
    writes: a quote, a backslash, a line break as repr() escapes them, the others as they are."""
    if isinstance(node, Lit):
        return Lit("".join(_PYTHON_ESCAPES.get(ch, ch) for ch in node.text))
    if isinstance(node, (Chars, AnyChar)):
        allowed = [ch for ch in _PYTHON_MUST_ESCAPE if _in_class(node, ch)]
        ranges = () if isinstance(node, AnyChar) else node.ranges
        plain = Chars(ranges + tuple((c, c) for c in _PYTHON_MUST_ESCAPE), negate=True) \
            if isinstance(node, AnyChar) or node.negate \
            else Chars(_ranges_without(ranges, _PYTHON_MUST_ESCAPE), negate=False)
        escapes = [Lit(_PYTHON_ESCAPES[ch]) for ch in allowed]
        return alt(*([plain] if plain.negate or plain.ranges else []), *escapes)
    if isinstance(node, Seq):
        return seq(*[python_spelled(item) for item in node.items])
    if isinstance(node, Alt):
        return alt(*[python_spelled(item) for item in node.items])
    if isinstance(node, Rep):
        return Rep(python_spelled(node.item), node.min, node.max)
    return node


def _in_class(node: Node, ch: str) -> bool:
    if isinstance(node, AnyChar):
        return True
    assert isinstance(node, Chars)
    inside = any(a <= ch <= b for a, b in node.ranges)
    return inside != node.negate


def _repetitions(node: Node) -> int:
    """How many times a bounded repetition (nested ones multiplied) copies what it repeats."""
    if isinstance(node, Rep):
        return max(node.min, node.max or 1) * _repetitions(node.item)
    return max((_repetitions(child) for child in children(node)), default=1)


class _PatternParser:
    def __init__(self, text: str):
        self.text = text
        self.i = 0

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def alternation(self) -> Node:
        options = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.sequence())
        return alt(*options)

    def sequence(self) -> Node:
        items = []
        while self.peek() and self.peek() not in "|)":
            items.append(self.quantified(self.atom()))
        return seq(*items)

    def atom(self) -> Node:
        ch = self.peek()
        self.i += 1
        if ch == "(":
            if self.text.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise ValueError("lookaround and named groups")
            node = self.alternation()
            if self.peek() != ")":
                raise ValueError("unclosed group")
            self.i += 1
            return node
        if ch == "[":
            return self.char_class()
        if ch == ".":
            return chars("\n", negate=True)
        if ch == "\\":
            esc = self.peek()
            self.i += 1
            if esc in _ESCAPE_CLASSES:
                return chars(_ESCAPE_CLASSES[esc])
            if esc in "DWS":
                return chars(_ESCAPE_CLASSES[esc.lower()], negate=True)
            return Lit(self.escaped_character(esc, in_class=False))
        if ch in "*+?{":
            raise ValueError(f"nothing to repeat before {ch!r}")
        if ch in "^$":
            raise ValueError("anchors inside the pattern")
        return Lit(ch)

    def char_class(self) -> Node:
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        ranges: list[tuple[str, str]] = []
        first = True
        while first or self.peek() != "]":
            first = False
            if not self.peek():
                raise ValueError("unclosed class")
            ch = self.peek()
            self.i += 1
            if ch == "\\":
                esc = self.peek()
                self.i += 1
                if esc in _ESCAPE_CLASSES:
                    ranges.extend(chars(_ESCAPE_CLASSES[esc]).ranges)
                    continue
                if esc in "DWS":
                    raise ValueError(f"\\{esc} inside a class")
                ch = self.escaped_character(esc, in_class=True)
            if self.peek() == "-" and self.i + 1 < len(self.text) and self.text[self.i + 1] != "]":
                self.i += 1
                last = self.peek()
                self.i += 1
                if last == "\\":
                    last = self.escaped_character(self.peek(), in_class=True, moved=True)
                if last < ch:
                    raise ValueError(f"the range {ch!r}-{last!r} runs backwards")
                ranges.append((ch, last))
            else:
                ranges.append((ch, ch))
        self.i += 1
        return Chars(tuple(ranges), negate)

    def escaped_character(self, esc: str, in_class: bool, moved: bool = False) -> str:
        """The character an escape writes (the backslash read, `esc` the character after it,
        the position past `esc`, or on it when `moved`): \\xHH, \\uHHHH, the control escapes,
        \\b (a backspace, inside a class), and escaped punctuation; ValueError for the rest
        (\\b outside a class is a word boundary, \\1 a back reference, \\p a property)."""
        if moved:
            self.i += 1
        if not esc:
            raise ValueError("a pattern that ends with a backslash")
        if esc in "xu":
            width = 2 if esc == "x" else 4
            digits = self.text[self.i:self.i + width]
            if len(digits) != width or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"escape \\{esc} without {width} hex digits")
            self.i += width
            return chr(int(digits, 16))
        if esc in _CONTROL_ESCAPES and (esc != "b" or in_class):
            return _CONTROL_ESCAPES[esc]
        if esc.isalnum():
            raise ValueError(f"escape \\{esc}")
        return esc

    def quantified(self, node: Node) -> Node:
        ch = self.peek()
        if ch == "*":
            self.i += 1
            node = Rep(node, 0, None)
        elif ch == "+":
            self.i += 1
            node = Rep(node, 1, None)
        elif ch == "?":
            self.i += 1
            node = Rep(node, 0, 1)
        elif ch == "{":
            end = self.text.find("}", self.i)
            if end == -1:
                raise ValueError("unclosed {")
            body = self.text[self.i + 1:end]
            self.i = end + 1
            low, _, high = body.partition(",")
            if not low.isdigit() or (high and not high.isdigit()):
                raise ValueError(f"quantifier {{{body}}}")
            node = Rep(node, int(low), int(low) if "," not in body
                       else (int(high) if high else None))
            if _repetitions(node) > MAX_REPETITION:
                raise ValueError(f"quantifier {{{body}}}: more than the {MAX_REPETITION} "
                                 "repetitions a grammar holds")
        if self.peek() and self.peek() in "*+?{":
            raise ValueError("lazy or nested quantifiers")
        return node


__all__ = ["MAX_REPETITION", "SchemaError", "add_schema", "check_refs", "inlined", "resolve_ref",
           "add_string_content", "add_raw_value", "closed_objects", "extra_properties",
           "primary_type", "pattern_to_ir", "TextUntil"]
