"""Two servers running the real LocalLLM on a tiny model answer like one in-process LocalLLM.

Greedy generations are token-for-token identical. Scores and head outputs agree to float32
rounding (1e-5), not bit for bit: each server packs a different set of sequences into its
forward passes, and the order of float sums in the matmuls depends on the batch shape.
"""

import pytest
import torch

from llmgym.config import DistributedConfig, LoRAConfig, ModelConfig
from llmgym.errors import BackendError
from llmgym.llm.distributed.backend import make_backend
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import ValueHead
from llmgym.testing import tiny_causal_lm
from tests.distributed.helpers import CacheProbe, FailingUpdater, SGDUpdater

CONTEXTS = [
    "You see a red ball 2 steps left. Action:",
    "Goal of the agent: go to the red ball. Action:",
    "Your hand: 14. Dealer shows: 10. Do you hit or stay?",
    "the quick brown fox",
    "The capital of France is",
]
CANDIDATES = [
    [" turn left", " go forward"],
    [" pick up"],
    [" hit", " stay", " stick"],
    [" jumps", " dog"],
    [" Paris", " apple"],
]
RETURNS = [1.0, -0.5, 0.25, 2.0, 0.0]
TOL = 1e-5
CONFIG = ModelConfig(name="tiny", forward_batch_size=4)


def _build(updater=SGDUpdater, llm_processes=1, timeout_s=30.0):
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    return make_backend(
        CONFIG, {"value": ValueHead(hidden_sizes=(8,))}, updater, model=model, tokenizer=tokenizer,
        distributed=DistributedConfig(llm_processes=llm_processes, timeout_s=timeout_s, backend="spawn"),
    )


@pytest.fixture(scope="module")
def pair():
    local = _build()
    assert isinstance(local, LocalLLM)
    remote = _build(llm_processes=2)
    yield local, remote
    remote.close()
    local.close()


@pytest.mark.timeout(90)
def test_scores_forwards_generations_equal_local(pair):
    local, remote = pair
    for got, want in zip(remote.score(CONTEXTS, CANDIDATES), local.score(CONTEXTS, CANDIDATES)):
        torch.testing.assert_close(got, want, atol=TOL, rtol=0)
    got = remote.forward(["value", "score"], CONTEXTS, CANDIDATES)
    want = local.forward(["value", "score"], CONTEXTS, CANDIDATES)
    for g, w in zip(got, want):
        torch.testing.assert_close(g["value"], w["value"], atol=TOL, rtol=0)
        torch.testing.assert_close(g["score"], w["score"], atol=TOL, rtol=0)
    got_gen = remote.generate(CONTEXTS, max_new_tokens=5, do_sample=False)
    want_gen = local.generate(CONTEXTS, max_new_tokens=5, do_sample=False)
    assert [[s.token_ids for s in g] for g in got_gen] == [[s.token_ids for s in g] for g in want_gen]
    assert [[s.text for s in g] for g in got_gen] == [[s.text for s in g] for g in want_gen]
    assert remote.tokenizer("hello").input_ids == local.tokenizer("hello").input_ids


@pytest.mark.timeout(90)
def test_update_equals_one_local_update_on_full_batch(pair):
    local, remote = pair
    assert local.update(CONTEXTS, CANDIDATES, returns=RETURNS) == [{"samples": 5}]
    results = remote.update(CONTEXTS, CANDIDATES, returns=RETURNS)
    assert sorted(r["samples"] for r in results) == [2, 3]
    want = local.trainable_parameters()
    server0, server1 = remote.parameters_of(0), remote.parameters_of(1)
    assert len(server0) == len(want)
    for p0, p1, w in zip(server0, server1, want):
        assert torch.equal(p0, p1)
        torch.testing.assert_close(p0, w.detach(), atol=1e-6, rtol=0)
    # more servers than contexts: one server has an empty share and still joins the all-reduce
    local.update(CONTEXTS[:1], CANDIDATES[:1], returns=RETURNS)
    assert sorted(r["samples"] for r in remote.update(CONTEXTS[:1], CANDIDATES[:1], returns=RETURNS)) == [0, 1]
    for p0, p1, w in zip(remote.parameters_of(0), remote.parameters_of(1), local.trainable_parameters()):
        assert torch.equal(p0, p1)
        torch.testing.assert_close(p0, w.detach(), atol=1e-6, rtol=0)


@pytest.mark.timeout(90)
def test_save_empties_every_servers_trunk_cache(tmp_path):
    # server 0 writes the checkpoint; every server starts a fresh cache, as a resumed run would
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    config = ModelConfig(name="tiny", lora=LoRAConfig(r=2, layers=[-1]), trunk_cache_mb=16)
    remote = make_backend(config, None, CacheProbe, model=model, tokenizer=tokenizer,
                          distributed=DistributedConfig(llm_processes=2, timeout_s=30.0, backend="spawn"))
    try:
        remote.forward(["score"], CONTEXTS, CANDIDATES)  # records the trunk states (score() does not)
        assert all(r["cached"] > 0 for r in remote.update(CONTEXTS, CANDIDATES))
        remote.save(str(tmp_path / "ckpt"))
        assert (tmp_path / "ckpt").is_dir()
        assert [r["cached"] for r in remote.update(CONTEXTS, CANDIDATES)] == [0, 0]
    finally:
        remote.close()


@pytest.mark.timeout(90)
def test_updater_exception_is_a_backend_error_with_rank_and_traceback():
    remote = _build(updater=FailingUpdater, llm_processes=2, timeout_s=5.0)
    try:
        contexts = ["fine", "explode", "a much longer context than the others, to land on its own server"]
        with pytest.raises(BackendError) as info:
            remote.update(contexts, [["a"], ["b"], ["c"]])
        message = str(info.value)
        assert "LLM server rank" in message and "KeyError: 'explode: this updater found a bad sample'" in message
        assert "Traceback (most recent call last)" in message and "helpers.py" in message
    finally:
        remote.close()
