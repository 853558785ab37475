"""ReBN: turn returns and their batch normalisation by hand, rounds from distinct seeds, resume."""

from __future__ import annotations

import pytest
import torch

from llmgym.agents.learning import Episode
from llmgym.algorithms import ReBN, algorithm_class, return_batch_normalization, turn_returns
from llmgym.config import AlgorithmConfig
from llmgym.errors import InputError
from tests.algorithms.helpers import build, one_round_on_countdown, tiny_config
from tests.run.test_trainer import _resume_at


def test_turn_returns_discount_the_rewards_that_follow_each_turn():
    # G_2 = 1, G_1 = 0 + 0.9 * 1, G_0 = 0.5 + 0.9 * 0.9
    got = turn_returns([0.5, 0.0, 1.0], gamma=0.9)
    torch.testing.assert_close(got, torch.tensor([1.31, 0.9, 1.0], dtype=torch.float64))
    torch.testing.assert_close(
        turn_returns([1.0, 2.0], gamma=1.0), torch.tensor([3.0, 2.0], dtype=torch.float64)
    )
    assert turn_returns([], gamma=0.9).numel() == 0
    with pytest.raises(InputError, match="gamma=1.5"):
        turn_returns([1.0], gamma=1.5)


def test_return_batch_normalization_zscores_over_every_turn_of_the_batch():
    # mean 0.5, population std 0.5
    got = return_batch_normalization(torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64))
    expected = torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64) * 0.5 / (0.5 + 1e-6)
    torch.testing.assert_close(got, expected)
    # mean 2, population std sqrt(8/3)
    got = return_batch_normalization(torch.tensor([0.0, 2.0, 4.0], dtype=torch.float64), eps=0.0)
    torch.testing.assert_close(got, torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64) * 2 / (8 / 3) ** 0.5)
    equal = return_batch_normalization(torch.full((5,), 3.0, dtype=torch.float64))
    torch.testing.assert_close(equal, torch.zeros(5, dtype=torch.float64))  # no signal, no NaN
    with pytest.raises(InputError, match="non-empty"):
        return_batch_normalization(torch.zeros(0))
    with pytest.raises(InputError, match=r"\[2, 2\]"):
        return_batch_normalization(torch.zeros(2, 2))


def test_rebn_is_registered():
    assert algorithm_class("rebn") is ReBN
    assert ReBN().config.name == "rebn"


def test_a_round_plays_each_env_from_its_own_seed_and_credits_each_turn_with_its_return(tmp_path):
    algorithm, rollout = one_round_on_countdown(
        tmp_path,
        "algorithm.name=rebn",
        "env.kwargs.length=3",
        "algorithm.gamma=0.5",
        "algorithm.rollout_steps=6",
    )
    assert len(rollout) == algorithm.env_steps
    batch = rollout.batch
    ends = torch.nonzero(algorithm.buffer.terminated.reshape(-1)).reshape(-1).tolist()
    assert len(ends) == 4  # one episode per env, each ended (terminal or cut by the round)
    starts = [0] + [e + 1 for e in ends[:-1]]
    returns = torch.cat([turn_returns(batch.rewards[s : e + 1].tolist(), 0.5) for s, e in zip(starts, ends)])
    torch.testing.assert_close(rollout.advantages.double(), return_batch_normalization(returns))
    first_prompts = [batch.prompts[s] for s in starts]
    assert len(set(first_prompts)) > 1  # distinct seeds, not groups


def test_loop_api_normalises_over_the_episodes_of_one_update(tmp_path):
    config = tiny_config(tmp_path, "llmgym/EchoWord-v0", "agent.action_head=false")
    llm, envs, agent, _ = build(config)
    obs, infos = envs.reset(seed=0)
    agent.act_batch(obs, infos)
    decisions = agent.last_decisions
    envs.close()
    rebn = ReBN(config=AlgorithmConfig(name="rebn", epochs=1))
    episodes = [Episode([d], [float(i % 2)]) for i, d in enumerate(decisions)]
    stats = rebn.train_on_episodes(llm, agent.policy, episodes)
    assert stats["episodes"] == 4.0 and "policy_loss" in stats
    targets = rebn.rollout_targets(rebn.episode_buffer(episodes))
    assert targets.advantages.tolist() == pytest.approx([-1.0, 1.0, -1.0, 1.0], abs=1e-5)


def test_rebn_trains_through_the_trainer_and_resumes_exactly(tmp_path):
    base = [
        "env.kwargs.words=[banana,dog]",
        "algorithm.name=rebn",
        "agent.action_head=false",
        "algorithm.epochs=2",
        "algorithm.minibatch_size=4",
    ]
    _resume_at(tmp_path, "llmgym/EchoWord-v0", base, total=16, split=8)
