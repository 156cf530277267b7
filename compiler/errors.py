"""The errors a user can cause (and fix).

Everything tplparse raises on bad input derives from `TplparseError`; the CLI prints
its one-line message and exits with status 2, never a traceback.
"""

from __future__ import annotations


class TplparseError(Exception):
    """Bad input: a file, a template, an argument or a model output the user supplied."""


class LoadError(TplparseError):
    """A source could not be loaded as a chat template (missing, not a GGUF, truncated, ...)."""


class TemplateError(TplparseError):
    """A chat template failed to compile or render.

    `template` names the template, `line` is the Jinja source line (1-based) when known.
    """

    def __init__(self, message: str, *, template: str = "", line: int | None = None):
        self.reason = message
        self.template = template
        self.line = line
        # Why transformers' sandbox refused what the own-containers sandbox renders (see
        # tplparse.source.render), or None.
        self.own_containers: str | None = None
        # A resource limit stopped the render (time, memory, output size, a value too big
        # to build), or a failure that is not the template's own (the machine could not start
        # the watchdog): no other way of rendering will do better, so probing stops too.
        self.limit = False
        where = template or "template"
        if line is not None:
            where += f", line {line}"
        super().__init__(f"{where}: {message}")


class InputError(TplparseError):
    """Messages, tools or arguments that are not what tplparse accepts."""


class CannotExport(TplparseError):
    """The target format cannot express a construct of the family's protocol.

    `construct` names it (one phrase, e.g. "channel messages"); the message says what and why.
    """

    def __init__(self, construct: str, detail: str = "", *, target: str = "response_template"):
        self.construct = construct
        self.target = target
        super().__init__(f"{target} cannot express {construct}" + (f": {detail}" if detail else ""))
