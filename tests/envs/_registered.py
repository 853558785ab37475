"""Every ``llmgym/`` id in Gymnasium's registry, as ``llmgym envs`` lists them, for parametrized tests."""

from __future__ import annotations

import gymnasium as gym
import pytest

from llmgym.envs.registration import check_env_id, register_envs
from llmgym.errors import MissingDependencyError

register_envs()

#: The ids, in registration order; ScienceWorld's 31 (a JVM of their own each, hundreds of valid
#: actions per state) are left to tests/envs/test_scienceworld.py.
LLMGYM_IDS: list[str] = [
    env_id for env_id in gym.registry if env_id.startswith("llmgym/") and not env_id.startswith("llmgym/ScienceWorld-")
]


def require_extras(env_id: str) -> None:
    """Skip the test, naming the extra to install, if the env needs an optional package that is missing."""
    try:
        check_env_id(env_id)
    except MissingDependencyError as exc:
        pytest.skip(str(exc))
