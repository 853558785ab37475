"""Critic-free policy optimisation with group baselines: what GRPO and RLOO share.

Each round (:class:`~llmgym.algorithms.episode_rounds.EpisodeRoundAlgorithm`) resets the vector
env's ``N = M * G`` envs so that the ``G`` envs of group ``m`` start from the same seed (the same
task, the same prompt), plays every env until its first episode ends, and credits each turn of an
episode with its episode's return measured against the other returns of its group
(:meth:`GroupBaselineAlgorithm.group_advantages`: GRPO standardises within the group, RLOO
subtracts the leave-one-out mean). The update is PPO's clipped surrogate with no value loss.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

from llmgym.agents.base import BaseAgent
from llmgym.agents.learning import Episode
from llmgym.algorithms.buffer import RolloutBuffer
from llmgym.algorithms.episode_rounds import EpisodeRoundAlgorithm
from llmgym.algorithms.on_policy import RolloutTargets, lay_end_to_end
from llmgym.errors import ConfigError, InputError

if TYPE_CHECKING:
    from llmgym.envs.vector import TextVectorEnv

__all__ = ["GroupBaselineAlgorithm", "episode_returns_by_group"]


def episode_returns_by_group(returns: Sequence[float], group_size: int) -> Tensor:
    """Episode returns laid out ``[M, G]``: consecutive runs of ``group_size`` episodes are a group.

    Raises:
        InputError: The number of returns is not a positive multiple of ``group_size``.
    """
    if group_size < 2 or not returns or len(returns) % group_size:
        raise InputError(
            f"{len(returns)} episodes do not form groups of algorithm.group.size={group_size} (>= 2); give a multiple "
            f"of {group_size} episodes, each group played from one reset seed."
        )
    return torch.tensor([float(r) for r in returns], dtype=torch.float64).reshape(-1, group_size)


class GroupBaselineAlgorithm(EpisodeRoundAlgorithm):
    """PPO's update with a group baseline instead of a critic (subclasses: GRPO, RLOO).

    Args:
        agent: As :class:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm`; with envs, the vector
            env's ``num_envs`` must be a multiple of ``algorithm.group.size``.
        envs: The vector env, or ``None``.
        config: The ``algorithm`` section (``group.size``; ``value_coef`` and ``gae_lambda`` do
            not apply).
        seed: Seeds the rounds' reset seeds and the minibatch order.

    Raises:
        ConfigError: ``num_envs`` is not a multiple of ``group_size``.
    """

    def setup(self, agent: Optional[BaseAgent], envs: Optional[TextVectorEnv]) -> None:
        """The base class's checks, then that the vector env plays whole groups; no round played yet.

        Raises:
            ConfigError: ``num_envs`` is not a multiple of ``algorithm.group.size``.
        """
        super().setup(agent, envs)
        group = self.config.group.size
        if envs is not None and envs.num_envs % group:
            raise ConfigError(
                f"{type(self).__name__} plays groups of algorithm.group.size={group} envs from one reset seed, but "
                f"env.num_envs={envs.num_envs}; set env.num_envs to a multiple of {group}."
            )
        self._episode_lengths: list[int] = []

    @staticmethod
    @abc.abstractmethod
    def group_advantages(returns: Tensor) -> Tensor:
        """``[M, G]`` advantages of the ``[M, G]`` episode returns of ``M`` groups of ``G``."""

    def round_seeds(self, num_envs: int) -> list[int]:
        """The ``G`` envs of each group start from the group's seed; each round takes the next ``M`` seeds."""
        groups = num_envs // self.config.group.size
        first = self._seed + self._rounds * groups
        return [first + g for g in range(groups) for _ in range(self.config.group.size)]

    def episode_buffer(self, episodes: Sequence[Episode]) -> RolloutBuffer:
        """The episodes end to end (GAE with discount 1 and no critic: each turn's return-to-go).

        Consecutive runs of ``group_size`` episodes are the groups: in LlamaGym's loop, play each
        group's episodes from one reset seed and set ``episodes_per_update`` to a multiple of
        ``algorithm.group.size``. Their lengths are kept for :meth:`rollout_targets`.

        Raises:
            InputError: The episodes do not form whole groups.
        """
        episode_returns_by_group([sum(ep.rewards) for ep in episodes], self.config.group.size)
        self._episode_lengths = [len(ep.decisions) for ep in episodes]
        return lay_end_to_end(episodes, 1.0, 1.0)

    def rollout_targets(self, buffer: RolloutBuffer) -> RolloutTargets:
        """Every turn of an episode gets the episode's group advantage.

        Returns:
            The buffer's transitions with advantages ``[B]`` from :meth:`group_advantages`.
        """
        batch = buffer.get(torch.arange(len(buffer)))
        lengths = torch.tensor(self._episode_lengths)
        starts = torch.cumsum(lengths, 0) - lengths
        # with gamma = lambda = 1 and no values, a first turn's GAE advantage is its episode's return
        returns = [float(batch.advantages[int(s)]) for s in starts]
        advantages = self.group_advantages(episode_returns_by_group(returns, self.config.group.size)).reshape(
            -1
        )
        per_turn = torch.repeat_interleave(advantages, lengths).to(batch.advantages.dtype)
        return RolloutTargets(batch, per_turn)
