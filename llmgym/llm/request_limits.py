"""How much memory one ``generate`` request takes, estimated from the model config before anything is allocated.

A request keeps, for each of its rows (contexts times ``num_return_sequences``), the scores of every
step over the whole vocabulary (the processed and the raw logits, float32, which the per-token
log-probs are read from) and the KV cache of its prompt and new tokens. Both grow with
``rows * max_new_tokens``; the scores dominate for real vocabularies (t5-small: 32,128 tokens, so
32,768 new tokens of one row are 8.4 GB of scores). A request whose estimate exceeds the memory free
on the model's device is refused with an ``InputError`` instead of dying in the allocator after
taking gigabytes (and the machine with it).
"""

from __future__ import annotations

from typing import Any

import torch

from llmgym.errors import InputError

__all__ = ["available_bytes", "check_generation_memory", "generation_bytes"]

#: Bytes of one float32 score.
_SCORE_BYTES = 4


def _first_int(config: Any, names: tuple[str, ...]) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 0


def generation_bytes(
    model_config: Any, rows: int, prompt_tokens: int, new_tokens: int, dtype_bytes: int
) -> int:
    """Estimated bytes a request's step scores and KV cache take (a lower bound: activations come on top).

    Args:
        model_config: The model's ``config`` (``vocab_size``, layer count and widths).
        rows: Sequences generated side by side: contexts times ``num_return_sequences``.
        prompt_tokens: Tokens of the longest prompt (the encoder's input for a seq2seq model).
        new_tokens: Most new tokens per sequence.
        dtype_bytes: Bytes per element of the model's activations.

    Returns:
        ``2 * rows * new_tokens * vocab * 4`` (processed and raw scores) plus the self-attention cache
        ``rows * positions * layers * 2 * kv_width * dtype_bytes`` (and a seq2seq model's cross-attention cache).
    """
    vocab = _first_int(model_config, ("vocab_size",))
    layers = _first_int(model_config, ("num_decoder_layers", "num_hidden_layers", "num_layers", "n_layer"))
    hidden = _first_int(model_config, ("hidden_size", "d_model", "n_embd"))
    heads = _first_int(model_config, ("num_attention_heads", "num_heads", "n_head"))
    kv_heads = _first_int(model_config, ("num_key_value_heads",)) or heads
    head_dim = _first_int(model_config, ("head_dim", "d_kv")) or (hidden // heads if heads else 0)
    kv_width = kv_heads * head_dim or hidden
    seq2seq = bool(getattr(model_config, "is_encoder_decoder", False))
    positions = new_tokens + (1 if seq2seq else prompt_tokens)
    cache_positions = positions + (prompt_tokens if seq2seq else 0)
    scores = 2 * rows * new_tokens * vocab * _SCORE_BYTES
    cache = rows * cache_positions * layers * 2 * kv_width * dtype_bytes
    return scores + cache


def available_bytes(device: torch.device) -> int:
    """Memory free for a new allocation on ``device``: the GPU's free memory, else the machine's available RAM."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


def check_generation_memory(
    needed: int, available: int, rows: int, new_tokens: int, num_return_sequences: int, where: str
) -> None:
    """Refuse a request whose estimated memory (:func:`generation_bytes`) exceeds what is free.

    Args:
        needed: The estimate, in bytes.
        available: Bytes free on the device (:func:`available_bytes`).
        rows: Sequences generated side by side.
        new_tokens: Most new tokens per sequence.
        num_return_sequences: Sequences per context.
        where: The device, for the message.

    Raises:
        InputError: Naming the request's size, the estimate, the memory free and the fix.
    """
    if needed <= available:
        return
    raise InputError(
        f"this generate request needs about {needed / 2**30:,.1f} GiB ({rows:,} sequences: contexts x "
        f"num_return_sequences={num_return_sequences:,}, up to max_new_tokens={new_tokens:,} each, with the scores "
        f"of every step over the vocabulary and the KV cache), more than the {available / 2**30:,.1f} GiB free on "
        f"{where}; it would fail in the allocator after taking that memory. Fix: lower num_return_sequences or "
        "max_new_tokens, or generate fewer contexts per call."
    )
