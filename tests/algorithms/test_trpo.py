"""One TRPO step on a tiny model: it stays in the trust region, improves the surrogate, trains only the critic's head."""

from __future__ import annotations

import pytest
import torch

from llmgym.agents.policies import CandidateActions, CandidatePolicy, TokenActions, TokenPolicy
from llmgym.algorithms import TRPO, UpdateBatch, UpdateContext
from llmgym.config import AlgorithmConfig, DistributedConfig, ModelConfig, TRPOSection
from llmgym.llm.distributed.backend import make_backend
from llmgym.llm.modules import ValueHead
from llmgym.llm.sampling import Sampling
from llmgym.testing import tiny_causal_lm
from tests.distributed.helpers import CANDIDATES, CONTEXTS

MAX_KL = 0.01
CONFIG = AlgorithmConfig(
    name="trpo", trpo=TRPOSection(max_kl=MAX_KL), head_learning_rate=1e-2, epochs=2, minibatch_size=2
)


def _llm():
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    return make_backend(
        ModelConfig(name="tiny", forward_batch_size=4),
        {"value": ValueHead(hidden_sizes=(8,))},
        TRPO(config=CONFIG).updater(),
        model=model,
        tokenizer=tokenizer,
        distributed=DistributedConfig(llm_processes=1),
    )


def _batch(llm, generated: bool) -> tuple[list[list[str]] | None, UpdateBatch]:
    """A batch whose stored log-probs are the current policy's (on-policy, as after a rollout)."""
    n = len(CONTEXTS)
    advantages = torch.tensor([1.0, -0.5, 0.25, 2.0, -1.0])
    common = dict(
        objective=TRPO(config=CONFIG).objective(),
        minibatches=[[0, 2, 4], [1, 3], [4, 1], [0, 3, 2]],
        old_log_probs=torch.zeros(n),
        old_values=torch.zeros(n),
        advantages=advantages,
        returns=torch.tensor([1.0, 0.0, 0.5, 2.0, -1.0]),
    )
    if generated:
        prompt_ids = [llm.tokenizer(c)["input_ids"] for c in CONTEXTS]
        action_ids = [llm.tokenizer(c[0], add_special_tokens=False)["input_ids"] for c in CANDIDATES]
        candidates, batch = (
            None,
            UpdateBatch(
                policy=TokenPolicy(Sampling(temperature=0.8)),
                actions=TokenActions(prompt_ids, action_ids),
                **common,
            ),
        )
    else:
        candidates, batch = (
            CANDIDATES,
            UpdateBatch(
                policy=CandidatePolicy(temperature=0.7),
                actions=CandidateActions(CANDIDATES, torch.zeros(n, dtype=torch.long)),
                **common,
            ),
        )
    behaviour = _policy(llm, candidates, batch).log_probs
    return candidates, UpdateBatch(**{**batch.__dict__, "old_log_probs": behaviour})


def _policy(llm, candidates, batch):
    return UpdateContext(llm.updater, CONTEXTS, range(len(CONTEXTS)), batch).evaluate(require_grad=False)


@pytest.mark.parametrize("generated", [False, True], ids=["candidates", "generated"])
def test_one_step_stays_in_the_trust_region_and_improves_the_surrogate(generated):
    llm = _llm()
    try:
        candidates, batch = _batch(llm, generated)
        before = _policy(llm, candidates, batch)
        critic = [p.detach().clone() for p in llm.module_functions["value"].parameters()]
        stats = llm.update(CONTEXTS, candidates, batch=batch)[0]
        after = _policy(llm, candidates, batch)
        trained = list(llm.module_functions["value"].parameters())
        assert all(
            not torch.equal(a, b) for a, b in zip(critic, trained)
        )  # the critic's passes moved the head
    finally:
        llm.close()
    kl = float(batch.policy.kl(before, after).mean())
    gain = float(
        (torch.exp(after.log_probs - batch.old_log_probs) * batch.advantages).mean() - batch.advantages.mean()
    )
    assert stats["step_fraction"] > 0 and 0 < kl <= MAX_KL * 1.01, stats
    assert gain > 0 and gain == pytest.approx(stats["policy_improvement"], rel=1e-3, abs=1e-6)
    # the KL after the whole update is the policy step's: the critic's passes did not move the policy
    assert kl == pytest.approx(stats["approx_kl"], rel=1e-3, abs=1e-7)
    assert stats["num_samples"] == len(CONTEXTS) and stats["value_loss"] > 0


def test_a_step_that_cannot_improve_keeps_the_old_policy_exactly():
    llm = _llm()
    try:
        candidates, batch = _batch(llm, generated=False)
        batch = UpdateBatch(
            **{**batch.__dict__, "advantages": torch.zeros(len(CONTEXTS))}
        )  # g = 0: no direction
        context = UpdateContext(llm.updater, CONTEXTS, range(len(CONTEXTS)), batch)
        policy = [p.detach().clone() for p in context.policy_parameters]
        stats = llm.update(CONTEXTS, candidates, batch=batch)[0]
        assert all(torch.equal(a, b) for a, b in zip(policy, context.policy_parameters))
    finally:
        llm.close()
    assert (stats["step_fraction"], stats["step_size"], stats["approx_kl"]) == (0.0, 0.0, 0.0)
    assert stats["line_search_trials"] == CONFIG.trpo.line_search_steps
