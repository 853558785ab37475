"""The shared on-policy machinery: the minibatch schedule, the update payload, the registry, the seams."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgym.agents.learning import Decision, Episode
from llmgym.agents.policies import CandidateActions, CandidateChoice, CandidatePolicy, TokenActions
from llmgym.algorithms import A2C, ALGORITHMS, PPO, UpdateBatch, algorithm_class
from llmgym.algorithms.callbacks import Callback, FunctionCallback
from llmgym.algorithms.on_policy import lay_end_to_end, minibatch_schedule, weighted_mean
from llmgym.algorithms.updaters import PolicyUpdater
from llmgym.config import ALGORITHM_NAMES, AlgorithmConfig
from llmgym.errors import ConfigError, InputError
from tests.algorithms.helpers import build, tiny_config


@settings(max_examples=40, deadline=None)
@given(count=st.integers(1, 60), size=st.integers(1, 25), seed=st.integers(0, 1000))
def test_schedule_has_every_sample_once_and_is_seeded(count, size, seed):
    schedule = minibatch_schedule(count, size, torch.Generator().manual_seed(seed))
    assert sorted(i for minibatch in schedule for i in minibatch) == list(range(count))
    assert all(len(m) == size for m in schedule[:-1]) and 0 < len(schedule[-1]) <= size
    assert schedule == minibatch_schedule(count, size, torch.Generator().manual_seed(seed))


def test_schedule_rejects_a_bad_size():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InputError, match="minibatch_size"):
            minibatch_schedule(4, bad, torch.Generator())


def test_weighted_mean_weights_servers_by_samples():
    merged = weighted_mean(
        [{"loss": 1.0, "num_samples": 3}, {"loss": 3.0, "num_samples": 1}, {"num_samples": 0}]
    )
    assert merged == {"loss": 1.5}
    assert weighted_mean([{"num_samples": 0}]) == {}


def _batch(**overrides):
    fields = dict(
        objective=PPO().objective(),
        policy=CandidatePolicy(),
        minibatches=[[0, 1]],
        old_log_probs=torch.zeros(2),
        old_values=torch.zeros(2),
        advantages=torch.zeros(2),
        returns=torch.zeros(2),
        actions=CandidateActions([["a"], ["b"]], torch.zeros(2, dtype=torch.long)),
    )
    fields.update(overrides)
    return UpdateBatch(**fields)


def test_update_batch_checks_its_fields():
    assert len(_batch()) == 2 and isinstance(_batch().actions, CandidateActions)
    with pytest.raises(InputError, match="either actions"):
        _batch(actions=None)
    with pytest.raises(InputError, match="either actions"):
        _batch(actions=torch.zeros(2))  # bare indices: neither kind of action
    with pytest.raises(InputError, match="one prompt per sequence"):
        _batch(actions=TokenActions([[1], [2]], [[3]]))
    assert isinstance(_batch(actions=TokenActions([[1], [2]], [[3], [4]])).actions, TokenActions)
    with pytest.raises(InputError, match="'returns': 3"):
        _batch(returns=torch.zeros(3))
    with pytest.raises(InputError, match=r"outside \[0, 2\)"):
        _batch(minibatches=[[0, 2]])
    with pytest.raises(InputError, match="learning_rate_scale"):
        _batch(learning_rate_scale=1.5)


def test_the_updater_takes_only_an_update_batch(tmp_path):
    config = tiny_config(tmp_path, "llmgym/EchoWord-v0")
    llm, envs, _, _ = build(config)
    envs.close()
    with pytest.raises(InputError, match="takes one UpdateBatch"):
        llm.update(["a"], [["b"]], minibatches=[[0]])


def test_registry_matches_the_config_choices():
    assert tuple(ALGORITHMS) == ALGORITHM_NAMES
    assert algorithm_class("a2c") is A2C and algorithm_class("ppo") is PPO
    with pytest.raises(ConfigError, match="choose one of"):
        algorithm_class("sac")


def test_an_algorithm_refuses_another_algorithms_config_and_half_a_setup(tmp_path):
    with pytest.raises(ConfigError, match="name='a2c'"):
        A2C(config=AlgorithmConfig(name="ppo"))
    config = tiny_config(tmp_path, "llmgym/EchoWord-v0")
    _, envs, agent, _ = build(config)
    envs.close()
    with pytest.raises(InputError, match="without envs"):
        PPO(agent)
    with pytest.raises(InputError, match="collect rollouts"):
        PPO().collect_rollout()
    assert isinstance(PPO().updater(), PolicyUpdater)


def test_learning_rate_anneals_linearly_per_rollout(tmp_path):
    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        "algorithm.anneal_lr=true",
        "algorithm.epochs=1",
        "algorithm.rollout_steps=2",
    )
    llm, envs, _, algorithm = build(config)
    optimizer = llm.backend.updater.optimizer
    seen = []
    algorithm.learn(
        total_env_steps=32, callback=lambda a, m: seen.append([g["lr"] for g in optimizer.param_groups])
    )
    envs.close()
    base = [config.algorithm.learning_rate, config.algorithm.head_learning_rate]
    fractions = [1 - k * 8 / 32 for k in range(4)]  # 4 envs x 2 steps per rollout
    assert seen == [pytest.approx([b * f for b in base]) for f in fractions]
    assert PPO().learning_rate_scale() == 1.0  # off by default


def test_episodes_laid_end_to_end_end_terminal_and_never_share_returns():
    def decision(i):
        return Decision(
            prompt=f"p{i}",
            prompt_ids=[i],
            action="a",
            response="a",
            log_prob=-1.0,
            value=0.0,
            choice=CandidateChoice(["a", "b"], 0),
        )

    episodes = [Episode([decision(0), decision(1)], [0.0, 1.0]), Episode([decision(2)], [5.0])]
    buffer = lay_end_to_end(episodes, gamma=0.5, gae_lambda=1.0)
    batch = buffer.get(torch.arange(len(buffer)))
    assert batch.prompts == ["p0", "p1", "p2"]
    assert buffer.terminated.reshape(-1).tolist() == [False, True, True]
    assert batch.returns.tolist() == [0.5, 1.0, 5.0]  # the second episode's 5 does not flow back


class _Steps(Callback):
    """Keeps what every ``on_step`` saw."""

    def __init__(self) -> None:
        self.steps: list = []

    def on_step(self, algorithm, step) -> None:
        self.steps.append(step)


@pytest.mark.parametrize("name", ["ppo", "grpo"])
def test_every_collection_loop_tells_on_step_of_each_step(tmp_path, name):
    overrides = ["algorithm.rollout_steps=3", "agent.action_head=false", f"algorithm.name={name}"]
    config = tiny_config(tmp_path, "llmgym/Countdown-v0", "env.kwargs.length=2", *overrides)
    _, envs, _, algorithm = build(config)
    seen, functions = _Steps(), []
    algorithm.learn(1, [seen, FunctionCallback(lambda algo, metrics: functions.append(algo.env_steps))])
    envs.close()
    steps = seen.steps
    assert 1 <= len(steps) <= 3 and steps[0].episode_starts.all() and steps[0].live.all()
    counted = [int(s.live.sum()) for s in steps]
    assert [s.env_steps for s in steps] == [sum(counted[: i + 1]) for i in range(len(steps))]
    assert functions == [algorithm.env_steps] == [steps[-1].env_steps]
    for before, after in zip(steps, steps[1:]):
        done = before.terminated | before.truncated
        assert (after.episode_starts == done).all()
        assert name == "grpo" or after.live.all()  # PPO trains on every step
        assert name == "ppo" or not (after.live & done).any()  # GRPO: an ended episode steps on, discarded
    assert all(len(s.decisions) == 4 and s.rewards.shape == (4,) for s in steps)
