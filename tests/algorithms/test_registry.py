"""A user algorithm named in YAML (``algorithm.name: module:Class``) trains through the trainer."""

from __future__ import annotations

import pytest

from llmgym.algorithms import PPO, OnPolicyAlgorithm, algorithm_class
from llmgym.algorithms.callbacks import Callback
from llmgym.errors import ConfigError
from tests.algorithms.helpers import tiny_config


class CountingPPO(PPO):
    """A user algorithm: PPO that counts its updates and the rollouts it saw."""

    name = "counting_ppo"
    updates_seen: list[int] = []

    def train(self, llm, buffer, policy):
        CountingPPO.updates_seen.append(len(buffer))
        return super().train(llm, buffer, policy)


class NoTrain(OnPolicyAlgorithm):
    """Not an algorithm: objective() and train() are left abstract."""

    name = "no_train"


class Recorder(Callback):
    """Records the hooks learn() calls, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_training_start(self, algorithm):
        self.calls.append("start")

    def on_rollout_start(self, algorithm):
        self.calls.append("rollout")

    def on_rollout_end(self, algorithm, metrics):
        self.calls.append("collected")

    def on_update(self, algorithm, metrics):
        self.calls.append(f"update@{algorithm.env_steps}")

    def on_training_end(self, algorithm):
        self.calls.append("end")


def test_a_user_algorithm_from_yaml_trains_through_the_trainer(tmp_path):
    from llmgym.run.trainer import Trainer
    from llmgym.testing import tiny_causal_lm

    name = f"{__name__}:CountingPPO"
    assert algorithm_class(name) is CountingPPO
    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        f"algorithm.name={name}",
        "algorithm.rollout_steps=2",
        "algorithm.epochs=1",
        "train.total_env_steps=16",
        "train.run_name=user",
    )
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    CountingPPO.updates_seen.clear()
    trainer = Trainer(config, model=model, tokenizer=tokenizer)
    try:
        recorder = Recorder()
        trainer.algorithm.learn(8, recorder)  # the callbacks of learn(), in SB3's order
        assert recorder.calls == ["start", "rollout", "collected", "update@8", "end"]
        trainer.train()
    finally:
        trainer.close()
    assert isinstance(trainer.algorithm, CountingPPO)
    assert CountingPPO.updates_seen == [8, 8]  # 4 envs x 2 steps per rollout, two rollouts to 16 steps
    assert (trainer.run_dir / "checkpoints").is_dir()


def test_a_user_algorithm_that_does_not_fit_is_a_config_error(monkeypatch):
    # past the opt-in (tests/test_import_path.py), to the import itself
    monkeypatch.setenv("LLMGYM_ALLOW_IMPORTS", "*")
    with pytest.raises(ConfigError, match="could not be imported"):
        algorithm_class("no_such_module_xyz:Algo")
    with pytest.raises(ConfigError, match="could not be imported"):
        algorithm_class(f"{__name__}:Missing")
    with pytest.raises(ConfigError, match="is not an llmgym.OnPolicyAlgorithm subclass"):
        algorithm_class("collections:OrderedDict")
    with pytest.raises(ConfigError, match="leaves objective, train undefined"):
        algorithm_class(f"{__name__}:NoTrain")
    with pytest.raises(ConfigError, match="not an algorithm; choose one of"):
        algorithm_class("ppo2")
