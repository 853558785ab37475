from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("minigrid")

from llmgym.envs.babyai_text import BABYAI_ACTIONS, BabyAITextEnv, describe_view  # noqa: E402
from llmgym.errors import ConfigError, InputError, MissingDependencyError  # noqa: E402

EMPTY, WALL, DOOR, KEY, BALL, BOX = 1, 2, 4, 5, 6, 7
RED, GREEN, BLUE, PURPLE, YELLOW, GREY = range(6)


def view(*cells):
    """A 7x7 view of empty floor; cells are (x, y, type, color, state); the agent is at (3, 6)."""
    image = np.zeros((7, 7, 3), dtype=np.uint8)
    image[:, :, 0] = EMPTY
    for x, y, obj, color, state in cells:
        image[x, y] = (obj, color, state)
    return image


def test_objects_left_right_forward():
    image = view((1, 5, BALL, RED, 0), (3, 3, KEY, BLUE, 0), (5, 6, BOX, GREEN, 0), (3, 5, BALL, GREY, 0))
    assert describe_view(image) == [
        "You see a red ball 2 steps left and 1 step forward",
        "You see a blue key 3 steps forward",
        "You see a grey ball 1 step forward",
        "You see a green box 2 steps right",
    ]


def test_walls_forward_left_right_and_hidden_by_objects():
    image = view()
    image[:, 2, 0] = WALL  # a wall 4 steps ahead across the view
    image[0, :, 0] = WALL  # a wall 3 steps left
    image[6, :, 0] = WALL  # a wall 3 steps right
    assert describe_view(image) == [
        "You see a wall 4 steps forward",
        "You see a wall 3 steps left",
        "You see a wall 3 steps right",
    ]
    image[5, 6] = (BOX, YELLOW, 0)  # an object between the agent and the right wall hides it
    assert describe_view(image)[-2:] == ["You see a wall 3 steps left", "You see a yellow box 2 steps right"]
    image[3, 5] = (WALL, GREY, 0)
    assert describe_view(image)[0] == "You see a wall 1 step forward"


def test_unseen_cells_are_skipped_when_looking_for_walls():
    image = view()
    image[3, 3:6, 0] = 0  # unseen
    image[3, 1, 0] = WALL
    assert describe_view(image) == ["You see a wall 5 steps forward"]


def test_door_states_and_carrying():
    image = view((3, 4, DOOR, PURPLE, 2), (1, 4, DOOR, RED, 1), (5, 4, DOOR, GREEN, 0))
    image[3, 6] = (KEY, PURPLE, 0)  # minigrid draws the carried object on the agent's cell
    assert describe_view(image, carrying=("purple", "key")) == [
        "You carry a purple key",
        "You see a closed red door 2 steps left and 2 steps forward",
        "You see a locked purple door 2 steps forward",
        "You see an open green door 2 steps right and 2 steps forward",
    ]


def test_goto_local_seed_0_matches_glam_template():
    # GLAM's hand-written test prompt (experiments/environments/babyai_text_env.py) is this layout.
    env = gym.make("llmgym/BabyAI-Text-GoToLocal-v0")
    obs, info = env.reset(seed=0)
    assert obs["mission"] == "go to the green ball"
    assert info["descriptions"] == [
        "You see a wall 2 steps left",
        "You see a purple key 1 step left and 2 steps forward",
        "You see a yellow key 1 step left and 1 step forward",
        "You see a green ball 3 steps forward",
        "You see a grey ball 1 step right and 5 steps forward",
        "You see a green key 1 step right and 2 steps forward",
        "You see a grey ball 1 step right and 1 step forward",
        "You see a green key 2 steps right and 4 steps forward",
        "You see a red box 2 steps right and 2 steps forward",
    ]
    assert obs["text"] == "Goal of the agent: go to the green ball\n" + ", ".join(info["descriptions"])
    assert info["valid_actions"] == list(BABYAI_ACTIONS)
    # After "go forward" everything is one step closer (GLAM's observation 1).
    obs, *_ = env.step("go forward")
    assert obs["view"].startswith(
        "You see a purple key 1 step left and 1 step forward, You see a yellow key 1 step left"
    )
    # Go to the green ball (3 steps forward): facing it after 2 steps is success, discounted by
    # minigrid's formula; the episode is then over.
    _, reward, terminated, truncated, info = env.step("go forward")
    assert terminated and not truncated and info["success"]
    assert reward == pytest.approx(1 - 0.9 * 2 / env.unwrapped.minigrid_env.max_steps)
    with pytest.raises(InputError, match=r"after the episode ended \(terminated=True\).*env\.reset\(\)"):
        env.step("go forward")


def test_same_layout_as_raw_minigrid_and_reward_scale():
    raw = gym.make("BabyAI-PutNextLocal-v0")
    text = gym.make("llmgym/BabyAI-Text-PutNextLocal-v0", reward_scale=20.0)
    for seed in (1, 2):
        raw_obs, _ = raw.reset(seed=seed)
        obs, _ = text.reset(seed=seed)
        assert obs["mission"] == raw_obs["mission"]
    assert text.unwrapped.reward_scale == 20.0


def test_pickup_carrying_is_described():
    env = BabyAITextEnv("GoToLocal")
    env.reset(seed=0)
    env.step("go forward")  # the yellow key is now 1 step left
    obs, *_ = env.step("turn left")
    assert "You see a yellow key 1 step forward" in obs["view"]
    _, _, terminated, _, info = env.step("pick up")
    assert not terminated
    assert info["descriptions"][0] == "You carry a yellow key"
    assert "yellow key" not in ", ".join(info["descriptions"][1:])


def test_mixed_train_samples_levels_deterministically():
    env = gym.make("llmgym/BabyAI-Text-MixedTrain-v0")
    first = []
    env.reset(seed=7)
    for _ in range(12):
        obs, info = env.reset()
        first.append((info["level"], obs["text"]))
    env.reset(seed=7)
    second = [(info["level"], obs["text"]) for obs, info in (env.reset() for _ in range(12))]
    assert first == second
    assert len({level for level, _ in first}) >= 3


def test_pick_up_seq_go_to_missions():
    env = BabyAITextEnv("PickUpSeqGoTo")
    missions = [env.reset(seed=s)[0]["mission"] for s in range(6)]
    assert all(("then go to" in m) or ("after you pick up" in m) for m in missions)


def test_unknown_level_suggests_close_names():
    with pytest.raises(ConfigError, match="GoToLocal"):
        BabyAITextEnv("GoToLocl")


def test_missing_minigrid_gives_missing_dependency_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "minigrid", None)
    with pytest.raises(MissingDependencyError, match=r"llmgym\[babyai\]"):
        BabyAITextEnv("GoToLocal")


def _greedy_shortest_action(env: BabyAITextEnv) -> int:
    """The turn/forward action that lowers the distance to the goal (by simulation on a copy)."""
    import copy

    from llmgym.envs._babyai_shaping import actions_to_goal

    inner = env.minigrid_env
    for action in (2, 0, 1):
        clone = copy.deepcopy(inner)
        clone.step(action)
        if actions_to_goal(clone) == actions_to_goal(inner) - 1:
            return action
    raise AssertionError("no action makes progress")


@pytest.mark.parametrize("seed", range(5))
def test_shaping_rewards_each_step_towards_the_goal_and_telescopes(seed):
    from llmgym.envs._babyai_shaping import actions_to_goal

    env = BabyAITextEnv("GoToRedBallNoDists", reward_shaping=0.1)
    env.reset(seed=seed)
    start = actions_to_goal(env.minigrid_env)
    assert start is not None and start > 0
    _, reward, *_ = env.step("toggle")  # no progress, no shaping
    assert reward == 0.0
    _, reward, *_ = env.step("turn left")
    total, steps, terminated = reward, 1, False
    while not terminated:
        _, reward, terminated, truncated, info = env.step(_greedy_shortest_action(env))
        total += reward
        steps += 1
        assert not truncated
        if not terminated:
            assert reward == pytest.approx(0.1)
    assert info["success"]
    success_reward = total - 0.1 * start  # shaping telescopes to weight * (d(s0) - 0)
    plain = BabyAITextEnv("GoToRedBallNoDists")
    plain.reset(seed=seed)
    max_steps = plain.minigrid_env.max_steps
    assert success_reward == pytest.approx(1 - 0.9 * (steps + 1) / max_steps)


@pytest.mark.parametrize("seed", range(3))
def test_discounted_shaping_sums_to_the_potential_difference_along_any_trajectory(seed):
    """With ``shaping_gamma`` = the discount, the discounted shaping of a trajectory is w * (d(s0) - gamma^T d(s_T))."""
    from llmgym.envs._babyai_shaping import actions_to_goal

    weight, gamma = 0.1, 0.5
    env = BabyAITextEnv("GoToRedBallNoDists", reward_shaping=weight, shaping_gamma=gamma)
    env.reset(seed=seed)
    start = actions_to_goal(env.minigrid_env)
    assert start is not None and start > 0
    _, reward, *_ = env.step("toggle")  # standing still earns w * d * (1 - gamma)
    assert reward == pytest.approx(weight * start * (1 - gamma))
    rng = np.random.default_rng(seed)
    shaping_return, discount, terminated, steps = reward, gamma, False, 1
    while not terminated and steps < 40:
        _, _, terminated, _, info = env.step(int(rng.integers(3)))
        shaping_return += discount * info["shaping_reward"]
        discount *= gamma
        steps += 1
    end = 0 if info["success"] else actions_to_goal(env.minigrid_env)
    assert shaping_return == pytest.approx(weight * (start - discount * end))


def test_shaping_needs_a_goto_mission_and_a_non_negative_weight():
    with pytest.raises(ConfigError, match="needs a 'go to' mission"):
        BabyAITextEnv("PickupLocal", reward_shaping=0.1).reset(seed=0)
    with pytest.raises(ConfigError, match="reward_shaping=-1"):
        BabyAITextEnv("GoToRedBall", reward_shaping=-1)
    with pytest.raises(ConfigError, match=r"shaping_gamma=1.5 must be in \(0, 1\]"):
        BabyAITextEnv("GoToRedBall", reward_shaping=0.1, shaping_gamma=1.5)


def test_success_is_false_when_a_time_limit_truncates_a_shaped_episode():
    env = gym.make("llmgym/BabyAI-Text-GoToRedBallNoDists-v0", max_episode_steps=2, reward_shaping=0.1)
    _, info = env.reset(seed=0)
    assert info["success"] is False
    truncated = False
    while not truncated:
        _, reward, terminated, truncated, info = env.step("turn left")
        assert not terminated
    assert info["success"] is False
