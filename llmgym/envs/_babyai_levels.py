"""BabyAI levels of GLAM that minigrid does not ship (imported only when minigrid is installed)."""

from __future__ import annotations

from typing import Any

from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel
from minigrid.envs.babyai.core.verifier import AfterInstr, BeforeInstr, GoToInstr, ObjDesc, PickupInstr

__all__ = ["PickUpSeqGoToLevel"]


class PickUpSeqGoToLevel(RoomGridLevel):
    """GLAM's "pick up A then go to B" task in one room (``MixedTrainLocal``'s sequence missions).

    The mission reads "pick up the A, then go to the B" or "go to the B after you pick up the A";
    A and B are among ``num_dists + 2`` random objects, and differ unless A's description matches
    several objects.

    Args:
        room_size: Side of the room, walls included.
        num_dists: Distractor count (GLAM adds 2 to it, as here).
        **kwargs: Passed to :class:`~minigrid.envs.babyai.core.roomgrid_level.RoomGridLevel`.
    """

    def __init__(self, room_size: int = 8, num_dists: int = 8, **kwargs: Any) -> None:
        self.num_dists = num_dists
        super().__init__(num_rows=1, num_cols=1, room_size=room_size, **kwargs)

    def gen_mission(self) -> None:
        """Place the agent and objects and draw the two-part mission."""
        self.place_agent()
        objs = self.add_distractors(num_distractors=self.num_dists + 2, all_unique=False)
        self.check_objs_reachable()
        obj_a = self._rand_elem(objs)
        obj_b = self._rand_elem(objs)
        desc_a = ObjDesc(obj_a.type, obj_a.color)
        if (obj_a.type, obj_a.color) == (obj_b.type, obj_b.color) and len(
            desc_a.find_matching_objs(self)[0]
        ) < 2:
            while (obj_a.type, obj_a.color) == (obj_b.type, obj_b.color):
                obj_b = self._rand_elem(objs)
        pick_a = PickupInstr(desc_a)
        go_b = GoToInstr(ObjDesc(obj_b.type, obj_b.color))
        self.instrs = BeforeInstr(pick_a, go_b) if self._rand_bool() else AfterInstr(go_b, pick_a)
