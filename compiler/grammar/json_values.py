"""JSON (and Python-literal) value rules in the grammar IR."""

from __future__ import annotations

from .ir import AnyChar, Grammar, Lit, Ref, Rep, alt, chars, opt, seq

# Whitespace between JSON tokens. Bounded, so a constrained model cannot loop on it.
WS_MAX = 64


def add_ws(g: Grammar) -> Ref:
    if not g.has("ws"):
        g.add("ws", Rep(chars(" \t\n\r"), 0, WS_MAX), "optional whitespace")
    return Ref("ws")


def add_json(g: Grammar) -> Ref:
    """json-value and the rules it needs; returns a reference to json-value."""
    if g.has("json-value"):
        return Ref("json-value")
    ws = add_ws(g)
    hexdigit = chars("0-9a-fA-F")
    g.add("json-string", seq(
        Lit('"'),
        Rep(alt(
            chars('"\\\x00-\x1f', negate=True),
            seq(Lit("\\"), alt(chars('"\\/bfnrt'),
                               seq(Lit("u"), hexdigit, hexdigit, hexdigit, hexdigit))),
        )),
        Lit('"'),
    ), "a JSON string: its quotes end it, markers inside it are text",
          json_schema={"type": "string"})
    digits = Rep(chars("0-9"), 1)
    g.add("json-number", seq(
        opt(Lit("-")),
        alt(Lit("0"), seq(chars("1-9"), Rep(chars("0-9")))),
        opt(seq(Lit("."), digits)),
        opt(seq(chars("eE"), opt(chars("-+")), digits)),
    ), json_schema={"type": "number"})
    g.add("json-literal", alt(Lit("true"), Lit("false"), Lit("null")))
    member = seq(Ref("json-string"), ws, Lit(":"), ws, Ref("json-value"))
    g.add("json-object", seq(
        Lit("{"), ws, opt(seq(member, Rep(seq(ws, Lit(","), ws, member)))), ws, Lit("}"),
    ), json_schema={"type": "object"})
    g.add("json-array", seq(
        Lit("["), ws, opt(seq(Ref("json-value"), Rep(seq(ws, Lit(","), ws, Ref("json-value"))))),
        ws, Lit("]"),
    ), json_schema={"type": "array"})
    g.add("json-value", alt(
        Ref("json-object"), Ref("json-array"), Ref("json-string"), Ref("json-number"),
        Ref("json-literal"),
    ), "any JSON value", json_schema={})
    return Ref("json-value")


def add_python_literal(g: Grammar) -> Ref:
    """py-value: a Python literal as repr() writes it (strings in quotes, True/False/None)."""
    if g.has("py-value"):
        return Ref("py-value")
    ws = add_ws(g)
    add_json(g)  # numbers are the same
    g.add("py-string", alt(
        seq(Lit("'"), Rep(alt(chars("'\\", negate=True), seq(Lit("\\"), AnyChar()))), Lit("'")),
        seq(Lit('"'), Rep(alt(chars('"\\', negate=True), seq(Lit("\\"), AnyChar()))), Lit('"')),
    ), "a Python string literal")
    member = seq(Ref("py-string"), ws, Lit(":"), ws, Ref("py-value"))
    g.add("py-dict", seq(Lit("{"), ws, opt(seq(member, Rep(seq(ws, Lit(","), ws, member)))), ws,
                         Lit("}")))
    g.add("py-list", seq(
        Lit("["), ws, opt(seq(Ref("py-value"), Rep(seq(ws, Lit(","), ws, Ref("py-value"))))), ws,
        Lit("]"),
    ))
    g.add("py-value", alt(
        Ref("py-dict"), Ref("py-list"), Ref("py-string"), Ref("json-number"),
        Lit("True"), Lit("False"), Lit("None"),
    ), "any Python literal")
    return Ref("py-value")
