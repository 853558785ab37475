"""Tiny text envs for tests and learning checks.

- :class:`EchoWordEnv` (``llmgym/EchoWord-v0``): one-step identity task, "Say the word: apple".
- :class:`CountdownEnv` (``llmgym/Countdown-v0``): pick the named action ``length`` times in a row;
  the only reward comes at the end, so credit assignment over several steps is needed.
- :class:`ConstantRewardEnv` (``llmgym/ConstantReward-v0``): reward 1 at every step, a constant
  observation, truncated (never terminated) after ``horizon`` steps. With bootstrapping at
  truncation its value is ``1 / (1 - gamma)`` in every state.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from gymnasium.spaces import Discrete

from llmgym.envs.core import ANSI_METADATA, TextEnv, TextSpace
from llmgym.errors import ConfigError

__all__ = ["EchoWordEnv", "CountdownEnv", "ConstantRewardEnv", "DEFAULT_WORDS"]

#: Words of :class:`EchoWordEnv` unless others are given.
DEFAULT_WORDS: tuple[str, ...] = ("apple", "banana", "cherry", "grape", "lemon", "mango", "peach", "plum")


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name}={value!r} is invalid; expected an int >= 1. Fix: pass e.g. {name}=3.")


class _SyntheticEnv(TextEnv[str], abc.ABC):
    """A tiny env whose observation is one text, also its ``"ansi"`` rendering."""

    metadata = ANSI_METADATA

    def __init__(self, max_length: int, render_mode: str | None) -> None:
        self._init_render_mode(render_mode)
        self.action_space = Discrete(len(self.action_names))
        self.observation_space = TextSpace(max_length)

    @abc.abstractmethod
    def _obs(self) -> str:
        """The current observation."""

    @abc.abstractmethod
    def _start(self) -> None:
        """Set up a new episode (after the env's generator was seeded)."""

    def _render_text(self) -> str:
        return self._obs()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a new episode. See :meth:`gymnasium.Env.reset`."""
        super().reset(seed=seed)
        self._start()
        return self._obs(), {"valid_actions": self.valid_actions()}


class EchoWordEnv(_SyntheticEnv):
    """Say the word shown: reward 1 for the right word, 0 otherwise; one-step episodes.

    Args:
        words: The vocabulary, which is also the list of valid actions (at least two words).
        render_mode: ``"ansi"`` (:meth:`render` returns the observation) or ``None``.
    """

    description = "Say the word you are shown (one step, reward 1 if right)."

    def __init__(self, words: Sequence[str] = DEFAULT_WORDS, *, render_mode: str | None = None) -> None:
        words = tuple(words)
        if (
            len(words) < 2
            or len(set(words)) != len(words)
            or not all(isinstance(w, str) and w for w in words)
        ):
            raise ConfigError(
                f"words={words!r} is invalid; expected at least two distinct non-empty strings. "
                "Fix: pass e.g. words=('apple', 'banana')."
            )
        self.action_names = words
        super().__init__(64 + max(len(w) for w in words), render_mode)
        self._target = 0

    def _obs(self) -> str:
        return f"Say the word: {self.action_names[self._target]}"

    def _start(self) -> None:
        """Draw a new word."""
        self._target = int(self.np_random.integers(len(self.action_names)))

    def step(self, action: str | int) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Say a word; the episode ends. See :meth:`gymnasium.Env.step`."""
        success = self.parse_action(action) == self._target
        info = {"valid_actions": self.valid_actions(), "success": success}
        return self._obs(), float(success), True, False, info


class CountdownEnv(_SyntheticEnv):
    """Pick the named action ``length`` times in a row; reward 1 only at the end.

    A wrong action ends the episode with reward 0.

    Args:
        length: How many right actions in a row are needed.
        render_mode: ``"ansi"`` (:meth:`render` returns the observation) or ``None``.
    """

    description = "Repeat the named action several times in a row (sparse reward at the end)."
    action_names = ("left", "right")

    def __init__(self, length: int = 3, *, render_mode: str | None = None) -> None:
        super().__init__(128, render_mode)
        _check_positive("length", length)
        self.length = length
        self._target = 0
        self._remaining = length

    def _obs(self) -> str:
        target = self.action_names[self._target]
        return f"Say '{target}' {self._remaining} more time{'s' if self._remaining != 1 else ''} in a row."

    def _start(self) -> None:
        """Draw the action to repeat."""
        self._target = int(self.np_random.integers(2))
        self._remaining = self.length

    def step(self, action: str | int) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Take one action. See :meth:`gymnasium.Env.step`."""
        right = self.parse_action(action) == self._target
        info: dict[str, Any] = {"valid_actions": self.valid_actions()}
        if not right:
            info["success"] = False
            return self._obs(), 0.0, True, False, info
        self._remaining -= 1
        if self._remaining == 0:
            info["success"] = True
            return self._obs(), 1.0, True, False, info
        return self._obs(), 0.0, False, False, info


class ConstantRewardEnv(_SyntheticEnv):
    """Reward 1 at every step, one constant observation, truncated after ``horizon`` steps.

    Args:
        horizon: Steps before truncation.
        render_mode: ``"ansi"`` (:meth:`render` returns the observation) or ``None``.
    """

    description = "Reward 1 at every step, truncated after a fixed horizon (value checks)."
    action_names = ("wait", "go")
    _OBSERVATION = "Every step earns one point."

    def __init__(self, horizon: int = 10, *, render_mode: str | None = None) -> None:
        super().__init__(64, render_mode)
        _check_positive("horizon", horizon)
        self.horizon = horizon
        self._t = 0

    def _obs(self) -> str:
        return self._OBSERVATION

    def _start(self) -> None:
        """Restart the step count."""
        self._t = 0

    def step(self, action: str | int) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Take any valid action and earn 1. See :meth:`gymnasium.Env.step`."""
        self.parse_action(action)
        self._t += 1
        return (
            self._OBSERVATION,
            1.0,
            False,
            self._t >= self.horizon,
            {"valid_actions": self.valid_actions()},
        )
