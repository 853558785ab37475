"""How fluent a text-generation policy stays: its completions' perplexity under the reference and their distinct-n.

Reward under a KL budget is RL4LMs' point: a policy that reaches its reward by repeating one word
is reward hacking. Every evaluation of a text-generation env (an episode that ends with
``info["completion"]``, as ``llmgym/TextGen-v0``) reports, next to the reward:

* ``perplexity_ref``: ``exp(-sum log pi_ref(token) / tokens)`` over every generated token of the
  evaluation, each scored after its own prompt by the reference (the model with its LoRA adapter
  disabled, or the frozen copy of the initial weights), at the agent's temperature;
* ``distinct-1`` / ``distinct-2``: distinct uni- and bigrams over all uni- and bigrams of the
  completions (the ``diversity`` metric of :mod:`llmgym.text_metrics`);
* ``kl_ref`` (sampled evaluations only): the mean over completions of their KL to the reference,
  ``sum_t log pi(a_t) - log pi_ref(a_t)`` on the sampled tokens (an unbiased estimate of
  ``KL(pi || pi_ref)``; on greedy tokens it estimates nothing, so greedy evaluations leave it out).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llmgym.agents.actions import Decision
from llmgym.agents.policies import Policy
from llmgym.llm.protocols import PolicyLLM
from llmgym.text_metrics import MetricContext, MetricSpec, compute_metrics

__all__ = ["fluency_metrics"]


def fluency_metrics(
    llm: PolicyLLM,
    policy: Policy,
    decisions: Sequence[Decision],
    completions: Sequence[str],
    *,
    sampled: bool,
) -> dict[str, float]:
    """Perplexity under the reference, distinct-1/2 and (``sampled``) KL to the reference of an evaluation's completions.

    Args:
        llm: The LLM that took the decisions (its reference scores them, in one batched pass).
        policy: The policy they were drawn from.
        decisions: Every decision of the evaluation's episodes (one per completion in completion
            mode, one per token in token mode).
        completions: The episodes' completions (``info["completion"]``).
        sampled: The decisions were sampled (not greedy): report ``kl_ref``.

    Returns:
        ``perplexity_ref``, ``distinct-1``, ``distinct-2`` and, when ``sampled``, ``kl_ref`` (nats per completion).

    Raises:
        ConfigError: The LLM has no reference (neither LoRA nor ``model.reference_copy``).
    """
    count = len(completions)
    diversity = compute_metrics(
        [MetricSpec("diversity")],
        [""] * count,
        list(completions),
        [[] for _ in range(count)],
        [{} for _ in range(count)],
        context=MetricContext("eval"),
    )
    result = {f"distinct-{n}": diversity[f"diversity_metrics/distinct-{n}"].corpus for n in (1, 2)}
    if not decisions:
        return result
    measured = policy.reference_kl(llm, decisions, "k1")
    tokens = int(measured.tokens.sum())
    if tokens:
        result["perplexity_ref"] = math.exp(-float(measured.reference_log_probs.sum()) / tokens)
    if sampled and count:
        result["kl_ref"] = float(measured.kl.sum()) / count
    return result
