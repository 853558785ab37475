"""ScoringAgent (GLAM / SayCan): the policy is a softmax over logits of the candidate actions.

The logits are the LLM's log-probs of the candidates, or, when the LLM has an
:class:`~llmgym.llm.modules.ActionHead` (module-function key ``"policy"``, what ``llmgym train``
builds by default), that head's logits, which start near uniform
(:class:`~llmgym.agents.policies.CandidatePolicy`).
"""

from __future__ import annotations

from llmgym.agents.base import BaseAgent
from llmgym.agents.policies import CandidatePolicy

__all__ = ["ScoringAgent"]


class ScoringAgent(BaseAgent):
    """Chooses among the candidate actions (``info["valid_actions"]`` by default) by scoring them.

    One forward pass per step gives the candidates' logits and, when the LLM has a ``"value"``
    module function, the value of the prompt. Sampling uses the agent's seeded generator;
    ``greedy=True`` takes the most likely candidate.
    """

    def make_policy(self) -> CandidatePolicy:
        """A softmax at ``agent.temperature`` over scores normalised by ``agent.score_normalize``."""
        return CandidatePolicy(self.config.temperature, self.config.score_normalize)
