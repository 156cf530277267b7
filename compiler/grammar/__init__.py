"""The grammar: a model's whole turn in one IR, built from the spec.

    ir            the grammar model (rules of Lit, Chars, Seq, Alt, Rep, Ref, TextUntil,
                  StringUntil, End) and its visitor
    reading       how a spec is read: the answers the grammar and the runtime share (the
                  reading tables)
    build         the turn's grammar from a spec (generic form, rendered layouts, calls, arguments)
    json_values   JSON and Python-literal value rules
    json_schema   JSON Schema as grammar rules
"""

from .build import GrammarOptions, ToolChoice, build

__all__ = ["GrammarOptions", "ToolChoice", "build"]
