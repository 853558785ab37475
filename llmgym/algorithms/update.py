"""Client side of an update: turn a filled rollout into ``llm.update`` calls, one per epoch.

The same function serves the local and the distributed backend: the minibatch schedule is drawn
here, from one seeded generator, as indices into the whole rollout, so every server follows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from llmgym.agents.base import Decision
from llmgym.algorithms.advantages import whiten
from llmgym.algorithms.buffer import RolloutBuffer
from llmgym.config import AlgorithmConfig
from llmgym.llm.sampling import Sampling

__all__ = ["add_decisions", "rollout_statistics", "run_update", "update_from_episodes"]


def add_decisions(
    buffer: RolloutBuffer,
    decisions: Sequence[Decision],
    rewards: Any,
    terminated: Any,
    truncated: Any,
    truncation_values: Any = None,
) -> None:
    """Store one vector step of agent decisions and env outcomes in the buffer.

    Args:
        buffer: The rollout buffer (``num_envs == len(decisions)``).
        decisions: The agent's decisions for this step (``agent.last_decisions``).
        rewards: ``[N]`` rewards (after the agent's shaping).
        terminated: ``[N]`` terminal flags.
        truncated: ``[N]`` time-limit flags.
        truncation_values: ``[N]`` values of the final observations of truncated episodes.
    """
    common: dict[str, Any] = {
        "prompts": [d.prompt for d in decisions],
        "prompt_ids": [d.prompt_ids for d in decisions],
        "values": [d.value for d in decisions],
        "rewards": rewards,
        "terminated": terminated,
        "truncated": truncated,
        "truncation_values": truncation_values,
    }
    if decisions[0].candidates is not None:
        buffer.add(
            **common,
            log_probs=[d.log_prob for d in decisions],
            candidates=[d.candidates or [] for d in decisions],
            actions=[d.action_index if d.action_index is not None else -1 for d in decisions],
        )
    else:
        buffer.add(
            **common,
            action_ids=[d.action_ids or [] for d in decisions],
            token_log_probs=[d.token_log_probs if d.token_log_probs is not None else torch.zeros(0) for d in decisions],
        )


def _weighted_mean(results: Sequence[dict[str, Any]]) -> dict[str, float]:
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


def run_update(
    llm: Any,
    buffer: RolloutBuffer,
    config: AlgorithmConfig,
    generator: torch.Generator,
    temperature: float = 1.0,
    normalize: str = "sum",
    sampling: Sampling | None = None,
) -> dict[str, float]:
    """Run the configured epochs of updates on a rollout whose advantages are computed.

    Advantages are whitened over the whole rollout (when ``normalize_advantages``), so the
    update does not depend on how samples are split across servers. PPO stops early when the
    approximate KL of an epoch exceeds ``target_kl``.

    Args:
        llm: An :class:`llmgym.LLM` built with a PPO/A2C updater.
        buffer: A buffer after ``compute_returns_and_advantages``.
        config: The ``algorithm`` section.
        generator: Draws the minibatch permutation of each epoch.
        temperature: The scoring agent's softmax temperature (the policy being trained).
        normalize: How the scoring agent scores a candidate (``agent.score_normalize``).
        sampling: The distribution generated actions were sampled from (the generative agent's
            :meth:`~llmgym.agents.base.BaseAgent.sampling`); ``None``: the model's own.

    Returns:
        Sample-weighted means of the last epoch's statistics, plus ``epochs`` run and the
        rollout's advantage, value and return statistics (:func:`rollout_statistics`).
    """
    count = len(buffer)
    batch = buffer.get(torch.arange(count))
    advantages = whiten(batch.advantages) if config.normalize_advantages and count > 1 else batch.advantages
    payload: dict[str, Any] = {
        "old_log_probs": batch.old_log_probs,
        "old_values": batch.old_values,
        "advantages": advantages,
        "returns": batch.returns,
        "temperature": temperature,
        "normalize": normalize,
    }
    if batch.candidates is not None:
        payload["actions"] = batch.actions
    else:
        payload["prompt_ids"] = batch.prompt_ids
        payload["action_ids"] = batch.action_ids
        payload["sampling"] = sampling
    epochs = config.epochs if config.name == "ppo" else 1
    stats: dict[str, float] = {}
    run = 0
    for _ in range(epochs):
        order = torch.randperm(count, generator=generator).tolist()
        minibatches = [order[i : i + config.minibatch_size] for i in range(0, count, config.minibatch_size)]
        results = llm.update(batch.prompts, batch.candidates, minibatches=minibatches, **payload)
        stats = _weighted_mean(results)
        run += 1
        if config.target_kl is not None and stats.get("approx_kl", 0.0) > config.target_kl:
            break
    stats["epochs"] = float(run)
    stats.update(rollout_statistics(batch.advantages, batch.old_values, batch.returns))
    return stats


def rollout_statistics(advantages: torch.Tensor, values: torch.Tensor, returns: torch.Tensor) -> dict[str, float]:
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


def update_from_episodes(
    llm: Any,
    episodes: Sequence[tuple[Sequence[Decision], Sequence[float]]],
    config: AlgorithmConfig,
    generator: torch.Generator,
    temperature: float = 1.0,
    normalize: str = "sum",
    sampling: Sampling | None = None,
) -> dict[str, float]:
    """Update from whole episodes (LlamaGym's ``terminate_episode`` flow).

    Each episode is ``(decisions, rewards)``; its last step is terminal. The episodes are laid
    end to end in a one-env buffer, so GAE never crosses an episode boundary. ``temperature``,
    ``normalize`` and ``sampling`` are those of :func:`run_update`.
    """
    steps = sum(len(decisions) for decisions, _ in episodes)
    buffer = RolloutBuffer(num_envs=1, num_steps=steps)
    for decisions, rewards in episodes:
        last = len(decisions) - 1
        for t, (decision, reward) in enumerate(zip(decisions, rewards)):
            add_decisions(buffer, [decision], [reward], [t == last], [False])
    buffer.compute_returns_and_advantages([0.0], config.gamma, config.gae_lambda)
    stats = run_update(llm, buffer, config, generator, temperature, normalize, sampling)
    returns = [sum(rewards) for _, rewards in episodes]
    stats["episode_return"] = sum(returns) / len(returns)
    stats["episodes"] = float(len(episodes))
    return stats
