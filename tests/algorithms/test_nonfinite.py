"""A non-finite loss or weight stops training before a checkpoint holds it, and export refuses NaN weights."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from llmgym.algorithms import PPO
from llmgym.checkpoint import latest_checkpoint, write_manifest
from llmgym.cli import main
from llmgym.config import AlgorithmConfig
from llmgym.errors import CheckpointError, NonFiniteError
from llmgym.export import export_run
from llmgym.run.trainer import Trainer
from llmgym.testing import save_tiny_model, tiny_causal_lm
from tests.algorithms.helpers import build, tiny_config

ECHO = "env.kwargs.words=[banana,cherry,dog,cat]"
DIVERGE = ["algorithm.learning_rate=1e6", "algorithm.head_learning_rate=1e6"]


def test_a_huge_learning_rate_stops_the_run_before_any_checkpoint(tmp_path):
    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        ECHO,
        *DIVERGE,
        "train.total_env_steps=96",
        "train.checkpoint_every=32",
        "train.run_name=diverge",
    )
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    trainer = Trainer(config, model=model, tokenizer=tokenizer)
    try:
        with pytest.raises(NonFiniteError, match=r"update 1 .*nan.*algorithm\.learning_rate \(now 1e\+06\)"):
            trainer.train()
    finally:
        trainer.close()
    with pytest.raises(CheckpointError):
        latest_checkpoint(tmp_path / "diverge")


def test_the_check_reads_the_weights_once_per_update_and_passes_finite_ones(tmp_path):
    config = tiny_config(tmp_path, "llmgym/EchoWord-v0", ECHO)
    _, envs, _, algorithm = build(config)
    algorithm.collect_rollout()
    stats = algorithm.update()
    envs.close()
    assert "nonfinite_weights" not in stats and all(math.isfinite(v) for v in stats.values())


def test_non_finite_weights_with_finite_losses_are_refused():
    ppo = PPO(config=AlgorithmConfig(learning_rate=1e-3))
    assert ppo.check_finite({"loss": 1.0, "nonfinite_weights": 0.0}) == {"loss": 1.0}
    with pytest.raises(NonFiniteError, match="finite losses and non-finite weights"):
        ppo.check_finite({"loss": 1.0, "nonfinite_weights": 1.0})
    with pytest.raises(NonFiniteError, match="value_loss=inf"):
        ppo.check_finite({"value_loss": float("inf"), "grad_norm": float("inf")})
    # fp16 loss scaling skips steps whose gradients overflow: an infinite grad_norm alone is not divergence
    assert ppo.check_finite({"loss": 1.0, "grad_norm": float("inf")})["grad_norm"] == float("inf")


def test_llamagym_compat_raises_instead_of_going_nan(tmp_path):
    from llmgym.compat.llamagym import Agent

    class Words(Agent):
        def get_system_prompt(self) -> str:
            return "Say a word."

        def format_observation(self, observation) -> str:
            return str(observation)

        def extract_action(self, response: str):
            return response

    path = str(save_tiny_model(tmp_path / "llama", "llama"))
    torch.manual_seed(0)
    agent = Words(
        path,
        path,
        "cpu",
        {"max_new_tokens": 4, "do_sample": True},
        {"batch_size": 4, "mini_batch_size": 2, "ppo_epochs": 2, "learning_rate": 1e6},
    )
    with pytest.raises(NonFiniteError, match="algorithm.learning_rate"):
        for turn in range(4):
            agent.act(f"word {turn}")
            agent.assign_reward(float(turn))
            agent.terminate_episode()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model_dir) -> Path:
    root = tmp_path_factory.mktemp("nanrun")
    config = tiny_config(
        root,
        "llmgym/EchoWord-v0",
        ECHO,
        f"model.name={tiny_model_dir}",
        "train.total_env_steps=32",
        "train.run_name=run",
    )
    trainer = Trainer(config)
    try:
        trainer.train()
    finally:
        trainer.close()
    return root / "run"


def test_export_refuses_a_checkpoint_with_nan_weights(finished_run, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    checkpoint = latest_checkpoint(finished_run)
    weights = checkpoint / "llm" / "weights.safetensors"
    tensors = load_file(str(weights))
    first = sorted(tensors)[0]
    tensors[first] = torch.full_like(tensors[first], float("nan"))
    save_file(tensors, str(weights))
    write_manifest(checkpoint / "llm")  # a consistent checkpoint, as a run without the check wrote them
    write_manifest(checkpoint)
    out = tmp_path / "export"
    with pytest.raises(NonFiniteError, match=r"NaN or infinite weights .*nothing was written"):
        export_run(finished_run, out)
    assert not out.exists()
    assert main(["export", str(finished_run), "--out", str(out)]) == 2
    assert "NaN or infinite weights" in capsys.readouterr().err and not out.exists()
