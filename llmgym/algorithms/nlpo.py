"""NLPO, Natural Language Policy Optimization (Ramamurthy et al., 2022, RL4LMs), for generating agents.

PPO over a masked action space. At every generated token the vocabulary is cut to the smallest
set whose probability under a *mask policy* ``pi_psi`` reaches ``p = algorithm.nlpo.mask_top_p``
(RL4LMs' ``top_mask``), and the token is sampled from the current policy renormalised on that set::

    M_psi(s) = smallest S with sum_{a in S} pi_psi(a | s) >= p
    pi_masked(a | s) = pi_theta(a | s) 1[a in M_psi(s)] / sum_{b in M_psi(s)} pi_theta(b | s)

The update is PPO's clipped surrogate on ``pi_masked``: the behaviour log-probs are the masked ones
recorded at sampling, and the current ones are recomputed under the same mask (the mask policy does
not change during an update). ``pi_psi`` is a frozen snapshot of the policy's trainable weights
(the LoRA adapter or the fine-tuned weights, :class:`~llmgym.llm.masking.MaskPolicy`), taken before
the first rollout and refreshed after every ``algorithm.nlpo.mask_update_interval`` updates (RL4LMs'
``target_update_iterations``): it lags the policy, so the policy can only move probability among
the tokens its recent self found plausible.

The snapshot lives next to the model on every LLM server; the client tells them when to refresh
(``llm.refresh_mask_policy()``), and a checkpoint saves it with the weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Optional

from llmgym.agents.base import BaseAgent
from llmgym.agents.learning import Episode
from llmgym.agents.policies import Policy
from llmgym.algorithms.buffer import RolloutBuffer
from llmgym.algorithms.ppo import PPO
from llmgym.algorithms.protocols import MaskedPolicyBackend, PolicyBackend
from llmgym.errors import ConfigError

if TYPE_CHECKING:
    from llmgym.envs.vector import TextVectorEnv

__all__ = ["NLPO"]


class NLPO(PPO):
    """PPO on the policy restricted to the top-p tokens of a periodically refreshed mask policy.

    ``NLPO(agent, envs, config)`` restricts the agent's sampling to the mask policy and takes the
    first snapshot; in LlamaGym's loop call :meth:`prepare` on the agent before its first action.

    Raises:
        ConfigError: The agent chooses among candidate actions (a scoring agent) instead of
            generating tokens.
    """

    name: ClassVar[str] = "nlpo"

    def setup(self, agent: Optional[BaseAgent], envs: Optional[TextVectorEnv]) -> None:
        """The base class's checks, then prepare the agent it is built with (:meth:`prepare`).

        Raises:
            ConfigError: The agent generates no tokens (a scoring agent).
        """
        super().setup(agent, envs)
        if agent is not None:
            self.prepare(agent)

    def prepare(self, agent: BaseAgent) -> None:
        """Restrict the agent's sampling to the mask policy and snapshot the policy as the mask policy.

        Raises:
            ConfigError: The agent generates no tokens (a scoring agent).
        """
        agent.policy = agent.policy.masked(self.config.nlpo.mask_top_p, self.config.nlpo.min_tokens_to_keep)
        agent.llm.refresh_mask_policy()

    def train(self, llm: PolicyBackend, buffer: RolloutBuffer, policy: Policy) -> dict[str, float]:
        """PPO's epochs on the masked policy the rollout was sampled from (see :meth:`PPO.train`).

        Raises:
            ConfigError: ``policy`` is not masked at ``algorithm.nlpo.mask_top_p`` (the agent was not
                prepared, or its policy was replaced by an unmasked one).
        """
        if policy.masked(self.config.nlpo.mask_top_p, self.config.nlpo.min_tokens_to_keep) != policy:
            raise ConfigError(
                f"NLPO trains the policy masked at algorithm.nlpo.mask_top_p={self.config.nlpo.mask_top_p}, but the actions were "
                f"sampled from {policy}; build NLPO with the agent (NLPO(agent, envs, config)) or call "
                "nlpo.prepare(agent) before it acts, and keep the mask in a replaced agent.policy (policy.masked(p))."
            )
        return super().train(llm, buffer, policy)

    def update(self) -> dict[str, float]:
        """Train on the collected rollout, then refresh the mask policy when it is due."""
        agent, _ = self._require_envs()
        stats = super().update()
        return {**stats, **self.refresh_if_due(agent.llm)}

    def train_on_episodes(
        self, llm: PolicyBackend, policy: Policy, episodes: Sequence[Episode]
    ) -> dict[str, float]:
        """One update from whole episodes (:meth:`PPO.train_on_episodes`), then the refresh when due."""
        stats = super().train_on_episodes(llm, policy, episodes)
        return {**stats, **self.refresh_if_due(llm)}

    def refresh_if_due(self, llm: PolicyBackend) -> dict[str, float]:
        """Snapshot the policy as the mask policy after every ``algorithm.nlpo.mask_update_interval`` updates.

        Returns:
            ``{"mask_refreshed": 1.0}`` when it refreshed, else ``0.0``.

        Raises:
            ConfigError: The LLM backend has no ``refresh_mask_policy``.
        """
        if self.updates % self.config.nlpo.mask_update_interval != 0:
            return {"mask_refreshed": 0.0}
        if not isinstance(llm, MaskedPolicyBackend):
            raise ConfigError(
                f"NLPO needs an LLM with refresh_mask_policy() (llmgym.LLM); got {type(llm).__name__}."
            )
        llm.refresh_mask_policy()
        return {"mask_refreshed": 1.0}
