"""Load and render: a chat template from a GGUF file, a .jinja, a tokenizer_config.json or a
model folder (`load`), and rendering it exactly as transformers does, in a sandbox."""

from .loader import load
from .render import RenderLimits
from .template import ChatTemplate

__all__ = ["ChatTemplate", "RenderLimits", "load"]
