"""The seam between an agent and the algorithm that trains it: the agent decides, the algorithm learns.

An agent records a :class:`Decision` per env step; its :class:`PolicySpec` says which
distribution those decisions were drawn from, so the algorithm recomputes exactly that policy's
log-probs. In LlamaGym's loop (``act`` / ``assign_reward`` / ``terminate_episode``) the agent
hands its finished :class:`Episode` objects to the :class:`EpisodeLearner` it was given (an
algorithm such as :class:`llmgym.algorithms.PPO`); this module imports nothing from
``llmgym.algorithms``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol, runtime_checkable

import torch

from llmgym.llm.sampling import Sampling

if TYPE_CHECKING:
    from llmgym.agents.base import BaseAgent

__all__ = ["Decision", "Episode", "EpisodeLearner", "PolicySpec"]


@dataclass
class Decision:
    """What the agent decided for one env at one step, with everything training needs.

    Attributes:
        prompt: The prompt text sent to the LLM.
        prompt_ids: Its exact token ids.
        action: What is passed to ``env.step``.
        response: The action as text (the chosen candidate or the generated text).
        log_prob: Log-prob of the decision under the policy that took it.
        value: ``V(prompt)`` from the value head (0 when the LLM has none).
        candidates: The candidate actions scored (scoring agents).
        action_index: Index of the chosen candidate (scoring agents).
        action_ids: Generated token ids (generative agents).
        token_log_probs: ``[T]`` log-probs of ``action_ids`` (generative agents).
        parse_failed: The generated text could not be parsed and the fallback action was used.
        candidate_log_probs: Log-prob of every candidate under the policy (scoring agents; the run
            report shows them).
    """

    prompt: str
    prompt_ids: list[int]
    action: Any
    response: str
    log_prob: float
    value: float
    candidates: Optional[list[str]] = None
    action_index: Optional[int] = None
    action_ids: Optional[list[int]] = None
    token_log_probs: Optional[torch.Tensor] = None
    parse_failed: bool = False
    candidate_log_probs: Optional[list[float]] = None


@dataclass(frozen=True)
class PolicySpec:
    """The distribution an agent's actions are drawn from: the one the algorithm must train.

    Attributes:
        temperature: Softmax temperature over candidate scores (scoring agents).
        normalize: How a candidate's token log-probs make its score (``agent.score_normalize``).
        sampling: The generation distribution (temperature, top-k, top-p and NLPO's mask-policy
            ``mask_top_p``) of generated actions; ``None`` for agents that generate none.
    """

    temperature: float = 1.0
    normalize: str = "sum"
    sampling: Optional[Sampling] = None


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
            agent: The agent that took the decisions (its ``llm`` and :meth:`~BaseAgent.policy_spec`).
            episodes: The finished episodes.

        Returns:
            The update's statistics.
        """
        ...
