"""Conventions shared by every llmgym text environment.

A *text env* is a :class:`gymnasium.Env` whose observation is a ``str`` or a ``dict`` with a
``"text"`` entry (plus structured parts such as ``"mission"``), whose ``info["valid_actions"]``
lists the legal action strings when the action set is finite (each once: the vector env merges
exact duplicates, first occurrence kept, with a warning), and whose :meth:`~gymnasium.Env.step`
takes an action string (or, where the action space is :class:`~gymnasium.spaces.Discrete`, its
index). ``info["success"]`` is a ``bool`` on the last step of an episode wherever success is
defined. Where part of a step's reward is shaping (a training aid, not the task's reward), the
env reports it as ``info["shaping_reward"]``: training uses the whole reward, evaluations report the
return without it. An action outside the valid ones raises :class:`~llmgym.errors.InvalidActionError`.
Made with :func:`gymnasium.make`, an llmgym env is wrapped in :class:`EpisodeGuard`, which refuses
``step()`` before ``reset()`` and after the episode ended.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Discrete, Text

from llmgym.envs.shared_memory import register_text_shared_memory
from llmgym.errors import ConfigError, InputError, InvalidActionError

__all__ = [
    "ANSI_METADATA",
    "PROSE_CHARSET",
    "TextSpace",
    "TextEnv",
    "EpisodeGuard",
    "observation_text",
    "normalize_action_text",
    "check_text_env",
]

ObsT = TypeVar("ObsT")

#: Characters of English prose: letters, digits, punctuation, space, newline and tab.
PROSE_CHARSET: str = string.ascii_letters + string.digits + string.punctuation + " \n\t"

#: ``metadata`` of a text env whose only render mode is ``"ansi"`` (the observation text); the frame
#: rate, meaningless for text, is the one of Gymnasium's toy-text games.
ANSI_METADATA: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}


class TextSpace(Text):
    """A :class:`gymnasium.spaces.Text` space for prose.

    Gymnasium's default ``Text`` charset is alphanumeric only, so it rejects spaces and
    punctuation. This space samples from :data:`PROSE_CHARSET` and, with ``strict=False``, accepts
    any string of admissible length (for prompts taken from user datasets, which may hold any
    Unicode character). Gymnasium's ``AsyncVectorEnv(shared_memory=True)`` passes its strings
    through unchanged (see :mod:`llmgym.envs.shared_memory`).

    Args:
        max_length: Longest admissible string.
        min_length: Shortest admissible string (0 admits the empty string).
        charset: Characters used by :meth:`sample` and, when ``strict``, required by
            :meth:`contains`.
        strict: Whether :meth:`contains` rejects characters outside ``charset``.
        seed: Seed of the space's sampler.
    """

    def __init__(
        self,
        max_length: int = 4096,
        *,
        min_length: int = 0,
        charset: str = PROSE_CHARSET,
        strict: bool = True,
        seed: int | None = None,
    ) -> None:
        super().__init__(max_length, min_length=min_length, charset=charset, seed=seed)
        self.strict = strict

    def contains(self, x: Any) -> bool:
        """Return whether ``x`` is a string of admissible length (and characters, if strict)."""
        if not isinstance(x, str) or not self.min_length <= len(x) <= self.max_length:
            return False
        return not self.strict or all(c in self.character_set for c in x)

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length}, min_length={self.min_length}, strict={self.strict})"


register_text_shared_memory(TextSpace)


def normalize_action_text(action: str) -> str:
    """Normalise an action string for matching: lower case, single spaces, no outer blanks.

    Args:
        action: The action as written by an agent, e.g. ``"  Go   Forward "``.

    Returns:
        The normalised string, e.g. ``"go forward"``.
    """
    return " ".join(action.lower().split())


class TextEnv(gym.Env[ObsT, Any], Generic[ObsT]):
    """Base class of llmgym's text envs with a finite action set.

    Subclasses set :attr:`description` (one line, shown by ``llmgym envs``), :attr:`action_names`
    (the valid actions, index ``i`` being the :class:`~gymnasium.spaces.Discrete` action ``i``)
    and optionally :attr:`action_aliases` (extra spellings accepted by :meth:`parse_action`, never
    listed as valid actions). :meth:`parse_action` turns a string or an index into the index and
    never changes the env's state, so a rejected action leaves the env as it was.

    Rendering: an env that renders its text takes ``render_mode`` in its constructor and passes it to
    :meth:`_init_render_mode`, lists ``"ansi"`` in ``metadata["render_modes"]`` (as
    :data:`ANSI_METADATA` does) and implements :meth:`_render_text`; :meth:`render` then returns the
    text of the current observation. Without that, the env declares no render mode and renders
    nothing, as a plain :class:`gymnasium.Env`.
    """

    #: One-line description of the task.
    description: ClassVar[str] = ""
    #: The valid actions in index order.
    action_names: tuple[str, ...] = ()
    #: Extra accepted spellings, normalised, mapped to a name in :attr:`action_names`.
    action_aliases: ClassVar[Mapping[str, str]] = {}

    def _init_render_mode(self, render_mode: str | None) -> None:
        """Check ``render_mode`` against ``metadata["render_modes"]`` and set :attr:`render_mode`.

        Args:
            render_mode: ``None`` or one of the env's declared render modes.

        Raises:
            ConfigError: If ``render_mode`` is neither ``None`` nor a declared render mode.
        """
        modes = list(self.metadata.get("render_modes", ()))
        if render_mode is not None and render_mode not in modes:
            raise ConfigError(
                f"render_mode={render_mode!r} is not supported by {type(self).__name__}; expected None or one "
                f"of {modes}. Fix: pass render_mode='ansi' to get the observation text from render()."
            )
        self.render_mode = render_mode

    def render(self) -> Any:
        """Return the current observation's text when ``render_mode="ansi"``, else ``None``.

        With ``"ansi"`` it is ``None`` too while the env has no state to show (a game before its first
        reset).
        """
        return self._render_text() if self.render_mode == "ansi" else None

    def _render_text(self) -> str | None:
        """Return the text of the current observation, or ``None`` while there is no state to show.

        Envs that declare the ``"ansi"`` render mode override it.
        """
        raise NotImplementedError(
            f"{type(self).__name__} has render_mode='ansi' but does not implement _render_text(). Fix: override "
            "it to return the current observation text."
        )

    def valid_actions(self) -> list[str]:
        """Return the actions legal in the current state (all of :attr:`action_names` by default)."""
        return list(self.action_names)

    @property
    def instructions(self) -> str:
        """A default system prompt for agents: the task and the action list."""
        return f"{self.description} Valid actions: {', '.join(self.action_names)}."

    def parse_action(self, action: Any) -> int:
        """Turn an action string or index into the action index.

        Args:
            action: One of :meth:`valid_actions` (matched case- and blank-insensitively), an alias,
                or an ``int`` index into :attr:`action_names`.

        Returns:
            The action index.

        Raises:
            InvalidActionError: If the action is neither a valid action string nor a valid index.
        """
        if isinstance(action, str):
            key = normalize_action_text(action)
            key = self.action_aliases.get(key, key)
            index = _name_index(self.action_names).get(key)
            if index is not None:
                return index
        elif isinstance(action, (int, np.integer)) and not isinstance(action, bool):
            if 0 <= int(action) < len(self.action_names):
                return int(action)
        raise self.invalid_action(action)

    def invalid_action(self, action: Any) -> InvalidActionError:
        """Build the error raised for an action outside the valid ones.

        Args:
            action: The rejected action.

        Returns:
            An :class:`InvalidActionError` naming the action and listing the valid ones.
        """
        names = self.valid_actions()
        return InvalidActionError(
            f"action={action!r} is not a valid action of {type(self).__name__}; expected one of "
            f"{names} or an index in [0, {len(self.action_names) - 1}]. Fix: map the agent's output "
            "onto one of these strings."
        )


class EpisodeGuard(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Refuse :meth:`step` before the first :meth:`reset` and after an episode ended.

    :func:`gymnasium.make` puts it outermost on every ``llmgym/`` env, so an episode that the
    time limit truncated counts as ended too. Without it a finished env would keep stepping (or
    fail in its own words) past the end of its episode.

    Args:
        env: The env to guard.
    """

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self._needs_reset: str | None = "step() called before reset()"

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset the env; stepping is allowed again."""
        self._needs_reset = None
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Step the env, remembering when its episode ends.

        Raises:
            InputError: Before the first reset, or after a step returned ``terminated`` or
                ``truncated``, until the next reset.
        """
        if self._needs_reset is not None:
            spec = self.unwrapped.spec
            name = repr(spec.id) if spec is not None else type(self.unwrapped).__name__
            raise InputError(f"{self._needs_reset}: {name} must be reset before it steps. Fix: call env.reset().")
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            flag = "terminated" if terminated else "truncated"
            self._needs_reset = f"step() called after the episode ended ({flag}=True)"
        return obs, reward, terminated, truncated, info


_NAME_INDEX_CACHE: dict[tuple[str, ...], dict[str, int]] = {}


def _name_index(names: tuple[str, ...]) -> dict[str, int]:
    index = _NAME_INDEX_CACHE.get(names)
    if index is None:
        index = {name: i for i, name in enumerate(names)}
        _NAME_INDEX_CACHE[names] = index
    return index


def observation_text(obs: Any) -> str:
    """Return the text of a text-env observation.

    Args:
        obs: A ``str`` observation or a mapping with a ``"text"`` entry.

    Returns:
        The observation text.

    Raises:
        InputError: If ``obs`` is neither a string nor a mapping with a string ``"text"``.
    """
    if isinstance(obs, str):
        return obs
    if isinstance(obs, Mapping) and isinstance(obs.get("text"), str):
        return obs["text"]
    raise InputError(
        f"obs={obs!r:.200} is not a text observation; expected a str or a dict with a str 'text' "
        "entry. Fix: wrap the env so that it returns text, or pass a prompt builder that formats it."
    )


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


def check_text_env(env: gym.Env, *, seed: int = 0, num_steps: int = 40, check_gymnasium: bool = True) -> None:
    """Check that an env follows gymnasium's API and llmgym's text-env conventions.

    Runs :func:`gymnasium.utils.env_checker.check_env` (its render and close checks only where the
    env has a spec, from which they make new envs), then checks that observations are text, that
    seeded rollouts are deterministic, that every valid action is accepted, that
    ``info["success"]`` is a bool where present, that an invalid action string (and an out-of-range
    index, for a Discrete action space) raises :class:`~llmgym.errors.InvalidActionError` whose
    message lists the valid actions, and, where the env renders ``"ansi"``, that
    :meth:`~gymnasium.Env.render` returns the observation text.

    Args:
        env: The env to check (wrapped or not); it is reset and stepped.
        seed: Seed of the rollouts.
        num_steps: Steps per determinism rollout.
        check_gymnasium: Whether to run gymnasium's own checker first.

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
    for action in valid or ():
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
        missing = [a for a in valid if a not in str(exc)]
        if missing:
            raise _fail(
                env, f"the InvalidActionError message does not list the valid actions {missing}"
            ) from exc
    else:
        raise _fail(env, f"step({action!r}) with an invalid action did not raise InvalidActionError")
