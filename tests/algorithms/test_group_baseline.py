"""GRPO and RLOO: group advantages by hand, rounds played from shared seeds, episodes as groups."""

from __future__ import annotations

import pytest
import torch

from llmgym.agents.learning import Episode
from llmgym.algorithms import GRPO, RLOO, grpo_advantages, rloo_advantages
from llmgym.algorithms.group_baseline import episode_returns_by_group
from llmgym.config import GroupSection
from llmgym.errors import ConfigError, InputError
from tests.algorithms.helpers import build, one_round_on_countdown, tiny_config


def test_grpo_standardises_within_each_group():
    returns = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]], dtype=torch.float64)
    advantages = grpo_advantages(returns)
    expected = torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64) * 0.5 / (0.5 + 1e-4)
    torch.testing.assert_close(advantages[0], expected)
    torch.testing.assert_close(advantages[1], torch.zeros(4, dtype=torch.float64))  # equal returns: no signal


def test_rloo_subtracts_the_mean_of_the_others():
    returns = torch.tensor([[3.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(
        rloo_advantages(returns), torch.tensor([[3.0, -1.5, -1.5]], dtype=torch.float64)
    )
    assert float(rloo_advantages(torch.randn(5, 4, dtype=torch.float64)).sum()) == pytest.approx(
        0.0, abs=1e-9
    )


def test_returns_must_form_whole_groups():
    assert episode_returns_by_group([1, 2, 3, 4], 2).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    with pytest.raises(InputError, match="groups of algorithm.group.size=3"):
        episode_returns_by_group([1, 2, 3, 4], 3)
    with pytest.raises(ConfigError, match="group.size=1"):
        tiny_config("/tmp", "llmgym/EchoWord-v0", "algorithm.group.size=1")


def test_a_round_plays_each_group_from_one_seed_and_credits_every_turn(tmp_path):
    algorithm, rollout = one_round_on_countdown(
        tmp_path, "algorithm.name=grpo", "algorithm.group.size=2", "algorithm.rollout_steps=5"
    )
    lengths = algorithm._episode_lengths
    assert len(lengths) == 4 and sum(lengths) == len(rollout) == algorithm.env_steps
    starts = [sum(lengths[:i]) for i in range(4)]
    prompts = [rollout.batch.prompts[s] for s in starts]
    assert prompts[0] == prompts[1] and prompts[2] == prompts[3]  # a group starts from one seed
    returns = [float(rollout.batch.rewards[s : s + n].sum()) for s, n in zip(starts, lengths)]
    want = grpo_advantages(torch.tensor(returns, dtype=torch.float64).reshape(2, 2)).reshape(-1)
    for (start, n), advantage in zip(zip(starts, lengths), want.tolist()):
        assert rollout.advantages[start : start + n].tolist() == pytest.approx([advantage] * n)


def test_num_envs_must_be_a_multiple_of_the_group(tmp_path):
    config = tiny_config(tmp_path, "llmgym/EchoWord-v0", "algorithm.name=rloo", "algorithm.group.size=3")
    with pytest.raises(ConfigError, match="multiple of 3"):
        build(config)


def test_loop_api_episodes_are_grouped_in_order(tmp_path):
    config = tiny_config(tmp_path, "llmgym/EchoWord-v0", "agent.action_head=false")
    llm, envs, agent, _ = build(config)
    obs, infos = envs.reset(seed=0)
    agent.act_batch(obs, infos)
    decisions = agent.last_decisions
    envs.close()
    rloo = RLOO(config=GRPO().config.__class__(name="rloo", group=GroupSection(size=2), epochs=1))
    episodes = [Episode([d], [float(i % 2)]) for i, d in enumerate(decisions)]
    stats = rloo.train_on_episodes(llm, agent.policy, episodes)
    assert stats["episodes"] == 4.0 and "policy_loss" in stats and stats["value_loss"] >= 0
    with pytest.raises(InputError, match="group.size=2"):
        rloo.train_on_episodes(llm, agent.policy, episodes[:3])


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_anneal_lr_decays_over_the_rounds_played(tmp_path, name):
    # a round is a rollout: before, the group loop never recorded where it started, so anneal_lr stayed at 1
    config = tiny_config(
        tmp_path,
        "llmgym/Countdown-v0",
        f"algorithm.name={name}",
        "env.num_envs=4",
        "algorithm.group.size=2",
        "agent.action_head=false",
        "algorithm.rollout_steps=5",
        "algorithm.anneal_lr=true",
    )
    _, envs, _, algorithm = build(config)
    algorithm.total_env_steps = 100
    algorithm.collect_rollout()
    first = algorithm.learning_rate_scale()
    played = algorithm.env_steps
    algorithm.collect_rollout()
    envs.close()
    assert first == 1.0 and 0 < played < 100
    assert algorithm.learning_rate_scale() == pytest.approx(1.0 - played / 100)
