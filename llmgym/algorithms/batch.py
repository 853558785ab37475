"""The typed payload of an update: what the client sends every LLM server, and what the loss sees.

One :class:`UpdateBatch` is one epoch: the whole rollout's stored quantities (indexed by position
in the client's batch), the epoch's minibatches as index lists, the policy to recompute and the
algorithm's :class:`~llmgym.algorithms.protocols.Objective`. Servers slice it with their share of
the batch, so the same object serves the local and the distributed backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from llmgym.agents.learning import PolicySpec
from llmgym.algorithms.protocols import NaturalGradientObjective, Objective
from llmgym.errors import InputError

__all__ = ["PolicyOutputs", "SampleTargets", "UpdateBatch"]


@dataclass(frozen=True)
class PolicyOutputs:
    """The current policy on a chunk of ``B`` samples, with gradients.

    Attributes:
        log_probs: ``[B]`` log-prob of each stored action (a generated action: its tokens' sum).
        entropy: ``[B]`` entropy of the action distribution (generated: mean token surprisal).
        values: ``[B]`` critic values (zeros when the LLM has no value head).
        ref_kl: ``[B]`` KL to the reference policy (zeros unless the objective's ``kl_coef > 0``).
        candidate_log_probs: ``[B, K]`` log-probs of every candidate (action-level agents; 0 on
            padding), or ``None`` for generated actions, whose full distribution is not kept.
        candidate_mask: Bool ``[B, K]``, True on real candidates (with ``candidate_log_probs``).
    """

    log_probs: Tensor
    entropy: Tensor
    values: Tensor
    ref_kl: Tensor
    candidate_log_probs: Optional[Tensor] = None
    candidate_mask: Optional[Tensor] = None

    def to(self, device: torch.device) -> PolicyOutputs:
        """The same outputs on ``device`` (graphs kept)."""
        log_p, mask = self.candidate_log_probs, self.candidate_mask
        return PolicyOutputs(
            self.log_probs.to(device), self.entropy.to(device), self.values.to(device), self.ref_kl.to(device),
            candidate_log_probs=log_p.to(device) if log_p is not None else None,
            candidate_mask=mask.to(device) if mask is not None else None,
        )


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
        policy: The distribution the actions were drawn from, recomputed with gradients.
        minibatches: This epoch's gradient steps, each a list of indices into ``[0, B)``.
        old_log_probs: ``[B]`` behaviour log-probs.
        old_values: ``[B]`` critic values at collection.
        advantages: ``[B]`` advantages.
        returns: ``[B]`` value targets.
        actions: ``[B]`` chosen candidate indices (action-level agents), else ``None``.
        prompt_ids: ``B`` prompt token-id lists (generated actions), else ``None``.
        action_ids: ``B`` generated token-id lists (generated actions), else ``None``.
        learning_rate_scale: Factor in ``[0, 1]`` on the optimizer's configured learning rates for
            this epoch (``algorithm.anneal_lr``).

    Raises:
        InputError: On per-sample fields of different lengths, an index out of range, or neither
            (or both) of ``actions`` and ``prompt_ids``/``action_ids``, or a
            ``learning_rate_scale`` outside ``[0, 1]``.
    """

    objective: Objective | NaturalGradientObjective
    policy: PolicySpec
    minibatches: list[list[int]]
    old_log_probs: Tensor
    old_values: Tensor
    advantages: Tensor
    returns: Tensor
    actions: Optional[Tensor] = None
    prompt_ids: Optional[list[list[int]]] = None
    action_ids: Optional[list[list[int]]] = None
    learning_rate_scale: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.learning_rate_scale <= 1.0:
            raise InputError(f"UpdateBatch.learning_rate_scale={self.learning_rate_scale!r} must lie in [0, 1].")
        size = len(self)
        lengths = {"old_values": len(self.old_values), "advantages": len(self.advantages), "returns": len(self.returns)}
        generated = self.prompt_ids is not None or self.action_ids is not None
        if (self.actions is None) == (not generated) or (generated and (self.prompt_ids is None or self.action_ids is None)):
            raise InputError(
                "UpdateBatch needs either actions (candidate indices, action-level agents) or both prompt_ids and "
                "action_ids (generated actions)."
            )
        for name, value in (("actions", self.actions), ("prompt_ids", self.prompt_ids), ("action_ids", self.action_ids)):
            if value is not None:
                lengths[name] = len(value)
        wrong = {name: n for name, n in lengths.items() if n != size}
        if wrong:
            raise InputError(f"UpdateBatch fields must all hold old_log_probs' {size} samples; got {wrong}.")
        outside = [i for minibatch in self.minibatches for i in minibatch if not 0 <= int(i) < size]
        if outside:
            raise InputError(f"UpdateBatch.minibatches index samples {outside[:5]} outside [0, {size}).")

    def __len__(self) -> int:
        return int(self.old_log_probs.shape[0])

    @property
    def is_generated(self) -> bool:
        """Whether the actions are generated token sequences (else chosen candidates)."""
        return self.actions is None

    def targets(self, indices: Sequence[int], device: torch.device) -> SampleTargets:
        """The stored quantities of the samples at ``indices``, on ``device``."""
        ids = torch.as_tensor(list(indices), dtype=torch.long)
        return SampleTargets(
            old_log_probs=self.old_log_probs[ids].to(device),
            old_values=self.old_values[ids].to(device),
            advantages=self.advantages[ids].to(device),
            returns=self.returns[ids].to(device),
        )
