"""Loss pieces every policy-gradient algorithm shares: pure torch functions, no model, no state.

Each algorithm's own policy loss lives in its module (:mod:`llmgym.algorithms.ppo`,
:mod:`llmgym.algorithms.a2c`).

Shapes: ``[B]`` for action-level quantities (one chosen candidate per transition), ``[B, L]`` with a
bool ``mask [B, L]`` for token-level ones (one generated token per position), ``[B, K]`` for
candidate logits padded with ``-inf`` to the largest candidate set ``K``. Every reduction is a
(masked) mean over the entries that count. Statistics are returned detached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Optional

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from llmgym.errors import InputError

__all__ = [
    "check_same_shape",
    "categorical_entropy",
    "categorical_log_prob",
    "kl_estimate",
    "masked_mean",
    "pad_candidate_scores",
    "value_loss",
]

KLEstimator = Literal["k1", "k2", "k3"]


def check_same_shape(reference_name: str, reference: Tensor, **others: Optional[Tensor]) -> None:
    """Raise unless every tensor of ``others`` (``None`` skipped) has ``reference``'s shape.

    Raises:
        InputError: Naming the first tensor whose shape differs.
    """
    for name, tensor in others.items():
        if tensor is not None and tuple(tensor.shape) != tuple(reference.shape):
            raise InputError(
                f"{name} has shape {list(tensor.shape)} but {reference_name} has {list(reference.shape)}; "
                f"pass tensors of one shape ([B] per transition or [B, L] per token)."
            )


def masked_mean(x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Mean of ``x`` over the entries where ``mask`` is True (over all entries when ``mask`` is None).

    Args:
        x: Values ``[B]`` or ``[B, L]`` (any shape).
        mask: Bool tensor of the shape of ``x``, or ``None``.

    Returns:
        A 0-d tensor; 0 when the mask selects nothing (an empty minibatch contributes no gradient).

    Raises:
        InputError: If ``mask`` does not have the shape of ``x``.
    """
    if mask is None:
        return x.mean()
    check_same_shape("x", x, mask=mask)
    weights = mask.to(device=x.device, dtype=x.dtype)
    return (x * weights).sum() / weights.sum().clamp(min=1.0)


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
    check_same_shape("log_probs", log_probs, ref_log_probs=ref_log_probs)
    log_ratio = log_probs - ref_log_probs
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.expm1(-log_ratio) + log_ratio
    raise InputError(f"estimator={estimator!r} is not a KL estimator; use 'k1', 'k2' or 'k3'.")


def value_loss(
    values: Tensor,
    returns: Tensor,
    old_values: Optional[Tensor] = None,
    clip_range: Optional[float] = None,
    mask: Optional[Tensor] = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Squared-error value loss ``0.5 * mean((V - R) ** 2)``, optionally clipped around the old values.

    With ``clip_range`` (PPO): ``0.5 * mean(max((V - R) ** 2, (V_old + clip(V - V_old, -c, c) - R) ** 2))``.

    Args:
        values: Current value predictions (with grad), ``[B]`` or ``[B, L]``.
        returns: Targets, same shape.
        old_values: Values at collection time, same shape; required when ``clip_range`` is set.
        clip_range: Value clip ``c`` > 0, or ``None`` for the plain loss.
        mask: Bool ``[B, L]`` of the entries that count, or ``None``.

    Returns:
        ``(loss, stats)``: the 0-d loss and detached 0-d stats ``value_clip_fraction`` (fraction of
        entries where the clipped term was selected and differs; 0 without clipping) and
        ``explained_variance`` (``1 - Var(R - V) / Var(R)``, NaN when the returns are constant).

    Raises:
        InputError: On a shape mismatch, ``clip_range <= 0``, or ``clip_range`` without ``old_values``.
    """
    check_same_shape("values", values, returns=returns, old_values=old_values, mask=mask)
    returns = returns.detach()
    squared = (values - returns) ** 2
    if clip_range is None:
        loss = 0.5 * masked_mean(squared, mask)
        clip_fraction = torch.zeros((), dtype=values.dtype, device=values.device)
    else:
        if not clip_range > 0:
            raise InputError(f"clip_range={clip_range!r} must be > 0, or None to disable value clipping.")
        if old_values is None:
            raise InputError("value_loss got clip_range but old_values is None; pass the values stored at collection.")
        old = old_values.detach()
        clipped_values = old + torch.clamp(values - old, -clip_range, clip_range)
        squared_clipped = (clipped_values - returns) ** 2
        loss = 0.5 * masked_mean(torch.maximum(squared, squared_clipped), mask)
        with torch.no_grad():
            clip_fraction = masked_mean((squared_clipped > squared).to(values.dtype), mask)
    with torch.no_grad():
        residual_var = masked_mean((returns - values - masked_mean(returns - values, mask)) ** 2, mask)
        returns_var = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
        explained = 1.0 - residual_var / returns_var if float(returns_var) > 0 else torch.full_like(returns_var, float("nan"))
    return loss, {"value_clip_fraction": clip_fraction.detach(), "explained_variance": explained.detach()}


def _masked_logits(logits: Tensor, mask: Optional[Tensor]) -> Tensor:
    if mask is not None:
        check_same_shape("logits", logits, mask=mask)
        logits = logits.masked_fill(~mask.to(device=logits.device, dtype=torch.bool), float("-inf"))
    if logits.dim() == 0 or logits.shape[-1] == 0:
        raise InputError(f"logits has shape {list(logits.shape)}; expected [..., K] with K >= 1 candidates.")
    if bool((logits == float("-inf")).all(dim=-1).any()):
        raise InputError(
            "a row of logits has no finite entry (every candidate is padding or masked out); "
            "give every row at least one valid candidate."
        )
    return logits


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
    log_p = torch.log_softmax(_masked_logits(logits, mask), dim=-1)
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
    logits = _masked_logits(logits, mask)
    if actions.dim() != 1 or actions.shape[0] != logits.shape[0] or logits.dim() != 2:
        raise InputError(
            f"actions has shape {list(actions.shape)} and logits {list(logits.shape)}; expected actions [B] "
            "and logits [B, K]."
        )
    index = actions.to(device=logits.device, dtype=torch.long)
    if bool(((index < 0) | (index >= logits.shape[1])).any()):
        raise InputError(f"actions must lie in [0, {logits.shape[1]}); got {index.tolist()}.")
    log_p = torch.log_softmax(logits, dim=-1).gather(1, index.unsqueeze(1)).squeeze(1)
    if not bool(torch.isfinite(log_p).all()):
        raise InputError("an action index points at a padded or masked-out candidate; pick a valid candidate.")
    return log_p


def pad_candidate_scores(
    scores: Sequence[Tensor], temperature: float = 1.0, padding_value: float = float("-inf")
) -> tuple[Tensor, Tensor]:
    """Stack per-context candidate scores of different lengths (``LLM.score`` output) into logits.

    Args:
        scores: One 1-D tensor ``[k_i]`` per context (log p(candidate | context)).
        temperature: The policy is ``softmax(score / temperature)``; must be > 0.
        padding_value: Value of the padded entries (``-inf``: zero probability).

    Returns:
        ``(logits, mask)``: ``logits [B, K]`` with ``K = max k_i`` (scores divided by the temperature,
        padding at the end of each row) and bool ``mask [B, K]``, True on real candidates.

    Raises:
        InputError: On an empty list, a non 1-D or empty score tensor, or ``temperature <= 0``.
    """
    if not temperature > 0:
        raise InputError(f"temperature={temperature!r} must be > 0; use 1.0 for the plain softmax.")
    if len(scores) == 0:
        raise InputError("scores is empty; pass one tensor of candidate scores per context.")
    for i, row in enumerate(scores):
        if not isinstance(row, Tensor) or row.dim() != 1 or row.numel() == 0:
            shape = list(row.shape) if isinstance(row, Tensor) else type(row).__name__
            raise InputError(f"scores[{i}] is {shape}; each entry must be a non-empty 1-D tensor [k_i].")
    first = scores[0]
    rows = [row.to(device=first.device, dtype=first.dtype) / temperature for row in scores]
    logits = pad_sequence(rows, batch_first=True, padding_value=padding_value)
    lengths = torch.tensor([row.shape[0] for row in rows], device=first.device)
    mask = torch.arange(logits.shape[1], device=first.device).unsqueeze(0) < lengths.unsqueeze(1)
    return logits, mask
