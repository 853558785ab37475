"""BabyAI-Text's NumPy view equals minigrid's own ``gen_obs`` path, step for step."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("minigrid")

from llmgym.envs._babyai_view import EgocentricView  # noqa: E402
from llmgym.envs.babyai_text import BABYAI_ACTIONS, BabyAITextEnv, describe_view  # noqa: E402


def reference_observation(env: BabyAITextEnv, raw: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """The observation built from minigrid's ``gen_obs`` dict, as BabyAI-Text did before its view."""
    carried = env.minigrid_env.carrying
    descriptions = describe_view(raw["image"], (carried.color, carried.type) if carried is not None else None)
    view = ", ".join(descriptions)
    obs = {"text": f"Goal of the agent: {raw['mission']}\n{view}", "mission": raw["mission"], "view": view}
    info = {
        "valid_actions": list(BABYAI_ACTIONS),
        "descriptions": descriptions,
        "level": env.levels[env._current],
        "success": False,
    }
    return obs, info


def reference_step(
    env: BabyAITextEnv, action: int
) -> tuple[dict[str, str], float, bool, bool, dict[str, Any]]:
    """One step through minigrid's full ``step`` (observation from ``gen_obs``)."""
    raw, reward, terminated, truncated, _ = env.minigrid_env.step(action)
    obs, info = reference_observation(env, raw)
    info["success"] = bool(reward > 0)
    return obs, float(reward), bool(terminated), bool(truncated), info


LEVELS = [
    ("GoToRedBall", True),
    ("GoToLocal", False),
    ("PickupLocal", False),
    ("PutNextLocal", False),
    ("OpenDoor", False),
    ("PickUpSeqGoTo", False),
    (("GoToLocal", "PickupLocal", "PutNextLocal", "UnlockLocal", "PickUpSeqGoTo"), False),  # MixedTrain
]


@pytest.mark.parametrize(("level", "see_through_walls"), LEVELS, ids=lambda v: str(v)[:40])
def test_view_matches_minigrid_gen_obs_every_step(level: Any, see_through_walls: bool) -> None:
    fast, ref = BabyAITextEnv(level), BabyAITextEnv(level)
    for env in (fast, ref):
        for inner in env._inner:
            inner.see_through_walls = see_through_walls
    rng = np.random.default_rng(0)
    stats = {"carrying": 0, "open door": 0, "ends": 0}
    with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints rejected layouts
        fast_obs, fast_info = fast.reset(seed=3)
        ref.reset(seed=3)
    for _ in range(700):
        expected = reference_observation(ref, ref.minigrid_env.gen_obs())
        assert (fast_obs, fast_info) == expected
        assert np.array_equal(fast._views[fast._current].image(), ref.minigrid_env.gen_obs()["image"])
        stats["carrying"] += fast.minigrid_env.carrying is not None
        stats["open door"] += "You see an open" in fast_obs["view"]
        action = int(rng.integers(len(BABYAI_ACTIONS)))
        fast_obs, reward, terminated, truncated, fast_info = fast.step(action)
        assert (fast_obs, reward, terminated, truncated, fast_info) == reference_step(ref, action)
        if terminated or truncated:
            stats["ends"] += 1
            with contextlib.redirect_stdout(io.StringIO()):
                fast_obs, fast_info = fast.reset()
                ref.reset()
    # The walk reached episode ends and the cells that pick up / drop / toggle change.
    assert stats["ends"] > 0, stats
    assert stats["open door" if level == "OpenDoor" else "carrying"] > 0, stats


@pytest.mark.parametrize("view_size", [3, 5, 9])
def test_other_view_sizes_match_gen_obs(view_size: int) -> None:
    env = gym.make("BabyAI-GoTo-v0", agent_view_size=view_size).unwrapped
    view = EgocentricView(env)
    rng = np.random.default_rng(1)
    with contextlib.redirect_stdout(io.StringIO()):
        view.reset(seed=0)
        for _ in range(150):
            assert np.array_equal(view.image(), env.gen_obs()["image"])
            _, terminated, truncated = view.step(int(rng.integers(6)))
            if terminated or truncated:
                view.reset()


def test_minigrid_gen_obs_still_works_after_fast_steps() -> None:
    env = BabyAITextEnv("GoToLocal")
    env.reset(seed=0)
    env.step("go forward")
    assert env.minigrid_env.gen_obs()["image"].shape == (7, 7, 3)
