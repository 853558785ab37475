"""LoRA / QLoRA adapters through PEFT."""

from __future__ import annotations

from typing import Any

from llmgym.config import LoRAConfig
from llmgym.errors import ConfigError, require

__all__ = ["apply_lora", "check_quantization", "is_peft_model"]


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is wrapped by PEFT."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def check_quantization(load_in_4bit: bool) -> None:
    """Raise when 4-bit loading is asked for on a machine without CUDA.

    Raises:
        ConfigError: ``load_in_4bit`` without a CUDA GPU.
    """
    import torch

    if load_in_4bit and not torch.cuda.is_available():
        raise ConfigError(
            "model.load_in_4bit=true needs a CUDA GPU (bitsandbytes 4-bit kernels) and none is available; "
            "set model.load_in_4bit=false (LoRA still works in full precision on CPU)."
        )


def apply_lora(model: Any, lora: LoRAConfig, *, quantized: bool = False) -> Any:
    """Wrap a model with trainable LoRA adapters; the base weights are frozen.

    Args:
        model: A transformers causal or seq2seq LM.
        lora: Rank, alpha, dropout and target modules (``None``: every linear layer but the LM head).
        quantized: The model was loaded in 4 bit (QLoRA): prepare it for k-bit training first.

    Returns:
        The ``peft.PeftModel``.

    Raises:
        MissingDependencyError: If peft is not installed.
    """
    require("peft", "lora", "model.lora")
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if quantized:
        model = prepare_model_for_kbit_training(model)
    seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules) if lora.target_modules else "all-linear",
        task_type="SEQ_2_SEQ_LM" if seq2seq else "CAUSAL_LM",
    )
    return get_peft_model(model, config)
