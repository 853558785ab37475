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
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeGuard, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Text

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
    "is_int",
    "int_action",
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


def is_int(value: Any) -> TypeGuard[int]:
    """Whether ``value`` is a Python or NumPy integer (not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def int_action(action: Any, count: int) -> int | None:
    """The index an integer action names among ``count`` actions.

    Args:
        action: The action, e.g. ``2`` or ``np.int64(2)``.
        count: How many actions there are.

    Returns:
        ``int(action)`` if ``action`` is an integer (not a bool) in ``[0, count)``, else ``None``.
    """
    return int(action) if is_int(action) and 0 <= int(action) < count else None


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
            index = _name_index(self.action_names).get(self.action_aliases.get(key, key))
        else:
            index = int_action(action, len(self.action_names))
        if index is None:
            raise self.invalid_action(action)
        return index

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
            raise InputError(
                f"{self._needs_reset}: {name} must be reset before it steps. Fix: call env.reset()."
            )
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
