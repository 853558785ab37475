"""ScoringAgent (GLAM / SayCan): the policy is a softmax over logits of the candidate actions.

The logits are the LLM's log-probs of the candidates, or, when the LLM has an
:class:`~llmgym.llm.modules.ActionHead` (module-function key ``"policy"``, what ``llmgym train``
builds by default), that head's logits, which start near uniform.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch

from llmgym.agents.base import BaseAgent, Decision
from llmgym.agents.history import Prompt
from llmgym.errors import InputError
from llmgym.llm.modules import POLICY_KEY, SCORE_KEY, VALUE_KEY

__all__ = ["ScoringAgent", "candidate_policy", "policy_logits_key", "scored_candidates"]


def policy_logits_key(module_function_keys: Sequence[str]) -> str:
    """The ``LLM.forward`` output the candidate policy is a softmax of.

    ``"policy"`` (the :class:`~llmgym.llm.modules.ActionHead`'s logits) when the LLM has that
    module function, else ``"score"`` (the candidates' log-probs). Agents and updaters both call
    this, so the policy that samples is the policy that is trained.
    """
    return POLICY_KEY if POLICY_KEY in module_function_keys else SCORE_KEY


def scored_candidates(prompt: str, candidates: list[str]) -> list[str]:
    """The candidate strings as scored after ``prompt``.

    A space is put between a prompt that does not end in whitespace and a candidate that does not
    start with one, so ``"Action:"`` is followed by ``" go forward"`` as a model would write it.
    """
    if not prompt or prompt[-1].isspace():
        return list(candidates)
    return [c if c[:1].isspace() else " " + c for c in candidates]


def candidate_policy(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probabilities of the candidate-action policy.

    Args:
        scores: ``[k]`` candidate logits: log p(candidate | prompt) from ``llm.score``, or the
            action head's logits.
        temperature: Softmax temperature (> 0).

    Returns:
        ``[k]`` log-probs ``log_softmax(scores / temperature)``.
    """
    return torch.log_softmax(scores.float() / temperature, dim=-1)


class ScoringAgent(BaseAgent):
    """Chooses among the candidate actions (``info["valid_actions"]`` by default) by scoring them.

    One forward pass per step gives the candidates' logits (see :func:`policy_logits_key`) and,
    when the LLM has a ``"value"`` module function, the value of the prompt. Sampling uses the agent's seeded
    generator; ``greedy=True`` takes the most likely candidate.
    """

    def _decide(
        self, prompts: Sequence[Prompt], candidates: Sequence[Optional[list[str]]], greedy: bool
    ) -> list[Decision]:
        for i, options in enumerate(candidates):
            if not options:
                raise InputError(
                    f"env {i} offers no candidate actions; ScoringAgent needs info['valid_actions'] from the env "
                    "or an overridden get_candidates(observation, info)."
                )
        texts = [p.text for p in prompts]
        options_per_env = [list(c or []) for c in candidates]
        groups = [scored_candidates(text, options) for text, options in zip(texts, options_per_env)]
        module_keys = self.llm.module_function_keys
        logits_key = policy_logits_key(module_keys)
        keys = [logits_key, VALUE_KEY] if VALUE_KEY in module_keys else [logits_key]
        outputs = self.llm.forward(keys, contexts=texts, candidates=groups, normalize=self.config.score_normalize)
        decisions = []
        for prompt, options, scored, out in zip(prompts, options_per_env, groups, outputs):
            log_probs = candidate_policy(torch.as_tensor(out[logits_key]), self.config.temperature)
            if greedy:
                index = int(torch.argmax(log_probs))
            else:
                index = int(torch.multinomial(log_probs.exp(), 1, generator=self.generator))
            value = float(torch.as_tensor(out[VALUE_KEY]).reshape(-1)[0]) if VALUE_KEY in out else 0.0
            decisions.append(
                Decision(
                    prompt=prompt.text,
                    prompt_ids=prompt.token_ids,
                    action=options[index],
                    response=options[index],
                    log_prob=float(log_probs[index]),
                    value=value,
                    candidates=scored,
                    action_index=index,
                    candidate_log_probs=log_probs.tolist(),
                )
            )
        return decisions
