"""Critic-free rounds of whole episodes: what GRPO, RLOO and ReBN share.

Each round resets the vector env's ``N`` envs from seeds the subclass chooses
(:meth:`EpisodeRoundAlgorithm.round_seeds`: one per env for ReBN, one per group for GRPO and
RLOO), plays every env until its first episode ends, and lays the episodes end to end in the
buffer; the subclass turns them into per-turn advantages (:meth:`episode_buffer`,
:meth:`rollout_targets`). The update is PPO's clipped surrogate (epochs, minibatches,
``algorithm.ppo.target_kl``) with no value loss. Envs whose episode has ended keep stepping, their
decisions discarded, until the round's last episode ends or ``algorithm.rollout_steps`` steps pass
(an episode still running then counts with the rewards it has so far).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch

from llmgym.agents.base import BaseAgent
from llmgym.agents.learning import Episode
from llmgym.algorithms.callbacks import Callback
from llmgym.algorithms.ppo import PPO, PPOObjective

if TYPE_CHECKING:
    from llmgym.envs.vector import TextVectorEnv

__all__ = ["EpisodeRoundAlgorithm"]


class EpisodeRoundAlgorithm(PPO, abc.ABC):
    """PPO's update without a critic, on rounds of whole episodes from seeded resets (GRPO, RLOO, ReBN)."""

    def setup(self, agent: Optional[BaseAgent], envs: Optional[TextVectorEnv]) -> None:
        """The base class's checks; no round played yet."""
        super().setup(agent, envs)
        self._rounds = 0

    @abc.abstractmethod
    def round_seeds(self, num_envs: int) -> list[int]:
        """The reset seed of each of the ``num_envs`` envs in the next round (``self._rounds`` played so far)."""

    def objective(self) -> PPOObjective:
        """PPO's clipped surrogate with no value loss (there is no critic)."""
        cfg = self.config
        return PPOObjective(cfg.ppo.clip_range, None, 0.0, cfg.entropy_coef, self.kl.loss_coef)

    def collect_rollout(self, callback: Optional[Callback] = None) -> dict[str, float]:
        """Play one round: every env's first episode from its :meth:`round_seeds` seed; store them end to end.

        Args:
            callback: Told of every step (:meth:`~llmgym.algorithms.callbacks.Callback.on_step`);
                an env whose episode has ended steps on outside ``live``.

        Returns:
            Rollout statistics (invalid-action rate, mean env reward per step: without the KL penalty).
        """
        agent, envs = self._require_envs()
        self._rollout_start_steps = self.env_steps  # what algorithm.anneal_lr decays over, as PPO's rollout
        observations, infos = envs.reset(seed=self.round_seeds(envs.num_envs))
        self._episode_starts = np.ones(envs.num_envs, dtype=bool)
        self._rounds += 1
        for index in range(envs.num_envs):
            agent.reset_env(index)
        episodes = [Episode() for _ in range(envs.num_envs)]
        running = set(range(envs.num_envs))
        parse_failures = 0
        env_reward_sum = 0.0
        self._rollout_kl = []
        for _ in range(self.config.rollout_steps):
            step = self.rollout_step(observations, infos, callback, live=sorted(running))
            for index in np.flatnonzero(step.live).tolist():
                episodes[index].decisions.append(step.decisions[index])
                episodes[index].rewards.append(float(step.rewards[index] + step.penalties[index]))
                env_reward_sum += float(step.rewards[index])
                parse_failures += int(step.decisions[index].parse_failed)
                if step.terminated[index] or step.truncated[index]:
                    running.discard(index)
            observations, infos = list(step.next_observations), list(step.infos)
            if not running:
                break
        steps = sum(len(ep.decisions) for ep in episodes)
        self.buffer = self.episode_buffer(episodes)
        return {"invalid_action_rate": parse_failures / steps, "reward_per_step": env_reward_sum / steps}

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Counters and episode statistics: every round starts from a seeded reset, so nothing is replayed."""
        state = super().state_dict()
        state["action_log"] = []
        state["rounds"] = self._rounds
        return state

    def load_state_dict(self, state: dict[str, Any], generators: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state_dict` (the next round resets the envs itself)."""
        super().load_state_dict(state, generators)
        self._rounds = int(state["rounds"])
