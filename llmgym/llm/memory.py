"""Memory knobs of the LLM layer: activation (gradient) checkpointing, the trunk cache's budget on a GPU."""

from __future__ import annotations

from typing import Any

import torch

from llmgym.errors import ConfigError
from llmgym.llm.adapters import base_model

__all__ = ["TRUNK_CACHE_FREE_FRACTION", "enable_gradient_checkpointing", "trunk_cache_bytes"]

#: Most of a GPU's free memory (when the LLM is built) the frozen-trunk cache may take.
TRUNK_CACHE_FREE_FRACTION = 0.25


def trunk_cache_bytes(requested_mb: int, device: torch.device) -> int:
    """The frozen-trunk cache's budget: ``model.trunk_cache_mb``, capped on a GPU by its free memory.

    The cache holds activations on the model's device; on a GPU it may take at most
    :data:`TRUNK_CACHE_FREE_FRACTION` of the memory free when the LLM is built, so that it never
    crowds out the update's activations.

    Args:
        requested_mb: ``model.trunk_cache_mb``.
        device: The model's device.
    """
    requested = requested_mb * 2**20
    if device.type != "cuda" or requested <= 0:
        return requested
    free, _ = torch.cuda.mem_get_info(device)
    return min(requested, int(free * TRUNK_CACHE_FREE_FRACTION))


def enable_gradient_checkpointing(model: Any) -> int:
    """Recompute each transformer block's activations in backward instead of keeping them (``model.gradient_checkpointing``).

    Transformers checkpoints a block only while that block is in training mode, and llmgym keeps
    models in eval mode (no dropout). So only the blocks' own ``training`` flags are set, not their
    children's: dropout stays off, and the blocks checkpoint whenever gradients are enabled.
    Non-reentrant checkpointing needs no input that requires grad.

    Args:
        model: A transformers model (optionally PEFT-wrapped).

    Returns:
        The number of checkpointed blocks.

    Raises:
        ConfigError: The model does not support gradient checkpointing.
    """
    from transformers.modeling_layers import GradientCheckpointingLayer

    base = base_model(model)
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise ConfigError(
            f"model.gradient_checkpointing=true but {type(base).__name__} does not support gradient checkpointing; "
            "set it to false (or lower model.forward_batch_size to save memory)."
        )
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    blocks = [m for m in base.modules() if isinstance(m, GradientCheckpointingLayer)]
    for block in blocks:
        torch.nn.Module.train(block, False)  # children (dropout) in eval ...
        block.training = True  # ... the block itself "training", which is what enables its checkpoint
    return len(blocks)
