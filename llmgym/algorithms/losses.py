"""Loss pieces every policy-gradient algorithm shares: pure torch functions, no model, no state.

Each algorithm's own policy loss lives in its module (:mod:`llmgym.algorithms.ppo`,
:mod:`llmgym.algorithms.a2c`); :func:`actor_critic_loss` adds the value, entropy and KL terms.

The distributions they are taken over (candidate softmaxes, token log-probs, KL estimates) live
with the policy, :mod:`llmgym.agents.distributions` and :mod:`llmgym.agents.policies`. Shapes:
``[B]`` for action-level quantities (one action per transition), ``[B, L]`` with a bool
``mask [B, L]`` for token-level ones (one generated token per position). Every reduction is a
(masked) mean over the entries that count. Statistics
are returned detached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional, Protocol

import torch
from torch import Tensor

from llmgym.agents.distributions import kl_estimate
from llmgym.errors import InputError

__all__ = [
    "LossCoefficients",
    "actor_critic_loss",
    "check_same_shape",
    "kl_estimate",
    "masked_mean",
    "value_loss",
]


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
            raise InputError(
                "value_loss got clip_range but old_values is None; pass the values stored at collection."
            )
        old = old_values.detach()
        clipped_values = old + torch.clamp(values - old, -clip_range, clip_range)
        squared_clipped = (clipped_values - returns) ** 2
        loss = 0.5 * masked_mean(torch.maximum(squared, squared_clipped), mask)
        with torch.no_grad():
            clip_fraction = masked_mean((squared_clipped > squared).to(values.dtype), mask)
    with torch.no_grad():
        residual_var = masked_mean((returns - values - masked_mean(returns - values, mask)) ** 2, mask)
        returns_var = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
        explained = (
            1.0 - residual_var / returns_var
            if float(returns_var) > 0
            else torch.full_like(returns_var, float("nan"))
        )
    return loss, {"value_clip_fraction": clip_fraction.detach(), "explained_variance": explained.detach()}


class LossCoefficients(Protocol):
    """The weights of an actor-critic loss's terms: an objective's (:class:`~llmgym.algorithms.ppo.PPOObjective`)."""

    @property
    def value_coef(self) -> float:
        """``c_v``, the value loss's weight."""
        ...

    @property
    def entropy_coef(self) -> float:
        """``c_e``, the entropy bonus's weight."""
        ...

    @property
    def kl_coef(self) -> float:
        """``c_kl``, the weight of the KL to the reference."""
        ...


def actor_critic_loss(
    coefficients: LossCoefficients,
    policy_loss: Tensor,
    critic_loss: Tensor,
    entropy: Tensor,
    ref_kl: Tensor,
    stats: Sequence[Mapping[str, Tensor]] = (),
) -> tuple[Tensor, dict[str, Tensor]]:
    """An actor-critic objective's loss ``L_pi + c_v L_V - c_e mean(H) + c_kl mean(KL(pi || pi_ref))``.

    Args:
        coefficients: ``c_v``, ``c_e`` and ``c_kl`` (the objective).
        policy_loss: The 0-d policy loss (with grad).
        critic_loss: The 0-d value loss (:func:`value_loss`).
        entropy: ``[B]`` entropies of the action distributions.
        ref_kl: ``[B]`` KLs to the reference policy.
        stats: The policy and value losses' own statistics, reported after the loss's terms, in order.

    Returns:
        ``(loss, stats)``: the 0-d loss and its detached statistics ``loss``, ``policy_loss``,
        ``value_loss``, ``entropy``, ``kl_ref``, then those of ``stats``.
    """
    mean_entropy = entropy.mean()
    mean_ref_kl = ref_kl.mean()
    loss = (
        policy_loss
        + coefficients.value_coef * critic_loss
        - coefficients.entropy_coef * mean_entropy
        + coefficients.kl_coef * mean_ref_kl
    )
    terms = {
        "loss": loss,
        "policy_loss": policy_loss,
        "value_loss": critic_loss,
        "entropy": mean_entropy,
        "kl_ref": mean_ref_kl,
    }
    for extra in stats:
        terms.update(extra)
    return loss, {key: value.detach() for key, value in terms.items()}
