"""Advantage estimation and normalisation: pure torch functions, no model, no state.

Shapes: ``[T, N]`` is steps × envs (the rollout layout of :class:`~llmgym.algorithms.buffer.RolloutBuffer`);


Episode-end conventions (Gymnasium, same-step autoreset): ``terminated[t, n]`` means the action at
step ``t`` reached a terminal state, whose value is 0; ``truncated[t, n]`` means the episode was cut
by a time limit, so the return is bootstrapped with the value of the *final* observation of that
episode, ``truncation_values[t, n]`` (the observation stored at ``t + 1`` already belongs to the next
episode). In both cases no advantage flows from step ``t + 1`` back into step ``t``.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from llmgym.errors import InputError

__all__ = ["compute_gae", "whiten"]


def _check_unit(name: str, value: float) -> None:
    if not 0.0 <= float(value) <= 1.0:
        raise InputError(
            f"{name}={value!r} must lie in [0, 1]; pass a value such as 0.99 (gamma) or 0.95 (lambda)."
        )


def _check_shape(name: str, tensor: Tensor, shape: tuple[int, ...], layout: str) -> None:
    if not isinstance(tensor, Tensor):
        raise InputError(
            f"{name} must be a torch.Tensor of shape {layout}={list(shape)}, got {type(tensor).__name__}."
        )
    if tuple(tensor.shape) != shape:
        raise InputError(
            f"{name} has shape {list(tensor.shape)} but {layout}={list(shape)} was expected; "
            f"pass one value per {'step and env' if layout == '[T, N]' else 'entry'}."
        )


def _check_matrix(values: Tensor, layout: str) -> tuple[int, int]:
    """The two sizes of ``values``, which must be a 2-D tensor laid out as ``layout``."""
    if not isinstance(values, Tensor) or values.dim() != 2:
        raise InputError(
            f"values must be a 2-D tensor {layout}, got "
            f"{list(values.shape) if isinstance(values, Tensor) else type(values).__name__}."
        )
    rows, cols = values.shape
    return int(rows), int(cols)


def compute_gae(
    rewards: Tensor,
    values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    last_values: Tensor,
    gamma: float,
    gae_lambda: float,
    truncation_values: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over a vectorised rollout.

    ``delta[t] = r[t] + gamma * V_next[t] - V[t]`` and
    ``A[t] = delta[t] + gamma * lambda * (1 - done[t]) * A[t + 1]`` where ``V_next[t]`` is 0 after a
    termination, ``truncation_values[t]`` after a truncation, ``values[t + 1]`` inside an episode and
    ``last_values`` after the last step of the rollout. Several episodes may follow each other in one
    column. A step both terminated and truncated counts as terminated.

    Args:
        rewards: Rewards ``[T, N]``.
        values: Value estimates ``V(s_t)`` of the observations the actions were taken in, ``[T, N]``.
        terminated: Bool ``[T, N]``, the episode reached a terminal state at step ``t``.
        truncated: Bool ``[T, N]``, the episode was cut (time limit) at step ``t``.
        last_values: ``V(s_T)`` of the observation following the last step, ``[N]``.
        gamma: Discount factor in ``[0, 1]``.
        gae_lambda: GAE lambda in ``[0, 1]`` (1: Monte-Carlo returns with bootstrap, 0: one-step TD).
        truncation_values: Value of the final observation of each truncated episode, ``[T, N]``; read
            only where ``truncated & ~terminated``. Required when such a step exists.

    Returns:
        ``(advantages, returns)``, both ``[T, N]`` float in the dtype of ``values``, with
        ``returns = advantages + values``.

    Raises:
        InputError: On a shape mismatch, ``gamma``/``gae_lambda`` outside ``[0, 1]``, or a truncated
            step without ``truncation_values``.
    """
    _check_unit("gamma", gamma)
    _check_unit("gae_lambda", gae_lambda)
    num_steps, num_envs = _check_matrix(values, "[T, N] (steps x envs)")
    for name, tensor in (("rewards", rewards), ("terminated", terminated), ("truncated", truncated)):
        _check_shape(name, tensor, (num_steps, num_envs), "[T, N]")
    _check_shape("last_values", last_values, (num_envs,), "[N]")
    dtype, device = values.dtype, values.device
    term = terminated.to(device=device, dtype=torch.bool)
    bootstrap_truncated = truncated.to(device=device, dtype=torch.bool) & ~term
    if truncation_values is None:
        if bool(bootstrap_truncated.any()):
            raise InputError(
                "truncated has True entries but truncation_values is None; pass the value of the final "
                "observation of each truncated episode (infos[i]['final_observation']) as a [T, N] tensor."
            )
        trunc_values = torch.zeros_like(values)
    else:
        _check_shape("truncation_values", truncation_values, (num_steps, num_envs), "[T, N]")
        trunc_values = truncation_values.to(device=device, dtype=dtype)
    rewards = rewards.to(device=device, dtype=dtype)
    next_values = torch.cat([values[1:], last_values.to(device=device, dtype=dtype).unsqueeze(0)], dim=0)
    next_values = torch.where(term, torch.zeros_like(next_values), next_values)
    next_values = torch.where(bootstrap_truncated, trunc_values, next_values)
    continues = (~(term | bootstrap_truncated)).to(dtype)
    deltas = rewards + gamma * next_values - values
    advantages = torch.zeros_like(values)
    running = torch.zeros(num_envs, dtype=dtype, device=device)
    for t in range(num_steps - 1, -1, -1):
        running = deltas[t] + gamma * gae_lambda * continues[t] * running
        advantages[t] = running
    return advantages, advantages + values


def whiten(x: Tensor, mask: Optional[Tensor] = None, eps: float = 1e-8, shift_mean: bool = True) -> Tensor:
    """Normalise to zero mean and unit variance, over all entries or over the masked-in ones.

    Uses the population variance (so a single entry whitens to 0 rather than NaN).

    Args:
        x: Values of any shape, e.g. advantages ``[B]`` or ``[B, L]``.
        mask: Bool tensor of the shape of ``x``; statistics use only True entries and False entries
            are returned as 0. ``None`` uses every entry.
        eps: Added to the variance before the square root.
        shift_mean: ``False`` only rescales (keeps the mean), as some token-level recipes do.

    Returns:
        A tensor of the shape of ``x``.

    Raises:
        InputError: If ``mask`` does not match ``x`` or selects no entry, or ``x`` is empty.
    """
    if mask is None:
        if x.numel() == 0:
            raise InputError("whiten got an empty tensor x; pass at least one value.")
        mean = x.mean()
        var = ((x - mean) ** 2).mean()
        return (x - mean if shift_mean else x) * torch.rsqrt(var + eps)
    if tuple(mask.shape) != tuple(x.shape):
        raise InputError(
            f"mask has shape {list(mask.shape)} but x has {list(x.shape)}; pass a mask of x's shape."
        )
    valid = mask.to(device=x.device, dtype=torch.bool)
    count = valid.sum()
    if int(count) == 0:
        raise InputError("whiten got a mask with no True entry; pass a mask selecting at least one value.")
    weights = valid.to(x.dtype)
    mean = (x * weights).sum() / count
    var = (((x - mean) ** 2) * weights).sum() / count
    out = (x - mean if shift_mean else x) * torch.rsqrt(var + eps)
    return torch.where(valid, out, torch.zeros_like(out))
