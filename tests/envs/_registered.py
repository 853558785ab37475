"""Every ``llmgym/`` id in Gymnasium's registry, as ``llmgym envs`` lists them, for parametrized tests."""

from __future__ import annotations

import gymnasium as gym
import pytest

from llmgym.envs.registration import check_env_id, register_envs
from llmgym.errors import MissingDependencyError

register_envs()

#: TextWorld ids the generic per-id tests run: the simple game only. Each generated family holds 8
#: games that tw-make compiles at first use (5-30 s each on a fresh machine) and the generic checks
#: reset with enough seeds to build all 8; tests/envs/test_textworld.py covers the families.
TEXTWORLD_GENERIC_IDS = ("llmgym/TextWorld-v0",)


def generic_ids(ids: list[str]) -> list[str]:
    """The ids the generic per-id tests run: all, but one representative of the slow suites.

    ScienceWorld's 31 (a JVM of their own each, hundreds of valid actions per state) are left to
    tests/envs/test_scienceworld.py, and TextWorld's generated families but one to
    tests/envs/test_textworld.py.
    """
    return [
        i
        for i in ids
        if not i.startswith("llmgym/ScienceWorld-")
        and (not i.startswith("llmgym/TextWorld-") or i in TEXTWORLD_GENERIC_IDS)
    ]


#: TextArena games whose reset takes ~0.5 s: tests/envs/test_core.py checks them, the other
#: per-id tests (render, Gymnasium vector envs, properties) leave them out.
SLOW_RESET_IDS = ("llmgym/TextArena-RushHour-v0", "llmgym/TextArena-Sokoban-v0")

#: The ids, in registration order, less the slow suites' (:func:`generic_ids`) and slow resets.
LLMGYM_IDS: list[str] = [
    i
    for i in generic_ids([env_id for env_id in gym.registry if env_id.startswith("llmgym/")])
    if i not in SLOW_RESET_IDS
]


def require_extras(env_id: str) -> None:
    """Skip the test, naming the extra to install, if the env needs an optional package that is missing."""
    try:
        check_env_id(env_id)
    except MissingDependencyError as exc:
        pytest.skip(str(exc))
