"""TextWorld games as llmgym text envs: generated game families, or any game file of your own.

:class:`TextWorldEnv` plays games through TextWorld's own API (``textworld.start`` with
``textworld.EnvInfos``), not its gym layer. The observation is the game's text, cleaned of
TextWorld's ASCII banner, the interpreter's prompt and status line, stray backslashes and runs of
blank lines; the first one holds the game's objective. ``info["valid_actions"]`` lists the
admissible commands (sorted), ``info["success"]`` is whether the game is won, the reward is the
increase of the game's score, and ``info["score"]``, ``info["max_score"]``, ``info["objective"]``,
``info["description"]`` (the room) and ``info["inventory"]`` come with every step.

With ``admissible_only=True`` (the default) a command outside the admissible ones raises
:class:`~llmgym.errors.InvalidActionError` naming them; with ``admissible_only=False`` any command
goes to the game's parser, which answers in words (e.g. "That's not a verb I recognise.") and
leaves the game as it was: the contract of a generative agent writing free text.

``reset(seed=s)`` plays game ``s % pool_size`` of the env's pool and seeds the interpreter from
``s``, so the episode is the same for the same seed and commands; ``reset()`` without a seed plays
the next game of the pool. ``action_space.sample()`` draws ``"inventory"`` or ``"look"``, which every
state admits (see :class:`CommandSpace`).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmgym.envs import _textworld_games as games
from llmgym.envs.core import ANSI_METADATA, TextEnv, TextSpace, normalize_action_text
from llmgym.errors import ConfigError, InputError, InvalidActionError, require

__all__ = [
    "TextWorldEnv",
    "CommandSpace",
    "clean_text",
    "MAX_TEXT_CHARS",
    "MAX_COMMAND_CHARS",
    "UNIVERSAL_COMMANDS",
]

#: Longest observation text.
MAX_TEXT_CHARS = 32768
#: Longest command.
MAX_COMMAND_CHARS = 256
#: Commands admitted in every state of a game that lists its admissible commands (they change nothing).
UNIVERSAL_COMMANDS = ("inventory", "look")
_ZCODE_SUFFIXES = tuple(f".z{version}" for version in range(1, 9))
_ZCODE_HEADER_BYTES = 0x40
_END_PROMPT = "would you like to restart, restore a saved game, quit or undo the last command?"
_BLANK_RUNS = re.compile(r"\n{3,}")


def clean_text(text: str) -> str:
    """Clean a TextWorld feedback for an agent.

    Drops the leading lines without a letter or digit (TextWorld's ASCII-art banner), the
    interpreter's prompt and status lines (starting with ``>``), its end-of-game "Would you like to
    RESTART..." question, backslashes, the blanks around lines (centred ones included) and runs of
    blank lines.

    Args:
        text: The feedback as the interpreter printed it.

    Returns:
        The cleaned text.
    """
    lines = text.replace("\\", "").splitlines()
    while lines and not any(c.isalnum() for c in lines[0]):
        lines.pop(0)
    kept = [
        line.strip()
        for line in lines
        if not line.lstrip().startswith(">") and line.strip().lower() != _END_PROMPT
    ]
    return _BLANK_RUNS.sub("\n\n", "\n".join(kept)).strip()


class CommandSpace(TextSpace):
    """Commands of a parser game: any text, whose :meth:`sample` draws a command every state admits.

    The admissible commands change with the state, and Gymnasium samples an action before the reset
    it steps it after, so :meth:`sample` draws among :attr:`commands`, the ones admitted everywhere
    (``"inventory"`` and ``"look"``): ``env.step(env.action_space.sample())`` never fails. A random
    policy draws from ``info["valid_actions"]`` instead.

    Args:
        max_length: Longest command.
        commands: The commands admitted in every state.
        seed: Seed of the space's sampler.
    """

    def __init__(
        self,
        max_length: int = MAX_COMMAND_CHARS,
        *,
        commands: tuple[str, ...] = UNIVERSAL_COMMANDS,
        seed: int | None = None,
    ) -> None:
        super().__init__(max_length, strict=False, seed=seed)
        self.commands = commands

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """Draw one of :attr:`commands` (a random string with a mask or a probability, as ``Text`` does)."""
        if mask is None and probability is None:
            return self.commands[int(self.np_random.integers(len(self.commands)))]
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"CommandSpace(max_length={self.max_length}, commands={self.commands})"


class TextWorldEnv(TextEnv[str]):
    """A TextWorld game from a generated family, or game files of your own.

    Args:
        challenge: A family of :data:`llmgym.envs._textworld_games.FAMILIES`, e.g. ``"Cooking"``
            (with ``level``); its games are generated on first use and cached.
        level: ``"Easy"``, ``"Medium"`` or ``"Hard"``.
        game_path: Instead of a family, a game file (``.z1``-``.z8``, or ``.ulx`` where the installed
            TextWorld still plays Glulx) or a list of them, the pool of the env. TextWorld's games
            have their ``.json`` beside them, which gives the admissible commands; other games have
            them where Jericho supports the game. Without ``challenge`` and ``game_path``: TextWorld's
            simple game (tw-simple, generated and cached too).
        admissible_only: Whether a command must be one of the admissible ones (else
            :class:`~llmgym.errors.InvalidActionError`); ``False`` sends free text to the parser.
        render_mode: ``"ansi"`` or ``None``.

    Raises:
        MissingDependencyError: If TextWorld is not installed.
        ConfigError: For an unknown family, both a family and ``game_path``, or a ``game_path`` that
            is missing or not a game file.
    """

    metadata = ANSI_METADATA
    description = "TextWorld: a text adventure game played with typed commands."

    def __init__(
        self,
        challenge: str | None = None,
        level: str | None = None,
        *,
        game_path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
        admissible_only: bool = True,
        render_mode: str | None = None,
    ) -> None:
        self._init_render_mode(render_mode)
        textworld: Any = require("textworld", "textworld", "llmgym's TextWorld envs")
        self._textworld = textworld
        if not isinstance(admissible_only, bool):
            raise ConfigError(f"admissible_only={admissible_only!r} is invalid; expected True or False.")
        self.admissible_only = admissible_only
        self._paths: list[Path] | None = None
        self._family_name, self._family = "Simple", games.DEFAULT_GAME
        if game_path is not None:
            if challenge is not None or level is not None:
                raise ConfigError(
                    f"game_path={game_path!r} and challenge={challenge!r}/level={level!r} were both given; "
                    "expected one of them. Fix: use llmgym/TextWorld-v0 with game_path= for your own games."
                )
            self._paths = _check_game_paths(game_path)
        elif challenge is not None or level is not None:
            self._family = games.family(str(challenge), str(level))
            self._family_name = f"{challenge}-{level}"
        self.action_space: CommandSpace = CommandSpace()
        self.observation_space = TextSpace(MAX_TEXT_CHARS, strict=False)
        self._infos = self._textworld.EnvInfos(
            admissible_commands=True,
            won=True,
            lost=True,
            score=True,
            max_score=True,
            description=True,
            inventory=True,
            objective=True,
            extras=["walkthrough"],
        )
        self._started: dict[int, Any] = {}
        self._index: int | None = None
        self._text: str | None = None
        self._commands: list[str] = []
        self._score = 0.0
        self._walkthrough: list[str] | None = None

    @property
    def pool_size(self) -> int:
        """Number of games the env plays (``reset(seed=s)`` plays game ``s % pool_size``)."""
        return len(self._paths) if self._paths is not None else self._family.pool_size

    @property
    def game_index(self) -> int | None:
        """The game of the current episode, in ``[0, pool_size)`` (``None`` before the first reset)."""
        return self._index

    @property
    def walkthrough(self) -> list[str] | None:
        """Commands that win the current game from its start, where the game has them (TextWorld's do)."""
        return None if self._walkthrough is None else list(self._walkthrough)

    @property
    def instructions(self) -> str:
        """How to play, for an agent's system prompt."""
        return (
            "You are playing a text adventure game. Read what you see and reach the objective. Each turn, "
            "write one command such as 'go north', 'take coin', 'open door' or 'look'."
        )

    def game_file(self, index: int) -> Path:
        """Return the file of game ``index`` of the pool, generating it first for a family.

        Args:
            index: A game in ``[0, pool_size)``.
        """
        if self._paths is not None:
            return self._paths[index]
        return games.game_file(self._family_name, self._family, index)

    def valid_actions(self) -> list[str]:
        """The admissible commands of the current state, sorted."""
        return list(self._commands)

    def parse_action(self, action: Any) -> str:  # type: ignore[override]
        """Turn an action into the command sent to the game, without changing the game.

        Args:
            action: A command string; matched case- and blank-insensitively against the admissible
                ones when ``admissible_only``.

        Returns:
            The admissible command as the game spells it, or the free-text command with its blanks
            collapsed (``admissible_only=False``).

        Raises:
            InvalidActionError: If ``action`` is not a string, is blank or too long, or (with
                ``admissible_only``) is not admissible.
        """
        if not isinstance(action, str):
            raise self.invalid_action(action)
        key = normalize_action_text(action)
        if self.admissible_only:
            for command in self._commands:
                if normalize_action_text(command) == key:
                    return command
            raise self.invalid_action(action)
        if not key or len(key) > MAX_COMMAND_CHARS:
            raise InvalidActionError(
                f"action={action!r:.300} is not a command; expected a non-blank string of at most "
                f"{MAX_COMMAND_CHARS} characters. Fix: send one short command such as 'go north'."
            )
        return " ".join(action.split())

    def invalid_action(self, action: Any) -> InvalidActionError:
        """Build the error for a command outside the admissible ones (it lists them)."""
        return InvalidActionError(
            f"action={action!r:.300} is not an admissible command of {type(self).__name__} here; expected one "
            f"of {self._commands}. Fix: pick one of info['valid_actions'], or make the env with "
            "admissible_only=False to send free text to the game's parser."
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a game of the pool. See :meth:`gymnasium.Env.reset` and the module docstring."""
        super().reset(seed=seed)
        if seed is not None:
            self._index = seed % self.pool_size
        elif self._index is None:
            self._index = int(self.np_random.integers(self.pool_size))
        else:
            self._index = (self._index + 1) % self.pool_size
        game = self._start(self._index)
        game.seed(int(self.np_random.integers(2**31 - 1)))
        state = game.reset()
        self._score = float(state.get("score") or 0)
        walkthrough = state.get("extra.walkthrough")
        self._walkthrough = list(walkthrough) if walkthrough else None
        text = clean_text(state.feedback)
        objective = state.get("objective")
        if objective and clean_text(objective) not in text:
            text = f"{clean_text(objective)}\n\n{text}"
        info = self._observe(state, text)
        if self.admissible_only and not self._commands:
            raise ConfigError(
                f"{self.game_file(self._index)} gives no admissible commands (it is neither a TextWorld game "
                "with its .json beside it nor a game Jericho supports). Fix: make the env with "
                "admissible_only=False to play it with free text."
            )
        return self._text or "", info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one command. See :meth:`gymnasium.Env.step` and the module docstring."""
        if self._index is None:
            raise InputError("TextWorldEnv.step() called before reset(). Fix: call env.reset() first.")
        command = self.parse_action(action)
        state, _, done = self._started[self._index].step(command)
        score = float(state.get("score") or 0)
        reward, self._score = score - self._score, score
        info = self._observe(state, clean_text(state.feedback))
        terminated = bool(done or state.get("won") or state.get("lost"))
        return self._text or "", reward, terminated, False, info

    def close(self) -> None:
        """Close the games' interpreters."""
        for game in self._started.values():
            game.close()
        self._started.clear()

    def _render_text(self) -> str | None:
        return self._text

    def _start(self, index: int) -> Any:
        """The TextWorld environment of game ``index``, started on first use.

        Raises:
            ConfigError: If the story file is damaged (see :func:`check_story_file`), its ``.json``
                is not a TextWorld game description, or TextWorld cannot play it.
        """
        if index not in self._started:
            path = self.game_file(index)
            check_story_file(path)
            description = path.with_suffix(".json")
            if description.is_file():
                _check_game_json(description)
            try:
                with warnings.catch_warnings():
                    if description.is_file():  # TextWorld's wrapper gives the score, not Jericho
                        warnings.filterwarnings("ignore", message=r"Game .* is not fully supported")
                    self._started[index] = self._textworld.start(str(path), request_infos=self._infos)
            except (NotImplementedError, KeyError, TypeError, ValueError) as exc:
                if description.is_file() and not isinstance(exc, NotImplementedError):
                    raise _bad_game_json(description, f"{type(exc).__name__}: {exc}") from exc
                if not isinstance(exc, (NotImplementedError, ValueError)):
                    raise
                raise ConfigError(
                    f"game_path {str(path)!r} cannot be played by TextWorld {self._textworld.__version__}: {exc} "
                    "Fix: use a .z1-.z8 game (TextWorld 1.7 dropped Glulx; tw-make writes .z8)."
                ) from exc
        return self._started[index]

    def _observe(self, state: Any, text: str) -> dict[str, Any]:
        """Record the step's text and commands; return its info."""
        self._text = text
        admissible = state.get("admissible_commands")
        self._commands = sorted({*admissible, *UNIVERSAL_COMMANDS}) if admissible else []
        info: dict[str, Any] = {
            "success": bool(state.get("won")),
            "score": self._score,
            "max_score": float(state.get("max_score")) if state.get("max_score") is not None else None,
            "objective": state.get("objective"),
            "description": clean_text(state.get("description") or ""),
            "inventory": clean_text(state.get("inventory") or ""),
        }
        if self._commands:
            info["valid_actions"] = list(self._commands)
        return info


def check_story_file(path: Path) -> None:
    """Refuse a Z-machine story file whose bytes disagree with its header.

    The interpreter ends the whole process (``exit(1)``, no exception) on a story file shorter than
    its header's length, and plays garbage from a damaged one: both are refused here by the
    header's length and checksum (bytes ``0x1A``-``0x1D``; a length of 0, which old story files
    give, is not checked). Other files (Glulx) pass unchecked.

    Args:
        path: The story file.

    Raises:
        ConfigError: If the file is shorter than its header, or its checksum is wrong.
    """
    data = path.read_bytes()
    if path.suffix.lower() not in _ZCODE_SUFFIXES:
        return
    fix = (
        "Fix: regenerate the game (tw-make writes the .z8 and its .json together; an llmgym/TextWorld-* game "
        f"is regenerated once its folder is removed from {games.cache_root()}) or copy it again in full."
    )
    if len(data) < _ZCODE_HEADER_BYTES:
        raise ConfigError(
            f"game_path {str(path)!r} is truncated: {len(data)} bytes, less than a story file's header. {fix}"
        )
    version = data[0]
    length = int.from_bytes(data[0x1A:0x1C], "big") * (2 if version <= 3 else 4 if version <= 5 else 8)
    if length and len(data) < length:
        raise ConfigError(
            f"game_path {str(path)!r} is truncated: {len(data)} bytes where its header says {length}. {fix}"
        )
    checksum = int.from_bytes(data[0x1C:0x1E], "big")
    if length and sum(data[_ZCODE_HEADER_BYTES:length]) % 0x10000 != checksum:
        raise ConfigError(
            f"game_path {str(path)!r} is damaged: its bytes do not match its header's checksum. {fix}"
        )


def _check_game_json(description: Path) -> None:
    """Refuse a TextWorld ``.json`` that is no JSON object with a ``KB`` (TextWorld needs one)."""
    try:
        data = json.loads(description.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _bad_game_json(description, f"not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise _bad_game_json(description, f"a JSON {type(data).__name__}, not an object")
    if "KB" not in data:
        raise _bad_game_json(description, "it has no 'KB' (the game's knowledge base)")


def _bad_game_json(description: Path, problem: str) -> ConfigError:
    return ConfigError(
        f"{description} is not a TextWorld game description: {problem}. Fix: regenerate the game with tw-make "
        "(it writes the story file and its .json together), or remove the .json to play the story file alone "
        "with admissible_only=False (free text, no admissible commands)."
    )


def _check_game_paths(game_path: Any) -> list[Path]:
    """Check ``game_path`` (one path or a list of them) and return it as a list of paths."""
    paths = [game_path] if isinstance(game_path, (str, os.PathLike)) else list(game_path)
    if not paths:
        raise ConfigError("game_path=[] names no game; expected a game file or a list of them.")
    checked = []
    for raw in paths:
        if not isinstance(raw, (str, os.PathLike)):
            raise ConfigError(f"game_path entry {raw!r:.100} is not a path; expected a str or os.PathLike.")
        path = Path(raw).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"game_path {str(path)!r} does not exist or is not a file. Fix: pass the path of a game file, "
                "e.g. one made with `tw-make tw-simple --rewards dense --goal detailed --output game.z8`."
            )
        with open(path, "rb") as handle:
            head = handle.read(4)
        suffix = path.suffix.lower()
        is_zcode = suffix in _ZCODE_SUFFIXES and len(head) == 4 and 1 <= head[0] <= 8
        if not (is_zcode or (suffix == ".ulx" and head == b"Glul")):
            raise ConfigError(
                f"game_path {str(path)!r} is not a game file; expected a Z-machine story (.z1-.z8) or a Glulx "
                "one (.ulx) with its header. Fix: pass the story file itself (TextWorld writes game.z8 and "
                "game.json: pass the .z8)."
            )
        check_story_file(path)
        checked.append(path)
    return checked
