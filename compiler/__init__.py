"""tplparse: turn an LLM's chat template into the parsers and grammars serving code needs.

Pipeline, one folder per stage: source (load, render) -> probe -> spec -> grammar (IR,
reading tables) -> emit (PEG, GBNF, parser modules) -> check (reference parser, GBNF
acceptors); runtime (the streaming parser, standard library only); bridge (prompt,
validation, retries); pipeline (the files of a template, the manifest build); cli.
"""

from .bridge import (GaveUp, Prompt, Success, ToolCallError, feedback_messages, parser_for, prompt_for,
                     validate_content, validate_tool_calls, with_retries)
from .errors import InputError, LoadError, TemplateError, TplparseError
from .source import ChatTemplate, RenderLimits, load

prompt = prompt_for  # tplparse.prompt(template, messages, tools=..., thinking=...)

__all__ = [
    "ChatTemplate",
    "GaveUp",
    "Prompt",
    "Success",
    "ToolCallError",
    "feedback_messages",
    "parser_for",
    "prompt",
    "prompt_for",
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
__version__ = "0.1.0"
