"""Check GBNF with the real llama.cpp (through llama-cpp-python), when it is installed.

- `validate(gbnf)`: llama.cpp's own GBNF parser accepts the grammar
  (`llama_sampler_init_grammar` returns NULL otherwise; its message, written to C stderr,
  is captured and returned).
- `accepts(gbnf, text)`: step the grammar sampler one single-byte token at a time over
  `text` (always apply before accept: accepting a rejected token aborts the process), then
  ask whether an end-of-generation token is allowed, which llama.cpp allows only when the
  grammar is complete.

A byte-level vocabulary (token i is byte i, see `byte_vocab`) is written once per process.
"""

from __future__ import annotations

import ctypes
import math
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .byte_vocab import write_byte_vocab

_CHECKER = None


def available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


@contextmanager
def _captured_stderr():
    """Capture what C code writes to file descriptor 2."""
    captured = {"text": ""}
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured["text"] = sink.read().decode("utf-8", "replace")


class LlamaGrammarChecker:
    def __init__(self):
        import llama_cpp

        self.llama = llama_cpp
        self.dir = tempfile.mkdtemp(prefix="tplparse-vocab-")
        path = write_byte_vocab(Path(self.dir) / "bytes.gguf", title="tplparse byte vocabulary",
                                basename="bytes", control=["<s>", "</s>"], bos="<s>", eos="</s>")
        with _captured_stderr():
            llama_cpp.llama_backend_init()
            params = llama_cpp.llama_model_default_params()
            params.vocab_only = True
            self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise RuntimeError("llama.cpp could not load the byte vocabulary")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.eos = llama_cpp.llama_vocab_eos(self.vocab)

    def _sampler(self, gbnf: str):
        with _captured_stderr() as err:
            sampler = self.llama.llama_sampler_init_grammar(self.vocab, gbnf.encode("utf-8"),
                                                            b"root")
        return sampler, err["text"]

    def validate(self, gbnf: str) -> tuple[bool, str]:
        sampler, message = self._sampler(gbnf)
        if not sampler:
            return False, message.strip() or "llama.cpp rejected the grammar"
        self.llama.llama_sampler_free(sampler)
        return True, ""

    def _allowed(self, sampler, token: int) -> bool:
        data = (self.llama.llama_token_data * 1)()
        data[0].id = ctypes.c_int32(token)
        data[0].logit = 0.0
        data[0].p = 0.0
        candidates = self.llama.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
        self.llama.llama_sampler_apply(sampler, ctypes.byref(candidates))
        return not math.isinf(data[0].logit)

    def accepts(self, gbnf: str, text: str) -> bool:
        """Whether the grammar generates exactly `text` (then may end)."""
        sampler, message = self._sampler(gbnf)
        if not sampler:
            raise ValueError(f"llama.cpp rejected the grammar: {message.strip()}")
        try:
            for byte in text.encode("utf-8"):
                if not self._allowed(sampler, byte):
                    return False
                self.llama.llama_sampler_accept(sampler, byte)
            return self._allowed(sampler, self.eos)
        finally:
            self.llama.llama_sampler_free(sampler)


def checker() -> LlamaGrammarChecker:
    global _CHECKER
    if _CHECKER is None:
        _CHECKER = LlamaGrammarChecker()
    return _CHECKER
