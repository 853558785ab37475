"""Issue 44, item 16: a run that fails at start never leaves its run name blocked behind a fix that fails.

A new run that fails while it starts (a model not found) removes what it wrote, so the same name
works at once; one that fails later but before its first checkpoint leaves its files, and the
refusal to reuse the folder says to remove it (not to resume it: there is nothing to resume).
"""

import shutil

import pytest

from llmgym.cli import main
from tests.reliability.test_run_folders import SMOKE

BOOM = '''
import gymnasium as gym
from gymnasium.spaces import Discrete, Text


class Boom(gym.Env):
    """Resets, then fails at its first step."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.action_space = Discrete(2)
        self.observation_space = Text(64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "Say yes.", {"valid_actions": ["yes", "no"]}

    def step(self, action):
        raise RuntimeError("the env broke at its first step")


gym.register(id="mine/Boom-v0", entry_point=Boom)
'''


def _train(tiny_model_dir, output_dir, *extra):
    return main(["train", f"model.name={tiny_model_dir}", f"train.output_dir={output_dir}", *SMOKE, *extra])


@pytest.mark.parametrize("existed", [False, True])
def test_a_run_whose_model_is_not_found_leaves_nothing_and_its_name_works_again(
    tiny_model_dir, tmp_path, capsys, existed
):
    run_dir = tmp_path / "mine"
    if existed:
        run_dir.mkdir()  # an empty folder the user made
    assert _train(tmp_path / "no-such-model", tmp_path, "train.run_name=mine") == 2
    assert "llmgym train: error: " in capsys.readouterr().err
    if existed:
        assert [p.name for p in run_dir.iterdir() if p.name != ".llmgym.lock"] == []
    else:
        assert not run_dir.exists()
    assert _train(tiny_model_dir, tmp_path, "train.run_name=mine") == 0, capsys.readouterr().err[-2000:]
    assert (run_dir / "checkpoints" / "latest").is_file()


def test_a_default_named_run_that_fails_at_start_removes_its_folder(tmp_path, capsys):
    assert _train(tmp_path / "no-such-model", tmp_path / "runs") == 2
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_run_that_fails_before_its_first_checkpoint_is_refused_with_a_fix_that_works(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    (tmp_path / "boomenv44.py").write_text(BOOM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LLMGYM_ALLOW_IMPORTS", "boomenv44")  # a config imports it only when allowed
    with pytest.raises(RuntimeError, match="the env broke"):
        _train(tiny_model_dir, tmp_path, "train.run_name=mine", "env.id=boomenv44:mine/Boom-v0")
    run_dir = tmp_path / "mine"
    assert (run_dir / "config.yaml").is_file()  # it started: its files stay for the user to read
    capsys.readouterr()
    assert _train(tiny_model_dir, tmp_path, "train.run_name=mine") == 2
    err = capsys.readouterr().err
    assert f"run folder {run_dir} holds files of a run that stopped before its first checkpoint" in err
    assert "train.resume" not in err and f"rm -r {run_dir}" in err
    shutil.rmtree(run_dir)  # the fix the message gives
    assert _train(tiny_model_dir, tmp_path, "train.run_name=mine") == 0, capsys.readouterr().err[-2000:]
