"""Operating the Ray backend: the servers' runtime environment, and a collective timeout that names the stuck server."""

from __future__ import annotations

import time

import pytest
import torch

from llmgym.config import DistributedConfig, ModelConfig
from llmgym.errors import BackendError, BackendTimeoutError
from llmgym.llm.distributed.backend import make_backend
from llmgym.llm.updater import Updater
from llmgym.testing import tiny_causal_lm

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


class EnvOrStall(Updater):
    """Reports an environment variable of its server; with ``stall_rank=R``, server R is late to the all-reduce."""

    def setup(self) -> None:
        self.optimizer = torch.optim.SGD(self.llm.trainable_parameters(), lr=0.1)

    def perform_update(self, contexts, candidates, _current_batch_ids, stall_rank=None, **kwargs):  # type: ignore[no-untyped-def]
        import os

        import torch.distributed as dist

        if dist.get_rank() == stall_rank:
            time.sleep(120)  # never reaches the collective in time; the LLM is closed before it wakes
        out = self.llm.forward(["score"], contexts, candidates, require_grad=True)
        self.optimizer.zero_grad()
        torch.stack([-o["score"].sum() for o in out]).sum().backward()
        self.llm.sync_gradients(len(contexts))
        return {"variable": os.environ.get("LLMGYM_TEST_VARIABLE"), "pid": os.getpid()}


def test_runtime_env_reaches_every_server_and_a_late_server_is_named_when_a_collective_times_out():
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    llm = make_backend(
        ModelConfig(name="tiny"),
        updater=EnvOrStall,
        model=model,
        tokenizer=tokenizer,
        distributed=DistributedConfig(
            llm_processes=2,
            timeout_s=60.0,
            collective_timeout_s=3.0,
            runtime_env={"env_vars": {"LLMGYM_TEST_VARIABLE": "set-by-config"}},
        ),
    )
    try:
        contexts, candidates = ["a red ball", "a blue key"], [[" left"], [" right"]]
        results = llm.update(contexts, candidates)
        assert [r["variable"] for r in results] == ["set-by-config", "set-by-config"]
        late = llm.servers[1]
        with pytest.raises(BackendTimeoutError) as caught:
            llm.update(contexts, candidates, stall_rank=1)
        message = str(caught.value)
        # the stuck server is named (rank, node, pid), the one that waited for it only as the one that waited
        assert message.startswith(f"LLM server {late.describe()} did not join a collective of update()")
        assert f"pid {late.pid}" in message and "collective_timeout_s=3s" in message
        assert f"server {llm.servers[0].describe()} waited for it and timed out" in message
        with pytest.raises(BackendError, match="cannot be used any more"):
            llm.update(contexts, candidates)
    finally:
        llm.close()
