from __future__ import annotations

import re

import gymnasium as gym


def llamagym_format_observation(observation) -> str:
    # LlamaGym's examples/blackjack.py BlackjackAgent.format_observation, unchanged.
    return f"You: {observation[0]}. Dealer: {observation[1]}. You have {'an' if bool(observation[2]) else 'no'} ace."


def llamagym_extract_action(response: str):
    match = re.compile(r"Action: (\d)").search(response)
    if match:
        return int(match.group(1))
    return 0


def test_llamagym_blackjack_loop_runs_on_blackjack_text():
    env = gym.make("llmgym/Blackjack-Text-v0", natural=False, sab=False)
    raw = gym.make("Blackjack-v1", natural=False, sab=False)
    for episode in range(20):
        observation, info = env.reset(seed=episode)
        raw_obs, _ = raw.reset(seed=episode)
        assert observation.as_tuple() == tuple(int(x) for x in raw_obs)
        assert llamagym_format_observation(observation).startswith(
            f"You: {raw_obs[0]}. Dealer: {raw_obs[1]}."
        )
        done = False
        while not done:
            action = llamagym_extract_action("Action: 1" if observation[0] < 17 else "Action: 0")
            observation, reward, terminated, truncated, info = env.step(action)
            raw_obs, raw_reward, *_ = raw.step(action)
            assert reward == raw_reward
            done = terminated or truncated
        assert info["success"] == (reward > 0)


def test_blackjack_text_and_string_actions():
    env = gym.make("llmgym/Blackjack-Text-v0")
    obs, info = env.reset(seed=0)
    assert info["valid_actions"] == ["stay", "hit"]
    assert obs["text"] == (
        f"Your cards sum to {obs['player_sum']}. The dealer shows "
        f"{'an' if obs['dealer_card'] in (1, 8) else 'a'} {'ace' if obs['dealer_card'] == 1 else obs['dealer_card']}. "
        f"You have {'a' if obs['usable_ace'] else 'no'} usable ace."
    )
    _, _, terminated, _, _ = env.step("stick")
    assert terminated


def test_frozen_lake_map_and_moves():
    env = gym.make("llmgym/FrozenLake-Text-v0", is_slippery=False)
    obs, info = env.reset(seed=0)
    assert obs["text"] == "You are at row 1, column 1.\nXFFF\nFHFH\nFFFH\nHFFG"
    assert info["valid_actions"] == ["left", "down", "right", "up"]
    for move in ["right", "right", "down", "down", "down"]:
        obs, reward, terminated, _, info = env.step(move)
    assert obs["text"].startswith("You are at row 4, column 3.")
    obs, reward, terminated, _, info = env.step("right")
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_taxi_describes_passenger_and_destination():
    env = gym.make("llmgym/Taxi-Text-v0")
    obs, _ = env.reset(seed=0)
    row, col, passenger, destination = env.unwrapped._inner.decode(obs["state"])
    stops = ["red", "green", "yellow", "blue"]
    assert obs["text"].startswith(f"The taxi is at row {row + 1}, column {col + 1}.")
    assert f"The destination is the {stops[destination]} stop" in obs["text"]
    assert "|R: | : :G|" in obs["text"]
    _, reward, *_ = env.step("drop off")  # no passenger in the taxi: gymnasium's -10
    assert reward == -10.0


def test_cliff_walking_success_and_time_limit():
    env = gym.make("llmgym/CliffWalking-Text-v0")
    obs, _ = env.reset(seed=0)
    assert obs["text"].startswith("You are at row 4, column 1.")
    env.step("up")
    for _ in range(11):
        env.step("right")
    _, _, terminated, _, info = env.step("down")
    assert terminated and info["success"]
    assert env.spec.max_episode_steps == 200
