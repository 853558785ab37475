"""Issue 35, item 0: an env registered in the user's own module trains from the command line.

Gymnasium's convention is ``module:Namespace/Name-v0``: ``gym.make`` imports the module first, and
``llmgym train``, ``eval``, ``play`` and ``envs`` take the same form.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgym.envs.registration import check_env_id
from llmgym.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

USER_MODULE = '''
import gymnasium as gym
from gymnasium.spaces import Discrete, Text

WORDS = ["yes", "no"]


class SayYes(gym.Env):
    """One step: say yes (reward 1) or no."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.action_space = Discrete(2)
        self.observation_space = Text(64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "Say yes.", {"valid_actions": list(WORDS)}

    def step(self, action):
        word = WORDS[action] if isinstance(action, int) else str(action).strip()
        ok = word == "yes"
        return "Say yes.", float(ok), True, False, {"valid_actions": list(WORDS), "success": ok}


gym.register(id="mine/SayYes-v0", entry_point=SayYes)
'''

ENV_ID = "userenvs35:mine/SayYes-v0"
SMOKE = [
    "train.total_env_steps=8",
    "env.num_envs=2",
    "algorithm.rollout_steps=4",
    "algorithm.epochs=1",
    "algorithm.minibatch_size=4",
    "train.eval_episodes=2",
    "train.eval_every=null",
    "train.checkpoint_every=null",
    "logging.progress=false",
    "logging.plot=false",
    "agent.max_prompt_tokens=64",
    "model.forward_batch_size=8",
]


@pytest.fixture()
def user_module(tmp_path):
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "userenvs35.py").write_text(USER_MODULE)
    return folder


def _cli(args, pythonpath, input_text=None):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(pythonpath)]),
        "LLMGYM_ALLOW_IMPORTS": "userenvs35",  # a config may import it only when the user allows it
    }
    return subprocess.run(
        [sys.executable, "-m", "llmgym.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=pythonpath.parent,
        input=input_text,
        timeout=240,
    )


def test_train_eval_play_and_envs_take_a_module_qualified_id(
    user_module, tmp_path, tiny_model_dir, monkeypatch, capsys
):
    from llmgym.cli import main

    proc = _cli(
        [
            "train",
            f"env.id={ENV_ID}",
            f"model.name={tiny_model_dir}",
            f"train.output_dir={tmp_path / 'runs'}",
            "train.run_name=mine",
            *SMOKE,
        ],
        user_module,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / "mine"
    assert (run_dir / "checkpoints" / "latest").is_file()

    monkeypatch.syspath_prepend(
        str(user_module)
    )  # in-process, as the console script runs it (no second torch import)
    monkeypatch.setenv("LLMGYM_ALLOW_IMPORTS", "userenvs35")
    assert main(["eval", str(run_dir), "--episodes", "2"]) == 0, capsys.readouterr().err[-3000:]
    assert f"{ENV_ID}: success rate" in capsys.readouterr().out

    proc = _cli(["play", ENV_ID], user_module, input_text="0\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Say yes." in proc.stdout and "episode over: success" in proc.stdout

    proc = _cli(["envs", "userenvs35"], user_module)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "userenvs35:mine/SayYes-v0" in proc.stdout and "llmgym/EchoWord-v0" in proc.stdout


def test_a_module_qualified_id_is_checked_by_importing_the_module(user_module, monkeypatch):
    monkeypatch.syspath_prepend(str(user_module))
    check_env_id(ENV_ID)  # imports the module, which registers the id
    with pytest.raises(ConfigError, match=r"'userenvs35:mine/SayYess-v0'.*Did you mean 'mine/SayYes-v0'"):
        check_env_id("userenvs35:mine/SayYess-v0")
    with pytest.raises(
        ConfigError, match=r"module 'no_such_module_35', which cannot be imported.*PYTHONPATH"
    ):
        check_env_id("no_such_module_35:mine/SayYes-v0")
