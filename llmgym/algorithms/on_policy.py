"""On-policy algorithms: collect a rollout with an agent on a vector env, then update.

``PPO(agent, envs, config).learn(total_env_steps)`` is the library-level API; the config-driven
:class:`~llmgym.algorithms.trainer.Trainer` adds logging, evaluation and checkpoints around it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np
import torch

from llmgym.agents.base import BaseAgent
from llmgym.algorithms.buffer import RolloutBuffer
from llmgym.algorithms.update import add_decisions, run_update
from llmgym.config import AlgorithmConfig
from llmgym.errors import ConfigError
from llmgym.metrics import EpisodeStats

__all__ = ["OnPolicyAlgorithm", "PPO", "A2C"]


class OnPolicyAlgorithm:
    """Rollout collection and updates for an agent whose LLM carries a PPO or A2C updater.

    Args:
        agent: The agent (``num_envs`` equal to the vector env's).
        envs: A :class:`~llmgym.envs.vector.TextVectorEnv`.
        config: The ``algorithm`` section.
        seed: Seeds the first env reset and the minibatch order.
    """

    name = "ppo"

    def __init__(self, agent: BaseAgent, envs: Any, config: Optional[AlgorithmConfig] = None, seed: int = 0) -> None:
        self.config = config if config is not None else AlgorithmConfig(name=self.name)
        if self.config.name != self.name:
            raise ConfigError(f"algorithm.name={self.config.name!r} but {type(self).__name__} runs {self.name!r}.")
        if agent.num_envs != envs.num_envs:
            agent.set_num_envs(envs.num_envs)
        self.agent = agent
        self.envs = envs
        self.buffer = RolloutBuffer(envs.num_envs, self.config.rollout_steps)
        self.generator = torch.Generator().manual_seed(seed + 1)
        self.episode_stats = EpisodeStats()
        self.env_steps = 0
        self.updates = 0
        self.action_log: list[list[Any]] = []
        self._seed = seed
        self._observations: Optional[list[Any]] = None
        self._infos: list[dict[str, Any]] = []

    def _reset_envs(self) -> None:
        self._observations, self._infos = self.envs.reset(seed=self._seed)

    def collect_rollout(self) -> dict[str, float]:
        """Fill the buffer with ``rollout_steps`` vector steps and compute advantages.

        Returns:
            Rollout statistics (invalid-action rate, mean reward per step).
        """
        if self._observations is None:
            self._reset_envs()
        self.buffer.reset()
        parse_failures = 0
        reward_sum = 0.0
        for _ in range(self.config.rollout_steps):
            actions = self.agent.act_batch(self._observations or [], self._infos)
            decisions = self.agent.last_decisions
            observations, rewards, terminated, truncated, infos = self.envs.step(actions)
            self.action_log.append(list(actions))
            shaped, truncation_values = self.agent.observe(rewards, terminated, truncated, infos)
            add_decisions(self.buffer, decisions, shaped, terminated, truncated, truncation_values)
            for i in np.flatnonzero(terminated | truncated):
                episode = infos[int(i)].get("episode")
                if episode is not None:
                    ep = dict(episode)
                    if ep.get("success") is None:
                        ep["success"] = float(ep["return"]) > 0
                    self.episode_stats.add(ep)
            parse_failures += sum(d.parse_failed for d in decisions)
            reward_sum += float(shaped.sum())
            self._observations, self._infos = observations, infos
            self.env_steps += self.envs.num_envs
        last = self.agent.values_of(dict(enumerate(self._observations or [])))
        self.buffer.compute_returns_and_advantages(
            [last[i] for i in range(self.envs.num_envs)], self.config.gamma, self.config.gae_lambda
        )
        steps = self.config.rollout_steps * self.envs.num_envs
        return {"invalid_action_rate": parse_failures / steps, "reward_per_step": reward_sum / steps}

    def update(self) -> dict[str, float]:
        """Run the updates on the collected rollout."""
        agent = self.agent.config
        stats = run_update(
            self.agent.llm, self.buffer, self.config, self.generator, agent.temperature, agent.score_normalize,
            self.agent.sampling(),
        )
        self.updates += 1
        return stats

    def learn(
        self, total_env_steps: int, callback: Optional[Callable[[OnPolicyAlgorithm, dict[str, float]], None]] = None
    ) -> dict[str, float]:
        """Alternate rollouts and updates until ``total_env_steps`` env steps are taken.

        Args:
            total_env_steps: Env steps summed over envs (rounded up to whole rollouts).
            callback: Called after each update with the algorithm and the iteration's metrics.

        Returns:
            The last iteration's metrics.
        """
        metrics: dict[str, float] = {}
        while self.env_steps < total_env_steps:
            metrics = self.collect_rollout()
            metrics.update(self.update())
            metrics.update(self.episode_stats.summary())
            if callback is not None:
                callback(self, metrics)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state for exact resumption (counters, env action log, agent histories)."""
        return {
            "env_steps": self.env_steps,
            "updates": self.updates,
            "action_log": self.action_log,
            "histories": self.agent.history_state(),
            "episode_stats": {
                "returns": list(self.episode_stats.returns),
                "lengths": list(self.episode_stats.lengths),
                "successes": list(self.episode_stats.successes),
                "episodes": self.episode_stats.episodes,
            },
        }

    def generator_states(self) -> dict[str, torch.Tensor]:
        """RNG states of the minibatch order and the agent's sampling."""
        return {"minibatch": self.generator.get_state(), "agent": self.agent.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any], generators: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state_dict`: replay the env actions from the seeded reset, then the histories."""
        self._reset_envs()
        for actions in state["action_log"]:
            self._observations, _, _, _, self._infos = self.envs.step(actions)
        self.action_log = [list(a) for a in state["action_log"]]
        self.agent.load_history_state(state["histories"])
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        stats = state["episode_stats"]
        self.episode_stats.returns.extend(stats["returns"])
        self.episode_stats.lengths.extend(stats["lengths"])
        self.episode_stats.successes.extend(stats["successes"])
        self.episode_stats.episodes = int(stats["episodes"])
        self.generator.set_state(generators["minibatch"])
        self.agent.generator.set_state(generators["agent"])


class PPO(OnPolicyAlgorithm):
    """Proximal Policy Optimization (the LLM must carry a :class:`~llmgym.algorithms.updaters.PPOUpdater`)."""

    name = "ppo"


class A2C(OnPolicyAlgorithm):
    """Advantage Actor-Critic (the LLM must carry an :class:`~llmgym.algorithms.updaters.A2CUpdater`)."""

    name = "a2c"
