"""Proximal Policy Optimization (Schulman et al., 2017) for LLM agents, all of it in one place.

One update, on a rollout whose GAE advantages are computed (CleanRL's ppo.py, SB3's ``PPO.train``):

1. whiten the advantages over the whole rollout (``algorithm.normalize_advantages``);
2. for each of ``algorithm.epochs`` epochs: shuffle the rollout into minibatches of
   ``algorithm.minibatch_size``; for each minibatch take one optimizer step on
   :class:`PPOObjective`, the clipped surrogate plus the clipped value loss, minus the entropy
   bonus, plus the optional KL penalty to the reference policy;
3. stop after an epoch whose mean approximate KL to the behaviour policy exceeds
   ``algorithm.ppo.target_kl``.

The objective runs next to the model on every LLM server (the generic
:class:`~llmgym.algorithms.updaters.PolicyUpdater`); the epoch loop runs here, in the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import torch
from torch import Tensor

from llmgym.agents.policies import Policy
from llmgym.algorithms.batch import PolicyOutputs, SampleTargets
from llmgym.algorithms.buffer import RolloutBuffer
from llmgym.algorithms.losses import actor_critic_loss, check_same_shape, kl_estimate, masked_mean, value_loss
from llmgym.algorithms.on_policy import OnPolicyAlgorithm
from llmgym.algorithms.protocols import PolicyBackend
from llmgym.errors import InputError

__all__ = ["PPO", "PPOObjective", "ppo_policy_loss"]


def ppo_policy_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    clip_range: float,
    mask: Optional[Tensor] = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate loss ``-mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A))``.

    Args:
        log_probs: Log-probs of the taken actions under the current policy (with grad), ``[B]`` or
            ``[B, L]``.
        old_log_probs: Log-probs at collection time, same shape (no grad needed).
        advantages: Advantages, same shape (token-level: a step advantage broadcast to its tokens, or
            per-token GAE).
        clip_range: Clip ``eps`` > 0.
        mask: Bool ``[B, L]`` of the tokens that count, or ``None``.

    Returns:
        ``(loss, stats)``: the 0-d loss and detached 0-d stats ``clip_fraction`` (fraction of entries
        with ``|ratio - 1| > eps``), ``approx_kl`` (k3 estimate of ``KL(pi_old || pi)``),
        ``ratio_mean`` and ``ratio_max``.

    Raises:
        InputError: On a shape mismatch or ``clip_range <= 0``.
    """
    if not clip_range > 0:
        raise InputError(f"clip_range={clip_range!r} must be > 0; PPO usually uses 0.1 to 0.3.")
    check_same_shape("log_probs", log_probs, old_log_probs=old_log_probs, advantages=advantages, mask=mask)
    advantages = advantages.detach()
    log_ratio = log_probs - old_log_probs.detach()
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        clip_hits = ((ratio - 1.0).abs() > clip_range).to(ratio.dtype)
        stats = {
            "clip_fraction": masked_mean(clip_hits, mask),
            "approx_kl": masked_mean(kl_estimate(old_log_probs.detach(), log_probs.detach(), "k3"), mask),
            "ratio_mean": masked_mean(ratio, mask),
            "ratio_max": ratio[mask.to(torch.bool)].max()
            if mask is not None and bool(mask.any())
            else ratio.max(),
        }
    return loss, {key: value.detach() for key, value in stats.items()}


@dataclass(frozen=True)
class PPOObjective:
    """PPO's loss: ``L_clip + c_v L_value - c_e H + c_kl KL(pi || pi_ref)``, means over the chunk.

    Attributes:
        clip_range: Policy ratio clip ``eps``.
        value_clip_range: Clip of the value around the old value; ``None``: the plain loss.
        value_coef: ``c_v``.
        entropy_coef: ``c_e``.
        kl_coef: ``c_kl`` (0: no reference pass).
    """

    clip_range: float
    value_clip_range: Optional[float]
    value_coef: float
    entropy_coef: float
    kl_coef: float

    def loss(self, outputs: PolicyOutputs, targets: SampleTargets) -> tuple[Tensor, dict[str, Tensor]]:
        """The chunk's loss and statistics (see :class:`~llmgym.algorithms.protocols.Objective`)."""
        policy_loss, policy_stats = ppo_policy_loss(
            outputs.log_probs, targets.old_log_probs, targets.advantages, self.clip_range
        )
        critic_loss, critic_stats = value_loss(
            outputs.values, targets.returns, targets.old_values, clip_range=self.value_clip_range
        )
        return actor_critic_loss(
            self, policy_loss, critic_loss, outputs.entropy, outputs.ref_kl, [policy_stats, critic_stats]
        )


class PPO(OnPolicyAlgorithm):
    """Proximal Policy Optimization: several epochs of clipped-surrogate minibatch steps per rollout.

    ``PPO(agent, envs, config).learn(total_env_steps)`` trains on a vector env;
    ``PPO(config=config)`` given to an agent as ``algorithm=`` trains it in LlamaGym's loop. The
    LLM is built with :meth:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm.updater`.
    """

    name: ClassVar[str] = "ppo"

    def objective(self) -> PPOObjective:
        """PPO's loss with this config's coefficients."""
        cfg = self.config
        return PPOObjective(
            cfg.ppo.clip_range, cfg.ppo.value_clip_range, cfg.value_coef, cfg.entropy_coef, self.kl.loss_coef
        )

    def train(self, llm: PolicyBackend, buffer: RolloutBuffer, policy: Policy) -> dict[str, float]:
        """Run up to ``algorithm.epochs`` epochs, stopping early past ``algorithm.ppo.target_kl``.

        Returns:
            The last epoch's sample-weighted statistics, ``epochs`` run and the rollout's
            advantage, value and return statistics.
        """
        rollout = self.rollout_targets(buffer)
        objective = self.objective()
        stats: dict[str, float] = {}
        epochs = 0
        target_kl = self.config.ppo.target_kl
        for _ in range(self.config.epochs):
            stats = self.run_epoch(llm, rollout, objective, policy)
            epochs += 1
            if target_kl is not None and stats.get("approx_kl", 0.0) > target_kl:
                break
        return {**stats, "epochs": float(epochs), **rollout.statistics()}
