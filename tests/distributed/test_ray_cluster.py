"""The Ray backend joining a real 2-node ``ray.cluster_utils.Cluster`` (one per module) through ``ray_address``.

The cluster runs with token authentication off, so joining it is refused unless
``allow_unauthenticated_cluster`` is set. Each node has one CPU and each server reserves one: one
server lands on each node, and together they answer like one in-process LLM; two sharded servers
(``distributed.sharding=fsdp``), one per node, update like it. Removing a node is a
``BackendError`` naming the lost server within seconds.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

from llmgym.algorithms import PPO
from llmgym.config import DistributedConfig, ModelConfig
from llmgym.errors import AuthenticationError, BackendError
from llmgym.llm.distributed.backend import make_backend
from llmgym.llm.distributed.ray_runtime import reload_ray_auth
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import ValueHead
from llmgym.testing import tiny_causal_lm
from tests.distributed.helpers import CANDIDATES, CONTEXTS, OPTIMIZER
from tests.distributed.test_fsdp import MODEL, _assert_close_weights, _candidate_batch

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]
NODE = {"num_cpus": 1, "object_store_memory": 80 * 2**20}


@pytest.fixture(scope="module")
def cluster():
    saved = {
        name: os.environ.pop(name, None)
        for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    }
    os.environ["RAY_AUTH_MODE"] = "disabled"
    reload_ray_auth()
    started = cluster_utils.Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    second = started.add_node(**NODE)
    yield started, second
    started.shutdown()
    for name, value in saved.items():
        os.environ.pop(name, None)
        if value is not None:
            os.environ[name] = value
    reload_ray_auth()


def _build(distributed: DistributedConfig | None):
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    return make_backend(
        ModelConfig(name="tiny", forward_batch_size=4),
        {"value": ValueHead(hidden_sizes=(8,))},
        None,
        model=model,
        tokenizer=tokenizer,
        distributed=distributed,
    )


def _joining(address: str, **options) -> DistributedConfig:
    return DistributedConfig(llm_processes=2, ray_address=address, timeout_s=30.0, **options)


def test_an_unauthenticated_cluster_is_refused_without_the_opt_in(cluster):
    with pytest.raises(AuthenticationError, match="allow_unauthenticated_cluster=true"):
        _build(_joining(cluster[0].address))
    assert not ray.is_initialized()


def test_sharded_servers_on_two_nodes_train_like_one_in_process_llm(cluster):
    head, second = cluster
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    local = LocalLLM(
        MODEL,
        {"value": ValueHead(hidden_sizes=(8,))},
        PPO(config=OPTIMIZER).updater(),
        model=model,
        tokenizer=tokenizer,
    )
    with pytest.warns(UserWarning, match="token authentication is off"):
        sharded = _build_sharded(_joining(head.address, allow_unauthenticated_cluster=True, sharding="fsdp"))
    try:
        assert {s.node_id for s in sharded.servers} == {head.head_node.node_id, second.node_id}
        batch = _candidate_batch(PPO().objective())
        local.update(CONTEXTS, CANDIDATES, batch=batch)
        sharded.update(CONTEXTS, CANDIDATES, batch=batch)
        _assert_close_weights(
            [p.detach() for p in local.trainable_parameters()], sharded.parameters_of(0), atol=1e-4
        )
    finally:
        sharded.close()
        local.close()


def _build_sharded(distributed: DistributedConfig):
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    return make_backend(
        MODEL,
        {"value": ValueHead(hidden_sizes=(8,))},
        PPO(config=OPTIMIZER).updater(),
        model=model,
        tokenizer=tokenizer,
        distributed=distributed,
    )


def test_one_server_per_node_equals_in_process_and_a_removed_node_is_an_error(cluster):
    head, second = cluster
    local = _build(None)
    with pytest.warns(UserWarning, match="token authentication is off"):
        remote = _build(_joining(head.address, allow_unauthenticated_cluster=True))
    try:
        assert {s.node_id for s in remote.servers} == {head.head_node.node_id, second.node_id}
        for got, want in zip(
            remote.forward(["value", "score"], CONTEXTS, CANDIDATES),
            local.forward(["value", "score"], CONTEXTS, CANDIDATES),
        ):
            torch.testing.assert_close(got["value"], want["value"], atol=1e-4, rtol=0)
            torch.testing.assert_close(got["score"], want["score"], atol=1e-4, rtol=0)
        lost = next(s for s in remote.servers if s.node_id == second.node_id)
        head.remove_node(second)
        start = time.monotonic()
        with pytest.raises(BackendError, match=rf"LLM server rank {lost.rank} .* died during score\(\)"):
            remote.score(CONTEXTS, CANDIDATES)
        assert time.monotonic() - start < 10
    finally:
        remote.close()
        local.close()
