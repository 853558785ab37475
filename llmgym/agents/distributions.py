"""Categorical distributions and KL estimates: the math a policy's distribution is written in.

Pure tensor functions, no LLM: the softmax over a row of logits with ``-inf`` (or a ``False`` mask
entry) on the candidates that are not there (:func:`masked_log_softmax`), its entropy, log-prob and
exact KL, Schulman's per-sample KL estimators (:func:`kl_estimate`), and the stacking of candidate
scores of different lengths into ``[B, K]`` logits (:func:`pad_candidate_scores`).
:func:`tempered_logits` is the one place a candidate policy's temperature is applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Optional

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from llmgym.errors import InputError

__all__ = [
    "KLEstimator",
    "categorical_entropy",
    "categorical_kl",
    "categorical_log_prob",
    "kl_estimate",
    "masked_log_softmax",
    "pad_candidate_scores",
    "segment_sums",
    "tempered_logits",
]


#: The per-sample estimators of :func:`kl_estimate` (Schulman's k1, k2, k3).
KLEstimator = Literal["k1", "k2", "k3"]


def kl_estimate(log_probs: Tensor, ref_log_probs: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """Per-sample estimate of ``KL(pi || pi_ref)`` from actions sampled from ``pi``.

    With ``log_ratio = log pi(a) - log pi_ref(a)`` (Schulman's estimators):
    ``k1 = log_ratio`` (unbiased, can be negative), ``k2 = log_ratio ** 2 / 2`` (biased, low variance),
    ``k3 = exp(-log_ratio) - 1 + log_ratio`` (unbiased, always >= 0). All are 0 where the two
    log-probs are equal.

    Args:
        log_probs: Log-probs of the sampled actions under the policy, ``[B]`` or ``[B, L]``.
        ref_log_probs: Log-probs of the same actions under the reference policy, same shape.
        estimator: ``"k1"``, ``"k2"`` or ``"k3"``.

    Returns:
        Element-wise estimates, shape of ``log_probs``.

    Raises:
        InputError: On a shape mismatch or an unknown estimator.
    """
    if tuple(log_probs.shape) != tuple(ref_log_probs.shape):
        raise InputError(
            f"ref_log_probs has shape {list(ref_log_probs.shape)} but log_probs has {list(log_probs.shape)}; "
            "pass tensors of one shape ([B] per transition or [B, L] per token)."
        )
    log_ratio = log_probs - ref_log_probs
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.expm1(-log_ratio) + log_ratio
    raise InputError(f"estimator={estimator!r} is not a KL estimator; use 'k1', 'k2' or 'k3'.")


def _masked_logits(logits: Tensor, mask: Optional[Tensor]) -> Tensor:
    if mask is not None:
        if tuple(mask.shape) != tuple(logits.shape):
            raise InputError(
                f"mask has shape {list(mask.shape)} but logits has {list(logits.shape)}; pass a mask of the logits' shape."
            )
        logits = logits.masked_fill(~mask.to(device=logits.device, dtype=torch.bool), float("-inf"))
    if logits.dim() == 0 or logits.shape[-1] == 0:
        raise InputError(f"logits has shape {list(logits.shape)}; expected [..., K] with K >= 1 candidates.")
    if bool((logits == float("-inf")).all(dim=-1).any()):
        raise InputError(
            "a row of logits has no finite entry (every candidate is padding or masked out); "
            "give every row at least one valid candidate."
        )
    return logits


def masked_log_softmax(logits: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """``log softmax(logits)`` over the last dimension, ``-inf`` where ``mask`` is False: the one softmax.

    Args:
        logits: ``[..., K]`` logits; ``-inf`` marks a candidate that is not there.
        mask: Bool ``[..., K]``, True on valid candidates, or ``None``.

    Returns:
        ``[..., K]`` log-probs.

    Raises:
        InputError: On a mask shape mismatch or a row without any valid candidate.
    """
    return torch.log_softmax(_masked_logits(logits, mask), dim=-1)


def categorical_entropy(logits: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Entropy of the categorical distribution ``softmax(logits)`` along the last dimension.

    Works on raw logits or on log-probs (they are renormalised), on candidate sets ``[B, K]`` padded
    with ``-inf`` and on vocabularies ``[B, L, V]``. Padded entries contribute 0.

    Args:
        logits: Unnormalised log-probabilities ``[..., K]``; ``-inf`` marks an invalid candidate.
        mask: Bool ``[..., K]``, True on valid candidates; False entries are treated as ``-inf``.

    Returns:
        Entropies ``[...]`` (``log K`` for a uniform distribution over ``K`` valid candidates).

    Raises:
        InputError: On a mask shape mismatch or a row without any valid candidate.
    """
    log_p = masked_log_softmax(logits, mask)
    safe_log_p = torch.where(torch.isfinite(log_p), log_p, torch.zeros_like(log_p))
    return -(log_p.exp() * safe_log_p).sum(dim=-1)


def categorical_log_prob(logits: Tensor, actions: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Log-probability of the chosen candidate under ``softmax(logits)``.

    Args:
        logits: Candidate logits (e.g. candidate log-likelihoods / temperature) ``[B, K]``, ``-inf``
            on padding.
        actions: Chosen candidate index per row, int ``[B]``.
        mask: Bool ``[B, K]``, True on valid candidates, or ``None``.

    Returns:
        ``log pi(actions)``, ``[B]``.

    Raises:
        InputError: On a shape mismatch, a row without valid candidates, or an index pointing outside
            the row's valid candidates.
    """
    log_p_all = masked_log_softmax(logits, mask)
    if actions.dim() != 1 or actions.shape[0] != log_p_all.shape[0] or log_p_all.dim() != 2:
        raise InputError(
            f"actions has shape {list(actions.shape)} and logits {list(logits.shape)}; expected actions [B] "
            "and logits [B, K]."
        )
    index = actions.to(device=log_p_all.device, dtype=torch.long)
    if bool(((index < 0) | (index >= log_p_all.shape[1])).any()):
        raise InputError(f"actions must lie in [0, {log_p_all.shape[1]}); got {index.tolist()}.")
    log_p = log_p_all.gather(1, index.unsqueeze(1)).squeeze(1)
    # -inf is a masked candidate; NaN (weights gone non-finite) flows on to the loss, which the update checks.
    if bool(torch.isneginf(log_p).any()):
        raise InputError(
            "an action index points at a padded or masked-out candidate; pick a valid candidate."
        )
    return log_p


def categorical_kl(log_p: Tensor, other_log_p: Tensor, mask: Tensor) -> Tensor:
    """``KL(p || q) = sum_k p_k (log p_k - log q_k)`` over the real candidates of each row.

    Args:
        log_p: ``[B, K]`` log-probs of ``p`` (anything on padding).
        other_log_p: ``[B, K]`` log-probs of ``q``.
        mask: Bool ``[B, K]``, True on real candidates.

    Returns:
        ``[B]`` KLs.
    """
    terms = log_p.exp() * (log_p - other_log_p.to(log_p.device))
    return torch.where(mask, terms, torch.zeros_like(terms)).sum(-1)


def tempered_logits(scores: Tensor, temperature: float) -> Tensor:
    """``scores / temperature``: a candidate policy's logits, the one place its temperature is applied.

    Args:
        scores: Candidate scores (log-likelihoods or an action head's logits) of any shape.
        temperature: The softmax temperature (> 0; 1.0: the scores themselves).

    Returns:
        The logits, shape of ``scores``.

    Raises:
        InputError: ``temperature <= 0``.
    """
    if not temperature > 0:
        raise InputError(f"temperature={temperature!r} must be > 0; use 1.0 for the plain softmax.")
    return scores / temperature


def pad_candidate_scores(
    scores: Sequence[Tensor], temperature: float = 1.0, padding_value: float = float("-inf")
) -> tuple[Tensor, Tensor]:
    """Stack per-context candidate scores of different lengths (``LLM.score`` output) into logits.

    Args:
        scores: One 1-D tensor ``[k_i]`` per context (log p(candidate | context)).
        temperature: The policy is ``softmax(score / temperature)`` (:func:`tempered_logits`); must be > 0.
        padding_value: Value of the padded entries (``-inf``: zero probability).

    Returns:
        ``(logits, mask)``: ``logits [B, K]`` with ``K = max k_i`` (scores divided by the temperature,
        padding at the end of each row) and bool ``mask [B, K]``, True on real candidates.

    Raises:
        InputError: On an empty list, a non 1-D or empty score tensor, or ``temperature <= 0``.
    """
    if len(scores) == 0:
        raise InputError("scores is empty; pass one tensor of candidate scores per context.")
    for i, row in enumerate(scores):
        if not isinstance(row, Tensor) or row.dim() != 1 or row.numel() == 0:
            shape = list(row.shape) if isinstance(row, Tensor) else type(row).__name__
            raise InputError(f"scores[{i}] is {shape}; each entry must be a non-empty 1-D tensor [k_i].")
    first = scores[0]
    rows = [tempered_logits(row.to(device=first.device, dtype=first.dtype), temperature) for row in scores]
    logits = pad_sequence(rows, batch_first=True, padding_value=padding_value)
    lengths = torch.tensor([row.shape[0] for row in rows], device=first.device)
    mask = torch.arange(logits.shape[1], device=first.device).unsqueeze(0) < lengths.unsqueeze(1)
    return logits, mask


def segment_sums(values: Tensor, lengths: Sequence[int]) -> Tensor:
    """``[B]`` sums of consecutive runs of ``lengths[b]`` entries of the flat ``values [N]``.

    A generated action's log-prob or KL is the sum of its tokens': ``values`` holds every action's
    per-token values one after the other, ``lengths`` how many each action has (0 gives a 0 sum).
    """
    counts = torch.as_tensor(list(lengths), dtype=torch.long, device=values.device)
    segments = torch.repeat_interleave(torch.arange(len(counts), device=values.device), counts)
    return torch.zeros(len(counts), dtype=values.dtype, device=values.device).index_add_(0, segments, values)
