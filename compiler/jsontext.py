"""JSON a user gives (a tokenizer_config.json, a messages or tools file, standard input), read
into Python values, or one clear error.

`json.loads` fails three ways on text it was not made for, only one of them a JSONDecodeError:
arrays or objects nested deeper than Python's recursion limit (a RecursionError), and an
integer of more digits than Python converts from a string (a ValueError: 4,300 by default,
a bound against quadratic conversion). Each is an error of the caller's class naming the
file and what is wrong, never a traceback.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .errors import TplparseError


def loads(text: str, where: str, error: type[TplparseError], what: str = "") -> Any:
    """`text` read as JSON; `error(message)` naming `where` (and `what` the file is) when it
    does not read."""
    label = f"{where}: invalid JSON" + (f" ({what})" if what else "")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{label} at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise error(f"{label}: arrays or objects nested deeper than Python's recursion limit "
                    f"({sys.getrecursionlimit()}) can read") from None
    except ValueError:  # (an integer longer than Python converts: sys.get_int_max_str_digits)
        raise error(f"{label}: an integer of more than {_digit_limit()} digits, the longest "
                    "Python reads from text") from None


def _digit_limit() -> int:
    return getattr(sys, "get_int_max_str_digits", lambda: 4300)()
