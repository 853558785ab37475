"""llmgym's own generation engine (``model.generation_engine: builtin``): batched ``generate`` on the trained model.

It samples with the model the LLM trains, so it always holds the current weights: syncing and
releasing them cost nothing.
"""

from __future__ import annotations

from typing import Any

from llmgym.llm.generation import Generation, MaskFactory, generate
from llmgym.llm.masking import IncrementalMask, TokenMask
from llmgym.llm.protocols import EngineHost

__all__ = ["BuiltinEngine"]


class BuiltinEngine:
    """Samples with :func:`~llmgym.llm.generation.generate` on the host's model (a :class:`~llmgym.llm.protocols.GenerationEngine`).

    Args:
        host: The LLM it samples for.
    """

    def __init__(self, host: EngineHost) -> None:
        self._host = host

    def generate(
        self, contexts: list[str], generation_kwargs: dict[str, Any], mask: TokenMask
    ) -> list[list[Generation]]:
        """Sample with :func:`~llmgym.llm.generation.generate`, an active ``mask`` run on the host's mask policy."""
        host = self._host
        kwargs = dict(generation_kwargs)
        if mask.active:
            kwargs["logits_mask"] = self._mask_keep(mask)
        with host.autocast():
            return generate(host.model, host.tokenizer, host.encoder, contexts, **kwargs)

    def _mask_keep(self, mask: TokenMask) -> MaskFactory:
        """Per call, the ``[R, V]`` tokens the mask policy keeps after each row so far."""
        host = self._host
        special, pad, seq2seq = host.special_ids(), host.pad_token_id, host.is_seq2seq
        return lambda prompts: IncrementalMask(
            host.mask_policy,
            host.model,
            mask.top_p,
            special,
            pad,
            mask.min_tokens,
            prompts if seq2seq else None,
        )

    def sync_weights(self, version: int) -> None:
        """Nothing to do: the engine samples with the trained model itself."""

    def release(self) -> None:
        """Nothing to free: the engine holds no copy of the weights."""

    def close(self) -> None:
        """Nothing to free."""
