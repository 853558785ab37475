"""The typed payload of an update: what the client sends every LLM server, and what the loss sees.

One :class:`UpdateBatch` is one epoch: the whole rollout's stored quantities (indexed by position
in the client's batch), the epoch's minibatches as index lists, the policy to recompute and the
algorithm's :class:`~llmgym.algorithms.protocols.Objective`. Servers slice it with their share of
the batch, so the same object serves the local and the distributed backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from llmgym.agents.actions import Actions, CandidateActions, PolicyOutputs, TokenActions
from llmgym.agents.distributions import KLEstimator
from llmgym.agents.policies import Policy
from llmgym.algorithms.protocols import NaturalGradientObjective, Objective
from llmgym.errors import InputError

__all__ = ["PolicyOutputs", "SampleTargets", "UpdateBatch"]


@dataclass(frozen=True)
class SampleTargets:
    """What the rollout stored for the same ``B`` samples.

    Attributes:
        old_log_probs: ``[B]`` log-probs at collection (the behaviour policy).
        old_values: ``[B]`` critic values at collection.
        advantages: ``[B]`` advantages (whitened over the rollout when configured).
        returns: ``[B]`` value targets.
    """

    old_log_probs: Tensor
    old_values: Tensor
    advantages: Tensor
    returns: Tensor


@dataclass(frozen=True)
class UpdateBatch:
    """One epoch of an update over a rollout of ``B`` samples, as sent to every LLM server.

    Attributes:
        objective: The algorithm's loss (PPO's clipped surrogate, A2C's policy gradient...), or an
            objective that runs the whole server-side step itself (TRPO's natural-gradient step).
        policy: The distribution the actions were drawn from; the updater calls its ``evaluate``.
        minibatches: This epoch's gradient steps, each a list of indices into ``[0, B)``.
        old_log_probs: ``[B]`` behaviour log-probs.
        old_values: ``[B]`` critic values at collection.
        advantages: ``[B]`` advantages.
        returns: ``[B]`` value targets.
        actions: The ``B`` actions (chosen candidates or generated token sequences), built by ``policy``.
        learning_rate_scale: Factor in ``[0, 1]`` on the optimizer's configured learning rates for
            this epoch (``algorithm.anneal_lr``).
        kl_estimator: Per-token estimate of the KL to the reference in the loss (``algorithm.kl.estimator``).

    Raises:
        InputError: On ``actions`` of neither kind, per-sample fields of different lengths, an
            index out of range, or a ``learning_rate_scale`` outside ``[0, 1]``.
    """

    objective: Objective | NaturalGradientObjective
    policy: Policy
    minibatches: list[list[int]]
    old_log_probs: Tensor
    old_values: Tensor
    advantages: Tensor
    returns: Tensor
    actions: Actions
    learning_rate_scale: float = 1.0
    kl_estimator: KLEstimator = "k1"

    def __post_init__(self) -> None:
        if not 0.0 <= self.learning_rate_scale <= 1.0:
            raise InputError(
                f"UpdateBatch.learning_rate_scale={self.learning_rate_scale!r} must lie in [0, 1]."
            )
        if not isinstance(self.actions, (CandidateActions, TokenActions)):
            raise InputError(
                f"UpdateBatch needs either actions as CandidateActions (chosen candidates) or TokenActions (generated "
                f"token sequences), built by the policy (policy.actions(decisions)); got {type(self.actions).__name__}."
            )
        size = len(self)
        lengths = {
            "old_values": len(self.old_values),
            "advantages": len(self.advantages),
            "returns": len(self.returns),
            "actions": len(self.actions),
        }
        wrong = {name: n for name, n in lengths.items() if n != size}
        if wrong:
            raise InputError(f"UpdateBatch fields must all hold old_log_probs' {size} samples; got {wrong}.")
        outside = [i for minibatch in self.minibatches for i in minibatch if not 0 <= int(i) < size]
        if outside:
            raise InputError(f"UpdateBatch.minibatches index samples {outside[:5]} outside [0, {size}).")

    def __len__(self) -> int:
        return int(self.old_log_probs.shape[0])

    def targets(self, indices: Sequence[int], device: torch.device) -> SampleTargets:
        """The stored quantities of the samples at ``indices``, on ``device``."""
        ids = torch.as_tensor(list(indices), dtype=torch.long)
        return SampleTargets(
            old_log_probs=self.old_log_probs[ids].to(device),
            old_values=self.old_values[ids].to(device),
            advantages=self.advantages[ids].to(device),
            returns=self.returns[ids].to(device),
        )
