"""Exports: a family's protocol written for another tool (`tplparse export ...`).

`response_template`: the declarative parser transformers 5 reads from tokenizer_config.json;
`vllm_plugin`: a vLLM plugin. An export either writes the format's own data or raises
`CannotExport` naming the construct the format cannot express. Nothing here imports the
target tool (the tests run it, to prove an export reads the template's renders as tplparse does).
"""

from ..errors import CannotExport
from .response_template import response_template

__all__ = ["CannotExport", "response_template"]
