"""tplparse: turn an LLM's chat template into the parsers and grammars serving code needs.

Pipeline: load (GGUF / Jinja / tokenizer_config.json) -> render (sandboxed, as transformers
does) -> probe -> ProtocolSpec -> grammar IR -> emitters (PEG, GBNF, streaming parsers).
"""

from .bridge import GaveUp, Prompt, Success, ToolCallError, feedback_messages, validate_content, validate_tool_calls, with_retries
from .errors import InputError, LoadError, TemplateError, TplparseError
from .loader import load
from .render import RenderLimits
from .template import ChatTemplate

__all__ = [
    "ChatTemplate",
    "GaveUp",
    "Prompt",
    "Success",
    "ToolCallError",
    "feedback_messages",
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
