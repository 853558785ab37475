"""REINFORCE with Return Batch Normalization, ReBN (GEM, Liu et al., 2025), for LLM agents.

No critic, no groups. Each round resets the vector env's ``N`` envs, every one from its own seed,
and plays each env until its first episode ends. Each turn ``t`` of an episode gets its
Monte-Carlo return ``G_t = sum_k gamma^k r_{t+k}`` (:func:`turn_returns`, with ``algorithm.gamma``),
so a turn is credited with the rewards that came after it only (dense per-turn rewards keep their
place, which a trajectory-level group baseline loses), and the returns of every turn of the round
are normalised together, ``A = (G - mean(G)) / (std(G) + eps)`` (:func:`return_batch_normalization`).
The update is PPO's clipped surrogate with no value loss (with ``algorithm.epochs=1`` and one
minibatch it is REINFORCE, the ratio being 1). Envs whose episode has ended keep stepping, their
decisions discarded, until the round's last episode ends or ``algorithm.rollout_steps`` steps pass
(an episode still running then counts with the rewards it has so far).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Optional

import torch
from torch import Tensor

from llmgym.agents.base import BaseAgent
from llmgym.agents.learning import Episode
from llmgym.algorithms.buffer import RolloutBuffer
from llmgym.algorithms.episode_rounds import EpisodeRoundAlgorithm
from llmgym.algorithms.on_policy import RolloutTargets, lay_end_to_end
from llmgym.errors import InputError

if TYPE_CHECKING:
    from llmgym.envs.vector import TextVectorEnv

__all__ = ["ReBN", "return_batch_normalization", "turn_returns"]

#: Added to the batch's std so a batch of equal returns gets advantage 0, not NaN.
REBN_EPS = 1e-6


def turn_returns(rewards: Sequence[float], gamma: float) -> Tensor:
    """Each turn's discounted return-to-go in one episode: ``G_t = r_t + gamma * G_{t+1}``.

    Args:
        rewards: The episode's per-turn rewards, ``L`` of them.
        gamma: Discount factor in ``[0, 1]``.

    Returns:
        ``[L]`` float64 returns.

    Raises:
        InputError: ``gamma`` outside ``[0, 1]``.
    """
    if not 0.0 <= float(gamma) <= 1.0:
        raise InputError(f"gamma={gamma!r} must lie in [0, 1]; pass algorithm.gamma such as 0.99 or 1.0.")
    returns = torch.zeros(len(rewards), dtype=torch.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        returns[t] = running
    return returns


def return_batch_normalization(returns: Tensor, eps: float = REBN_EPS) -> Tensor:
    """Normalise the returns of every turn of a batch together: ``(G - mean) / (std + eps)``.

    Args:
        returns: ``[B]`` per-turn returns, all turns of all episodes of the batch.
        eps: Added to the (population) std.

    Returns:
        ``[B]`` advantages (0 throughout a batch of equal returns).

    Raises:
        InputError: ``returns`` is not a non-empty 1-D tensor.
    """
    if not isinstance(returns, Tensor) or returns.dim() != 1 or returns.numel() == 0:
        raise InputError(
            f"returns must be a non-empty [B] tensor of per-turn returns, got "
            f"{list(returns.shape) if isinstance(returns, Tensor) else type(returns).__name__}."
        )
    mean = returns.mean()
    std = returns.std(unbiased=False)
    return (returns - mean) / (std + eps)


class ReBN(EpisodeRoundAlgorithm):
    """REINFORCE with Return Batch Normalization: PPO's surrogate on batch-normalised turn returns.

    Built and used as :class:`~llmgym.algorithms.ppo.PPO` is; ``algorithm.gamma`` discounts the
    turn returns, and ``value_coef``, ``gae_lambda``, ``normalize_advantages`` and
    ``ppo.value_clip_range`` do not apply.
    """

    name: ClassVar[str] = "rebn"

    def setup(self, agent: Optional[BaseAgent], envs: Optional[TextVectorEnv]) -> None:
        """The base class's checks; no batch yet."""
        super().setup(agent, envs)
        #: ``[B]`` the discounted return of every turn of the last batch, in the buffer's order.
        self._turn_returns = torch.zeros(0, dtype=torch.float64)

    def round_seeds(self, num_envs: int) -> list[int]:
        """Every env from its own seed; each round takes the next ``num_envs`` seeds."""
        first = self._seed + self._rounds * num_envs
        return [first + i for i in range(num_envs)]

    def episode_buffer(self, episodes: Sequence[Episode]) -> RolloutBuffer:
        """The episodes end to end; each turn's discounted return is kept for :meth:`rollout_targets`.

        In LlamaGym's loop the batch is the ``episodes_per_update`` episodes of one update.
        """
        self._turn_returns = torch.cat([turn_returns(ep.rewards, self.config.gamma) for ep in episodes])
        return lay_end_to_end(episodes, self.config.gamma, 1.0)

    def rollout_targets(self, buffer: RolloutBuffer) -> RolloutTargets:
        """Every turn gets its return normalised over all turns of the batch.

        Returns:
            The buffer's transitions with advantages ``[B]`` from :func:`return_batch_normalization`.
        """
        batch = buffer.get(torch.arange(len(buffer)))
        advantages = return_batch_normalization(self._turn_returns)
        return RolloutTargets(batch, advantages.to(batch.advantages.dtype))
