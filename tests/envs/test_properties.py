from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgym.envs import list_envs
from llmgym.errors import InvalidActionError
from tests.envs._registered import SLOW_RESET_IDS, generic_ids

FAST_IDS = [
    i
    for i in generic_ids([i for i, _ in list_envs()])
    if ("BabyAI" not in i or i.endswith("GoToLocal-v0")) and i not in SLOW_RESET_IDS
]
_ENVS: dict[str, gym.Env] = {}


def _env(env_id):
    if env_id not in _ENVS:
        _ENVS[env_id] = gym.make(env_id)
    return _ENVS[env_id]


@pytest.mark.parametrize("env_id", FAST_IDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    action=st.one_of(
        st.text(max_size=30), st.sampled_from(["turn left", " HIT ", "go forward", "left", "drop off"])
    )
)
def test_arbitrary_strings_are_accepted_or_rejected_cleanly(env_id, action):
    env = _env(env_id)
    _, info = env.reset(seed=0)
    try:
        obs, reward, terminated, truncated, info = env.step(action)
    except InvalidActionError as exc:
        assert info.get("valid_actions") and all(a in str(exc) for a in info["valid_actions"])
    else:
        assert obs in env.observation_space
        assert isinstance(reward, float) and isinstance(terminated, bool)
        if info.get("valid_actions") is not None:
            key = " ".join(action.lower().split())
            assert env.unwrapped.action_aliases.get(key, key) in info["valid_actions"]
