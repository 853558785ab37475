"""llmgym's own generation engine (``model.generation_engine: builtin``): batched ``generate`` on the trained model.

It samples with the model the LLM trains, so it always holds the current weights: syncing and
releasing them cost nothing.
"""

from __future__ import annotations

from typing import Any

from llmgym.llm.generation import Generation, MaskFactory, generate
from llmgym.llm.masking import DecoderIncrementalMask, IncrementalMask
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
        self,
        contexts: list[str],
        generation_kwargs: dict[str, Any],
        mask_top_p: float,
        mask_min_tokens: int = 1,
    ) -> list[list[Generation]]:
        """Sample continuations of ``contexts`` (see :func:`~llmgym.llm.generation.generate`).

        ``mask_top_p < 1`` (NLPO) restricts every token to the host's mask policy's top-p set, and
        keeps at least its ``mask_min_tokens`` most likely tokens.
        """
        host = self._host
        kwargs = dict(generation_kwargs)
        if mask_top_p < 1.0:
            kwargs["logits_mask"] = self._mask_keep(mask_top_p, mask_min_tokens)
        with host.autocast():
            return generate(host.model, host.tokenizer, host.encoder, contexts, **kwargs)

    def _mask_keep(self, top_p: float, min_tokens: int) -> MaskFactory:
        """Per call, the ``[R, V]`` tokens the mask policy keeps after each row so far."""
        host = self._host
        special, pad = host.special_ids(), host.pad_token_id
        if host.is_seq2seq:
            return lambda prompts: DecoderIncrementalMask(
                host.mask_policy, host.model, top_p, special, pad, prompts, min_tokens
            )
        return lambda prompts: IncrementalMask(host.mask_policy, host.model, top_p, special, pad, min_tokens)

    def sync_weights(self, version: int) -> None:
        """Nothing to do: the engine samples with the trained model itself."""

    def release(self) -> None:
        """Nothing to free: the engine holds no copy of the weights."""

    def close(self) -> None:
        """Nothing to free."""
