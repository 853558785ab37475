"""Gymnasium's toy-text games described in words: Blackjack, FrozenLake, Taxi, CliffWalking.

Each env wraps the gymnasium game, whose dynamics, rewards and seeding it keeps unchanged: the
observation is a dict with ``"text"`` plus the raw state (``"state"``, or Blackjack's three
parts), actions are strings from ``info["valid_actions"]`` or their ``Discrete`` index, and
``info["success"]`` is present at every step (``True`` once the game is won), so that it is right
on the last step whether the game ends or the time limit of ``gymnasium.make`` cuts it.

Blackjack-Text runs LlamaGym's blackjack example unchanged: its observation also indexes like
gymnasium's tuple (``obs[0]`` player sum, ``obs[1]`` dealer card, ``obs[2]`` usable ace), its
actions are ``0``/``"stay"`` (alias ``"stick"``, ``"stand"``) and ``1``/``"hit"``, and it takes
gymnasium's ``natural`` and ``sab`` arguments.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.envs.toy_text.blackjack import BlackjackEnv
from gymnasium.envs.toy_text.cliffwalking import CliffWalkingEnv
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv
from gymnasium.envs.toy_text.taxi import TaxiEnv
from gymnasium.spaces import Dict, Discrete

from llmgym.envs.core import ANSI_METADATA, TextEnv, TextSpace

__all__ = [
    "BlackjackObservation",
    "BlackjackTextEnv",
    "FrozenLakeTextEnv",
    "TaxiTextEnv",
    "CliffWalkingTextEnv",
]


class _ToyTextEnv(TextEnv[dict[str, Any]], abc.ABC):
    """A gymnasium toy-text game with its state described in words."""

    metadata = ANSI_METADATA
    #: The rules and actions of the game, the agents' default system prompt.
    rules: ClassVar[str]

    def __init__(self, inner: gym.Env, render_mode: str | None = None) -> None:
        self._init_render_mode(render_mode)
        self._inner = inner
        self._state: Any = None
        self.action_space = Discrete(len(self.action_names))
        self.observation_space = self._make_observation_space()

    @property
    def instructions(self) -> str:
        """Rules and actions of the game."""
        return self.rules

    def _make_observation_space(self) -> gym.spaces.Space:
        n = self._inner.observation_space.n  # type: ignore[attr-defined]
        return Dict({"text": TextSpace(2048), "state": Discrete(n)})

    def _observe(self, state: Any) -> dict[str, Any]:
        return {"text": self._describe(state), "state": int(state)}

    @abc.abstractmethod
    def _describe(self, state: Any) -> str:
        """Describe the wrapped game's state in words."""

    @abc.abstractmethod
    def _won(self, state: Any, reward: float, terminated: bool) -> bool:
        """Whether the game is won after a step that led to ``state``."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start a game (seeds the wrapped gymnasium game). See :meth:`gymnasium.Env.reset`."""
        super().reset(seed=seed)
        state, _ = self._inner.reset(seed=seed, options=options)
        self._state = state
        return self._observe(state), {"valid_actions": self.valid_actions(), "success": False}

    def step(self, action: str | int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Play one action (string or index). See :meth:`gymnasium.Env.step`."""
        state, reward, terminated, truncated, _ = self._inner.step(self.parse_action(action))
        self._state = state
        info = {"valid_actions": self.valid_actions(), "success": self._won(state, float(reward), terminated)}
        return self._observe(state), float(reward), bool(terminated), bool(truncated), info

    def _render_text(self) -> str | None:
        """The description of the current state (``None`` before the first reset)."""
        return None if self._state is None else self._describe(self._state)


def _with_article(card: int) -> str:
    name = "ace" if card == 1 else str(card)
    return f"an {name}" if name in ("ace", "8", "11") else f"a {name}"


class BlackjackObservation(dict):
    """Blackjack-Text's observation: a dict that also indexes like gymnasium's tuple.

    Keys: ``"text"``, ``"player_sum"``, ``"dealer_card"`` (1 is an ace), ``"usable_ace"`` (0/1).
    ``obs[0]``, ``obs[1]``, ``obs[2]`` give the last three, as gymnasium's
    ``(player_sum, dealer_card, usable_ace)`` tuple does.
    """

    _TUPLE_KEYS: ClassVar[tuple[str, str, str]] = ("player_sum", "dealer_card", "usable_ace")

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int) and not isinstance(key, bool):
            return super().__getitem__(self._TUPLE_KEYS[key])
        return super().__getitem__(key)

    def as_tuple(self) -> tuple[int, int, int]:
        """Return gymnasium's ``(player_sum, dealer_card, usable_ace)``."""
        return (self["player_sum"], self["dealer_card"], self["usable_ace"])


class BlackjackTextEnv(_ToyTextEnv):
    """Blackjack against the dealer, in words.

    Args:
        natural: Gymnasium's ``natural`` (extra reward for a natural blackjack).
        sab: Gymnasium's ``sab`` (Sutton and Barto's rules).
        render_mode: ``"ansi"`` or ``None``.
    """

    description = "Blackjack in words: hit or stay against the dealer."
    action_names = ("stay", "hit")
    action_aliases = {"stick": "stay", "stand": "stay"}
    rules = (
        "You are playing blackjack. Get closer to 21 than the dealer without going over. "
        "Each turn, say 'hit' to take another card or 'stay' to stop and let the dealer play."
    )

    def __init__(self, natural: bool = False, sab: bool = False, render_mode: str | None = None) -> None:
        super().__init__(BlackjackEnv(natural=natural, sab=sab), render_mode)

    def _make_observation_space(self) -> gym.spaces.Space:
        return Dict(
            {
                "text": TextSpace(512),
                "player_sum": Discrete(32),
                "dealer_card": Discrete(11),
                "usable_ace": Discrete(2),
            }
        )

    def _observe(self, state: Any) -> BlackjackObservation:
        player_sum, dealer_card, usable_ace = (int(x) for x in state)
        return BlackjackObservation(
            text=self._describe(state), player_sum=player_sum, dealer_card=dealer_card, usable_ace=usable_ace
        )

    def _describe(self, state: Any) -> str:
        player_sum, dealer_card, usable_ace = state
        ace = "You have a usable ace." if usable_ace else "You have no usable ace."
        return f"Your cards sum to {player_sum}. The dealer shows {_with_article(int(dealer_card))}. {ace}"

    def _won(self, state: Any, reward: float, terminated: bool) -> bool:
        return terminated and reward > 0


def _map_rows(env: FrozenLakeEnv | TaxiEnv) -> list[str]:
    """The rows of a gymnasium grid game's map (its ``desc``), as text."""
    return [b"".join(line).decode() for line in np.asarray(env.desc).tolist()]


def _cell(row: int, col: int) -> str:
    return f"row {row + 1}, column {col + 1}"


class FrozenLakeTextEnv(_ToyTextEnv):
    """FrozenLake in words: the map, where you are, and the four moves.

    Args:
        map_name: Gymnasium's ``"4x4"`` or ``"8x8"``.
        is_slippery: Gymnasium's ``is_slippery`` (moves may slip sideways).
        render_mode: ``"ansi"`` or ``None``.
    """

    description = "FrozenLake in words: walk to the goal without falling into a hole."
    action_names = ("left", "down", "right", "up")
    rules = (
        "You walk on a frozen lake drawn as a map: S start, F frozen ice, H hole, G goal, X you. "
        "Reach the goal without stepping into a hole; the ice may be slippery. "
        "Moves: left, down, right, up."
    )

    def __init__(
        self, map_name: str = "4x4", is_slippery: bool = True, render_mode: str | None = None
    ) -> None:
        inner = FrozenLakeEnv(map_name=map_name, is_slippery=is_slippery)
        self._rows = _map_rows(inner)
        super().__init__(inner, render_mode)

    def _describe(self, state: Any) -> str:
        ncol = len(self._rows[0])
        row, col = divmod(int(state), ncol)
        grid = [list(line) for line in self._rows]
        grid[row][col] = "X"
        drawing = "\n".join("".join(line) for line in grid)
        return f"You are at {_cell(row, col)}.\n{drawing}"

    def _won(self, state: Any, reward: float, terminated: bool) -> bool:
        return reward > 0


class TaxiTextEnv(_ToyTextEnv):
    """Taxi in words: where the taxi, the passenger and the destination are.

    Args:
        render_mode: ``"ansi"`` or ``None``.
    """

    description = "Taxi in words: pick up the passenger and drop them at their destination."
    action_names = ("south", "north", "east", "west", "pick up", "drop off")
    action_aliases = {"pickup": "pick up", "dropoff": "drop off", "drop": "drop off"}
    _STOPS: ClassVar[tuple[str, ...]] = ("red", "green", "yellow", "blue")
    rules = (
        "You drive a taxi on a 5x5 grid with walls (| on the map) and four stops R, G, Y, B. "
        "Drive to the passenger, pick them up, drive to the destination and drop them off. "
        "Actions: south, north, east, west, pick up, drop off."
    )

    def __init__(self, render_mode: str | None = None) -> None:
        inner = TaxiEnv()
        self._map = "\n".join(_map_rows(inner))
        super().__init__(inner, render_mode)

    def _describe(self, state: Any) -> str:
        taxi_row, taxi_col, passenger, destination = self._inner.unwrapped.decode(int(state))  # type: ignore[attr-defined]
        locs = self._inner.unwrapped.locs  # type: ignore[attr-defined]
        if passenger == 4:
            where = "The passenger is in the taxi."
        else:
            where = f"The passenger waits at the {self._STOPS[passenger]} stop ({_cell(*locs[passenger])})."
        goal = f"The destination is the {self._STOPS[destination]} stop ({_cell(*locs[destination])})."
        return f"The taxi is at {_cell(taxi_row, taxi_col)}. {where} {goal}\n{self._map}"

    def _won(self, state: Any, reward: float, terminated: bool) -> bool:
        return terminated


class CliffWalkingTextEnv(_ToyTextEnv):
    """CliffWalking in words: a 4x12 grid with a cliff along the bottom row.

    Args:
        is_slippery: Gymnasium's ``is_slippery``.
        render_mode: ``"ansi"`` or ``None``.
    """

    description = "CliffWalking in words: reach the goal along the cliff without falling."
    action_names = ("up", "right", "down", "left")
    rules = (
        "You walk on a 4x12 grid from row 4, column 1 to the goal at row 4, column 12. "
        "The cliff covers row 4, columns 2 to 11: stepping on it costs -100 and sends you back "
        "to the start. Every step costs -1. Moves: up, right, down, left."
    )

    def __init__(self, is_slippery: bool = False, render_mode: str | None = None) -> None:
        super().__init__(CliffWalkingEnv(is_slippery=is_slippery), render_mode)

    def _describe(self, state: Any) -> str:
        row, col = divmod(int(state), 12)
        return (
            f"You are at {_cell(row, col)}. The goal is at row 4, column 12. "
            "The cliff covers row 4, columns 2 to 11."
        )

    def _won(self, state: Any, reward: float, terminated: bool) -> bool:
        return terminated
