"""Sharded LLM servers (``distributed.sharding=fsdp``) on a real private local Ray instance, gloo on the CPU.

Two servers forming one FSDP2 group answer and train like two replicated servers: scores, greedy
generations and the weights after PPO (both policies, with the KL to a sharded reference copy)
and GRPO updates agree within 1e-5 (fp32), also when one server's share of the batch is empty.
Each sharded server holds about half of a replica's parameters, gradients and optimizer state.
NLPO's mask policy, snapshotted from the gathered weights, is whole on every sharded server.
"""

from __future__ import annotations

import pytest
import torch

from llmgym.agents.policies import CandidateActions, CandidatePolicy, TokenActions, TokenPolicy
from llmgym.algorithms import GRPO, NLPO, PPO, UpdateBatch
from llmgym.config import AlgorithmConfig, DistributedConfig, KLConfig, ModelConfig
from llmgym.llm.distributed.backend import make_backend
from llmgym.llm.distributed.ray_backend import RayLLM
from llmgym.llm.distributed.ray_runtime import start_ray
from llmgym.llm.modules import ValueHead
from llmgym.llm.sampling import Sampling
from llmgym.testing import tiny_causal_lm
from tests.distributed.helpers import CANDIDATES, CONTEXTS, OPTIMIZER, batches, common, generated

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
TOL = 1e-5
MODEL = ModelConfig(name="tiny", forward_batch_size=4, reference_copy=True, trunk_cache_mb=0)
KL = AlgorithmConfig(kl=KLConfig(coef=0.1))


def _build(servers: int, sharding: str, model: ModelConfig = MODEL, **distributed):
    llm, tokenizer = tiny_causal_lm("llama", seed=0)
    return make_backend(
        model,
        {"value": ValueHead(hidden_sizes=(8,))},
        PPO(config=OPTIMIZER).updater(),
        model=llm,
        tokenizer=tokenizer,
        distributed=DistributedConfig(
            llm_processes=servers, sharding=sharding, timeout_s=60.0, **distributed
        ),
    )


@pytest.fixture(scope="module")
def runtime():
    started = start_ray(DistributedConfig(llm_processes=4))
    yield started
    started.shutdown()


@pytest.fixture(scope="module")
def pair(runtime):
    replica = _build(2, "none")
    sharded = _build(2, "fsdp", check_weights=True)
    assert isinstance(replica, RayLLM) and isinstance(sharded, RayLLM)
    yield replica, sharded
    sharded.close()
    replica.close()


def _assert_close_weights(want: list[torch.Tensor], got: list[torch.Tensor], atol: float = TOL) -> None:
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert w.shape == g.shape
        torch.testing.assert_close(g, w, atol=atol, rtol=0)


def _candidate_batch(objective, n: int = len(CONTEXTS), **fields) -> UpdateBatch:
    data = common()
    if n < len(CONTEXTS):
        data = {k: v[:n] for k, v in data.items() if k != "minibatches"} | {"minibatches": [list(range(n))]}
    return UpdateBatch(
        objective=objective,
        policy=CandidatePolicy(temperature=0.7),
        actions=CandidateActions(CANDIDATES[:n], torch.zeros(n, dtype=torch.long)),
        **data,
        **fields,
    )


def test_two_sharded_servers_answer_and_train_like_two_replicas(pair):
    replica, sharded = pair
    for got, want in zip(sharded.score(CONTEXTS, CANDIDATES), replica.score(CONTEXTS, CANDIDATES)):
        torch.testing.assert_close(got, want, atol=TOL, rtol=0)
    got_gen = sharded.generate(CONTEXTS, max_new_tokens=4, do_sample=False)
    want_gen = replica.generate(CONTEXTS, max_new_tokens=4, do_sample=False)
    assert [[s.token_ids for s in g] for g in got_gen] == [[s.token_ids for s in g] for g in want_gen]
    _assert_close_weights(replica.parameters_of(0), sharded.parameters_of(1))
    ppo_candidates, ppo_tokens = [(c, b) for _, c, b in list(batches(replica.tokenizer))[:2]]
    updates = [
        ppo_candidates,
        ppo_tokens,
        (CANDIDATES, _candidate_batch(PPO(config=KL).objective())),  # the KL to the sharded reference copy
        (CANDIDATES, _candidate_batch(GRPO().objective())),
    ]
    for candidates, batch in updates:
        want = replica.update(CONTEXTS, candidates, batch=batch)
        got = sharded.update(CONTEXTS, candidates, batch=batch)  # check_weights: the heads agree
        assert sorted(r["num_samples"] for r in got) == sorted(r["num_samples"] for r in want)
        assert sum(r["loss"] * r["num_samples"] for r in got) == pytest.approx(
            sum(r["loss"] * r["num_samples"] for r in want), abs=1e-5
        )
        _assert_close_weights(replica.parameters_of(0), sharded.parameters_of(0))
    # one sample: one server's share is empty, and it still joins every gathering and reduction
    one = _candidate_batch(PPO().objective(), n=1)
    replica.update(CONTEXTS[:1], CANDIDATES[:1], batch=one)
    assert sorted(r["num_samples"] for r in sharded.update(CONTEXTS[:1], CANDIDATES[:1], batch=one)) == [0, 1]
    assert len(sharded.score(CONTEXTS[:1], CANDIDATES[:1])) == 1
    _assert_close_weights(replica.parameters_of(0), sharded.parameters_of(0))


def test_each_sharded_server_holds_about_half_of_a_replicas_training_state(pair):
    replica, sharded = pair
    whole = replica._request({0: ("state_bytes", (), {})})[0]
    shards = sharded._request({rank: ("state_bytes", (), {}) for rank in range(2)})
    for kind in ("parameters", "gradients", "optimizer"):
        assert whole[kind] > 0
        assert sum(s[kind] for s in shards.values()) == pytest.approx(whole[kind], rel=0.02)
        assert max(s[kind] for s in shards.values()) < 0.6 * whole[kind]


def test_nlpo_mask_policy_is_whole_on_sharded_servers(pair):
    replica, sharded = pair
    sampling = Sampling(temperature=0.8, mask_top_p=0.5)
    prompt_ids, action_ids = generated(replica.tokenizer)
    batch = UpdateBatch(
        objective=NLPO().objective(),
        policy=TokenPolicy(sampling),
        actions=TokenActions(prompt_ids, action_ids),
        **common(),
    )
    for llm in (replica, sharded):
        llm.refresh_mask_policy()
    want = replica.token_logprobs(prompt_ids, action_ids, require_grad=False, sampling=sampling)
    got = sharded.token_logprobs(prompt_ids, action_ids, require_grad=False, sampling=sampling)
    for w, g in zip(want, got):
        torch.testing.assert_close(g["logprobs"], w["logprobs"], atol=TOL, rtol=0)
    replica.update(CONTEXTS, None, batch=batch)
    sharded.update(CONTEXTS, None, batch=batch)
    _assert_close_weights(replica.parameters_of(0), sharded.parameters_of(0))
