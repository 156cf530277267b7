"""tplparse's version: the package's, and what `tplparse --version` and the build cache read
(a module of its own, so that reading it imports no stage)."""

__version__ = "0.1.0"
