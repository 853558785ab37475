"""The seam between an agent and the algorithm that trains it: the agent decides, the algorithm learns.

An agent records a :class:`~llmgym.agents.actions.Decision` per env step, drawn from its
:class:`~llmgym.agents.policies.Policy`, which the algorithm re-scores the decisions under. In
LlamaGym's loop (``act`` / ``assign_reward`` / ``terminate_episode``) the agent hands its finished
:class:`Episode` objects to the :class:`EpisodeLearner` it was given (an algorithm such as
:class:`llmgym.algorithms.PPO`); this module imports nothing from ``llmgym.algorithms``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from llmgym.agents.actions import Decision

if TYPE_CHECKING:
    from llmgym.agents.base import BaseAgent

__all__ = ["Decision", "Episode", "EpisodeLearner"]


@dataclass
class Episode:
    """One finished episode of LlamaGym's loop: a decision and a reward per step.

    Attributes:
        decisions: The agent's decisions, in order.
        rewards: The reward assigned to each decision (same length).
    """

    decisions: list[Decision] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)


@runtime_checkable
class EpisodeLearner(Protocol):
    """What trains an agent from whole episodes (an algorithm: :class:`llmgym.algorithms.PPO`, A2C...)."""

    def learn_from_episodes(self, agent: BaseAgent, episodes: Sequence[Episode]) -> dict[str, float]:
        """Run one update of ``agent.llm`` on ``episodes`` (each ends in a terminal step).

        Args:
            agent: The agent that took the decisions (its ``llm`` and :attr:`~BaseAgent.policy`).
            episodes: The finished episodes.

        Returns:
            The update's statistics.
        """
        ...
