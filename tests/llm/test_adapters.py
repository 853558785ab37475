"""PEFT helpers."""

from __future__ import annotations

from llmgym.llm.adapters import base_model
from llmgym.testing import tiny_causal_lm


def test_base_model_unwraps_peft():
    from peft import LoraConfig, get_peft_model

    model, _ = tiny_causal_lm("llama")
    assert base_model(model) is model
    wrapped = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
    assert base_model(wrapped) is model
