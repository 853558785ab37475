"""GRPO, Group Relative Policy Optimization (Shao et al., 2024, DeepSeekMath), for LLM agents.

No critic: ``G`` episodes are played from the same reset seed (the same prompt, for TextGen), and
every turn of episode ``i`` gets the advantage ``(R_i - mean(R)) / (std(R) + eps)`` over its
group's returns (outcome supervision; the population std, as the paper). The update is PPO's
clipped surrogate with an optional KL to the reference policy (``algorithm.kl``); see
:mod:`llmgym.algorithms.group_baseline` for the rounds.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from llmgym.algorithms.group_baseline import GroupBaselineAlgorithm

__all__ = ["GRPO", "grpo_advantages"]

#: Added to the group's std so a group of equal returns gets advantage 0, not NaN.
GRPO_EPS = 1e-4


def grpo_advantages(returns: Tensor) -> Tensor:
    """Standardise each group's returns: ``(R - mean) / (std + eps)``.

    Args:
        returns: ``[M, G]`` episode returns, one row per group.

    Returns:
        ``[M, G]`` advantages (0 throughout a group of equal returns).
    """
    mean = returns.mean(dim=1, keepdim=True)
    std = returns.std(dim=1, unbiased=False, keepdim=True)
    return (returns - mean) / (std + GRPO_EPS)


class GRPO(GroupBaselineAlgorithm):
    """Group Relative Policy Optimization: PPO's surrogate on group-standardised episode returns."""

    name: ClassVar[str] = "grpo"

    @staticmethod
    def group_advantages(returns: Tensor) -> Tensor:
        """:func:`grpo_advantages`."""
        return grpo_advantages(returns)
