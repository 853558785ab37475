"""The text-env checker: :func:`check_text_env` runs an env through llmgym's text-env conventions.

The conventions themselves are written down in :mod:`llmgym.envs.core`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Discrete, Text

from llmgym.envs.core import observation_text
from llmgym.errors import InvalidActionError

__all__ = ["LISTED_IN_FULL", "check_text_env"]

#: Valid actions an :class:`~llmgym.errors.InvalidActionError` must list in full; past it (ScienceWorld
#: lists thousands per state) a readable message names their number and points to ``info["valid_actions"]``.
LISTED_IN_FULL = 50


def _fail(env: gym.Env, message: str) -> AssertionError:
    return AssertionError(f"check_text_env({env.unwrapped!r}): {message}")


def _pick_action(env: gym.Env, info: dict[str, Any], rng: np.random.Generator) -> Any:
    """Draw one of the valid actions, or a sample of the action space where there is no list."""
    valid = info.get("valid_actions")
    if valid:
        return valid[int(rng.integers(len(valid)))]
    if isinstance(env.action_space, Text):  # short strings: completions, tokens
        return env.action_space.sample(mask=(int(rng.integers(1, 16)), None))
    return env.action_space.sample()


def _rollout(env: gym.Env, seed: int, num_steps: int) -> list[tuple[str, float, bool, bool]]:
    """Run a seeded rollout choosing among the valid actions with a seeded RNG."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    env.action_space.seed(seed)
    trace = [(observation_text(obs), 0.0, False, False)]
    for _ in range(num_steps):
        obs, reward, terminated, truncated, info = env.step(_pick_action(env, info, rng))
        trace.append((observation_text(obs), float(reward), bool(terminated), bool(truncated)))
        if terminated or truncated:
            obs, info = env.reset()
    return trace


def _check_obs(env: gym.Env, obs: Any, info: Any, where: str) -> None:
    observation_text(obs)
    if obs not in env.observation_space:
        raise _fail(env, f"the observation from {where} is not in observation_space: {obs!r:.300}")
    if not isinstance(info, dict):
        raise _fail(env, f"the info from {where} is not a dict but {type(info).__name__}")
    valid = info.get("valid_actions")
    if valid is not None and not (
        isinstance(valid, list) and valid and all(isinstance(a, str) for a in valid)
    ):
        raise _fail(env, f"info['valid_actions'] from {where} is not a non-empty list of str: {valid!r}")


def check_text_env(
    env: gym.Env,
    *,
    seed: int = 0,
    num_steps: int = 40,
    check_gymnasium: bool = True,
    max_valid_actions: int = 50,
) -> None:
    """Check that an env follows gymnasium's API and llmgym's text-env conventions.

    Runs :func:`gymnasium.utils.env_checker.check_env` (its render and close checks only where the
    env has a spec, from which they make new envs), then checks that observations are text, that
    seeded rollouts are deterministic, that the valid actions after ``reset(seed=seed)`` are accepted
    (every one, or a seeded sample of ``max_valid_actions`` where there are more), that
    ``info["success"]`` is a bool where present, that an invalid action string (and an out-of-range
    index, for a Discrete action space) raises :class:`~llmgym.errors.InvalidActionError` whose
    message lists the valid actions (or, past :data:`LISTED_IN_FULL` of them, says how many there are
    and points to ``info["valid_actions"]``), and, where the env renders ``"ansi"``, that
    :meth:`~gymnasium.Env.render` returns the observation text.

    Args:
        env: The env to check (wrapped or not); it is reset and stepped.
        seed: Seed of the rollouts.
        num_steps: Steps per determinism rollout.
        check_gymnasium: Whether to run gymnasium's own checker first.
        max_valid_actions: Valid actions stepped (each after a fresh reset) at most.

    Raises:
        AssertionError: Naming the convention the env breaks (as gymnasium's checker does).
    """
    if check_gymnasium:
        from gymnasium.utils.env_checker import check_env

        no_spec = env.unwrapped.spec is None
        check_env(env.unwrapped, skip_render_check=no_spec, skip_close_check=no_spec)

    obs, info = env.reset(seed=seed)
    _check_obs(env, obs, info, "reset()")
    first, second = _rollout(env, seed, num_steps), _rollout(env, seed, num_steps)
    if first != second:
        raise _fail(env, f"two rollouts with seed={seed} differ: the env is not deterministic under a seed")

    valid = info.get("valid_actions")
    stepped = list(valid or ())
    if len(stepped) > max_valid_actions:
        picked = np.random.default_rng(seed).choice(len(stepped), size=max_valid_actions, replace=False)
        stepped = [stepped[int(i)] for i in sorted(picked)]
    for action in stepped:
        env.reset(seed=seed)
        obs, reward, terminated, truncated, step_info = env.step(action)
        _check_obs(env, obs, step_info, f"step({action!r})")
        if not isinstance(terminated, bool) or not isinstance(truncated, bool):
            raise _fail(env, f"step({action!r}) returned non-bool terminated/truncated")
        if "success" in step_info and not isinstance(step_info["success"], bool):
            raise _fail(
                env, f"info['success'] after step({action!r}) is not a bool: {step_info['success']!r}"
            )
    if valid:
        _check_rejects(env, seed, "definitely not an action \U0001f984", valid)
        if isinstance(env.action_space, Discrete):
            _check_rejects(env, seed, int(env.action_space.start + env.action_space.n), valid)
    _check_ansi_render(env, seed, num_steps)
    env.close()


def _check_ansi_render(env: gym.Env, seed: int, num_steps: int) -> None:
    """Check that ``render()`` returns the observation text, where the env renders ``"ansi"``.

    Checks ``env`` itself if it was made with ``render_mode="ansi"``, else an env made from its spec
    with that mode if it has a spec and declares the mode; otherwise there is nothing to check.
    """
    spec = env.unwrapped.spec
    if env.render_mode == "ansi":
        ansi_env = env
    elif spec is not None and "ansi" in env.metadata.get("render_modes", ()):
        ansi_env = gym.make(spec, render_mode="ansi")
    else:
        return
    rng = np.random.default_rng(seed)
    obs, info = ansi_env.reset(seed=seed)
    _check_rendered(env, ansi_env.render(), obs, "reset()")
    for _ in range(num_steps):
        obs, _, terminated, truncated, info = ansi_env.step(_pick_action(ansi_env, info, rng))
        _check_rendered(env, ansi_env.render(), obs, "step()")
        if terminated or truncated:
            obs, info = ansi_env.reset()
            _check_rendered(env, ansi_env.render(), obs, "reset()")
    if ansi_env is not env:
        ansi_env.close()


def _check_rendered(env: gym.Env, rendered: Any, obs: Any, where: str) -> None:
    text = observation_text(obs)
    if rendered != text:
        raise _fail(
            env,
            f"render() with render_mode='ansi' returned {rendered!r:.100} after {where}, not the observation "
            f"text {text!r:.100}",
        )


def _check_rejects(env: gym.Env, seed: int, action: Any, valid: Sequence[str]) -> None:
    env.reset(seed=seed)
    try:
        env.step(action)
    except InvalidActionError as exc:
        message = str(exc)
        missing = [a for a in valid if a not in message]
        if not missing:
            return
        if len(valid) > LISTED_IN_FULL:
            if str(len(valid)) not in message or "valid_actions" not in message:
                raise _fail(
                    env,
                    f"the InvalidActionError message neither lists the {len(valid)} valid actions nor says "
                    "how many there are and where to find them (info['valid_actions'])",
                ) from exc
            return
        raise _fail(env, f"the InvalidActionError message does not list the valid actions {missing}") from exc
    else:
        raise _fail(env, f"step({action!r}) with an invalid action did not raise InvalidActionError")
