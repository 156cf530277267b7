"""A schema's `pattern`, checked against a value within a time bound, and without holding the
interpreter while it runs.

Python's `re` backtracks: `^(a+)+$` against forty `a` and a `b` runs for minutes, in one C
call that holds the GIL, so that a server's other clients (its event loop, every thread) wait
as long. Patterns come from clients (a tool's schema), and so do the values checked against
them (a schema's `const` and `enum`, a model's arguments), so each search here runs on the
`regex` engine, which gives up after a time (`PatternTooCostly`) and lets other threads run
while it searches; a validator (`Validator`, `iter_errors`) checks `pattern` and
`patternProperties` with it, every other keyword as jsonschema does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import jsonschema
import regex
from jsonschema import ValidationError

# What one validation (or one schema's check) may spend on its patterns, all together.
PATTERN_SECONDS = 1.0


class PatternTooCostly(Exception):
    """A pattern took longer than its budget to search a value."""

    def __init__(self, pattern: str, seconds: float):
        self.pattern = pattern
        self.seconds = seconds
        shown = pattern if len(pattern) <= 80 else pattern[:80] + "..."
        super().__init__(f"pattern {shown!r} takes more than {seconds:g} s to check")


class PatternBudget:
    """The time a run of searches may take together (`PATTERN_SECONDS` by default)."""

    def __init__(self, seconds: float = PATTERN_SECONDS):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def search(self, pattern: str, text: str) -> bool:
        """Whether `pattern` matches somewhere in `text` (as JSON Schema's `pattern` reads it);
        PatternTooCostly when the budget runs out first; regex.error when it is no pattern."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise PatternTooCostly(pattern, self.seconds)
        try:
            return _compiled(pattern).search(text, timeout=left, concurrent=True) is not None
        except TimeoutError:
            raise PatternTooCostly(pattern, self.seconds) from None


_COMPILED: dict[str, Any] = {}


def _compiled(pattern: str):
    found = _COMPILED.get(pattern)
    if found is None:
        if len(_COMPILED) > 512:
            _COMPILED.clear()
        found = _COMPILED[pattern] = regex.compile(pattern)
    return found


# The budget of the validation under way (validators jsonschema makes for subschemas are new
# objects: the budget is not one of their attributes).
_BUDGET: ContextVar[PatternBudget | None] = ContextVar("tplparse_pattern_budget", default=None)


def _search(pattern: str, text: str) -> bool:
    budget = _BUDGET.get()
    if budget is None:  # (a validator used outside iter_errors: a budget of its own per search)
        budget = PatternBudget()
    return budget.search(pattern, text)


def _pattern(validator, pattern, instance, schema) -> Iterator[ValidationError]:
    if isinstance(instance, str) and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


# Every string format of Draft 2020-12, checked (not read as an annotation): jsonschema's
# checkers (their libraries are tplparse's dependencies), and `iri`, `iri-reference` here: the
# library jsonschema checks IRIs with builds a grammar when imported, 3 s of every command's start.
# (a checker of its own: the draft's is shared by every user of jsonschema in the process)
FORMATS = jsonschema.FormatChecker(())
FORMATS.checkers = dict(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)


def _as_uri(iri: str) -> str:
    """The URI an IRI maps to (RFC 3987, 3.1): each character past ASCII written as the
    percent-encoded bytes of its UTF-8 (UnicodeEncodeError for a lone surrogate)."""
    return "".join(c if c < "\x80" else "".join(f"%{b:02X}" for b in c.encode("utf-8"))
                   for c in iri)


def _iri_check(rule: str):
    def check(instance) -> bool:
        from rfc3986_validator import validate_rfc3986  # type: ignore[import-untyped]

        if not isinstance(instance, str):
            return True
        try:
            return bool(validate_rfc3986(_as_uri(instance), rule=rule))
        except UnicodeEncodeError:
            return False
    return check


FORMATS.checks("iri")(_iri_check("URI"))
FORMATS.checks("iri-reference")(_iri_check("URI_reference"))

# Draft 2020-12, its pattern keywords searched by the bounded engine.
Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {
    "pattern": _pattern, "patternProperties": _pattern_properties})


def iter_errors(schema, value, budget: PatternBudget | None = None) -> list[ValidationError]:
    """Every error of `value` under `schema`, its pattern searches within `budget` (a new one of
    PATTERN_SECONDS when None); PatternTooCostly when they take longer."""
    token = _BUDGET.set(budget or PatternBudget())
    try:
        return list(Validator(schema, format_checker=FORMATS).iter_errors(value))
    finally:
        _BUDGET.reset(token)


__all__ = ["PATTERN_SECONDS", "PatternBudget", "PatternTooCostly", "Validator", "iter_errors"]
