"""RLOO, REINFORCE Leave-One-Out (Kool et al., 2019; Ahmadian et al., 2024), for LLM agents.

No critic: ``G`` episodes are played from the same reset seed, and every turn of episode ``i``
gets the advantage ``R_i - mean_{j != i} R_j``, its return against the mean of the other
``G - 1`` (an unbiased baseline: it does not depend on episode ``i``'s own actions). The update
is PPO's clipped surrogate (with ``algorithm.epochs=1`` it is REINFORCE with that baseline, the
ratio being 1); see :mod:`llmgym.algorithms.group_baseline` for the rounds.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from llmgym.algorithms.group_baseline import GroupBaselineAlgorithm

__all__ = ["RLOO", "rloo_advantages"]


def rloo_advantages(returns: Tensor) -> Tensor:
    """Each return minus the mean of the other returns of its group.

    Args:
        returns: ``[M, G]`` episode returns, one row per group (``G >= 2``).

    Returns:
        ``[M, G]`` advantages ``R_i - (sum(R) - R_i) / (G - 1)``.
    """
    group = returns.shape[1]
    others = (returns.sum(dim=1, keepdim=True) - returns) / (group - 1)
    return returns - others


class RLOO(GroupBaselineAlgorithm):
    """REINFORCE Leave-One-Out: PPO's surrogate on leave-one-out baselined episode returns."""

    name: ClassVar[str] = "rloo"

    @staticmethod
    def group_advantages(returns: Tensor) -> Tensor:
        """:func:`rloo_advantages`."""
        return rloo_advantages(returns)
