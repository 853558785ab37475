"""What every on-policy algorithm shares: rollout collection, the epoch sent to the LLM, the loop.

An algorithm (:class:`~llmgym.algorithms.ppo.PPO`, :class:`~llmgym.algorithms.a2c.A2C`) subclasses
:class:`OnPolicyAlgorithm` and writes two methods: :meth:`~OnPolicyAlgorithm.objective` (its
loss, run on every LLM server) and :meth:`~OnPolicyAlgorithm.train` (its epoch loop on one
rollout). ``PPO(agent, envs, config).learn(total_env_steps)`` is the library-level API; the
config-driven :class:`~llmgym.run.trainer.Trainer` adds logging, evaluation and checkpoints as
callbacks (:mod:`~llmgym.algorithms.callbacks`).
"""

from __future__ import annotations

import abc
import math
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import numpy as np
import torch
from torch import Tensor

from llmgym.agents.actions import Decision
from llmgym.agents.base import BaseAgent
from llmgym.agents.distributions import KLEstimator
from llmgym.agents.learning import Episode
from llmgym.agents.policies import Policy
from llmgym.algorithms.advantages import whiten
from llmgym.algorithms.batch import UpdateBatch
from llmgym.algorithms.buffer import RolloutBatch, RolloutBuffer
from llmgym.algorithms.callbacks import Callback, CallbackArgument, as_callback
from llmgym.algorithms.episode_stats import EpisodeStats
from llmgym.algorithms.kl_control import KLController, KLMeasurement, reward_penalty
from llmgym.algorithms.protocols import NaturalGradientObjective, Objective, PolicyBackend
from llmgym.algorithms.updaters import NONFINITE_WEIGHTS_KEY, resolve_updater
from llmgym.algorithms.user_classes import import_class, is_import_path
from llmgym.config import AlgorithmConfig
from llmgym.errors import ConfigError, InputError, NonFiniteError
from llmgym.llm.protocols import PolicyLLM
from llmgym.llm.updater import Updater

if TYPE_CHECKING:
    from llmgym.envs.vector import TextVectorEnv

__all__ = [
    "OnPolicyAlgorithm",
    "RolloutStep",
    "RolloutTargets",
    "lay_end_to_end",
    "minibatch_schedule",
    "rollout_statistics",
    "weighted_mean",
]


def lay_end_to_end(episodes: Sequence[Episode], gamma: float, gae_lambda: float) -> RolloutBuffer:
    """A one-env buffer of whole episodes end to end, each ending terminal, with GAE computed.

    Args:
        episodes: Finished episodes, each with a decision and a reward per step.
        gamma: Discount factor of the GAE.
        gae_lambda: GAE lambda.
    """
    buffer = RolloutBuffer(num_envs=1, num_steps=sum(len(ep.decisions) for ep in episodes))
    for episode in episodes:
        last = len(episode.decisions) - 1
        for t, (decision, reward) in enumerate(zip(episode.decisions, episode.rewards)):
            buffer.add([decision], [reward], [t == last], [False])
    buffer.compute_returns_and_advantages([0.0], gamma, gae_lambda)
    return buffer


def minibatch_schedule(count: int, minibatch_size: int, generator: torch.Generator) -> list[list[int]]:
    """One epoch's minibatches: a seeded permutation of ``range(count)`` cut into runs of ``minibatch_size``.

    Every sample appears exactly once; the last minibatch may be smaller. Drawn in the client, as
    indices into the whole rollout, so every LLM server follows the same schedule.

    Args:
        count: Samples in the rollout.
        minibatch_size: Samples per gradient step (> 0).
        generator: Draws the permutation (the same state gives the same schedule).

    Raises:
        InputError: ``minibatch_size`` is not a positive int.
    """
    if isinstance(minibatch_size, bool) or not isinstance(minibatch_size, int) or minibatch_size <= 0:
        raise InputError(
            f"minibatch_size={minibatch_size!r} must be a positive int (e.g. algorithm.minibatch_size=32)."
        )
    order = torch.randperm(count, generator=generator).tolist()
    return [order[i : i + minibatch_size] for i in range(0, count, minibatch_size)]


def rollout_statistics(advantages: Tensor, values: Tensor, returns: Tensor) -> dict[str, float]:
    """What the critic and the advantages looked like in a rollout (before whitening).

    Args:
        advantages: ``[B]`` GAE advantages.
        values: ``[B]`` the critic's values at collection time.
        returns: ``[B]`` the value targets (advantages + values).

    Returns:
        ``advantage_mean``, ``advantage_std``, ``advantage_abs_mean``, ``value_mean`` and ``return_mean``.
    """
    adv = advantages.float()
    return {
        "advantage_mean": float(adv.mean()),
        "advantage_std": float(adv.std(unbiased=False)),
        "advantage_abs_mean": float(adv.abs().mean()),
        "value_mean": float(values.float().mean()),
        "return_mean": float(returns.float().mean()),
    }


def weighted_mean(results: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Merge the per-server results of one ``llm.update`` call, weighted by their ``num_samples``."""
    total = sum(int(r.get("num_samples", 0)) for r in results)
    merged: dict[str, float] = {}
    if total == 0:
        return merged
    for result in results:
        weight = int(result.get("num_samples", 0)) / total
        for key, value in result.items():
            if key != "num_samples" and isinstance(value, (int, float)):
                merged[key] = merged.get(key, 0.0) + float(value) * weight
    return merged


@dataclass(frozen=True)
class RolloutStep:
    """One vector step of a rollout, as :meth:`~llmgym.algorithms.callbacks.Callback.on_step` sees it.

    Attributes:
        env_steps: Training env steps after the step.
        observations: Per env, the observation the agent acted on.
        actions: Per env, the action sent to the env.
        decisions: Per env, the agent's decision.
        rewards: ``[N]`` the env's rewards after the agent's shaping (without the KL penalty).
        penalties: ``[N]`` the KL penalties training adds to them (zeros unless ``algorithm.kl.penalty``
            is ``reward``; zero for an env not ``live``).
        terminated: ``[N]`` whether each episode reached a terminal state.
        truncated: ``[N]`` whether a time limit cut it.
        truncation_values: ``[N]`` the agent's values of the cut episodes' final observations.
        next_observations: Per env, the observation after the step (the next episode's first one
            where an episode ended).
        infos: Per env, the step's info.
        live: ``[N]`` whether each env's step belongs to an episode training uses (GRPO and RLOO
            keep stepping an env whose episode of the round has ended, its decisions discarded).
        episode_starts: ``[N]`` whether each env's step is the first of its episode.
    """

    env_steps: int
    observations: Sequence[Any]
    actions: Sequence[Any]
    decisions: Sequence[Decision]
    rewards: np.ndarray
    penalties: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    truncation_values: np.ndarray
    next_observations: Sequence[Any]
    infos: Sequence[dict[str, Any]]
    live: np.ndarray
    episode_starts: np.ndarray


@dataclass(frozen=True)
class RolloutTargets:
    """A whole rollout ready for updates: its ``B`` transitions and their (whitened) advantages.

    Attributes:
        batch: Every transition of the buffer, in flat order.
        advantages: ``[B]`` advantages, whitened over the whole rollout when asked (so the update
            does not depend on how samples are split across servers).
    """

    batch: RolloutBatch
    advantages: Tensor

    @classmethod
    def from_buffer(cls, buffer: RolloutBuffer, normalize_advantages: bool) -> RolloutTargets:
        """Take every transition of a buffer whose advantages are computed."""
        batch = buffer.get(torch.arange(len(buffer)))
        whitened = normalize_advantages and len(batch) > 1
        return cls(batch, whiten(batch.advantages) if whitened else batch.advantages)

    def __len__(self) -> int:
        return len(self.batch)

    def update_batch(
        self,
        objective: Objective | NaturalGradientObjective,
        policy: Policy,
        minibatches: list[list[int]],
        learning_rate_scale: float = 1.0,
        kl_estimator: KLEstimator = "k1",
    ) -> UpdateBatch:
        """One epoch's payload for ``llm.update``: the decisions' actions as ``policy`` stores them."""
        batch = self.batch
        return UpdateBatch(
            objective=objective,
            policy=policy,
            minibatches=minibatches,
            old_log_probs=batch.old_log_probs,
            old_values=batch.old_values,
            advantages=self.advantages,
            returns=batch.returns,
            actions=policy.actions(batch.decisions),
            learning_rate_scale=learning_rate_scale,
            kl_estimator=kl_estimator,
        )

    def statistics(self) -> dict[str, float]:
        """:func:`rollout_statistics` of the raw advantages."""
        return rollout_statistics(self.batch.advantages, self.batch.old_values, self.batch.returns)


class OnPolicyAlgorithm(abc.ABC):
    """Collects rollouts with an agent on a vector env and updates the agent's LLM from them.

    Args:
        agent: The agent (its ``num_envs`` is set to the vector env's); ``None`` when the
            algorithm only trains from whole episodes (LlamaGym's loop, :meth:`learn_from_episodes`).
        envs: A :class:`~llmgym.envs.vector.TextVectorEnv`, or ``None`` likewise.
        config: The ``algorithm`` section; its ``name`` must be this algorithm's (its registered name, or
            for a user algorithm its import path ``'package.module:ClassName'``).
        seed: Seeds the first env reset and the minibatch order.

    Raises:
        ConfigError: ``config.name`` names another algorithm.
        InputError: Only one of ``agent`` and ``envs`` is given.
    """

    #: The ``algorithm.name`` that selects this class.
    name: ClassVar[str]

    def __init__(
        self,
        agent: Optional[BaseAgent] = None,
        envs: Optional[TextVectorEnv] = None,
        config: Optional[AlgorithmConfig] = None,
        seed: int = 0,
    ) -> None:
        self.config = config if config is not None else AlgorithmConfig(name=self.name)
        if self.config.name != self.name and not self._named_by_import_path(self.config.name):
            raise ConfigError(
                f"algorithm.name={self.config.name!r} but {type(self).__name__} runs {self.name!r}; build the config "
                f"with name={self.name!r} (or use the class that name selects)."
            )
        self.agent = agent
        self.envs = envs
        self.buffer = RolloutBuffer(envs.num_envs if envs is not None else 1, self.config.rollout_steps)
        self.generator = torch.Generator().manual_seed(seed + 1)
        self.episode_stats = EpisodeStats()
        self.env_steps = 0
        #: The training budget that ``algorithm.anneal_lr`` decays over (set by :meth:`learn`).
        self.total_env_steps: Optional[int] = None
        self._rollout_start_steps = 0
        self.updates = 0
        self.action_log: list[list[Any]] = []
        self._seed = seed
        self._observations: Optional[list[Any]] = None
        self._infos: list[dict[str, Any]] = []
        #: ``[N]`` whether each env's next step is the first of an episode (:attr:`RolloutStep.episode_starts`).
        self._episode_starts = np.ones(self.buffer.num_envs, dtype=bool)
        #: The weight of the KL to the reference and its controller (``algorithm.kl``).
        self.kl = KLController(self.config.kl)
        self._rollout_kl: list[KLMeasurement] = []
        self.setup(agent, envs)

    def setup(self, agent: Optional[BaseAgent], envs: Optional[TextVectorEnv]) -> None:
        """Check the agent and envs the algorithm is built with and fit the agent to the envs' width.

        The end of ``__init__``: an algorithm that needs more of them, or state of its own, overrides
        this (calling it first) instead of ``__init__``.

        Args:
            agent: The agent, or ``None``.
            envs: The vector env, or ``None``.

        Raises:
            InputError: Only one of ``agent`` and ``envs`` is given.
        """
        if (agent is None) != (envs is None):
            raise InputError(
                f"{type(self).__name__} got {'an agent' if envs is None else 'envs'} without "
                f"{'envs' if envs is None else 'an agent'}; pass both to train on envs, or neither to train an agent "
                "from its episodes (agent = MyAgent(llm, algorithm=...))."
            )
        if agent is not None and envs is not None and agent.num_envs != envs.num_envs:
            agent.set_num_envs(envs.num_envs)

    @classmethod
    def _named_by_import_path(cls, name: str) -> bool:
        """Whether ``algorithm.name`` is the import path of this class (a user algorithm)."""
        if not is_import_path(name):
            return False
        return import_class(name, "algorithm.name", OnPolicyAlgorithm, "algorithm") is cls  # type: ignore[type-abstract]

    # ------------------------------------------------------------------ what an algorithm defines
    @abc.abstractmethod
    def objective(self) -> Objective | NaturalGradientObjective:
        """The loss the LLM servers minimise on each minibatch (or the step they run: TRPO)."""

    @abc.abstractmethod
    def train(self, llm: PolicyBackend, buffer: RolloutBuffer, policy: Policy) -> dict[str, float]:
        """Update ``llm`` from a buffer whose advantages are computed; return the statistics.

        Args:
            llm: The LLM that took the actions (built with :meth:`updater`).
            buffer: The rollout.
            policy: The distribution the actions were drawn from.
        """

    def rollout_targets(self, buffer: RolloutBuffer) -> RolloutTargets:
        """The buffer's transitions and the advantages to train on (GAE, whitened when configured)."""
        return RolloutTargets.from_buffer(buffer, self.config.normalize_advantages)

    def updater(self) -> Updater:
        """The server-side half, to build the LLM with: ``llmgym.LLM(..., updater=algo.updater())``.

        A :class:`~llmgym.algorithms.updaters.PolicyUpdater` (or the user class ``algorithm.updater``,
        :func:`~llmgym.algorithms.updaters.resolve_updater`): it runs whatever objective each update
        sends, with this config's optimizer settings (learning rates, gradient clipping, accumulation).
        """
        return resolve_updater(self.config)

    # ------------------------------------------------------------------ shared steps
    def run_epoch(
        self,
        llm: PolicyBackend,
        rollout: RolloutTargets,
        objective: Objective | NaturalGradientObjective,
        policy: Policy,
    ) -> dict[str, float]:
        """One pass over the rollout in shuffled minibatches, one optimizer step each.

        Returns:
            Sample-weighted means of the epoch's loss statistics over all servers.
        """
        schedule = minibatch_schedule(len(rollout), self.config.minibatch_size, self.generator)
        batch = rollout.update_batch(
            objective, policy, schedule, self.learning_rate_scale(), self.kl_estimator
        )
        return weighted_mean(llm.update(rollout.batch.prompts, batch.actions.candidate_sets, batch=batch))

    def check_finite(self, stats: dict[str, float]) -> dict[str, float]:
        """Stop training when the update's losses or the servers' weights are not finite.

        Runs right after each update, before any callback (so before a checkpoint holds the weights).

        Args:
            stats: The update's statistics, with the servers' :data:`~llmgym.algorithms.updaters.NONFINITE_WEIGHTS_KEY`.

        Returns:
            ``stats`` without that key.

        Raises:
            NonFiniteError: A loss statistic (``loss``, ``policy_loss``...) is NaN or infinite, or a server's weights
                are; the message names the update, the values and the settings to change.
        """
        stats = dict(stats)
        weights_bad = stats.pop(NONFINITE_WEIGHTS_KEY, 0.0) > 0
        losses = {k: v for k, v in stats.items() if "loss" in k and not math.isfinite(v)}
        if not weights_bad and not losses:
            return stats
        cfg = self.config
        found = ", ".join(f"{k}={v}" for k, v in losses.items()) or "finite losses"
        what = f"{found} and {'non-finite' if weights_bad else 'finite'} weights"
        raise NonFiniteError(
            f"Training diverged at update {self.updates + 1} (after {self.env_steps} env steps): {what}. The run stops "
            "here, before a checkpoint or an export holds these weights. Fix: lower algorithm.learning_rate "
            f"(now {cfg.learning_rate:g}) and algorithm.head_learning_rate (now {cfg.head_learning_rate:g}), or clip with "
            f"algorithm.max_grad_norm (now {cfg.max_grad_norm}); with model.dtype=float16 try bfloat16 or float32."
        )

    @property
    def kl_estimator(self) -> KLEstimator:
        """``algorithm.kl.estimator``, typed."""
        return typing.cast(KLEstimator, self.config.kl.estimator)  # KLConfig checked it

    def learning_rate_scale(self) -> float:
        """``1 - (env steps before the last rollout) / total_env_steps`` with ``anneal_lr``, else 1."""
        if not self.config.anneal_lr or not self.total_env_steps:
            return 1.0
        return min(1.0, max(0.0, 1.0 - self._rollout_start_steps / self.total_env_steps))

    def _require_envs(self) -> tuple[BaseAgent, TextVectorEnv]:
        if self.agent is None or self.envs is None:
            raise InputError(
                f"{type(self).__name__} was built without an agent and envs; build it as "
                f"{type(self).__name__}(agent, envs, config) to collect rollouts."
            )
        return self.agent, self.envs

    def _reset_envs(self) -> None:
        _, envs = self._require_envs()
        self._observations, self._infos = envs.reset(seed=self._seed)
        self._episode_starts = np.ones(envs.num_envs, dtype=bool)

    def collect_rollout(self, callback: Optional[Callback] = None) -> dict[str, float]:
        """Fill the buffer with ``rollout_steps`` vector steps and compute advantages.

        Args:
            callback: Told of every step (:meth:`~llmgym.algorithms.callbacks.Callback.on_step`).

        Returns:
            Rollout statistics (invalid-action rate, mean reward per step).
        """
        agent, envs = self._require_envs()
        if self._observations is None:
            self._reset_envs()
        self._rollout_start_steps = self.env_steps
        self.buffer.reset()
        parse_failures = 0
        reward_sum = 0.0
        self._rollout_kl = []
        for _ in range(self.config.rollout_steps):
            step = self.rollout_step(self._observations or [], self._infos, callback)
            self.action_log.append(list(step.actions))
            self.buffer.add(
                step.decisions,
                step.rewards + step.penalties,
                step.terminated,
                step.truncated,
                step.truncation_values,
            )
            parse_failures += sum(d.parse_failed for d in step.decisions)
            reward_sum += float(step.rewards.sum())
            self._observations, self._infos = list(step.next_observations), list(step.infos)
        last = agent.values_of(dict(enumerate(self._observations or [])))
        self.buffer.compute_returns_and_advantages(
            [last[i] for i in range(envs.num_envs)], self.config.gamma, self.config.gae_lambda
        )
        steps = self.config.rollout_steps * envs.num_envs
        return {"invalid_action_rate": parse_failures / steps, "reward_per_step": reward_sum / steps}

    def rollout_step(
        self,
        observations: Sequence[Any],
        infos: Sequence[dict[str, Any]],
        callback: Optional[Callback] = None,
        live: Optional[Sequence[int]] = None,
    ) -> RolloutStep:
        """One vector step of a rollout, the same for every collection loop.

        The agent acts, the ``live`` decisions are priced for their KL to the reference
        (:meth:`kl_penalties`), the envs step, the agent observes the outcome, the ``live`` envs'
        ended episodes join :attr:`episode_stats`, the env steps are counted, and ``callback`` is
        told (:meth:`~llmgym.algorithms.callbacks.Callback.on_step`).

        Args:
            observations: Per env, the current observation.
            infos: Per env, the current info.
            callback: Told of the step; ``None``: nobody.
            live: The envs whose step counts (all by default); the others still act and step,
                their decisions discarded by the caller.

        Returns:
            The step.
        """
        agent, envs = self._require_envs()
        indices = list(range(envs.num_envs)) if live is None else list(live)
        actions = agent.act_batch(list(observations), list(infos))
        decisions = agent.last_decisions
        priced = self.kl_penalties(agent.llm, agent.policy, [decisions[i] for i in indices])
        penalties = np.zeros(envs.num_envs, dtype=priced.dtype)
        penalties[indices] = priced
        next_observations, rewards, terminated, truncated, next_infos = envs.step(actions)
        shaped, truncation_values = agent.observe(rewards, terminated, truncated, next_infos)
        live_mask = np.zeros(envs.num_envs, dtype=bool)
        live_mask[indices] = True
        for i in np.flatnonzero((terminated | truncated) & live_mask):
            self._record_episode(next_infos[int(i)])
        self.env_steps += len(indices)
        step = RolloutStep(
            env_steps=self.env_steps,
            observations=observations,
            actions=actions,
            decisions=decisions,
            rewards=shaped,
            penalties=penalties,
            terminated=terminated,
            truncated=truncated,
            truncation_values=truncation_values,
            next_observations=next_observations,
            infos=next_infos,
            live=live_mask,
            episode_starts=self._episode_starts,
        )
        self._episode_starts = terminated | truncated
        if callback is not None:
            callback.on_step(self, step)
        return step

    def kl_penalties(self, llm: object, policy: Policy, decisions: Sequence[Decision]) -> np.ndarray:
        """``[B]`` rewards added to the decisions for their KL to the reference (``algorithm.kl.penalty: reward``).

        One batched reference pass (:meth:`~llmgym.agents.policies.Policy.reference_kl`) measures
        the KL of each decision's action, summed over its tokens; the measurement joins the
        rollout's (:meth:`kl_statistics`). Zeros, and no reference pass, when the KL is a loss term or off.

        Raises:
            ConfigError: ``llm`` cannot score under its reference (not an :class:`llmgym.LLM`).
        """
        if not self.kl.in_reward or not decisions:
            return np.zeros(len(decisions))
        if not isinstance(llm, PolicyLLM):
            raise ConfigError(
                f"algorithm.kl.penalty=reward scores every action under the reference model, which "
                f"{type(llm).__name__} cannot; train an llmgym.LLM or set algorithm.kl.penalty=loss."
            )
        measured = policy.reference_kl(llm, decisions, self.kl_estimator)
        self._rollout_kl.append(
            KLMeasurement(float(measured.kl.sum()), len(decisions), int(measured.tokens.sum()))
        )
        return reward_penalty(measured.kl, self.kl.coef).numpy()

    def kl_statistics(
        self, stats: dict[str, float], policy: Policy, decisions: Sequence[Decision]
    ) -> dict[str, float]:
        """Log the update's KL to the reference and adapt the KL weight to it (``algorithm.kl.controller``).

        The KL is the rollout's reference pass with the penalty in the reward, else the update's
        ``kl_ref`` (mean per action, from the loss). The returned ``kl_coef`` is the weight this update used.

        Args:
            stats: The update's statistics.
            policy: The policy the decisions were drawn from.
            decisions: The update's decisions.

        Returns:
            ``kl_coef`` and, when the KL was measured, ``kl_ref`` (nats per action) and
            ``kl_ref_per_token``.
        """
        measurement: Optional[KLMeasurement] = None
        if self.kl.in_reward and self._rollout_kl:
            measurement = KLMeasurement(
                sum(m.total for m in self._rollout_kl),
                sum(m.actions for m in self._rollout_kl),
                sum(m.tokens for m in self._rollout_kl),
            )
        elif self.kl.loss_coef > 0 and "kl_ref" in stats and decisions:
            tokens = sum(policy.actions(decisions).token_counts)
            measurement = KLMeasurement(stats["kl_ref"] * len(decisions), len(decisions), tokens)
        self._rollout_kl = []
        metrics = self.kl.metrics(measurement)
        if measurement is not None:
            self.kl.update(measurement)
        return metrics

    def _record_episode(self, info: dict[str, Any]) -> None:
        """Add an ended episode's ``info["episode"]`` to the statistics (success: return > 0 if unset)."""
        episode = info.get("episode")
        if episode is not None:
            stats = dict(episode)
            if stats.get("success") is None:
                stats["success"] = float(stats["return"]) > 0
            self.episode_stats.add(stats)

    def update(self) -> dict[str, float]:
        """Train on the collected rollout (:meth:`train`)."""
        agent, _ = self._require_envs()
        stats = self.check_finite(self.train(agent.llm, self.buffer, agent.policy))
        self.updates += 1
        decisions = self.buffer.get(torch.arange(len(self.buffer))).decisions
        return {**stats, **self.kl_statistics(stats, agent.policy, decisions)}

    def learn(self, total_env_steps: int, callback: CallbackArgument = None) -> dict[str, float]:
        """Alternate rollouts and updates until ``total_env_steps`` env steps are taken.

        Args:
            total_env_steps: Env steps summed over envs (rounded up to whole rollouts); also the
                budget ``algorithm.anneal_lr`` decays the learning rates over.
            callback: A :class:`~llmgym.algorithms.callbacks.Callback`, a list of them, or a function
                ``f(algorithm, metrics)`` called after each update.

        Returns:
            The last iteration's metrics: the rollout's and the update's statistics and the episode statistics.
        """
        hooks = as_callback(callback)
        metrics: dict[str, float] = {}
        self.total_env_steps = total_env_steps
        hooks.on_training_start(self)
        while self.env_steps < total_env_steps:
            hooks.on_rollout_start(self)
            metrics = self.collect_rollout(hooks)
            hooks.on_rollout_end(self, metrics)
            metrics.update(self.update())
            metrics.update(self.episode_stats.summary())
            hooks.on_update(self, metrics)
        hooks.on_training_end(self)
        return metrics

    def learn_from_episodes(self, agent: BaseAgent, episodes: Sequence[Episode]) -> dict[str, float]:
        """One update of ``agent.llm`` from whole episodes (LlamaGym's ``terminate_episode`` flow).

        Args:
            agent: The agent that took the decisions (its ``llm`` and ``policy``).
            episodes: Finished episodes, each with a decision and a reward per step.

        Returns:
            The statistics of :meth:`train_on_episodes`.
        """
        return self.train_on_episodes(agent.llm, agent.policy, episodes)

    def train_on_episodes(
        self, llm: PolicyBackend, policy: Policy, episodes: Sequence[Episode]
    ) -> dict[str, float]:
        """One update from whole episodes.

        The episodes go into :meth:`episode_buffer` (with the KL penalty added to their rewards
        when ``algorithm.kl.penalty`` is ``reward``), then :meth:`train`; ``episode_return`` is the
        env's return, without the penalty.

        Args:
            llm: The LLM that took the decisions.
            policy: The distribution the decisions were drawn from.
            episodes: Finished episodes, each with a decision and a reward per step.

        Returns:
            The update's statistics plus ``episode_return`` (mean) and ``episodes``.

        Raises:
            InputError: No episode, or an episode with no decision or a reward count that differs
                (or what :meth:`episode_buffer` refuses).
        """
        bad = [i for i, ep in enumerate(episodes) if not ep.decisions or len(ep.rewards) != len(ep.decisions)]
        if not episodes or bad:
            raise InputError(
                f"train_on_episodes needs episodes with one reward per decision; got {len(episodes)} episodes, "
                f"malformed: {bad[:5]}."
            )
        decisions = [d for ep in episodes for d in ep.decisions]
        penalties = self.kl_penalties(llm, policy, decisions).tolist()
        penalised, start = [], 0
        for ep in episodes:
            stop = start + len(ep.decisions)
            penalised.append(
                Episode(ep.decisions, [r + p for r, p in zip(ep.rewards, penalties[start:stop])])
            )
            start = stop
        stats = self.check_finite(self.train(llm, self.episode_buffer(penalised), policy))
        self.updates += 1
        returns = [sum(ep.rewards) for ep in episodes]
        stats.update(self.kl_statistics(stats, policy, decisions))
        return {**stats, "episode_return": sum(returns) / len(returns), "episodes": float(len(episodes))}

    def episode_buffer(self, episodes: Sequence[Episode]) -> RolloutBuffer:
        """Whole episodes laid end to end in a one-env buffer, GAE computed with this config's discounts.

        Every episode ends in a terminal step, so GAE never crosses an episode boundary.
        """
        return lay_end_to_end(episodes, self.config.gamma, self.config.gae_lambda)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """JSON-able state for exact resumption (counters, env action log, agent histories)."""
        agent, _ = self._require_envs()
        return {
            "env_steps": self.env_steps,
            "updates": self.updates,
            "kl": self.kl.state_dict(),
            "action_log": self.action_log,
            "histories": agent.history_state(),
            "episode_stats": {
                "returns": list(self.episode_stats.returns),
                "lengths": list(self.episode_stats.lengths),
                "successes": list(self.episode_stats.successes),
                "episodes": self.episode_stats.episodes,
            },
        }

    def generator_states(self) -> dict[str, torch.Tensor]:
        """RNG states of the minibatch order and the agent's sampling."""
        agent, _ = self._require_envs()
        return {"minibatch": self.generator.get_state(), "agent": agent.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any], generators: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state_dict`: replay the env actions from the seeded reset, then the histories."""
        agent, envs = self._require_envs()
        self._reset_envs()
        for actions in state["action_log"]:
            self._observations, _, terminated, truncated, self._infos = envs.step(actions)
            self._episode_starts = terminated | truncated
        self.action_log = [list(a) for a in state["action_log"]]
        agent.load_history_state(state["histories"])
        self.env_steps = int(state["env_steps"])
        self.updates = int(state["updates"])
        if "kl" in state:
            self.kl.load_state_dict(state["kl"])
        stats = state["episode_stats"]
        self.episode_stats.returns.extend(stats["returns"])
        self.episode_stats.lengths.extend(stats["lengths"])
        self.episode_stats.successes.extend(stats["successes"])
        self.episode_stats.episodes = int(stats["episodes"])
        self.generator.set_state(generators["minibatch"])
        agent.generator.set_state(generators["agent"])
