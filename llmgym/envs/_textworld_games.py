"""TextWorld's game families, generated once with tw-make and cached on disk.

Each ``llmgym/TextWorld-<Challenge>-<Level>-v0`` id plays a pool of :data:`POOL_SIZE` games made by
one tw-make challenge with the settings of :data:`FAMILIES`, game ``i`` with tw-make's seed ``i``.
A game is generated the first time an env needs it, in a subprocess with ``PYTHONHASHSEED=0``
(TextWorld's generation follows hash order), into a temporary folder that is renamed into place
under a file lock: concurrent processes (vector env workers, pytest-xdist workers) generate each
game once and never read a half-written one. The story file's header serial number (the compile
date) is set to ``000000``, so two generations give the same bytes on any day.

The cache is ``$LLMGYM_TEXTWORLD_CACHE``, or ``~/.cache/llmgym/textworld``, with one folder per
TextWorld version. This module imports no TextWorld at import time (registration reads its table).

:func:`main` (``CHALLENGE SETTINGS_JSON SEED OUTPUT.z8``) is the subprocess's side.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgym.errors import ConfigError, GenerationError

__all__ = [
    "GameFamily",
    "FAMILIES",
    "DEFAULT_GAME",
    "POOL_SIZE",
    "CACHE_ENV",
    "cache_root",
    "family",
    "game_file",
    "generate",
]

#: Games per id; ``reset(seed=s)`` plays game ``s % POOL_SIZE``.
POOL_SIZE = 8
#: Environment variable naming the cache folder.
CACHE_ENV = "LLMGYM_TEXTWORLD_CACHE"
#: Name of the story file inside a game's folder (its ``.json`` beside it holds the game's logic).
GAME_NAME = "game.z8"
_SERIAL = slice(0x12, 0x18)  # the six ASCII digits of a Z-machine header's serial number


@dataclass(frozen=True)
class GameFamily:
    """The tw-make settings of one ``llmgym/TextWorld-<Challenge>-<Level>-v0`` id.

    Attributes:
        challenge: The tw-make challenge, e.g. ``"tw-coin_collector"``.
        settings: Its settings, as tw-make's command line would give them.
        max_episode_steps: Time limit of the registered id.
        description: What the games are like, for ``llmgym envs``.
        seed_settings: Settings that take the game's seed too (the cooking recipe).
        pool_size: Number of games, made with tw-make's seeds ``0`` to ``pool_size - 1``.
    """

    challenge: str
    settings: Mapping[str, Any]
    max_episode_steps: int
    description: str
    seed_settings: tuple[str, ...] = field(default=())
    pool_size: int = POOL_SIZE

    def settings_for(self, seed: int) -> dict[str, Any]:
        """Return the challenge settings of the game made with ``seed``."""
        return {**self.settings, **dict.fromkeys(self.seed_settings, seed)}

    @property
    def key(self) -> str:
        """A short digest of the challenge and settings, so that changed settings get new games."""
        text = json.dumps([self.challenge, dict(self.settings), list(self.seed_settings)], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]


def _cooking(recipe: int, go: int, *, open_: bool, cook: bool, cut: bool) -> dict[str, Any]:
    return {
        "recipe": recipe,
        "take": recipe,
        "go": go,
        "open": open_,
        "cook": cook,
        "cut": cut,
        "drop": False,
        "split": None,
    }


#: ``(challenge, level) -> GameFamily`` of every registered id, in registration order.
FAMILIES: dict[tuple[str, str], GameFamily] = {
    ("CoinCollector", "Easy"): GameFamily(
        "tw-coin_collector", {"level": 5}, 50, "walk a chain of 5 rooms to the coin"
    ),
    ("CoinCollector", "Medium"): GameFamily(
        "tw-coin_collector", {"level": 105}, 100, "find the coin 5 rooms away, among dead-end rooms"
    ),
    ("CoinCollector", "Hard"): GameFamily(
        "tw-coin_collector", {"level": 210}, 100, "find the coin 10 rooms away, among 30 rooms"
    ),
    ("TreasureHunter", "Easy"): GameFamily(
        "tw-treasure_hunter", {"level": 5}, 50, "take the named object, 3 moves away in 5 rooms"
    ),
    ("TreasureHunter", "Medium"): GameFamily(
        "tw-treasure_hunter", {"level": 15}, 100, "take the named object behind closed doors and containers"
    ),
    ("TreasureHunter", "Hard"): GameFamily(
        "tw-treasure_hunter", {"level": 25}, 100, "take the named object behind locked doors, in 20 rooms"
    ),
    ("Cooking", "Easy"): GameFamily(
        "tw-cooking",
        _cooking(1, 1, open_=False, cook=False, cut=False),
        50,
        "read the recipe and cook a 1-ingredient meal in the kitchen",
        ("recipe_seed",),
    ),
    ("Cooking", "Medium"): GameFamily(
        "tw-cooking",
        _cooking(2, 6, open_=True, cook=False, cut=True),
        100,
        "gather and cut the 2 ingredients of a meal across 6 rooms, opening containers",
        ("recipe_seed",),
    ),
    ("Cooking", "Hard"): GameFamily(
        "tw-cooking",
        _cooking(3, 9, open_=True, cook=True, cut=True),
        100,
        "gather, cut and cook (roast, fry, grill) the 3 ingredients of a meal across 9 rooms",
        ("recipe_seed",),
    ),
}

#: The game of ``llmgym/TextWorld-v0`` without ``game_path``: TextWorld's own simple game (tw-simple).
DEFAULT_GAME = GameFamily(
    "tw-simple",
    {"rewards": "balanced", "goal": "detailed", "test": False},
    100,
    "TextWorld's simple game: find the right food in a 6-room house and cook it",
    pool_size=1,
)


def family(challenge: str, level: str) -> GameFamily:
    """Return the family of a challenge and level.

    Args:
        challenge: ``"CoinCollector"``, ``"TreasureHunter"`` or ``"Cooking"``.
        level: ``"Easy"``, ``"Medium"`` or ``"Hard"``.

    Raises:
        ConfigError: If there is no such family; the message lists them.
    """
    found = FAMILIES.get((challenge, level))
    if found is None:
        known = [f"{c}/{lv}" for c, lv in FAMILIES]
        raise ConfigError(
            f"challenge={challenge!r}, level={level!r} is not a TextWorld game family; expected one of {known}. "
            "Fix: use a registered llmgym/TextWorld-* id, or pass game_path= for a game of your own."
        )
    return found


def cache_root() -> Path:
    """The cache folder: ``$LLMGYM_TEXTWORLD_CACHE`` or ``~/.cache/llmgym/textworld``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "llmgym" / "textworld"


def game_file(name: str, spec: GameFamily, index: int) -> Path:
    """Return the story file of game ``index`` of a family, generating it first if it is not cached.

    Args:
        name: The family's folder name in the cache, e.g. ``"CoinCollector-Easy"``.
        spec: The family.
        index: The game, in ``[0, spec.pool_size)`` (its tw-make seed).

    Returns:
        The ``.z8`` file, with its ``.json`` beside it.

    Raises:
        ConfigError: If ``index`` is out of range.
        GenerationError: If tw-make fails.
    """
    if not isinstance(index, int) or not 0 <= index < spec.pool_size:
        raise ConfigError(f"index={index!r} is out of range; expected an int in [0, {spec.pool_size - 1}].")
    import textworld  # the cache is per TextWorld version, whose generator may change

    folder = cache_root() / f"textworld-{textworld.__version__}" / f"{name}-{spec.key}"
    final = folder / f"game-{index}"
    if not (final / GAME_NAME).is_file():
        folder.mkdir(parents=True, exist_ok=True)
        with _locked(folder / f"game-{index}.lock"):
            if not (final / GAME_NAME).is_file():
                _generate_into(final, spec, index)
    return final / GAME_NAME


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl  # POSIX only, as TextWorld is: imported here so that registering stays portable

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _generate_into(final: Path, spec: GameFamily, seed: int) -> None:
    """Generate a game in a subprocess into a temporary folder, then rename it to ``final``."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        settings = json.dumps(spec.settings_for(seed))
        child = f"import sys; from {__name__} import main; main(sys.argv[1:])"
        command = [sys.executable, "-c", child, spec.challenge, settings, str(seed), str(tmp / GAME_NAME)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not (tmp / GAME_NAME).is_file():
            raise GenerationError(
                f"tw-make {spec.challenge} with {spec.settings_for(seed)} and seed {seed} failed (exit "
                f"{done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-4000:]}\nFix: check that "
                "`tw-make` runs on this machine (TextWorld's Inform 7 compiler needs Linux or macOS)."
            )
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def generate(challenge: str, settings: Mapping[str, Any], seed: int, path: Path) -> None:
    """Generate one game with tw-make's Python API in this process (run with ``PYTHONHASHSEED=0``).

    Args:
        challenge: The tw-make challenge, e.g. ``"tw-cooking"``.
        settings: Its settings.
        seed: tw-make's seed.
        path: The ``.z8`` file to write (its ``.json`` and ``.ni`` go beside it).
    """
    import textworld
    import textworld.challenges

    options = textworld.GameOptions()
    options.seeds = seed
    options.path = str(path)
    options.file_ext = ".z8"
    options.force_recompile = True
    _, make_game, _ = textworld.challenges.CHALLENGES[challenge]
    game = make_game(settings=dict(settings), options=options)
    textworld.generator.compile_game(game, options)
    with open(path, "r+b") as story:  # the header serial is the compile date: make it constant
        story.seek(_SERIAL.start)
        story.write(b"0" * (_SERIAL.stop - _SERIAL.start))


def main(argv: list[str]) -> None:
    """Generate one game: ``CHALLENGE SETTINGS_JSON SEED OUTPUT.z8``."""
    challenge, settings, seed, path = argv
    generate(challenge, json.loads(settings), int(seed), Path(path))
