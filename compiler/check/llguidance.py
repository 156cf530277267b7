"""Check Lark grammars with the real llguidance, when it is installed.

- `validate(lark)`: llguidance compiles the grammar (its error message otherwise).
- `accepts(lark, text)`: drive llguidance's matcher over `text` with a byte-level
  tokenizer (token i is byte i, as the llama.cpp check steps single bytes; each special
  token the grammar may name is one token of its own), then ask whether the grammar is
  complete there.

The tokenizer is made per set of special tokens: text is tokenized by taking a special
token wherever one starts (longest first), else one byte.
"""

from __future__ import annotations

from functools import lru_cache

from ..emit.lark import nameable_token, token_split


def available() -> bool:
    try:
        import llguidance  # noqa: F401
    except ImportError:
        return False
    return True


class _ByteTokens:
    """What llguidance's TokenizerWrapper reads: 256 byte tokens, the special tokens (marked
    with byte 0xFF, as llguidance expects), and an end-of-sequence token."""

    def __init__(self, special_tokens: tuple[str, ...]):
        self.special = {token: 256 + i for i, token in enumerate(special_tokens)}
        self.tokens = [bytes([i]) for i in range(256)] \
            + [b"\xff" + t.encode("utf-8") for t in special_tokens]
        self.tokens.append(b"\xff<|tplparse-eos|>")
        self.eos_token_id = len(self.tokens) - 1
        self.bos_token_id = None
        self.special_token_ids = list(range(256, len(self.tokens)))

    def __call__(self, text) -> list[int]:
        return list(text if isinstance(text, bytes) else text.encode("utf-8"))

    def encode(self, text: str) -> list[int]:
        order = sorted(self.special, key=lambda t: (-len(t), t))
        ids: list[int] = []
        for part in token_split(text, order):
            ids.extend([self.special[part]] if part in self.special else part.encode("utf-8"))
        return ids


@lru_cache(maxsize=16)
def _tokenizer(special_tokens: tuple[str, ...]):
    import llguidance

    tokens = _ByteTokens(special_tokens)
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(tokens), slices=[]), tokens


class LarkChecker:
    def __init__(self, special_tokens: tuple[str, ...] = ()):
        import llguidance

        self.llguidance = llguidance
        self.special_tokens = tuple(sorted({t for t in special_tokens if nameable_token(t)}))
        self.tokenizer, self.tokens = _tokenizer(self.special_tokens)

    def _matcher(self, lark: str):
        grammar = self.llguidance.LLMatcher.grammar_from_lark(lark)
        return self.llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)

    def validate(self, lark: str) -> tuple[bool, str]:
        matcher = self._matcher(lark)
        if matcher.is_error():
            return False, matcher.get_error().splitlines()[0]
        return True, ""

    def encode(self, text: str) -> list[int]:
        return self.tokens.encode(text)

    def accepts(self, lark: str, text: str) -> bool:
        """Whether the grammar takes `text`, token by token, and is complete at its end."""
        return self.accepts_tokens(lark, self.tokens.encode(text))

    def accepts_tokens(self, lark: str, tokens: list[int]) -> bool:
        matcher = self._matcher(lark)
        if matcher.is_error():
            raise ValueError("llguidance rejected the grammar: "
                             f"{matcher.get_error().splitlines()[0]}")
        for token in tokens:
            if not matcher.consume_token(token):
                return False
        return matcher.is_accepting()


__all__ = ["LarkChecker", "available"]
