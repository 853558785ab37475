"""LLM state saved on one device loads on another."""

from __future__ import annotations

import torch

from llmgym.llm.persistence import load_llm_state, save_llm_state
from llmgym.testing import tiny_causal_lm
from tests._devices import saved_as_cuda


def test_updater_state_saved_on_a_gpu_loads_on_a_cpu_machine(tmp_path):
    model, _ = tiny_causal_lm()
    head = torch.nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(head.parameters())
    head(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    with saved_as_cuda():  # the updater.pt a GPU-trained run writes
        save_llm_state(tmp_path / "llm", model, {"value": head}, {"optimizer": optimizer.state_dict()})
    state = load_llm_state(tmp_path / "llm", model, {"value": head})
    assert state is not None
    exp_avg = state["optimizer"]["state"][0]["exp_avg"]
    assert exp_avg.device.type == "cpu"
    assert torch.equal(exp_avg, optimizer.state_dict()["state"][0]["exp_avg"])
