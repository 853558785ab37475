"""Offline helpers for tests: tiny models and tokenizers, fake envs, a gloo harness."""

from llmgym.testing.counting import CountingTokenizer
from llmgym.testing.tiny_models import (
    TINY_CORPUS,
    save_tiny_classifier,
    save_tiny_model,
    tiny_causal_lm,
    tiny_seq2seq_lm,
    tiny_tokenizer,
    tiny_tool_tokenizer,
)

__all__ = [
    "CountingTokenizer",
    "TINY_CORPUS",
    "save_tiny_classifier",
    "save_tiny_model",
    "tiny_causal_lm",
    "tiny_seq2seq_lm",
    "tiny_tokenizer",
    "tiny_tool_tokenizer",
]
