"""Distance to the goal of a BabyAI "go to" mission, in actions, for potential-based reward shaping.

The potential of a state is minus the number of actions (turn left, turn right, go forward) on a
shortest path to a state facing one of the mission's target objects. Shaping with the difference of
potentials between consecutive states (Ng, Harada & Russell 1999) leaves the optimal policies
unchanged while rewarding every step that brings the agent closer.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Optional

__all__ = ["actions_to_goal", "has_goto_mission"]

# minigrid's DIR_TO_VEC: 0 east, 1 south, 2 west, 3 north.
_DIRECTIONS = ((1, 0), (0, 1), (-1, 0), (0, -1))


def has_goto_mission(env: Any) -> bool:
    """Whether the minigrid BabyAI env's mission is a single "go to" instruction."""
    from minigrid.envs.babyai.core.verifier import GoToInstr

    return isinstance(getattr(env, "instrs", None), GoToInstr)


def actions_to_goal(env: Any) -> Optional[int]:
    """Fewest actions from the agent's state to facing a target object of the "go to" mission.

    Args:
        env: An unwrapped minigrid BabyAI env after ``reset``, whose mission is a ``GoToInstr``.

    Returns:
        The number of turn/forward actions (0 when the agent already faces a target), or ``None``
        when no target can be reached (e.g. behind a locked door).
    """
    grid = env.grid
    targets = {tuple(int(c) for c in pos) for pos in env.instrs.desc.obj_poss}
    start = (int(env.agent_pos[0]), int(env.agent_pos[1]), int(env.agent_dir))
    seen = {start}
    queue = deque([(start, 0)])
    while queue:
        (x, y, d), cost = queue.popleft()
        dx, dy = _DIRECTIONS[d]
        front = (x + dx, y + dy)
        if front in targets:
            return cost
        moves = [(x, y, (d - 1) % 4), (x, y, (d + 1) % 4)]
        if 0 <= front[0] < grid.width and 0 <= front[1] < grid.height:
            cell = grid.get(*front)
            if cell is None or cell.can_overlap():
                moves.append((front[0], front[1], d))
        for state in moves:
            if state not in seen:
                seen.add(state)
                queue.append((state, cost + 1))
    return None
