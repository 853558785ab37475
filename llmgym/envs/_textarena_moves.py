"""The legal moves of the TextArena games whose moves are cheap to list, read from the game's state.

Each lister takes the unwrapped textarena game (after its ``reset``) and returns the moves legal
for the player to move, spelled as the game parses them (``"[4]"``, ``"[A C]"``); the adapter
exposes them as ``info["valid_actions"]`` and its opponent draws from them. Keyed by the game's
class name, so that this module needs no textarena import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MOVE_LISTERS"]


def _tic_tac_toe(game: Any) -> list[str]:
    board = game.state.game_state["board"]
    return [f"[{r * 3 + c}]" for r in range(3) for c in range(3) if board[r][c] == ""]


def _connect_four(game: Any) -> list[str]:
    top = game.state.game_state["board"][0]
    return [f"[{c}]" for c in range(game.num_cols) if top[c] == "."]


def _tower_of_hanoi(game: Any) -> list[str]:
    towers = game.state.game_state["towers"]
    return [
        f"[{source} {target}]"
        for source in towers
        for target in towers
        if source != target
        and towers[source]
        and (not towers[target] or towers[target][-1] > towers[source][-1])
    ]


def _guess_the_number(game: Any) -> list[str]:
    return [f"[{n}]" for n in range(game.min_number, game.max_number + 1) if n not in game.guessed_numbers]


def _nim(game: Any) -> list[str]:
    piles = game.state.game_state["piles"]
    return [f"[{pile} {quantity}]" for pile, size in enumerate(piles) for quantity in range(1, size + 1)]


#: Lister of legal moves by textarena game class name.
MOVE_LISTERS: dict[str, Callable[[Any], list[str]]] = {
    "TicTacToeEnv": _tic_tac_toe,
    "ConnectFourEnv": _connect_four,
    "TowerOfHanoiEnv": _tower_of_hanoi,
    "GuessTheNumberEnv": _guess_the_number,
    "NimEnv": _nim,
}
