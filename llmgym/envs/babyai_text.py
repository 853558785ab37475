"""BabyAI-Text: minigrid's BabyAI levels described in words, as in GLAM.

GLAM (Carta et al. 2023, "Grounding Large Language Models in Interactive Environments with Online
Reinforcement Learning") describes the agent's 7x7 egocentric view with sentences such as
``"You see a wall 2 steps forward"``, ``"You see a red ball 2 steps left and 1 step forward"``,
``"You see a locked purple door 3 steps forward"`` and ``"You carry a purple key"``, in this order:
what is carried, then the first wall straight ahead / to the left / to the right (only when no
object stands between the agent and the wall), then every visible object, column by column from
left to right and, within a column, from far to near. :func:`describe_view` reproduces that code
(``gen_graph`` in GLAM's ``gym_minigrid/minigrid.py``) with one deliberate difference: an open
door reads "You see an open ... door" where GLAM's code writes "a open".

Observation: a dict with ``"text"`` (``"Goal of the agent: <mission>"``, a newline, then the view), ``"mission"``
and ``"view"`` (the descriptions joined by ``", "``, as in GLAM's prompts); ``info`` holds
``"valid_actions"`` (the 6 GLAM actions), ``"descriptions"`` (the list), ``"level"`` and
``"success"`` (at every step, ``True`` on the step that accomplishes the mission, so that it stays
right when a ``TimeLimit`` wrapper truncates the episode and with shaped rewards).

Reward: minigrid's success-discounted ``1 - 0.9 * step_count / max_steps`` on success, 0 otherwise,
times ``reward_scale``, plus, when ``reward_shaping`` is set on a "go to" level, potential-based shaping
``w * (d(s) - shaping_gamma * d(s'))`` (Ng, Harada & Russell 1999, with the potential
``-w * d``), where ``w`` is ``reward_shaping`` and ``d`` counts the actions left on a shortest path
to facing the target (:mod:`llmgym.envs._babyai_shaping`). It rewards every step towards the goal;
it leaves the optimal policies unchanged when ``shaping_gamma`` equals the discount the agent
learns with (with the default 1, a step towards the goal earns ``w``, a step away ``-w`` and a step
in place 0, which under a smaller discount makes wandering cost more than standing still).
``info["success"]`` and evaluations are unaffected. GLAM trained with ``reward_scale=20``; the
default here is 1 so that returns stay in [0, 1] like every other llmgym env. The episode ends (``terminated``) when the
mission is done or failed (e.g. the wrong object picked up) and is ``truncated`` at the level's
``max_steps``.

Speed: minigrid's own observation (``gen_obs``) is skipped; the view is read from a NumPy mirror of
the grid (:mod:`llmgym.envs._babyai_view`), equal to ``gen_obs()["image"]`` at every step.

Seeding: ``reset(seed=s)`` on a single-level env gives the layout of ``BabyAI-<Level>-v0``
reset with seed ``s``; a mixed env seeds its level ``k`` with ``s + k`` and draws the level of each
episode from its own generator seeded with ``s``.
"""

from __future__ import annotations

import contextlib
import difflib
import io
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Dict, Discrete
from gymnasium.utils import seeding

from llmgym.envs._babyai_shaping import actions_to_goal, has_goto_mission
from llmgym.envs._babyai_view import EgocentricView
from llmgym.envs.core import TextEnv, TextSpace
from llmgym.errors import ConfigError, require

__all__ = ["BabyAITextEnv", "describe_view", "BABYAI_ACTIONS", "GLAM_TRAIN_LEVELS", "LEVELS"]

#: GLAM's 6 actions, in minigrid's action order (left, right, forward, pickup, drop, toggle).
BABYAI_ACTIONS: tuple[str, ...] = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")

#: Levels registered as ``llmgym/BabyAI-Text-<Level>-v0``.
LEVELS: tuple[str, ...] = (
    "GoToRedBall",
    "GoToRedBallNoDists",
    "GoToObj",
    "GoToLocal",
    "PickupLocal",
    "PutNextLocal",
    "OpenDoor",
    "Open",
    "UnlockLocal",
    "PickUpSeqGoTo",
    "GoTo",
    "Pickup",
)

#: The single-room tasks of GLAM's ``MixedTrainLocal``: go to, pick up, put next to, open a
#: (locked) door, and "pick up A then go to B", mapped onto minigrid's levels.
GLAM_TRAIN_LEVELS: tuple[str, ...] = (
    "GoToLocal",
    "PickupLocal",
    "PutNextLocal",
    "UnlockLocal",
    "PickUpSeqGoTo",
)

# llmgym's "PickupLocal" is minigrid's "PickupLoc"; "PickUpSeqGoTo" is GLAM's own level, built by
# llmgym.envs._babyai_levels.
_MINIGRID_NAMES = {"PickupLocal": "PickupLoc"}

_OBJECT_NAMES = ("unseen", "empty", "wall", "floor", "door", "key", "ball", "box", "goal", "lava", "agent")
_COLOR_NAMES = ("red", "green", "blue", "purple", "yellow", "grey")
_DOOR_STATES = ("open", "closed", "locked")
_WALL, _DOOR = 2, 4


def _steps(n: int, direction: str) -> str:
    return f"{n} step{'s' if n > 1 else ''} {direction}"


_DESC_CACHE: dict[tuple[int, int, int, int, int], str] = {}


def _describe_object(obj_type: int, color: int, state: int, dx: int, dy: int) -> str:
    key = (obj_type, color, state, dx, dy)
    text = _DESC_CACHE.get(key)
    if text is None:
        name = _OBJECT_NAMES[obj_type]
        if obj_type == _DOOR:
            door_state = _DOOR_STATES[state]
            article = "an" if door_state == "open" else "a"
            what = f"You see {article} {door_state} {_COLOR_NAMES[color]} {name}"
        else:
            what = f"You see a {_COLOR_NAMES[color]} {name}"
        side = "right" if dx > 0 else "left"
        if dx == 0:
            where = _steps(dy, "forward")
        elif dy == 0:
            where = _steps(abs(dx), side)
        else:
            where = f"{_steps(abs(dx), side)} and {_steps(dy, 'forward')}"
        text = _DESC_CACHE[key] = f"{what} {where}"
    return text


def _first_wall(line: np.ndarray) -> int:
    """Distance to the first wall along ``line`` (nearest first), 0 if an object hides it."""
    blocking = np.flatnonzero(line > 1)
    if blocking.size and line[blocking[0]] == _WALL:
        return int(blocking[0]) + 1
    return 0


def describe_view(image: np.ndarray, carrying: tuple[str, str] | None = None) -> list[str]:
    """Describe minigrid's egocentric view in GLAM's words.

    Args:
        image: minigrid's encoded view, shape ``(view, view, 3)`` indexed ``[x, y]`` with the agent
            at ``(view // 2, view - 1)`` facing decreasing ``y``; channels are object type, color
            and state (minigrid's ``OBJECT_TO_IDX`` / ``COLOR_TO_IDX``; door states 0 open, 1
            closed, 2 locked).
        carrying: ``(color, type)`` of the carried object, or ``None``.

    Returns:
        The sentences, carried object first, then walls (forward, left, right), then objects.
    """
    size = image.shape[0]
    vx, vy = size // 2, size - 1
    types = image[:, :, 0]
    out = [f"You carry a {carrying[0]} {carrying[1]}"] if carrying is not None else []
    forward = _first_wall(types[vx, vy - 1 :: -1])
    if forward:
        out.append(f"You see a wall {_steps(forward, 'forward')}")
    left = _first_wall(types[vx - 1 :: -1, vy])
    if left:
        out.append(f"You see a wall {_steps(left, 'left')}")
    right = _first_wall(types[vx + 1 :, vy])
    if right:
        out.append(f"You see a wall {_steps(right, 'right')}")
    flat = types.ravel()
    cells = np.flatnonzero(flat > _WALL)
    if cells.size:
        values = image.reshape(-1, 3)[cells].tolist()
        agent_cell = vx * size + vy
        for cell, (obj_type, color, state) in zip(cells.tolist(), values):
            if cell != agent_cell:
                i, j = divmod(cell, size)
                out.append(_describe_object(obj_type, color, state, i - vx, vy - j))
    return out


def _resolve_levels(level: str | Sequence[str]) -> tuple[str, ...]:
    levels = (level,) if isinstance(level, str) else tuple(level)
    if not levels:
        raise ConfigError(
            "level=() is empty; expected a level name or a non-empty list. Fix: level='GoToLocal'."
        )
    known = sorted(
        {k[len("BabyAI-") : -len("-v0")] for k in gym.registry if k.startswith("BabyAI-")} | set(LEVELS)
    )
    for name in levels:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=3)
            hint = f" Did you mean {close}?" if close else ""
            raise ConfigError(
                f"level={name!r} is not a BabyAI level; expected one of minigrid's BabyAI-<Level>-v0 "
                f"names such as {list(LEVELS)}.{hint}"
            )
    return levels


def _make_level(name: str, render_mode: str | None) -> Any:
    if name == "PickUpSeqGoTo":
        from llmgym.envs._babyai_levels import PickUpSeqGoToLevel

        return PickUpSeqGoToLevel(render_mode=render_mode)
    return gym.make(f"BabyAI-{_MINIGRID_NAMES.get(name, name)}-v0", render_mode=render_mode).unwrapped


class BabyAITextEnv(TextEnv[dict[str, str]]):
    """A minigrid BabyAI level (or a mix of levels) with text observations and GLAM's 6 actions.

    See the module docstring for the observation, reward and seeding conventions.

    Args:
        level: A BabyAI level name (``"GoToLocal"`` for ``BabyAI-GoToLocal-v0``) or several, one
            drawn uniformly per episode.
        reward_scale: Factor applied to minigrid's reward (GLAM used 20).
        reward_shaping: Weight of the potential-based shaping reward per action of progress towards
            the target ("go to" missions only; 0 disables it).
        shaping_gamma: Discount of the shaping potential, in (0, 1]; set it to the algorithm's
            ``gamma`` so that shaping leaves the optimal policies unchanged.
        render_mode: ``"ansi"`` (:meth:`render` returns the observation text), ``"rgb_array"``
            (minigrid's picture of the grid) or ``None``.

    Raises:
        MissingDependencyError: If minigrid is not installed (``pip install 'llmgym[babyai]'``).
        ConfigError: If a level or the render mode is unknown, a shaping parameter is out of range,
            or shaping is asked for on a mission that is not "go to".
    """

    description = "BabyAI level in words (GLAM): reach the mission's goal with 6 navigation actions."
    action_names = BABYAI_ACTIONS
    #: The frame rate is minigrid's.
    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 10}

    def __init__(
        self,
        level: str | Sequence[str] = "GoToLocal",
        *,
        reward_scale: float = 1.0,
        reward_shaping: float = 0.0,
        shaping_gamma: float = 1.0,
        render_mode: str | None = None,
    ) -> None:
        require("minigrid", "babyai", "BabyAI-Text")
        self._init_render_mode(render_mode)
        self.levels = _resolve_levels(level)
        self.reward_scale = float(reward_scale)
        if reward_shaping < 0:
            raise ConfigError(
                f"reward_shaping={reward_shaping!r} must be >= 0 (0 disables shaping); e.g. reward_shaping=0.1."
            )
        if not 0 < shaping_gamma <= 1:
            raise ConfigError(
                f"shaping_gamma={shaping_gamma!r} must be in (0, 1]; set it to the algorithm's gamma, e.g. shaping_gamma=0.5."
            )
        self.reward_shaping = float(reward_shaping)
        self.shaping_gamma = float(shaping_gamma)
        self._distance: int | None = None
        minigrid_render_mode = render_mode if render_mode == "rgb_array" else None
        self._inner = [_make_level(name, minigrid_render_mode) for name in self.levels]
        self._views = [EgocentricView(inner) for inner in self._inner]
        self._current = 0
        self._started = False
        self.action_space = Discrete(len(BABYAI_ACTIONS))
        self.observation_space: gym.spaces.Space[Any] = Dict(
            {"text": TextSpace(8192), "mission": TextSpace(1024), "view": TextSpace(8192)}
        )

    @property
    def instructions(self) -> str:
        """GLAM-style instructions listing the actions and what they do."""
        return (
            "You are an agent in a grid world. Reach the goal of the agent by choosing one action per step: "
            "turn left, turn right, go forward (one step), pick up (the object in front of you), "
            "drop (what you carry, in front of you), toggle (open or close the door, or open the box, "
            "in front of you)."
        )

    @property
    def minigrid_env(self) -> Any:
        """The underlying minigrid env of the current episode.

        Read its state freely; step it only through this env, which keeps its view mirror in sync.
        """
        return self._inner[self._current]

    def _observe(self) -> tuple[dict[str, str], dict[str, Any]]:
        inner = self.minigrid_env
        carried = inner.carrying
        image = self._views[self._current].image()
        descriptions = describe_view(image, (carried.color, carried.type) if carried is not None else None)
        view = ", ".join(descriptions)
        mission = inner.mission
        obs = {"text": f"Goal of the agent: {mission}\n{view}", "mission": mission, "view": view}
        info = {
            "valid_actions": list(BABYAI_ACTIONS),
            "descriptions": descriptions,
            "level": self.levels[self._current],
        }
        return obs, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, Any]]:
        """Start an episode (drawing its level for a mixed env). See :meth:`gymnasium.Env.reset`."""
        super().reset(seed=seed)
        if seed is not None:
            for k, inner in enumerate(self._inner):
                inner.np_random, _ = seeding.np_random(seed + k)
        if len(self._inner) > 1:
            self._current = int(self.np_random.integers(len(self._inner)))
        # minigrid prints a line each time its level generator rejects a layout.
        with contextlib.redirect_stdout(io.StringIO()):
            self._views[self._current].reset()
        self._started = True
        if self.reward_shaping:
            if not has_goto_mission(self.minigrid_env):
                raise ConfigError(
                    f"reward_shaping={self.reward_shaping} needs a 'go to' mission, but level "
                    f"{self.levels[self._current]!r} asks {self.minigrid_env.mission!r}; use a GoTo level "
                    "(GoToRedBall, GoToLocal, ...) or reward_shaping=0."
                )
            self._distance = actions_to_goal(self.minigrid_env)
        obs, info = self._observe()
        info["success"] = False
        return obs, info

    def step(self, action: str | int) -> tuple[dict[str, str], float, bool, bool, dict[str, Any]]:
        """Take one of the 6 actions (string or index). See :meth:`gymnasium.Env.step`."""
        reward, terminated, truncated = self._views[self._current].step(self.parse_action(action))
        obs, info = self._observe()
        info["success"] = reward > 0
        total = reward * self.reward_scale
        if self.reward_shaping:
            shaping = self._shaping_reward(0 if reward > 0 else actions_to_goal(self.minigrid_env))
            info["shaping_reward"] = shaping
            total += shaping
        return obs, total, terminated, truncated, info

    def _shaping_reward(self, distance: int | None) -> float:
        """``reward_shaping * (d(s) - shaping_gamma * d(s'))`` for this step (0 when unreachable)."""
        previous, self._distance = self._distance, distance
        if previous is None or distance is None:
            return 0.0
        return self.reward_shaping * (previous - self.shaping_gamma * distance)

    def render(self) -> Any:
        """Render the current episode (``None`` before the first reset or with ``render_mode=None``).

        Returns:
            With ``render_mode="ansi"`` the observation text, with ``"rgb_array"`` minigrid's
            ``uint8`` picture of the grid (height, width, 3).
        """
        if self.render_mode == "rgb_array":
            return self.minigrid_env.render() if self._started else None
        return super().render()

    def _render_text(self) -> str | None:
        return self._observe()[0]["text"] if self._started else None

    def close(self) -> None:
        """Close the minigrid envs."""
        for inner in self._inner:
            inner.close()
