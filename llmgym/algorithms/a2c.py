"""Advantage Actor-Critic (Mnih et al., 2016), synchronous, for LLM agents, all of it in one place.

One update, on a rollout whose GAE advantages are computed: whiten the advantages over the
rollout (``algorithm.normalize_advantages``), then one pass over it in shuffled minibatches of
``algorithm.minibatch_size``, one optimizer step each on :class:`A2CObjective`:
``-log pi(a|s) A + c_v (V - R)^2 / 2 - c_e H + c_kl KL(pi || pi_ref)``. No ratio, no clipping:
the samples are on-policy for the one pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from torch import Tensor

from llmgym.agents.policies import Policy
from llmgym.algorithms.batch import PolicyOutputs, SampleTargets
from llmgym.algorithms.buffer import RolloutBuffer
from llmgym.algorithms.losses import actor_critic_loss, check_same_shape, masked_mean, value_loss
from llmgym.algorithms.on_policy import OnPolicyAlgorithm
from llmgym.algorithms.protocols import PolicyBackend

__all__ = ["A2C", "A2CObjective", "a2c_policy_loss"]


def a2c_policy_loss(log_probs: Tensor, advantages: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Advantage actor-critic policy loss ``-mean(log pi(a) * A)`` (advantages are not differentiated).

    Args:
        log_probs: Log-probs of the taken actions (with grad), ``[B]`` or ``[B, L]``.
        advantages: Advantages, same shape.
        mask: Bool ``[B, L]`` of the tokens that count, or ``None``.

    Returns:
        The 0-d loss.

    Raises:
        InputError: On a shape mismatch.
    """
    check_same_shape("log_probs", log_probs, advantages=advantages, mask=mask)
    return masked_mean(-log_probs * advantages.detach(), mask)


@dataclass(frozen=True)
class A2CObjective:
    """A2C's loss: the policy gradient with a learned baseline, unclipped value loss, entropy bonus.

    Attributes:
        value_coef: ``c_v``.
        entropy_coef: ``c_e``.
        kl_coef: ``c_kl`` (0: no reference pass).
    """

    value_coef: float
    entropy_coef: float
    kl_coef: float

    def loss(self, outputs: PolicyOutputs, targets: SampleTargets) -> tuple[Tensor, dict[str, Tensor]]:
        """The chunk's loss and statistics (see :class:`~llmgym.algorithms.protocols.Objective`)."""
        policy_loss = a2c_policy_loss(outputs.log_probs, targets.advantages)
        critic_loss, critic_stats = value_loss(outputs.values, targets.returns)
        return actor_critic_loss(
            self, policy_loss, critic_loss, outputs.entropy, outputs.ref_kl, [critic_stats]
        )


class A2C(OnPolicyAlgorithm):
    """Advantage Actor-Critic: one pass of policy-gradient minibatch steps per rollout.

    Built and used as :class:`~llmgym.algorithms.ppo.PPO` is; ``algorithm.epochs`` and
    ``algorithm.ppo`` (the clips and ``target_kl``) do not apply.
    """

    name: ClassVar[str] = "a2c"

    def objective(self) -> A2CObjective:
        """A2C's loss with this config's coefficients."""
        cfg = self.config
        return A2CObjective(cfg.value_coef, cfg.entropy_coef, self.kl.loss_coef)

    def train(self, llm: PolicyBackend, buffer: RolloutBuffer, policy: Policy) -> dict[str, float]:
        """One epoch over the rollout.

        Returns:
            The epoch's sample-weighted statistics, ``epochs`` (1) and the rollout's advantage,
            value and return statistics.
        """
        rollout = self.rollout_targets(buffer)
        stats = self.run_epoch(llm, rollout, self.objective(), policy)
        return {**stats, "epochs": 1.0, **rollout.statistics()}
