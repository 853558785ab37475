"""The shipped RL4LMs synthetic-task configs train as written, on a tiny model, and reward what the task asks."""

from __future__ import annotations

import json

import pytest

from llmgym.config import load_config
from llmgym.envs.rewards import increasing_numbers
from llmgym.run.trainer import Trainer
from llmgym.testing import tiny_causal_lm


@pytest.mark.parametrize("name", ["numbers_ppo", "numbers_nlpo"])
def test_numbers_configs_train_and_evaluate_on_a_tiny_model(name, tmp_path) -> None:
    config = load_config(
        name,
        [
            f"train.output_dir={tmp_path}",
            "train.run_name=r",
            "train.total_env_steps=32",
            "train.eval_episodes=4",
            "logging.progress=false",
            "logging.plot=false",
            "logging.report=false",
            "model.lora.layers=[-2,-1]",  # the tiny model has 2 blocks
        ],
    )
    assert config.env.kwargs["reward"] == "increasing_numbers" and config.algorithm.kl.unit == "token"
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    Trainer(config, model=model, tokenizer=tokenizer).train()
    records = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert len(updates) == 2  # 16 completions per update
    assert all(r["kl_coef"] > 0 for r in updates)  # the adaptive KL penalty is on
    assert len(evals) == 2 and all(0.0 <= r["sampled_episode_return"] <= 1.0 for r in evals)


def test_the_increasing_numbers_reward_is_rl4lms_run_per_word() -> None:
    assert increasing_numbers("", "1 2 3 4 5 6 7 8 9 10 11 12", []) == 1.0
    assert increasing_numbers("", "1 2 3 word", []) == pytest.approx(3 / 10)  # max(4 words, 20 / 2)
    assert increasing_numbers("", "3 2 1", []) == pytest.approx(1 / 10)
    assert increasing_numbers("", "no numbers", []) == 0.0
