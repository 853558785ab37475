"""The batch the Ray tests send to 2 LLM servers and to one in-process LLM, and the updates they make."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from llmgym.agents.policies import CandidateActions, CandidatePolicy, TokenActions, TokenPolicy
from llmgym.algorithms import A2C, PPO, TRPO, UpdateBatch
from llmgym.config import AlgorithmConfig, TRPOSection
from llmgym.llm.sampling import Sampling

CONTEXTS = [
    "You see a red ball 2 steps left. Action:",
    "Goal of the agent: go to the red ball. Action:",
    "Your hand: 14. Dealer shows: 10. Do you hit or stay?",
    "the quick brown fox",
    "The capital of France is",
]
CANDIDATES = [
    [" turn left", " go forward"],
    [" pick up", " drop"],
    [" hit", " stay", " stick"],
    [" jumps"],
    [" Paris", " apple"],
]
OPTIMIZER = AlgorithmConfig(
    learning_rate=1e-2, head_learning_rate=1e-2, max_grad_norm=0.5, gradient_accumulation_steps=2
)


def common() -> dict[str, Any]:
    """The rollout data of the 5 samples (two minibatches)."""
    n = len(CONTEXTS)
    return dict(
        minibatches=[[0, 2, 4], [1, 3]],
        old_log_probs=-torch.linspace(0.5, 1.5, n),
        old_values=torch.zeros(n),
        advantages=torch.tensor([1.0, -0.5, 0.25, 2.0, -1.0]),
        returns=torch.tensor([1.0, 0.0, 0.5, 2.0, -1.0]),
    )


def generated(tokenizer: Any) -> tuple[list[list[int]], list[list[int]]]:
    """Prompt and action token ids of the 5 samples (each action: its first candidate)."""
    prompt_ids = [tokenizer(c)["input_ids"] for c in CONTEXTS]
    action_ids = [tokenizer(c[0], add_special_tokens=False)["input_ids"] for c in CANDIDATES]
    return prompt_ids, action_ids


def batches(tokenizer: Any) -> Iterator[tuple[tuple[str, ...], list[list[str]] | None, UpdateBatch]]:
    """``(statistics to compare, candidates, batch)`` of PPO, A2C and TRPO, each with both policies."""
    prompt_ids, action_ids = generated(tokenizer)
    n = len(CONTEXTS)
    losses = ("loss", "policy_loss", "value_loss", "entropy")
    # TRPO's step statistics are all-reduced (the same on both servers); its max_kl is large enough
    # that the line search accepts a step on these stored log-probs (not the current policy's).
    trpo = TRPO(config=AlgorithmConfig(name="trpo", trpo=TRPOSection(max_kl=0.5)))
    step = (
        "policy_objective",
        "policy_improvement",
        "approx_kl",
        "step_fraction",
        "step_size",
        "value_loss",
        "entropy",
    )
    for algorithm, keys in ((PPO(), losses), (A2C(config=AlgorithmConfig(name="a2c")), losses), (trpo, step)):
        objective = algorithm.objective()
        yield (
            keys,
            CANDIDATES,
            UpdateBatch(
                objective=objective,
                policy=CandidatePolicy(temperature=0.7),
                actions=CandidateActions(CANDIDATES, torch.zeros(n, dtype=torch.long)),
                **common(),
            ),
        )
        yield (
            keys,
            None,
            UpdateBatch(
                objective=objective,
                policy=TokenPolicy(Sampling(temperature=0.8)),
                actions=TokenActions(prompt_ids, action_ids),
                learning_rate_scale=0.5,
                **common(),
            ),
        )
