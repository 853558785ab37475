"""Evaluation: seeded episodes played to their end by an agent, a batch of envs side by side.

:func:`play_episodes` is the one evaluation loop: :func:`evaluate` (success rate and return over
seeded episodes, ``llmgym train``'s evaluations and ``llmgym eval``) and the RL4LMs-style split
evaluation (:mod:`llmgym.run.text_evaluation`, one episode per datapool sample) both run it.
Training's collection runs on the autoresetting vector env instead
(:meth:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm.collect_rollout`), because its episodes
continue across rollouts rather than starting from chosen seeds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional

import gymnasium as gym

from llmgym.agents.actions import Decision
from llmgym.agents.base import BaseAgent
from llmgym.config import Config
from llmgym.errors import ConfigError
from llmgym.report.records import EpisodeRecorder
from llmgym.run.fluency import fluency_metrics

__all__ = ["EpisodeStep", "eval_width", "evaluate", "evaluated_policy", "masks_evaluation", "play_episodes"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeStep:
    """One env step of an episode played by :func:`play_episodes`.

    Attributes:
        episode: The episode's number (``0 .. episodes - 1``).
        observation: The observation the agent acted on.
        decision: The agent's decision.
        next_observation: The observation the step returned.
        reward: The step's reward, as the env returned it.
        terminated: The episode ended in a terminal state.
        truncated: The episode was cut by a time limit.
        info: The step's info.
    """

    episode: int
    observation: Any
    decision: Decision
    next_observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]

    @property
    def done(self) -> bool:
        """Whether the episode ended at this step."""
        return self.terminated or self.truncated


def play_episodes(
    agent: BaseAgent,
    envs: Sequence[gym.Env],
    episodes: int,
    reset: Callable[[gym.Env, int], tuple[Any, dict[str, Any]]],
    on_step: Callable[[EpisodeStep], None],
    greedy: bool = True,
) -> None:
    """Play ``episodes`` episodes to their end, ``len(envs)`` side by side.

    A slot starts the next pending episode as soon as its own ends, so every batched forward stays
    full; each episode starts with a fresh agent history, so the result does not depend on the
    number of envs.

    Args:
        agent: The agent (its histories ``0 .. len(envs) - 1`` are used).
        envs: The envs played on (not closed here).
        episodes: How many episodes to play.
        reset: ``reset(env, episode) -> (observation, info)``: starts an episode (seeds it).
        on_step: Called after every env step, in order within each episode.
        greedy: Take the most likely action (else sample).
    """
    pending = iter(range(episodes))
    running: dict[int, int] = {}  # slot -> episode
    state: dict[int, tuple[Any, dict[str, Any]]] = {}

    def start_next(slot: int) -> None:
        episode = next(pending, None)
        if episode is None:
            running.pop(slot, None)
            state.pop(slot, None)
            return
        running[slot] = episode
        agent.reset_env(slot)
        state[slot] = reset(envs[slot], episode)

    for slot in range(min(len(envs), episodes)):
        start_next(slot)
    while state:
        active = sorted(state)
        actions = agent.act_batch(
            [state[i][0] for i in active], [state[i][1] for i in active], greedy=greedy, env_indices=active
        )
        for slot, action, decision in zip(active, actions, agent.last_decisions):
            obs, reward, terminated, truncated, info = envs[slot].step(action)
            step = EpisodeStep(
                running[slot],
                state[slot][0],
                decision,
                obs,
                float(reward),
                bool(terminated),
                bool(truncated),
                info,
            )
            on_step(step)
            if step.done:
                start_next(slot)
            else:
                state[slot] = (obs, info)


def masks_evaluation(config: Config) -> bool:
    """Whether evaluations decode under NLPO's mask (``algorithm.name: nlpo`` and ``algorithm.nlpo.evaluate_masked``)."""
    return config.algorithm.name == "nlpo" and config.algorithm.nlpo.evaluate_masked


@contextmanager
def evaluated_policy(agent: BaseAgent, config: Config) -> Iterator[None]:
    """The agent acts with the policy evaluations decode with; its own policy is restored after.

    With :func:`masks_evaluation`, every token is restricted to the mask policy's top-p set
    (``agent.policy.masked(algorithm.nlpo.mask_top_p, algorithm.nlpo.min_tokens_to_keep)``), greedy
    and sampled alike, as RL4LMs' maskable policies apply their mask in every ``generate``, evaluation
    included; otherwise the agent's policy as it is.
    """
    if not masks_evaluation(config):
        yield
        return
    nlpo = config.algorithm.nlpo
    policy = agent.policy
    agent.policy = policy.masked(nlpo.mask_top_p, nlpo.min_tokens_to_keep)
    try:
        yield
    finally:
        agent.policy = policy


def eval_width(config: Config, episodes: int) -> int:
    """Envs evaluated side by side: ``train.eval_num_envs`` (default ``env.num_envs``), at most ``episodes``."""
    width = config.train.eval_num_envs or config.env.num_envs
    return max(1, min(width, episodes))


def evaluate(
    agent: BaseAgent,
    config: Config,
    episodes: int,
    seed: int,
    greedy: bool = True,
    recorder: Optional[EpisodeRecorder] = None,
) -> dict[str, float]:
    """Run ``episodes`` seeded episodes (episode ``j`` uses seed ``seed + j``) with the agent.

    Up to ``agent.num_envs`` episodes run side by side (:func:`play_episodes`). With a
    ``recorder``, the steps of the episodes it wants are recorded (for the run report). An NLPO
    config's agent decodes under the mask with ``algorithm.nlpo.evaluate_masked`` (:func:`evaluated_policy`).

    Returns:
        ``success_rate``, ``episode_return`` (the task's return: ``info["shaping_reward"]`` is left
        out, the invalid-action penalty is in) and ``episode_length`` means, and ``episodes``; for a
        text-generation env (its episodes end with ``info["completion"]``) also the completions'
        fluency (:func:`~llmgym.run.fluency.fluency_metrics`: ``perplexity_ref``,
        ``distinct-1``, ``distinct-2``, and ``kl_ref`` when sampled).
    """
    kwargs: dict[str, Any] = dict(config.env.kwargs)
    if config.env.max_episode_steps is not None:
        kwargs["max_episode_steps"] = config.env.max_episode_steps
    width = max(1, min(agent.num_envs, episodes))
    envs = [gym.make(config.env.id, **kwargs) for _ in range(width)]
    returns: list[float] = [0.0] * episodes
    lengths: list[int] = [0] * episodes
    successes: list[float] = [0.0] * episodes
    completions: dict[int, str] = {}
    decisions: list[Decision] = []

    def on_step(step: EpisodeStep) -> None:
        episode = step.episode
        reward = step.reward - float(step.info.get("shaping_reward", 0.0))
        penalised = reward + (agent.config.invalid_action_penalty if step.decision.parse_failed else 0.0)
        returns[episode] += penalised
        lengths[episode] += 1
        decisions.append(step.decision)
        recorded = recorder is not None and recorder.wants(episode)
        if recorder is not None and recorded:
            recorder.add_step(episode, agent.format_observation(step.observation), step.decision, penalised)
        if step.done:
            if "completion" in step.info:
                completions[episode] = str(step.info["completion"])
            success = step.info.get("success")
            successes[episode] = float(bool(success if success is not None else reward > 0))
            if recorder is not None and recorded:
                recorder.end_episode(episode, seed + episode, bool(successes[episode]), step.terminated)

    n = max(1, episodes)
    with evaluated_policy(agent, config):  # the fluency's KL reads the policy the tokens were drawn from
        try:
            play_episodes(
                agent, envs, episodes, lambda env, episode: env.reset(seed=seed + episode), on_step, greedy
            )
        finally:
            for env in envs:
                env.close()
        result = {
            "success_rate": sum(successes) / n,
            "episode_return": sum(returns) / n,
            "episode_length": sum(lengths) / n,
            "episodes": float(episodes),
        }
        if completions:
            result.update(
                _fluency(agent, decisions, [completions[e] for e in sorted(completions)], sampled=not greedy)
            )
    return result


def _fluency(
    agent: BaseAgent, decisions: list[Decision], completions: list[str], sampled: bool
) -> dict[str, float]:
    """:func:`~llmgym.run.fluency.fluency_metrics`, distinct-n only (with a warning) when the LLM has no reference."""
    try:
        return fluency_metrics(agent.llm, agent.policy, decisions, completions, sampled=sampled)
    except ConfigError as exc:
        logger.warning("perplexity and KL to the reference not measured: %s", exc)
        return fluency_metrics(agent.llm, agent.policy, [], completions, sampled=sampled)
