"""tplparse: turn an LLM's chat template into the parsers and grammars serving code needs.

Pipeline, one folder per stage: source (load, render) -> probe -> spec -> grammar (IR,
reading tables) -> emit (PEG, GBNF, parser modules) -> check (reference parser, GBNF
acceptors); runtime (the streaming parser, standard library only); bridge (prompt,
validation, retries); pipeline (the files of a template, the manifest build); cli.
"""

from importlib import import_module

from .errors import InputError, LoadError, TemplateError, TplparseError
from .version import __version__ as __version__

# The API's names, each imported from its stage on first use (PEP 562): `import tplparse` (and
# `tplparse --version`, `tplparse parse generated/<family>.py`) loads no probe, grammar or
# GGUF reader until a name that needs one is asked for.
_LAZY = {
    **dict.fromkeys(["GaveUp", "Identity", "Prompt", "Recorder", "Success", "ToolCallError",
                     "Transcript", "append_transcript", "feedback_messages", "parser_for",
                     "prompt_for", "read_transcripts", "replay",
                     "validate_content", "validate_tool_calls", "with_retries"], ".bridge"),
    **dict.fromkeys(["ChatTemplate", "RenderLimits", "load"], ".source"),
}


def __getattr__(name: str):
    if name == "prompt":  # tplparse.prompt(template, messages, tools=..., thinking=...)
        return __getattr__("prompt_for")
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"prompt"})


__all__ = [
    "ChatTemplate",
    "GaveUp",
    "Identity",
    "Prompt",
    "Recorder",
    "Success",
    "ToolCallError",
    "Transcript",
    "append_transcript",
    "feedback_messages",
    "parser_for",
    "prompt",
    "prompt_for",
    "read_transcripts",
    "replay",
    "validate_content",
    "validate_tool_calls",
    "with_retries",
    "InputError",
    "LoadError",
    "RenderLimits",
    "TemplateError",
    "TplparseError",
    "load",
]
