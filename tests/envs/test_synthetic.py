from __future__ import annotations

import pytest

from llmgym.envs.synthetic import ConstantRewardEnv, CountdownEnv, EchoWordEnv
from llmgym.errors import ConfigError


def test_echo_word_rewards_the_shown_word():
    env = EchoWordEnv()
    obs, info = env.reset(seed=3)
    word = obs.removeprefix("Say the word: ")
    assert word in info["valid_actions"]
    _, reward, terminated, truncated, info = env.step(word)
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    env.reset(seed=3)
    other = next(w for w in env.action_names if w != word)
    _, reward, _, _, info = env.step(other)
    assert reward == 0.0 and info["success"] is False


def test_countdown_sparse_reward():
    env = CountdownEnv(length=3)
    obs, _ = env.reset(seed=0)
    target = "left" if "'left'" in obs else "right"
    rewards = []
    for _ in range(3):
        obs, reward, terminated, _, info = env.step(target)
        rewards.append(reward)
    assert rewards == [0.0, 0.0, 1.0] and terminated and info["success"]
    env.reset(seed=0)
    env.step(target)
    _, reward, terminated, _, info = env.step("right" if target == "left" else "left")
    assert (reward, terminated, info["success"]) == (0.0, True, False)


def test_constant_reward_truncates():
    env = ConstantRewardEnv(horizon=4)
    env.reset(seed=0)
    flags = [env.step("go")[1:4] for _ in range(4)]
    assert flags == [(1.0, False, False)] * 3 + [(1.0, False, True)]


@pytest.mark.parametrize(
    "make", [lambda: EchoWordEnv(["one"]), lambda: CountdownEnv(0), lambda: ConstantRewardEnv(-1)]
)
def test_bad_arguments(make):
    with pytest.raises(ConfigError):
        make()
