"""Independent checkers of what the emitters write.

    reference      the reference parser: a whole output parsed with the PEG grammar
    gbnf_lark      a lark reader of GBNF (syntax, with line numbers) and an Earley acceptor
    ir_match       whether a grammar accepts a text, read from its IR (the proof's check
                   without llama.cpp)
    llama          the real llama.cpp (llama-cpp-python): validation and acceptance, byte by byte
    byte_vocab     the byte-level vocabulary llama.cpp is loaded with for those checks
    llguidance     the real llguidance: Lark grammars compiled and driven one byte token at a time
    drift          two templates' protocols compared, each one's turns read by the other's parser
"""
