"""Every example runs as a subprocess with a tiny model and a tiny budget."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgym.testing import save_tiny_model

ROOT = Path(__file__).resolve().parents[1]
PPO_TINY = [
    "--steps",
    "4",
    "--eval-episodes",
    "2",
    "env.num_envs=2",
    "algorithm.rollout_steps=2",
    "algorithm.minibatch_size=4",
    "algorithm.epochs=1",
]

EXAMPLES = {
    "blackjack.py": ["--episodes", "2", "--episodes-per-update", "2", "--max-new-tokens", "4"],
    "babyai_ppo.py": [*PPO_TINY, "env.max_episode_steps=4"],
    "babyai_ppo_lora.py": [*PPO_TINY, "env.max_episode_steps=4"],
    "rlhf_like.py": [*PPO_TINY, "env.kwargs.max_tokens=2"],
    "saycan.py": ["--max-steps", "2"],
    "custom_module.py": ["--updates", "2"],
    "trl_grpo.py": ["--steps", "1", "--generations", "2", "--seeds", "2", "--max-new-tokens", "2"],
}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("examples") / "llama", "llama")


def test_every_example_is_covered() -> None:
    assert sorted(p.name for p in (ROOT / "examples").glob("*.py")) == sorted(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs(name: str, tiny_model: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "LLMGYM_CACHE": str(tmp_path / "cache"),
        "PYTHONPATH": str(ROOT),
    }  # this checkout's llmgym, whichever one is installed
    command = [sys.executable, str(ROOT / "examples" / name), "--model", str(tiny_model), *EXAMPLES[name]]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
