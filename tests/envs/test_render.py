"""render_mode on every llmgym env, and Gymnasium's own env checker with its render checks."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from llmgym.envs import check_text_env, observation_text
from llmgym.envs.core import ANSI_METADATA
from llmgym.envs.synthetic import EchoWordEnv
from llmgym.errors import ConfigError
from tests.envs._registered import LLMGYM_IDS, require_extras


def _some_action(env: gym.Env, info: dict):
    valid = info.get("valid_actions")
    return valid[-1] if valid else "a word"


@pytest.mark.parametrize("env_id", LLMGYM_IDS)
def test_every_env_declares_its_render_modes_and_a_frame_rate(env_id):
    require_extras(env_id)
    metadata = gym.make(env_id).metadata
    assert "ansi" in metadata["render_modes"] and metadata["render_fps"] > 0


@pytest.mark.parametrize("env_id", LLMGYM_IDS)
def test_ansi_renders_the_observation_text_and_none_renders_nothing(env_id):
    require_extras(env_id)
    plain = gym.make(env_id)
    plain.reset(seed=0)
    assert plain.render_mode is None and plain.render() is None
    env = gym.make(env_id, render_mode="ansi")
    assert env.render_mode == "ansi" and env.unwrapped.render_mode == "ansi"
    obs, info = env.reset(seed=0)
    for _ in range(5):
        assert env.render() == observation_text(obs)
        obs, _, terminated, truncated, info = env.step(_some_action(env, info))
        assert env.render() == observation_text(obs)
        if terminated or truncated:
            obs, info = env.reset()


@pytest.mark.parametrize("env_id", LLMGYM_IDS)
@pytest.mark.filterwarnings(
    "ignore:.*not in the possible render_modes:UserWarning"
)  # gymnasium.make warns first
def test_an_unsupported_render_mode_is_a_config_error(env_id):
    require_extras(env_id)
    unsupported = "rgb_array" if "BabyAI" not in env_id else "depth_array"
    with pytest.raises(
        ConfigError, match=rf"render_mode='{unsupported}' is not supported by \w+; expected None or one of"
    ):
        gym.make(env_id, render_mode=unsupported)


def test_babyai_renders_minigrid_pictures_too():
    pytest.importorskip("minigrid")
    env = gym.make("llmgym/BabyAI-Text-GoToRedBallNoDists-v0", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert (
        isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    )
    assert env.unwrapped.render() is not None


def test_unwrapped_envs_render_none_before_their_state_exists():
    pytest.importorskip("minigrid")
    for env_id in ("llmgym/Blackjack-Text-v0", "llmgym/BabyAI-Text-GoToRedBallNoDists-v0"):
        for mode in gym.make(env_id).metadata["render_modes"]:
            assert gym.make(env_id, render_mode=mode).unwrapped.render() is None


@pytest.mark.parametrize("env_id", LLMGYM_IDS)
def test_gymnasium_check_env_passes_with_render_and_close_checks_and_no_warning(env_id):
    require_extras(env_id)
    env = gym.make(env_id)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught if issubclass(w.category, UserWarning)] == []


def test_check_text_env_catches_a_render_that_is_not_the_observation_text():
    class Stale(EchoWordEnv):
        def _render_text(self) -> str:
            return "Say the word: nothing"

    with pytest.raises(AssertionError, match="render\\(\\) with render_mode='ansi' returned"):
        check_text_env(Stale(render_mode="ansi"), check_gymnasium=False)


def test_a_text_env_without_rendering_declares_no_render_mode():
    from llmgym.envs import TextEnv

    assert TextEnv.metadata["render_modes"] == [] and ANSI_METADATA["render_modes"] == ["ansi"]
