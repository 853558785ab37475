"""The update's numbers, pinned: refactoring the algorithms must not change what one update computes.

Each case builds a tiny model, collects one seeded rollout and runs one update; the update's
statistics and a fingerprint of the trained parameters are compared with values recorded from the
reference implementation (``update_numerics.json``). Run this file with ``LLMGYM_RECORD_NUMERICS=1``
to re-record after a change that is meant to alter the numbers (and say why in the commit).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.algorithms.helpers import build, tiny_config

RECORD = Path(__file__).with_name("update_numerics.json")
ECHO = "env.kwargs.words=[banana split,dog,go forward now,cat]"

CASES: dict[str, tuple[str, ...]] = {
    "ppo_scoring": (
        "llmgym/EchoWord-v0",
        ECHO,
        "algorithm.epochs=2",
        "algorithm.minibatch_size=8",
        "agent.temperature=0.5",
        "agent.action_head=false",
        "algorithm.entropy_coef=0.01",
    ),
    "ppo_scoring_head_kl_early_stop": (
        "llmgym/Countdown-v0",
        "algorithm.epochs=4",
        "algorithm.ppo.target_kl=0.0001",
        "agent.action_head=true",
        "algorithm.gradient_accumulation_steps=2",
    ),
    "ppo_scoring_ref_kl": (
        "llmgym/EchoWord-v0",
        ECHO,
        "agent.action_head=false",
        "algorithm.kl.coef=0.1",
        "model.lora.r=4",
        "algorithm.epochs=2",
    ),
    "a2c_scoring": ("llmgym/Countdown-v0", "algorithm.name=a2c", "agent.action_head=false"),
    "ppo_generative": (
        "llmgym/EchoWord-v0",
        "env.kwargs.words=[banana,dog]",
        "agent.type=generative",
        "agent.max_new_tokens=3",
        "algorithm.epochs=2",
        "algorithm.kl.coef=0.05",
        "model.lora.r=4",
    ),
    "a2c_generative": (
        "llmgym/EchoWord-v0",
        "env.kwargs.words=[banana,dog]",
        "agent.type=generative",
        "agent.max_new_tokens=3",
        "algorithm.name=a2c",
    ),
}
STAT_KEYS = (
    "loss",
    "policy_loss",
    "value_loss",
    "entropy",
    "kl_ref",
    "approx_kl",
    "clip_fraction",
    "epochs",
    "advantage_mean",
    "advantage_std",
    "return_mean",
)


def _run_case(tmp_path, name: str) -> dict[str, float]:
    env_id, *overrides = CASES[name]
    config = tiny_config(tmp_path, env_id, *overrides)
    llm, envs, _, algorithm = build(config)
    try:
        algorithm.collect_rollout()
        before = [p.detach().double().clone() for p in llm.backend.trainable_parameters()]
        stats = algorithm.update()
    finally:
        envs.close()
    deltas = [p.detach().double() - b for p, b in zip(llm.backend.trainable_parameters(), before)]
    projection = torch.Generator().manual_seed(0)
    out = {key: float(stats[key]) for key in STAT_KEYS if key in stats}
    out["delta_abs_sum"] = float(sum(d.abs().sum() for d in deltas))
    out["delta_projection"] = float(
        sum((d * torch.randn(d.shape, generator=projection, dtype=torch.float64)).sum() for d in deltas)
    )
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_update_numbers_equal_the_recorded_reference(tmp_path, name):
    torch.manual_seed(0)
    got = _run_case(tmp_path, name)
    if os.environ.get("LLMGYM_RECORD_NUMERICS"):
        recorded = json.loads(RECORD.read_text()) if RECORD.exists() else {}
        recorded[name] = got
        RECORD.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        return
    want = json.loads(RECORD.read_text())[name]
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-3, abs=1e-6), key
