"""A tokenizer wrapper that records what it is asked to tokenize (for bounds on tokenization work)."""

from __future__ import annotations

from typing import Any

__all__ = ["CountingTokenizer"]


class CountingTokenizer:
    """Forwards to a tokenizer, recording the length of every text it tokenizes.

    Args:
        tokenizer: The tokenizer to wrap; every attribute but the call is its own.

    Attributes:
        lengths: The character length of each text passed to a call, in order.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.lengths: list[int] = []

    def __call__(self, text: str, **kwargs: Any) -> Any:
        """Record ``len(text)``, then tokenize it as the wrapped tokenizer does."""
        self.lengths.append(len(text))
        return self.tokenizer(text, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)
