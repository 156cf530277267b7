"""Load and render: a chat template from a GGUF file, a .jinja, a tokenizer_config.json or a
model folder (`load`), and rendering it exactly as transformers does, in a sandbox.

The names are imported from their modules on first use (PEP 562): the CLI imports the
isolation module from here without the GGUF reader (numpy) and jinja2 coming along."""

from importlib import import_module

_LAZY = {"load": ".loader", "RenderLimits": ".render", "ChatTemplate": ".template"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["ChatTemplate", "RenderLimits", "load"]
