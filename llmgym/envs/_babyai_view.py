"""minigrid's egocentric view by index arithmetic, without minigrid's per-step observation.

minigrid builds the observation of every ``step`` and ``reset`` through ``gen_obs``: it slices the
grid into a new ``Grid`` of fresh objects, rotates it cell by cell, walks it for visibility and
encodes it, which is most of the time of a step. :class:`EgocentricView` keeps a NumPy mirror of the
grid instead (each cell's ``encode()`` and ``see_behind()``, out-of-grid cells as walls, exactly as
``Grid.slice`` pads), updated on the only cell an action can change (the one in front of the
agent, on pick up / drop / toggle), and reads the view through precomputed per-direction indices.
Visibility (``see_through_walls=False``) runs minigrid's ``Grid.process_vis`` on one bit mask per
view row. :meth:`EgocentricView.image` equals ``env.gen_obs()["image"]`` cell for cell.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["EgocentricView"]

_EMPTY = (1, 0, 0)  # minigrid's encoding of an empty cell
_PICKUP, _DROP, _TOGGLE = 3, 4, 5  # the actions that change the cell in front of the agent


def _no_obs() -> None:
    """Stands in for ``gen_obs`` while minigrid steps or resets (its observation is discarded)."""


def _view_offsets(size: int) -> np.ndarray:
    """Per agent direction, the grid offsets (relative to the agent) of each view cell.

    Args:
        size: minigrid's ``agent_view_size``.

    Returns:
        Array of shape ``(4, 2, size, size)``: ``[direction, (dx, dy), view_x, view_y]``, the cell
        that ``gen_obs_grid`` puts at ``(view_x, view_y)`` (``Grid.slice`` at ``get_view_exts``,
        then ``rotate_left`` ``direction + 1`` times).
    """
    half = size // 2
    tops = ((0, -half), (-half, 0), (1 - size, -half), (-half, 1 - size))  # get_view_exts
    offsets = np.empty((4, 2, size, size), dtype=np.int64)
    sx, sy = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    for direction, (tx, ty) in enumerate(tops):
        # rotate_left sends (i, j) to (j, size - 1 - i): np.rot90 with k=-1 on [x, y] arrays.
        offsets[direction, 0] = np.rot90(sx + tx, -(direction + 1))
        offsets[direction, 1] = np.rot90(sy + ty, -(direction + 1))
    return offsets


class EgocentricView:
    """The agent's encoded view of a minigrid env, kept without minigrid's observation code.

    Step and reset the env through :meth:`step` and :meth:`reset` (which skip minigrid's
    ``gen_obs`` and keep the mirror in sync); stepping the env directly leaves the mirror stale
    until the next :meth:`reset`.

    Args:
        env: An unwrapped ``minigrid.minigrid_env.MiniGridEnv``.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.size = int(env.agent_view_size)
        self._pad = self.size
        self._padded_height = env.height + 2 * self.size
        offsets = _view_offsets(self.size)
        # Flat indices into the padded mirror, relative to the agent's own flat index.
        self._flat_offsets = offsets[:, 0] * self._padded_height + offsets[:, 1]
        self._row_bits = 1 << np.arange(self.size)
        self._codes = np.zeros((0, 3), dtype=np.uint8)
        self._see = np.zeros(0, dtype=bool)

    def _flat_index(self, x: int, y: int) -> int:
        return (int(x) + self._pad) * self._padded_height + int(y) + self._pad

    def _encode_cell(self, x: int, y: int) -> None:
        obj = self.env.grid.get(x, y)
        index = self._flat_index(x, y)
        self._codes[index] = _EMPTY if obj is None else obj.encode()
        self._see[index] = obj is None or obj.see_behind()

    def sync(self) -> None:
        """Re-encode the whole grid (after the env generated a new one)."""
        env, pad = self.env, self._pad
        width, height = env.width, env.height
        codes = np.empty((width + 2 * pad, height + 2 * pad, 3), dtype=np.uint8)
        codes[:] = (2, 5, 0)  # Grid.slice pads with grey walls
        see = np.zeros(codes.shape[:2], dtype=bool)
        cells = env.grid.grid  # row-major: cells[y * width + x]
        encoded = [_EMPTY if obj is None else obj.encode() for obj in cells]
        codes[pad : pad + width, pad : pad + height] = (
            np.array(encoded, dtype=np.uint8).reshape(height, width, 3).transpose(1, 0, 2)
        )
        see[pad : pad + width, pad : pad + height] = (
            np.array([obj is None or obj.see_behind() for obj in cells]).reshape(height, width).T
        )
        self._codes = codes.reshape(-1, 3)
        self._see = see.ravel()

    def reset(self, **kwargs: Any) -> None:
        """Reset the env without building minigrid's observation, then re-encode the grid.

        Args:
            **kwargs: Passed to the env's ``reset`` (``seed``, ``options``).
        """
        self.env.gen_obs = _no_obs
        try:
            self.env.reset(**kwargs)
        finally:
            del self.env.gen_obs
        self.sync()

    def step(self, action: int) -> tuple[float, bool, bool]:
        """Step the env without building minigrid's observation.

        Args:
            action: minigrid action index.

        Returns:
            ``(reward, terminated, truncated)`` as minigrid's ``step`` returns them.
        """
        env = self.env
        front = env.front_pos if action in (_PICKUP, _DROP, _TOGGLE) else None
        env.gen_obs = _no_obs
        try:
            _, reward, terminated, truncated, _ = env.step(action)
        finally:
            del env.gen_obs
        if front is not None:
            self._encode_cell(*front)
        return float(reward), bool(terminated), bool(truncated)

    def image(self) -> np.ndarray:
        """The encoded view, equal to minigrid's ``gen_obs()["image"]``.

        Returns:
            ``uint8`` array of shape ``(size, size, 3)`` indexed ``[x, y]``, the agent at
            ``(size // 2, size - 1)`` facing decreasing ``y``; cells it cannot see are zeros.
        """
        env, size = self.env, self.size
        indices = self._flat_offsets[env.agent_dir] + self._flat_index(*env.agent_pos)
        image = self._codes[indices]
        if not env.see_through_walls:
            image *= self._visible(self._see[indices])[:, :, None]
        carried = env.carrying
        image[size // 2, size - 1] = _EMPTY if carried is None else carried.encode()
        return image

    def _visible(self, see: np.ndarray) -> np.ndarray:
        """Visibility as ``Grid.process_vis`` computes it from the agent's cell, one bit mask per row.

        Args:
            see: ``see_behind()`` of each view cell, shape ``(size, size)`` indexed ``[x, y]``.

        Returns:
            Boolean visibility mask of shape ``(size, size)``.
        """
        size = self.size
        full = (1 << size) - 1
        transparent_rows = (self._row_bits @ see).tolist()  # bit x of row y: see[x, y]
        masks = [0] * size
        seeds = 1 << (size // 2)
        for y in range(size - 1, -1, -1):
            transparent = transparent_rows[y]
            # Left-to-right pass: a visible see-through cell reveals the next one.
            mask = seeds
            while (grown := mask | (((mask & transparent) << 1) & full)) != mask:
                mask = grown
            rightward = mask & transparent & (full >> 1)
            # Right-to-left pass, from everything the first pass reached.
            while (grown := mask | ((mask & transparent) >> 1)) != mask:
                mask = grown
            leftward = mask & transparent & (full - 1)
            masks[y] = mask
            # Each pass also reveals the cells above its see-through cells (and diagonally).
            seeds = rightward | (rightward << 1) | leftward | (leftward >> 1)
        return (np.array(masks)[None, :] >> np.arange(size)[:, None]) & 1 == 1
