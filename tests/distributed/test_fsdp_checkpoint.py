"""Sharded checkpoints (``distributed.sharding=fsdp``, torch.distributed.checkpoint) on a real local Ray.

A checkpoint written by two sharded servers resumes bit-identically on two new ones (weights and
optimizer state), loads resharded into three, and loads whole into one in-process LLM (what
``llmgym export`` does); a checkpoint of whole weights is refused by sharded servers, naming the fix.
LoRA adapters on a sharded base train like LoRA replicas (which load the sharded checkpoint, whole)
and reload from their sharded checkpoint. Gradient checkpointing (blocks recomputed in backward,
through FSDP's hooks) updates like replicas. A sharded training run resumed from its checkpoint
(on new servers) ends with the weights of the uninterrupted run, bit for bit.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from llmgym.algorithms import PPO
from llmgym.config import DistributedConfig, LoRAConfig
from llmgym.errors import BackendError
from llmgym.llm.distributed.ray_runtime import start_ray
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import ValueHead
from llmgym.run.trainer import Trainer
from llmgym.testing import tiny_causal_lm
from tests.algorithms.helpers import tiny_config
from tests.distributed.helpers import CANDIDATES, CONTEXTS, OPTIMIZER
from tests.distributed.test_fsdp import KL, MODEL, _assert_close_weights, _build, _candidate_batch
from tests.run.test_trainer import COUNTDOWN

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def runtime():
    started = start_ray(DistributedConfig(llm_processes=4))
    yield started
    started.shutdown()


def _whole(llm: LocalLLM) -> list[torch.Tensor]:
    return [p.detach().clone() for p in llm.trainable_parameters()]


def test_a_sharded_checkpoint_resumes_exactly_and_loads_resharded_or_whole(runtime, tmp_path):
    batch = _candidate_batch(PPO(config=KL).objective())
    path = str(tmp_path / "ckpt")
    first = _build(2, "fsdp")
    try:
        first.update(CONTEXTS, CANDIDATES, batch=batch)  # optimizer state to save
        first.save(path)
        saved = first.parameters_of(0)
        first.update(CONTEXTS, CANDIDATES, batch=batch)
        want = first.parameters_of(1)
    finally:
        first.close()
    resumed = _build(2, "fsdp")
    try:
        resumed.load(path)
        _assert_close_weights(saved, resumed.parameters_of(0), atol=0)
        resumed.update(CONTEXTS, CANDIDATES, batch=batch)
        _assert_close_weights(want, resumed.parameters_of(1), atol=0)
    finally:
        resumed.close()
    three = _build(3, "fsdp")
    try:  # DCP reshards the two servers' shards over three
        three.load(path)
        _assert_close_weights(saved, three.parameters_of(2), atol=0)
        three.update(CONTEXTS, CANDIDATES, batch=batch)
        _assert_close_weights(want, three.parameters_of(0))
        model, tokenizer = tiny_causal_lm("llama", seed=0)
        whole = LocalLLM(
            MODEL, {"value": ValueHead(hidden_sizes=(8,))}, None, model=model, tokenizer=tokenizer
        )
        whole.save(str(tmp_path / "whole"))
        with pytest.raises(BackendError, match="CheckpointError: .* written by unsharded LLM servers"):
            three.load(str(tmp_path / "whole"))
    finally:
        three.close()
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    local = LocalLLM(
        MODEL,
        {"value": ValueHead(hidden_sizes=(8,))},
        PPO(config=OPTIMIZER).updater(),
        model=model,
        tokenizer=tokenizer,
    )
    try:  # whole in one process (llmgym export's path), the optimizer state included
        local.load(path)
        _assert_close_weights(saved, _whole(local), atol=0)
        local.update(CONTEXTS, CANDIDATES, batch=batch)
        _assert_close_weights(want, _whole(local))
    finally:
        local.close()


def test_lora_adapters_train_sharded_like_replicas_and_reload(runtime, tmp_path):
    lora = dataclasses.replace(MODEL, reference_copy=False, lora=LoRAConfig(r=4))
    batch = _candidate_batch(PPO(config=KL).objective())  # the reference: the adapter disabled
    replica, sharded = _build(2, "none", lora), _build(2, "fsdp", lora)
    try:  # the replicas start from the sharded servers' adapters, whatever each group drew
        sharded.save(str(tmp_path / "start"))
        replica.load(str(tmp_path / "start"))
        for llm in (replica, sharded):
            llm.update(CONTEXTS, CANDIDATES, batch=batch)
        want = replica.parameters_of(0)
        assert len(want) == len(sharded.parameters_of(0)) < 40  # adapters and heads only
        _assert_close_weights(want, sharded.parameters_of(0))
        sharded.save(str(tmp_path / "lora"))
        sharded.update(CONTEXTS, CANDIDATES, batch=batch)
        sharded.load(str(tmp_path / "lora"))
        _assert_close_weights(want, sharded.parameters_of(1))
    finally:
        sharded.close()
        replica.close()


def test_gradient_checkpointing_under_fsdp_updates_like_replicas(runtime):
    recomputed = dataclasses.replace(MODEL, gradient_checkpointing=True)
    batch = _candidate_batch(PPO(config=KL).objective())
    replica, sharded = _build(2, "none", recomputed), _build(2, "fsdp", recomputed)
    try:
        for llm in (replica, sharded):
            llm.update(CONTEXTS, CANDIDATES, batch=batch)
        _assert_close_weights(replica.parameters_of(0), sharded.parameters_of(0))
    finally:
        sharded.close()
        replica.close()


def test_a_sharded_training_run_resumed_from_its_checkpoint_equals_the_uninterrupted_one(runtime, tmp_path):
    sharded = ["distributed.llm_processes=2", "distributed.sharding=fsdp", "distributed.timeout_s=60"]
    base = [*COUNTDOWN, "algorithm.epochs=2", "algorithm.minibatch_size=4", *sharded]

    def run(name: str, *overrides: str) -> list[torch.Tensor]:
        model, tokenizer = tiny_causal_lm("llama", seed=0)
        config = tiny_config(tmp_path, "llmgym/Countdown-v0", *base, f"train.run_name={name}", *overrides)
        trainer = Trainer(config, model=model, tokenizer=tokenizer)
        try:
            trainer.train()
            return list(trainer.llm.backend.trainable_parameters())
        finally:
            trainer.close()

    expected = run("a", "train.total_env_steps=32", "train.checkpoint_every=16")
    run("b", "train.total_env_steps=16")  # a run killed after its checkpoint at step 16
    (tmp_path / "b" / "checkpoints" / ".step-0000000024-tmp-x").mkdir()  # and its half-written next one
    got = run("b", "train.total_env_steps=32", f"train.resume={tmp_path / 'b'}")
    _assert_close_weights(expected, got, atol=0)
