"""Every algorithm's update through 2 LLM servers equals the same update in one process."""

from __future__ import annotations

import pytest
import torch

from llmgym.agents.policies import CandidateActions, CandidatePolicy, TokenActions, TokenPolicy
from llmgym.algorithms import A2C, NLPO, PPO, TRPO, UpdateBatch
from llmgym.config import AlgorithmConfig, DistributedConfig, ModelConfig, TRPOSection
from llmgym.llm.distributed.backend import make_backend
from llmgym.llm.modules import ValueHead
from llmgym.llm.sampling import Sampling
from llmgym.testing import tiny_causal_lm
from tests.distributed.test_local_equivalence import CONTEXTS

CANDIDATES = [[" turn left", " go forward"], [" pick up", " drop"], [" hit", " stay", " stick"], [" jumps"], [" Paris", " apple"]]
OPTIMIZER = AlgorithmConfig(learning_rate=1e-2, head_learning_rate=1e-2, max_grad_norm=0.5, gradient_accumulation_steps=2)


def _build(llm_processes: int):
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    return make_backend(
        ModelConfig(name="tiny", forward_batch_size=4), {"value": ValueHead(hidden_sizes=(8,))},
        PPO(config=OPTIMIZER).updater(), model=model, tokenizer=tokenizer,
        distributed=DistributedConfig(llm_processes=llm_processes, timeout_s=60.0, backend="spawn"),
    )


def _common():
    n = len(CONTEXTS)
    return dict(
        minibatches=[[0, 2, 4], [1, 3]], old_log_probs=-torch.linspace(0.5, 1.5, n), old_values=torch.zeros(n),
        advantages=torch.tensor([1.0, -0.5, 0.25, 2.0, -1.0]), returns=torch.tensor([1.0, 0.0, 0.5, 2.0, -1.0]),
    )


def _generated(tokenizer):
    """Prompt and action token ids of the 5 samples (each action: its first candidate)."""
    prompt_ids = [tokenizer(c)["input_ids"] for c in CONTEXTS]
    action_ids = [tokenizer(c[0], add_special_tokens=False)["input_ids"] for c in CANDIDATES]
    return prompt_ids, action_ids


def _batches(tokenizer):
    common = _common()
    n = len(CONTEXTS)
    prompt_ids, action_ids = _generated(tokenizer)
    losses = ("loss", "policy_loss", "value_loss", "entropy")
    # TRPO's step statistics are all-reduced (the same on both servers); its max_kl is large enough
    # that the line search accepts a step on these stored log-probs (not the current policy's).
    trpo = TRPO(config=AlgorithmConfig(name="trpo", trpo=TRPOSection(max_kl=0.5)))
    step = ("policy_objective", "policy_improvement", "approx_kl", "step_fraction", "step_size", "value_loss", "entropy")
    for algorithm, keys in ((PPO(), losses), (A2C(config=AlgorithmConfig(name="a2c")), losses), (trpo, step)):
        objective = algorithm.objective()
        yield keys, CANDIDATES, UpdateBatch(objective=objective, policy=CandidatePolicy(temperature=0.7),
                                            actions=CandidateActions(CANDIDATES, torch.zeros(n, dtype=torch.long)), **common)
        yield keys, None, UpdateBatch(objective=objective, policy=TokenPolicy(Sampling(temperature=0.8)),
                                      actions=TokenActions(prompt_ids, action_ids), learning_rate_scale=0.5, **common)


@pytest.mark.timeout(240)
def test_each_algorithms_update_on_two_servers_equals_the_local_one():
    local, remote = _build(1), _build(2)
    try:
        for keys, candidates, batch in _batches(local.tokenizer):
            want = local.update(CONTEXTS, candidates, batch=batch)[0]
            results = remote.update(CONTEXTS, candidates, batch=batch)
            assert sorted(r["num_samples"] for r in results) == [2, 3]  # each server's share of the 5 samples
            assert want.get("step_fraction", 1.0) > 0, want  # TRPO took a step (not the kept old policy)
            for key in keys:
                merged = sum(r[key] * r["num_samples"] for r in results) / len(CONTEXTS)
                assert merged == pytest.approx(want[key], rel=1e-5, abs=1e-5), key
            for p0, p1, w in zip(remote.parameters_of(0), remote.parameters_of(1), local.trainable_parameters()):
                assert torch.equal(p0, p1)
                torch.testing.assert_close(p0, w.detach(), atol=1e-5, rtol=0)
    finally:
        remote.close()
        local.close()


def _assert_same_update(local, remote, batch):
    want = local.update(CONTEXTS, None, batch=batch)[0]
    results = remote.update(CONTEXTS, None, batch=batch)
    for key in ("loss", "policy_loss", "ratio_mean"):
        merged = sum(r[key] * r["num_samples"] for r in results) / len(CONTEXTS)
        assert merged == pytest.approx(want[key], abs=1e-5), key
    for p0, p1, w in zip(remote.parameters_of(0), remote.parameters_of(1), local.trainable_parameters()):
        assert torch.equal(p0, p1)
        torch.testing.assert_close(p0, w.detach(), atol=1e-5, rtol=0)


@pytest.mark.timeout(240)
def test_nlpo_updates_and_mask_refreshes_on_two_servers_equal_the_local_ones():
    local, remote = _build(1), _build(2)
    sampling = Sampling(temperature=0.8, mask_top_p=0.5)
    prompt_ids, action_ids = _generated(local.tokenizer)
    batch = UpdateBatch(objective=NLPO().objective(), policy=TokenPolicy(sampling), actions=TokenActions(prompt_ids, action_ids),
                        **_common())
    try:
        for _ in range(2):  # the second refresh snapshots the weights the first update moved
            local.refresh_mask_policy()
            remote.refresh_mask_policy()
            # token_logprobs splits the samples over both servers: each server's mask equals the local one
            want = local.token_logprobs(prompt_ids, action_ids, require_grad=False, sampling=sampling)
            got = remote.token_logprobs(prompt_ids, action_ids, require_grad=False, sampling=sampling)
            for w, g in zip(want, got):
                torch.testing.assert_close(g["logprobs"], w["logprobs"], atol=1e-5, rtol=0)
            _assert_same_update(local, remote, batch)
    finally:
        remote.close()
        local.close()
