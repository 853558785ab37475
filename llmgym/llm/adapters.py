"""LoRA / QLoRA adapters through PEFT."""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any, Optional

from llmgym.config import LoRAConfig
from llmgym.errors import ConfigError

__all__ = [
    "apply_lora",
    "base_model",
    "cache_kwarg",
    "check_quantization",
    "is_peft_model",
    "lora_target_modules",
]

# The ModuleList of transformer blocks is named so in every common architecture (llama "layers", GPT-2 "h",
# T5 "block"); the group captures the block index.
_BLOCK_INDEX = re.compile(r"(?:^|\.)(?:layers|layer|h|block|blocks)\.(\d+)\.")


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is wrapped by PEFT."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def base_model(model: Any) -> Any:
    """The transformers model under a PEFT wrapper (``model`` itself when it is not wrapped)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def cache_kwarg(model: Any) -> str:
    """Name of the KV-cache argument of the model's forward (``cache`` in transformers >= 5.x)."""
    return (
        "cache" if "cache" in inspect.signature(base_model(model).forward).parameters else "past_key_values"
    )


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
        quantized: The model was loaded in 4 bit (QLoRA): its base is frozen as loaded (dtypes kept).

    Returns:
        The ``peft.PeftModel``.
    """
    from peft import LoraConfig, get_peft_model

    if quantized:
        # Not peft's prepare_model_for_kbit_training: it casts the embeddings, norms and LM head to
        # fp32 whatever model.dtype is, and makes the input embeddings require grad, so a trunk-cache
        # miss would backpropagate through every frozen block. A frozen 4-bit base is all LoRA needs
        # (get_peft_model adds the adapters in fp32); gradient checkpointing is set up separately.
        for param in model.parameters():
            param.requires_grad_(False)
    seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora_target_modules(model, lora.target_modules, lora.layers),
        task_type="SEQ_2_SEQ_LM" if seq2seq else "CAUSAL_LM",
    )
    return get_peft_model(model, config)


def lora_target_modules(
    model: Any, target_modules: Optional[Sequence[str]], layers: Optional[Sequence[int]]
) -> list[str] | str:
    """PEFT's ``target_modules`` for the adapted module names, restricted to some blocks.

    Args:
        model: The transformers model to adapt.
        target_modules: Module name suffixes (``["q_proj", "v_proj"]``), or ``None`` for every linear
            layer but the LM head.
        layers: Indices of the transformer blocks to adapt (negative ones count from the top), or
            ``None`` for all blocks.

    Returns:
        ``"all-linear"`` or the suffixes unchanged when ``layers`` is ``None``; otherwise the full
        names of the selected linear modules inside the selected blocks.

    Raises:
        ConfigError: A layer index outside the model's blocks, or a selection that matches no module.
    """
    if layers is None:
        return list(target_modules) if target_modules else "all-linear"
    import torch
    from transformers.pytorch_utils import Conv1D

    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    blocks: dict[str, int] = {}
    for name, module in model.named_modules():
        match = _BLOCK_INDEX.search(name)
        if match is None or not isinstance(module, (torch.nn.Linear, Conv1D)) or module is output:
            continue
        if target_modules and not any(name == t or name.endswith("." + t) for t in target_modules):
            continue
        blocks[name] = int(match.group(1))
    if not blocks:
        raise ConfigError(
            f"model.lora.layers={list(layers)} with target_modules={target_modules} selects no linear module; "
            "check the module names (print(model) shows them)."
        )
    n_blocks = 1 + max(blocks.values(), default=-1)
    chosen = set()
    for index in layers:
        if not -n_blocks <= index < n_blocks:
            raise ConfigError(
                f"model.lora.layers contains {index}, but the model has {n_blocks} adaptable blocks; "
                f"use indices in [{-n_blocks}, {n_blocks - 1}] (negative ones count from the top)."
            )
        chosen.add(index % n_blocks)
    return sorted(name for name, index in blocks.items() if index in chosen)
