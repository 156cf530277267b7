"""Emitters: what the grammar IR and the spec become on disk.

    peg            the PEG grammar (parsimonious syntax)
    gbnf           the GBNF grammar for llama.cpp
    lark           the Lark grammar for llguidance (llama.cpp %llguidance, vLLM guidance,
                   SGLang, Guidance)
    llama_request  the fields llama.cpp's server takes (lazy grammar, triggers, preserved tokens)
    module         the generated streaming parser files (runtime, family modules, standalone)
    code           the indenting emitter they print through
"""
