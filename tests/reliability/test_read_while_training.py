"""Issue 35, item 7: ``llmgym eval``/``export`` of a run that is still training read its newest complete checkpoint.

Training deletes old checkpoints as it writes new ones (two are kept), so one chosen by a reader can
vanish while the reader loads it. Here the "training" is the real ``save_checkpoint`` writing two
newer checkpoints at the moment the reader starts loading, as a run writing every few seconds does.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmgym.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint
from llmgym.errors import CheckpointError
from llmgym.export import export_run
from llmgym.llm.local import LocalLLM
from llmgym.run.trainer import Trainer, evaluate_run
from tests.algorithms.helpers import tiny_config

ROOT = Path(__file__).resolve().parents[2]
RUN = [
    "env.kwargs.length=2",
    "algorithm.rollout_steps=4",
    "env.num_envs=2",
    "train.total_env_steps=16",
    "train.checkpoint_every=8",
    "model.lora.r=4",
]
HOLD = (
    "import sys, time\nfrom llmgym.run_lock import RunLock\nlock = RunLock.acquire(sys.argv[1])\n"
    "print('held', flush=True)\ntime.sleep(120)\n"
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("runs")
    trainer = Trainer(
        tiny_config(root, "llmgym/Countdown-v0", *RUN, f"model.name={tiny_model_dir}", "train.run_name=r")
    )
    trainer.train()
    trainer.close()
    return root / "r"


def _advance(run, times):
    """What the training process does meanwhile: write ``times`` newer checkpoints (deleting older ones)."""
    newest = latest_checkpoint(run)
    state, tensors = load_trainer_state(newest)
    config_yaml = (newest / "config.yaml").read_text()
    for _ in range(times):
        steps = state["algorithm"]["env_steps"] + 8
        state = json.loads(json.dumps(state))
        state["algorithm"]["env_steps"] = steps
        llm = newest / "llm"
        newest = save_checkpoint(
            run, steps, lambda tmp, src=llm: shutil.copytree(src, tmp), state, tensors, config_yaml
        )


@pytest.fixture()
def training(trained, tmp_path, monkeypatch):
    """A copy of the run whose "training" writes two checkpoints as a reader starts loading one (each time: ``always``)."""
    state = SimpleNamespace(run=Path(shutil.copytree(trained, tmp_path / "r")), always=False, advanced=0)
    real_load = LocalLLM.load

    def load(self, path):
        if Path(path).parent.parent.parent == state.run and (state.always or not state.advanced):
            _advance(state.run, 2)
            state.advanced += 1
        return real_load(self, path)

    monkeypatch.setattr(LocalLLM, "load", load)
    return state


def test_eval_of_a_run_still_training_reads_the_newest_complete_checkpoint(training, capsys):
    evaluate_run(training.run, episodes=1)
    out = capsys.readouterr().out
    assert "(checkpoint step-0000000032)" in out


def test_export_of_a_run_still_training_exports_the_newest_complete_checkpoint(training, tmp_path):
    export = export_run(training.run, tmp_path / "export")
    assert export.checkpoint.name == "step-0000000032"
    assert "Evaluated at this checkpoint" not in (tmp_path / "export" / "README.md").read_text()


def test_a_run_that_keeps_replacing_its_checkpoints_is_named_as_being_written(training, tmp_path):
    training.always = True
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(training.run)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(
            CheckpointError, match=rf"is being written by process {holder.pid}.*replaced .* while"
        ):
            export_run(training.run, tmp_path / "export")
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "export").exists()
