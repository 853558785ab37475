"""The distributed plumbing with a small fake backend: dispatch, gradients, failures, cleanup."""

import os
import signal
import time

import pytest
import torch

from llmgym.errors import BackendError, BackendTimeoutError
from llmgym.llm.distributed.client import DistributedLLM
from tests.distributed.fakes import FakeBackend, FakeFactory

CONTEXTS = ["a b c", "hello world", "x", "the quick brown fox", "go forward", "pick up the key"]
CANDIDATES = [["1", "22"], ["3"], ["4", "5", "6"], ["7"], ["turn left", "turn right"], ["drop"]]
TARGETS = [1.0, -2.0, 3.0, 0.5, 2.0, -1.0]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead too
        return fh.read().split(")")[-1].split()[0] != "Z"


def _wait_dead(pids, within_s=10.0):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


@pytest.fixture(scope="module")
def two_servers():
    llm = DistributedLLM.spawn(FakeFactory(), 2, timeout_s=10.0)  # seeds differ per rank
    yield llm
    llm.close()


def _local(weight: torch.Tensor) -> FakeBackend:
    backend = FakeBackend(0)
    with torch.no_grad():
        backend.weight.copy_(weight)
    return backend


@pytest.mark.timeout(60)
def test_start_broadcasts_server0_weights(two_servers):
    w0, w1 = two_servers.parameters_of(0)[0], two_servers.parameters_of(1)[0]
    assert torch.equal(w0, w1)
    assert torch.equal(w0, FakeBackend(0).weight.detach())
    assert [s.rank for s in two_servers.servers] == [0, 1]


@pytest.mark.timeout(60)
def test_score_forward_generate_keep_order(two_servers):
    local = _local(two_servers.trainable_parameters()[0])
    for got, want in zip(two_servers.score(CONTEXTS, CANDIDATES), local.score(CONTEXTS, CANDIDATES)):
        assert torch.equal(got, want)
    got = two_servers.forward(["v"], CONTEXTS)
    want = local.forward(["v"], CONTEXTS)
    assert [torch.equal(g["v"], w["v"].detach()) for g, w in zip(got, want)] == [True] * len(CONTEXTS)
    assert two_servers.generate(CONTEXTS) == local.generate(CONTEXTS)
    assert two_servers.tokenizer is None  # the fake has none: dispatch balanced by characters


@pytest.mark.timeout(60)
def test_update_equals_one_local_update_on_full_batch(two_servers):
    local = _local(two_servers.trainable_parameters()[0])
    local.update(CONTEXTS, CANDIDATES, _current_batch_ids=list(range(6)), targets=TARGETS)
    results = two_servers.update(CONTEXTS, CANDIDATES, targets=TARGETS)
    assert [r["rank"] for r in results] == [0, 1]
    assert sum(r["n"] for r in results) == 6 and all(r["n"] > 0 for r in results)
    w0, w1 = two_servers.parameters_of(0)[0], two_servers.parameters_of(1)[0]
    assert torch.equal(w0, w1)
    torch.testing.assert_close(w0, local.weight.detach(), atol=1e-6, rtol=0)


@pytest.mark.timeout(60)
def test_more_servers_than_contexts(two_servers):
    local = _local(two_servers.trainable_parameters()[0])
    assert len(two_servers.score(CONTEXTS[:1], CANDIDATES[:1])) == 1
    local.update(CONTEXTS[:1], CANDIDATES[:1], _current_batch_ids=[0], targets=TARGETS)
    results = two_servers.update(CONTEXTS[:1], CANDIDATES[:1], targets=TARGETS)
    assert sorted(r["n"] for r in results) == [0, 1]  # the idle server joined the all-reduce with weight 0
    w0, w1 = two_servers.parameters_of(0)[0], two_servers.parameters_of(1)[0]
    assert torch.equal(w0, w1)
    torch.testing.assert_close(w0, local.weight.detach(), atol=1e-6, rtol=0)
    assert two_servers.score([], []) == []


@pytest.mark.timeout(60)
def test_updater_exception_reaches_client_with_rank_and_traceback():
    llm = DistributedLLM.spawn(FakeFactory(fail_update_on=1), 2, timeout_s=3.0)
    pids = [s.pid for s in llm.servers]
    try:
        with pytest.raises(BackendError) as info:
            llm.update(CONTEXTS, CANDIDATES, targets=TARGETS)
        message = str(info.value)
        assert "LLM server rank 1" in message and "during update()" in message
        assert "ZeroDivisionError: boom in updater on rank 1" in message
        assert "Traceback" in message and "fakes.py" in message
        with pytest.raises(BackendError, match="cannot be used any more"):
            llm.score(CONTEXTS, CANDIDATES)
    finally:
        llm.close()
    assert _wait_dead(pids) == []


@pytest.mark.timeout(60)
def test_killed_server_is_an_error_and_close_leaves_no_process():
    llm = DistributedLLM.spawn(FakeFactory(), 2, timeout_s=5.0)
    pids = [s.pid for s in llm.servers]
    os.kill(pids[1], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(BackendError, match=r"LLM server rank 1 .*(closed its connection|exited with code -9)"):
        llm.score(CONTEXTS, CANDIDATES)
    assert time.monotonic() - start < 5.0
    llm.close()
    assert _wait_dead(pids) == []


@pytest.mark.timeout(60)
def test_hung_server_times_out():
    llm = DistributedLLM.spawn(FakeFactory(), 2, timeout_s=2.0)
    pids = [s.pid for s in llm.servers]
    os.kill(pids[0], signal.SIGSTOP)
    start = time.monotonic()
    try:
        with pytest.raises(BackendTimeoutError, match=r"rank 0 .*sent nothing for distributed.timeout_s=2s during score"):
            llm.score(CONTEXTS, CANDIDATES)
        assert time.monotonic() - start < 4.0
    finally:
        llm.close()
    assert _wait_dead(pids) == []
