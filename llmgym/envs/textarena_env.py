"""One TextArena game (``pip install 'llmgym[textarena]'``) as a single-agent llmgym text env.

The env wraps textarena's unwrapped game (its ``-raw`` id) and plays for one player, the *agent*:

- **Observation**: text for the agent, rebuilt at each of its turns from the messages textarena
  sends it: the game's rules prompt, the last ``history`` messages (game messages, the agent's own
  moves as ``You: ...``, the opponent's as ``Opponent: ...``) and the latest board, cleaned (ANSI
  escapes removed, blank runs collapsed). It may hold non-ASCII characters (board glyphs).
- **Actions**: free text, as the game's prompt asks, moves mostly in square brackets
  (``"[4]"``, ``"[A C]"``, ``"[e2e4]"``). Where the moves are cheap to list (TicTacToe,
  ConnectFour, TowerOfHanoi, GuessTheNumber, Nim), ``info["valid_actions"]`` lists the legal
  ones and any other action raises :class:`~llmgym.errors.InvalidActionError`, leaving the game
  unchanged, as for every llmgym env with a move list. Elsewhere the move goes to the game
  unchanged and textarena's own rule applies: an invalid move is reported in the next observation
  and the player may retry once; a second invalid move in a row ends the game as a loss
  (``info["invalid_move"]`` is ``True`` after a move the game rejected).
- **Reward**: 0 until the game ends, then the game's own reward for the agent: +1 / -1 / 0 for a
  win / loss / draw in two-player games; in puzzles 1 when solved and otherwise whatever the game
  gives (often the share completed, in [0, 1], or -1 for a forfeit by invalid moves).
- **Success**: ``info["success"]`` is ``False`` until the end, then ``True`` if the agent won (its
  reward is above the opponent's) or solved the puzzle (reward 1).
- **Opponent** (two-player games): a seeded random policy inside the env. Where the moves are
  listed it draws one of them; elsewhere it tries, in a seeded random order, the bracketed tokens
  of the messages it received (the game's prompt and boards list its moves) on a copy of the game
  and plays the first one the game accepts, or a random one after ``_OPPONENT_TRIES`` rejections.
- **Seeding**: textarena's games draw from Python's global ``random`` (the two that use NumPy's
  global generator are excluded for other reasons). The env keeps its own state of that generator
  and swaps it in around every call into the game, so the caller's ``random`` is left as it was,
  and ``reset(seed=s)`` fixes the episode: each reset makes a new game object (some games carry
  state over from one reset to the next) and seeds it with ``s``, as ``textarena``'s
  ``reset(seed=s)`` does. A game whose reset is slow (Sokoban and RushHour generate and solve
  puzzles, about 0.5 s) is cached as reset per seed in the process, so a reset with a seed seen
  before costs a copy.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import importlib
import io
import random
import re
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from llmgym.envs._textarena_moves import MOVE_LISTERS
from llmgym.envs.core import ANSI_METADATA, TextEnv, TextSpace, int_action, normalize_action_text
from llmgym.envs.textarena_games import REUSED_ACROSS_RESETS, check_game, players
from llmgym.errors import ConfigError, InputError, InvalidActionError, require

__all__ = ["TextArenaEnv", "MoveSpace"]

#: Longest observation and action, in characters.
MAX_OBSERVATION_CHARS = 32768
MAX_ACTION_CHARS = 4096
#: Resets at least this slow (seconds: puzzle generation) are cached, up to this many games.
SLOW_RESET_S = 0.05
RESET_CACHE_SIZE = 256
_RESET_CACHE: collections.OrderedDict[tuple[str, int, int], tuple[Any, Any]] = collections.OrderedDict()
#: Opponent moves in a row after which the episode is truncated (a game that never ends on invalid moves).
_OPPONENT_MOVES = 100
#: Bracketed tokens the opponent tries on a copy of the game before it plays one blindly.
_OPPONENT_TRIES = 10

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BLANKS = re.compile(r"\n{3,}")
_TOKEN = re.compile(r"\[[^\[\]\n]{1,40}\]")


def clean_text(text: str) -> str:
    """Remove ANSI escapes and trailing blanks, and collapse runs of blank lines.

    Args:
        text: A message from a textarena game.

    Returns:
        The cleaned text.
    """
    lines = [line.rstrip() for line in _ANSI.sub("", text).replace("\r", "").split("\n")]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def _game_factory(ta: Any, game: str) -> Callable[[], Any]:
    """A factory of textarena's unwrapped game ``game`` (its ``-raw`` id where there is one)."""
    registry = ta.envs.registration.ENV_REGISTRY
    spec = registry.get(f"{game}-raw", registry[game])
    entry = spec.entry_point
    if isinstance(entry, str):
        module, name = entry.split(":")
        entry = getattr(importlib.import_module(module), name)
    return functools.partial(entry, **spec.kwargs)


class MoveSpace(TextSpace):
    """The action space of a TextArena env: any string, sampled among the legal moves where listed.

    ``contains`` accepts any string of admissible length. ``sample()`` draws one of the env's legal
    moves of the moment (seeded by :meth:`seed`) where the game lists them (once a game ended, one
    of the moves legal at its start, for the step after the next reset), so that random policies and
    Gymnasium's checker play legal moves; otherwise it samples prose as :class:`TextSpace` does.

    It holds its env weakly; a pickled or copied space (a vector env worker sends its spaces to the
    parent) has no env and samples prose.

    Args:
        moves: Returns the moves to sample from, or ``None`` where the game does not list them.
        max_length: Longest admissible action.
    """

    def __init__(self, moves: Callable[[], list[str] | None], max_length: int = MAX_ACTION_CHARS) -> None:
        super().__init__(max_length, strict=False)
        self._moves: weakref.WeakMethod[Callable[[], list[str] | None]] | None = weakref.WeakMethod(moves)  # type: ignore[arg-type]

    def __getstate__(self) -> dict[str, Any]:
        """The space's state without its env."""
        return {**self.__dict__, "_moves": None}

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """Draw a legal move where they are listed (and no mask is given), else a prose string."""
        method = self._moves() if self._moves is not None and mask is None and probability is None else None
        moves = method() if method is not None else None
        if moves:
            return moves[int(self.np_random.integers(len(moves)))]
        return super().sample(mask=mask, probability=probability)


class TextArenaEnv(TextEnv[str]):
    """One TextArena game played by the agent, against a seeded random opponent if it has two players.

    Args:
        game: A runnable textarena id, e.g. ``"TowerOfHanoi-v0"`` or ``"TowerOfHanoi-v0-medium"``
            (see :mod:`llmgym.envs.textarena_games`).
        agent_player: The agent's player id in two-player games (0 moves first); 0 in puzzles.
        history: How many of the latest game messages the observation keeps.
        render_mode: ``"ansi"`` or ``None``.

    Raises:
        ConfigError: If ``game`` is unknown or excluded (the message says why), or
            ``agent_player`` / ``history`` is out of range.
        MissingDependencyError: If textarena is not installed.
    """

    metadata = ANSI_METADATA
    description = "A TextArena game played with free-text moves."

    def __init__(
        self,
        game: str = "GuessTheNumber-v0",
        agent_player: int = 0,
        history: int = 20,
        render_mode: str | None = None,
    ) -> None:
        self._init_render_mode(render_mode)
        base = check_game(game)
        self.num_players = players(base)
        if (
            not isinstance(agent_player, int)
            or isinstance(agent_player, bool)
            or not 0 <= agent_player < self.num_players
        ):
            raise ConfigError(
                f"agent_player={agent_player!r} is invalid for {game!r}, a {self.num_players}-player game; expected "
                f"an int in [0, {self.num_players - 1}]. Fix: pass agent_player=0 (moves first) or 1."
            )
        if not isinstance(history, int) or isinstance(history, bool) or history < 0:
            raise ConfigError(
                f"history={history!r} is invalid; expected an int >= 0 (messages kept in the observation)."
            )
        ta: Any = require("textarena", "textarena", f"The TextArena game {game!r}")
        self.game, self.agent_player, self.history = game, agent_player, history
        self._py_state = random.Random(0).getstate()
        self._make_game = _game_factory(ta, game)
        with self._game_random():
            self._game: Any = self._make_game()
        self._lister = MOVE_LISTERS.get(type(self._game).__name__)
        self._opponent_rng = random.Random(0)
        self._started = self._done = False
        self._prompt, self._board = "", ""
        self._log: list[str] = []
        self._opponent_tokens: dict[str, None] = {}
        self._text = ""
        self.observation_space = TextSpace(MAX_OBSERVATION_CHARS, strict=False)
        self._start_moves: list[str] | None = None
        self.action_space = MoveSpace(self._sampled_moves)

    @property
    def instructions(self) -> str:
        """A system prompt: whom the agent plays and how to write a move."""
        side = f" as player {self.agent_player} against a random opponent" if self.num_players == 2 else ""
        moves = (
            "Answer with exactly one of the legal moves listed for you."
            if self._lister is not None
            else "Write your move in square brackets as the rules show, e.g. [4] or [A C]; text around it is "
            "ignored by most games. An invalid move is reported and may be retried once; a second one loses."
        )
        return f"You play the TextArena game {self.game}{side}. The rules come with each observation. {moves}"

    def valid_moves(self) -> list[str] | None:
        """The legal moves now where the game lists them (empty once the game ended), else ``None``."""
        if self._lister is None:
            return None
        if not self._started or self._done:
            return []
        return self._lister(self._game)

    def _sampled_moves(self) -> list[str] | None:
        """The moves :class:`MoveSpace` samples: the legal ones, or once the game ended those of its start."""
        return self.valid_moves() or self._start_moves

    def valid_actions(self) -> list[str]:
        """The legal moves now (empty where the game does not list them or has ended)."""
        return self.valid_moves() or []

    def parse_action(self, action: Any) -> int:
        """Check an action without playing it.

        Args:
            action: A move string; where moves are listed, one of :meth:`valid_actions`
                (case- and blank-insensitive) or its index in that list.

        Returns:
            The index of the move in :meth:`valid_actions`, or ``-1`` for a free-text move of a game
            without a move list.

        Raises:
            InvalidActionError: If the action is not a string (or listed index), or not a legal move
                where moves are listed.
        """
        valid = self.valid_moves()
        if isinstance(action, str):
            if valid is None:
                return -1
            keys = [normalize_action_text(move) for move in valid]
            key = normalize_action_text(action)
            index = keys.index(key) if key in keys else None
        else:
            index = None if valid is None else int_action(action, len(valid))
        if index is None:
            raise self.invalid_action(action)
        return index

    def invalid_action(self, action: Any) -> InvalidActionError:
        """Build the error for an action that is not a (legal) move: it names the legal moves where listed."""
        valid = self.valid_moves()
        if valid is None:
            return InvalidActionError(
                f"action={action!r:.100} is not a move of {self.game}: expected a string such as '[4]'. Fix: pass "
                "the agent's text."
            )
        return InvalidActionError(
            f"action={action!r:.100} is not a legal move of {self.game} now; expected one of {valid} or an index "
            "into that list. Fix: map the agent's output onto one of info['valid_actions']."
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a game, seeded with ``seed`` (or a seed drawn from the env's generator). See :meth:`gymnasium.Env.reset`."""
        super().reset(seed=seed)
        game_seed = int(self.np_random.integers(2**31 - 1)) if seed is None else int(seed)
        self._opponent_rng = random.Random(f"opponent-{game_seed}")
        self._new_game(game_seed)
        self._started, self._done = True, False
        self._prompt, self._board, self._log = "", "", []
        self._opponent_tokens = {}
        self._done = self._play_opponent()
        self._start_moves = self.valid_moves()
        self._text = self._observe()
        return self._text, self._info(0.0)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play the agent's move, then the opponent's until it is the agent's turn again. See :meth:`gymnasium.Env.step`.

        Raises:
            InvalidActionError: If the action is not a string, or not a legal move where moves are listed.
            InputError: Before :meth:`reset` or after the game ended.
        """
        if not self._started or self._done:
            raise InputError(
                f"{self.game} cannot step {'before reset()' if not self._started else 'after its game ended'}. "
                "Fix: call env.reset()."
            )
        index = self.parse_action(action)
        move = action if index < 0 else self.valid_actions()[index]
        with self._game_random():
            self._done = bool(self._game.step(move)[0])
        truncated = self._play_opponent()
        self._text = self._observe()
        reward = self._reward() if self._done else 0.0
        self._done = self._done or truncated
        return self._text, reward, self._done and not truncated, truncated, self._info(reward)

    def _render_text(self) -> str | None:
        """The current observation (``None`` before the first reset)."""
        return self._text if self._started else None

    def _new_game(self, game_seed: int) -> None:
        """Make and reset a new game (some games carry state over from a reset of the same object).

        The games of :data:`~llmgym.envs.textarena_games.REUSED_ACROSS_RESETS` are made once and reset.
        A game whose reset took :data:`SLOW_RESET_S` or more is kept, as reset, in an in-process cache
        keyed by game, players and seed (where copying it is cheaper than resetting it), so that its
        next reset with that seed is a copy.
        """
        key = (self.game, self.num_players, game_seed)
        cached = _RESET_CACHE.get(key)
        if cached is not None:
            _RESET_CACHE.move_to_end(key)
            self._game, self._py_state = copy.deepcopy(cached[0]), cached[1]
            return
        self._py_state = random.Random(game_seed).getstate()
        start = time.perf_counter()
        with self._game_random():
            if self._started and self.game not in REUSED_ACROSS_RESETS:
                self._game = self._make_game()
            self._game.reset(num_players=self.num_players, seed=game_seed)
        took = time.perf_counter() - start
        if took >= SLOW_RESET_S:
            start = time.perf_counter()
            snapshot = copy.deepcopy(self._game)
            if time.perf_counter() - start < took / 2:
                _RESET_CACHE[key] = (snapshot, self._py_state)
                while len(_RESET_CACHE) > RESET_CACHE_SIZE:
                    _RESET_CACHE.popitem(last=False)

    @contextlib.contextmanager
    def _game_random(self) -> Iterator[None]:
        """Swap the env's generator state into Python's global ``random`` for a call into the game.

        Also silences the game's prints.
        """
        outer = random.getstate()
        random.setstate(self._py_state)
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # some games print their puzzle generation
                yield
        finally:
            self._py_state = random.getstate()
            random.setstate(outer)

    def _drain(self, player: int) -> list[tuple[int, str, Any]]:
        """Take the messages textarena queued for ``player``."""
        observations = self._game.state.observations
        messages = list(observations.get(player, []))
        observations[player] = []
        return messages

    def _play_opponent(self) -> bool:
        """Play the opponent's moves until it is the agent's turn or the game ends.

        Returns:
            Whether the opponent was stopped after :data:`_OPPONENT_MOVES` moves in a row (the
            episode is then truncated).
        """
        state = self._game.state
        for _ in range(_OPPONENT_MOVES):
            if self._done or state.current_player_id == self.agent_player:
                return False
            player = state.current_player_id
            for _, message, _ in self._drain(player):
                self._opponent_tokens.update(dict.fromkeys(_TOKEN.findall(message)))
            with self._game_random():
                self._done = bool(self._game.step(self._opponent_move(player))[0])
        return not self._done and state.current_player_id != self.agent_player

    def _opponent_move(self, player: int) -> str:
        """The opponent's move: a random listed move, or the first bracketed token the game accepts."""
        rng = self._opponent_rng
        if self._lister is not None:
            return rng.choice(self._lister(self._game))
        tokens = list(self._opponent_tokens) or ["[0]"]
        rng.shuffle(tokens)
        for token in tokens[:_OPPONENT_TRIES]:
            if self._accepted(token, player):
                return token
        return tokens[0]

    def _accepted(self, move: str, player: int) -> bool:
        """Whether the game accepts ``move`` from ``player``, tried on a copy (the generators are restored)."""
        saved = random.getstate()
        try:
            trial = copy.deepcopy(self._game)
            trial.step(move)
            info = trial.state.game_info.get(player, {})
            return getattr(trial.state, "error_count", 0) == 0 and not info.get("invalid_move", False)
        except Exception:  # a move that crashes the game is not a move
            return False
        finally:
            random.setstate(saved)

    def _observe(self) -> str:
        """Fold the agent's new messages into its observation text."""
        for sender, message, kind in self._drain(self.agent_player):
            text = clean_text(message)
            name = getattr(kind, "name", "")
            if name == "PROMPT":
                self._prompt = self._prompt or text
            elif name == "GAME_BOARD":
                self._board = text
            elif text:
                who = "" if sender < 0 else "You: " if sender == self.agent_player else "Opponent: "
                self._log.append(who + text)
        del self._log[: max(0, len(self._log) - self.history)]
        parts = [self._prompt, "\n".join(self._log), self._board]
        text = "\n\n".join(part for part in parts if part)
        return text[-MAX_OBSERVATION_CHARS:]

    def _reward(self) -> float:
        rewards = self._game.state.rewards or {}
        return float(rewards.get(self.agent_player, 0.0))

    def _info(self, reward: float) -> dict[str, Any]:
        state = self._game.state
        info: dict[str, Any] = {"success": False}
        if self._done:
            rewards = state.rewards or {}
            others = [float(r) for player, r in rewards.items() if player != self.agent_player]
            info["success"] = bool(reward > max(others)) if others else reward >= 1.0
            info["reason"] = str(state.game_info.get(self.agent_player, {}).get("reason", ""))
            info["invalid_move"] = bool(state.game_info.get(self.agent_player, {}).get("invalid_move", False))
        else:
            info["invalid_move"] = getattr(state, "error_count", 0) > 0
            valid = self.valid_moves()
            if valid:
                info["valid_actions"] = valid
        return info
