"""An indenting emitter for generated Python (the pegen way of printing code)."""

from __future__ import annotations

from contextlib import contextmanager


class CodeEmitter:
    """Lines of Python, indented by context."""

    def __init__(self):
        self.lines: list[str] = []
        self.level = 0

    def line(self, text: str = "") -> None:
        self.lines.append(("    " * self.level + text) if text else "")

    def lines_of(self, text: str) -> None:
        """Several lines at the current indentation (blank lines stay blank)."""
        for line in text.split("\n"):
            self.line(line)

    @contextmanager
    def indent(self):
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
