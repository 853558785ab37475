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


def test_qlora_keeps_the_loaded_dtypes_and_no_input_gradients():
    """peft's prepare_model_for_kbit_training cast norms/embeddings/head to fp32 and made inputs require grad."""
    import torch

    from llmgym.config import LoRAConfig
    from llmgym.llm.adapters import apply_lora
    from llmgym.testing import tiny_causal_lm

    model, _ = tiny_causal_lm()
    model = model.to(torch.bfloat16)
    model.is_loaded_in_4bit = True  # what a bitsandbytes load sets (its kernels need CUDA)
    peft_model = apply_lora(model, LoRAConfig(r=4), quantized=True)
    frozen = {n: p.dtype for n, p in peft_model.named_parameters() if not p.requires_grad}
    assert frozen and set(frozen.values()) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in peft_model.parameters() if p.requires_grad)
    embedded = peft_model.get_input_embeddings()(torch.tensor([[1, 2]]))
    assert not embedded.requires_grad
