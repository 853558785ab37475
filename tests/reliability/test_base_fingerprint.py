"""Issue 35, item 7: a checkpoint records its base model; resume, eval and export refuse another base."""

import shutil

import pytest

from llmgym.errors import CheckpointError
from llmgym.export import export_run
from llmgym.run.trainer import Trainer, evaluate_run
from llmgym.testing import save_tiny_model
from tests.algorithms.helpers import tiny_config

RUN = [
    "env.kwargs.length=2",
    "algorithm.rollout_steps=4",
    "env.num_envs=2",
    "train.total_env_steps=8",
    "train.checkpoint_every=null",
]


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_a_changed_base_model_of_the_same_architecture_is_refused_naming_both(tmp_path, lora):
    base = save_tiny_model(tmp_path / "base", num_layers=2, seed=0)
    extra = ["model.lora.r=4"] if lora else []
    config = tiny_config(
        tmp_path, "llmgym/Countdown-v0", *RUN, *extra, f"model.name={base}", "train.run_name=r"
    )
    trainer = Trainer(config)
    trainer.train()
    trainer.close()
    run = tmp_path / "r"

    shutil.rmtree(base)
    save_tiny_model(base, num_layers=2, seed=1)  # same name, same architecture, other weights
    pattern = r"(?s)trained from the base model .*base.* \(architecture [0-9a-f]+, weights [0-9a-f]+\).*now .*weights [0-9a-f]+"
    resume = tiny_config(
        tmp_path,
        "llmgym/Countdown-v0",
        *RUN,
        *extra,
        f"model.name={base}",
        "train.run_name=r",
        "train.total_env_steps=12",
        f"train.resume={run}",
    )
    with pytest.raises(CheckpointError, match=pattern):
        Trainer(resume)
    with pytest.raises(CheckpointError, match=pattern):
        export_run(run, tmp_path / "export")
    assert not (tmp_path / "export").exists()
    with pytest.raises(CheckpointError, match=pattern):
        evaluate_run(run, episodes=1)

    shutil.rmtree(base)
    save_tiny_model(base, num_layers=2, seed=0)  # the base it was trained from, written again
    assert export_run(run, tmp_path / "export").path == tmp_path / "export"
    trainer = Trainer(resume)
    assert trainer.algorithm.env_steps == 8
    trainer.close()
