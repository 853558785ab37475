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
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import numpy as np
import torch
from torch import Tensor

from llmgym.agents.base import BaseAgent
from llmgym.agents.learning import Episode
from llmgym.algorithms.buffer import RolloutBuffer
from llmgym.algorithms.callbacks import Callback
from llmgym.algorithms.on_policy import RolloutTargets, lay_end_to_end
from llmgym.algorithms.ppo import PPO, PPOObjective
from llmgym.config import AlgorithmConfig
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


class ReBN(PPO):
    """REINFORCE with Return Batch Normalization: PPO's surrogate on batch-normalised turn returns.

    Built and used as :class:`~llmgym.algorithms.ppo.PPO` is; ``algorithm.gamma`` discounts the
    turn returns, and ``value_coef``, ``gae_lambda``, ``normalize_advantages`` and
    ``ppo.value_clip_range`` do not apply.
    """

    name: ClassVar[str] = "rebn"

    def __init__(
        self,
        agent: Optional[BaseAgent] = None,
        envs: Optional[TextVectorEnv] = None,
        config: Optional[AlgorithmConfig] = None,
        seed: int = 0,
    ) -> None:
        super().__init__(agent, envs, config, seed)
        self._rounds = 0
        #: ``[B]`` the discounted return of every turn of the last batch, in the buffer's order.
        self._turn_returns = torch.zeros(0, dtype=torch.float64)

    def objective(self) -> PPOObjective:
        """PPO's clipped surrogate with no value loss (there is no critic)."""
        cfg = self.config
        return PPOObjective(cfg.ppo.clip_range, None, 0.0, cfg.entropy_coef, self.kl.loss_coef)

    # ------------------------------------------------------------------ rollouts
    def collect_rollout(self, callback: Optional[Callback] = None) -> dict[str, float]:
        """Play one round: every env's first episode from its own seed; store them end to end.

        Args:
            callback: Told of every step (:meth:`~llmgym.algorithms.callbacks.Callback.on_step`);
                an env whose episode has ended steps on outside ``live``.

        Returns:
            Rollout statistics (invalid-action rate, mean env reward per step: without the KL penalty).
        """
        agent, envs = self._require_envs()
        self._rollout_start_steps = self.env_steps
        first = self._seed + self._rounds * envs.num_envs
        observations, infos = envs.reset(seed=[first + i for i in range(envs.num_envs)])
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
