"""The distribution generated actions are sampled from, and log-probs under it.

``generate(do_sample=True, temperature=T, top_k=k, top_p=p)`` draws each token from the model's
distribution rescaled by ``T``, cut to the ``k`` most likely tokens and then to the smallest set
whose mass reaches ``p`` (the nucleus), and renormalised. A policy-gradient update of such actions
must score them under that same distribution: :func:`sampled_logprobs` applies transformers' own
warpers, in the order ``generate`` applies them, to the logits of a forward pass.

NLPO (:mod:`llmgym.llm.masking`) further restricts every token to the top-p set of a mask policy
(``Sampling.mask_top_p``); the mask is applied first, as ``generate`` runs it before the warpers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

import torch

from llmgym.errors import InputError
from llmgym.llm.validation import check_generation_kwargs

__all__ = ["Sampling", "sampled_logprobs"]


@dataclass(frozen=True)
class Sampling:
    """Temperature, top-k and top-p of sampled generation.

    Attributes:
        temperature: Logits are divided by it (> 0).
        top_k: Keep the ``top_k`` most likely tokens (0: all of them).
        top_p: Keep the smallest set of most likely tokens whose probability reaches ``top_p``
            (in ``(0, 1]``; 1: all of them).
        mask_top_p: NLPO: keep only the smallest set of tokens whose probability under the LLM's
            mask policy (:class:`~llmgym.llm.masking.MaskPolicy`) reaches ``mask_top_p``, before
            the other cuts (in ``(0, 1]``; 1: no mask).

    Raises:
        InputError: On a value out of range.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    mask_top_p: float = 1.0

    def __post_init__(self) -> None:
        unset = [name for name in ("temperature", "top_k", "top_p", "mask_top_p") if getattr(self, name) is None]
        if unset:
            raise InputError(f"Sampling got None for {unset}; give a number (1.0, 0 and 1.0 leave the model's distribution).")
        check_generation_kwargs(
            {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "mask_top_p": self.mask_top_p}
        )
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_k", int(self.top_k))
        object.__setattr__(self, "top_p", float(self.top_p))
        object.__setattr__(self, "mask_top_p", float(self.mask_top_p))

    @property
    def is_plain(self) -> bool:
        """Whether this is the model's own distribution (no rescaling, no truncation)."""
        return self.temperature == 1.0 and self.top_k == 0 and self.top_p == 1.0 and not self.is_masked

    @property
    def is_masked(self) -> bool:
        """Whether tokens are restricted to the mask policy's top-p set (NLPO)."""
        return self.mask_top_p < 1.0

    def without_mask(self) -> Sampling:
        """The same temperature, top-k and top-p without the mask policy's restriction."""
        return replace(self, mask_top_p=1.0)

    def generation_kwargs(self) -> dict[str, Any]:
        """The ``generate`` arguments that sample from this distribution (``mask_top_p`` when masked)."""
        kwargs: dict[str, Any] = {"do_sample": True, "temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}
        if self.is_masked:
            kwargs["mask_top_p"] = self.mask_top_p
        return kwargs


def _warp(scores: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Apply transformers' temperature, top-k and top-p warpers as ``generate`` does (removed tokens: -inf)."""
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    if sampling.temperature != 1.0:
        scores = TemperatureLogitsWarper(sampling.temperature)(None, scores)
    if sampling.top_k != 0:
        scores = TopKLogitsWarper(top_k=sampling.top_k)(None, scores)
    if sampling.top_p < 1.0:
        scores = TopPLogitsWarper(top_p=sampling.top_p)(None, scores)
    return scores


def sampled_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, sampling: Sampling | None, keep: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Log-probs of target tokens under the sampling distribution of their logits.

    The target token is never cut by the mask, top-k or top-p: it was sampled, so it was kept
    when it was drawn, and at those weights the result equals the log-prob ``generate`` reports
    (``Generation.logprobs``). After an update moves it out of the kept set, it is scored against
    the kept tokens and itself, a finite value where the truncated distribution would give -inf.

    Args:
        logits: ``[N, V]`` logits of the positions that predict the targets.
        targets: ``[N]`` token ids.
        sampling: The distribution; ``None`` (or a plain one) is the model's own.
        keep: ``[N, V]`` bool mask-policy tokens (:func:`~llmgym.llm.masking.top_p_mask`) when
            ``sampling.mask_top_p < 1``, applied before the warpers; ``None``: no mask.

    Returns:
        ``[N]`` float32 log-probs (differentiable in ``logits``).
    """
    scores = logits.float()
    if (sampling is None or sampling.is_plain) and keep is None:
        return torch.log_softmax(scores, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
    sampling = sampling if sampling is not None else Sampling()
    index = targets[:, None]
    masked = scores if keep is None else scores.masked_fill(~keep.to(scores.device), float("-inf"))
    warped = _warp(masked, sampling)
    target_scores = (scores / sampling.temperature).gather(-1, index)
    warped = warped.scatter(-1, index, target_scores)
    return torch.log_softmax(warped, dim=-1).gather(-1, index).squeeze(-1)
