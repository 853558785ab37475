"""The Ray backend on a real private local Ray instance (one per module; `make test` runs the ray tests in one process).

Two Ray servers running the real LocalLLM on a tiny model answer like one in-process LocalLLM
(scores and heads to float32 rounding, greedy generations token for token), every algorithm's
update leaves both servers' weights equal to the in-process update, and a checkpoint written on
two servers resumes bit-identically on two new ones. Faults are ``BackendError``s naming the server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from llmgym.agents.policies import CandidateActions, CandidatePolicy
from llmgym.algorithms import GRPO, PPO, RLOO, UpdateBatch
from llmgym.config import AlgorithmConfig, DistributedConfig, ModelConfig
from llmgym.errors import BackendError, PlacementError
from llmgym.llm.distributed.backend import make_backend
from llmgym.llm.distributed.ray_backend import RayLLM
from llmgym.llm.distributed.ray_runtime import cluster_requires_token, start_ray
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import ModuleFunction, ValueHead
from llmgym.testing import tiny_causal_lm
from tests.distributed.test_algorithms import CANDIDATES, OPTIMIZER, _batches, _common
from tests.distributed.test_local_equivalence import CONTEXTS

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]
TOL = 1e-4
ROOT = Path(__file__).resolve().parents[2]


class Boom(ModuleFunction):
    """A head that always raises (a bug in a user's module function)."""

    def forward(self, forward_outputs, minibatch, tokenized_contexts, **kwargs):  # type: ignore[no-untyped-def]
        raise KeyError("boom: this head found a bad context")


def _build(llm_processes: int, **distributed):
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    return make_backend(
        ModelConfig(name="tiny", forward_batch_size=4), {"value": ValueHead(hidden_sizes=(8,)), "boom": Boom()},
        PPO(config=OPTIMIZER).updater(), model=model, tokenizer=tokenizer,
        distributed=DistributedConfig(llm_processes=llm_processes, **{"timeout_s": 30.0, **distributed}),
    )


@pytest.fixture(scope="module")
def runtime():
    started = start_ray(DistributedConfig(llm_processes=4))
    yield started
    started.shutdown()


@pytest.fixture(scope="module")
def pair(runtime):
    local = _build(1)
    remote = _build(2, check_weights=True)
    assert isinstance(local, LocalLLM) and isinstance(remote, RayLLM)
    yield local, remote
    remote.close()
    local.close()


def test_scores_heads_and_greedy_generations_equal_in_process(pair):
    local, remote = pair
    for got, want in zip(remote.score(CONTEXTS, CANDIDATES), local.score(CONTEXTS, CANDIDATES)):
        torch.testing.assert_close(got, want, atol=TOL, rtol=0)
    for got, want in zip(remote.forward(["value", "score"], CONTEXTS, CANDIDATES), local.forward(["value", "score"], CONTEXTS, CANDIDATES)):
        torch.testing.assert_close(got["value"], want["value"], atol=TOL, rtol=0)
        torch.testing.assert_close(got["score"], want["score"], atol=TOL, rtol=0)
    got_gen = remote.generate(CONTEXTS, max_new_tokens=5, do_sample=False)
    want_gen = local.generate(CONTEXTS, max_new_tokens=5, do_sample=False)
    assert [[s.token_ids for s in g] for g in got_gen] == [[s.token_ids for s in g] for g in want_gen]
    assert len({s.node_id for s in remote.servers}) == 1 and sorted(s.rank for s in remote.servers) == [0, 1]


def test_each_algorithms_update_equals_in_process(pair):
    local, remote = pair
    batches = list(_batches(local.tokenizer))
    for algorithm in (GRPO(), RLOO(config=AlgorithmConfig(name="rloo"))):  # PPO's server side, their own coefficients
        batches.append((("loss", "policy_loss"), CANDIDATES, UpdateBatch(
            objective=algorithm.objective(), policy=CandidatePolicy(temperature=0.7),
            actions=CandidateActions(CANDIDATES, torch.zeros(len(CONTEXTS), dtype=torch.long)), **_common())))
    for keys, candidates, batch in batches:
        want = local.update(CONTEXTS, candidates, batch=batch)[0]
        results = remote.update(CONTEXTS, candidates, batch=batch)  # check_weights: the servers agree
        assert sorted(r["num_samples"] for r in results) == [2, 3]
        for key in keys:
            merged = sum(r[key] * r["num_samples"] for r in results) / len(CONTEXTS)
            assert merged == pytest.approx(want[key], rel=TOL, abs=TOL), key
        for p0, p1, w in zip(remote.parameters_of(0), remote.parameters_of(1), local.trainable_parameters()):
            assert torch.equal(p0, p1)
            torch.testing.assert_close(p0, w.detach(), atol=TOL, rtol=0)


def test_module_function_exception_names_the_server_and_cause(pair):
    _, remote = pair
    with pytest.raises(BackendError, match=r"LLM server rank \d \(node .* pid \d+\) raised during forward\(\): KeyError") as info:
        remote.forward(["boom"], CONTEXTS, CANDIDATES)
    assert "boom: this head found a bad context" in str(info.value) and "test_ray.py" in str(info.value)
    assert len(remote.score(CONTEXTS[:2], CANDIDATES[:2])) == 2  # not a collective: the servers keep serving


def test_checkpoint_on_two_servers_resumes_bit_identically_on_two_new_ones(pair, tmp_path):
    _, remote = pair
    batch = next(_batches(remote.tokenizer))[2]
    remote.save(str(tmp_path / "ckpt"))
    remote.update(CONTEXTS, CANDIDATES, batch=batch)
    resumed = _build(2)
    try:
        resumed.load(str(tmp_path / "ckpt"))
        resumed.update(CONTEXTS, CANDIDATES, batch=batch)
        for p, q in zip(remote.parameters_of(1), resumed.parameters_of(0)):
            assert torch.equal(p, q)
    finally:
        resumed.close()


def test_a_killed_server_is_a_backend_error_in_seconds(pair):
    _, remote = pair
    ray.kill(remote._actors[1])
    start = time.monotonic()
    with pytest.raises(BackendError, match=r"LLM server rank 1 .* died during score\(\)"):
        remote.score(CONTEXTS, CANDIDATES)
    assert time.monotonic() - start < 10
    with pytest.raises(BackendError, match="cannot be used any more"):
        remote.score(CONTEXTS, CANDIDATES)


def test_gpus_on_a_cpu_only_instance_are_a_placement_error_naming_gpu(runtime):
    with pytest.raises(PlacementError, match=r"no node of the Ray cluster has enough GPU"):
        _build(2, gpus_per_server=1.0)
    with pytest.raises(PlacementError, match=r"could not be placed within distributed.timeout_s=1s"):
        _build(2, cpus_per_server=3, timeout_s=1.0)  # each fits a node, both do not
    assert all(group["state"] != "PENDING" for group in ray.util.placement_group_table().values())


def test_a_process_without_the_token_cannot_submit_work(runtime):
    assert cluster_requires_token(runtime.gcs_address)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    code = f"import ray; ray.init(address={runtime.gcs_address!r}); print('SUBMITTED', ray.get(ray.remote(lambda: 1).remote()))"
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=10)
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:  # Ray retries the refused connection for a while
        output = (exc.stdout or b"").decode() + (exc.stderr or b"").decode()
    assert "InvalidAuthToken" in output and "SUBMITTED" not in output


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_driver_stops_every_server_and_ray_process(signum):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    driver = subprocess.Popen([sys.executable, "-m", "tests.distributed.ray_driver"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(driver.stdout.readline())["pids"]  # type: ignore[union-attr]
        assert len(pids) >= 4 and all(_alive(pid) for pid in pids)  # gcs, raylet, ..., 2 servers
        driver.send_signal(signum)
        driver.wait(timeout=60)
    finally:
        driver.kill()
    deadline = time.monotonic() + 20
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in pids if _alive(pid)]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
