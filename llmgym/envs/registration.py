"""Registration of every llmgym env with Gymnasium under the ``llmgym/`` namespace.

Entry points are strings, so registering imports neither minigrid nor torch: ``import llmgym``
stays light and an env's module loads on its first :func:`gymnasium.make`.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec

from llmgym.envs import textarena_games
from llmgym.envs._scienceworld_tasks import SCIENCEWORLD_TASKS, task_id_name
from llmgym.envs._textworld_games import DEFAULT_GAME, FAMILIES
from llmgym.errors import ConfigError, require_installed

__all__ = [
    "register_envs",
    "list_envs",
    "check_env_id",
    "import_env_module",
    "extras_note",
    "ENV_SPECS",
    "EnvEntry",
    "EnvExtra",
]


@dataclass(frozen=True)
class EnvExtra:
    """An optional package that an env needs: always, or for some values of one keyword argument.

    Attributes:
        module: Top-level module of the package, e.g. ``"sacrebleu"``.
        extra: The llmgym extra that installs it, e.g. ``"metrics"``.
        kwarg: The env keyword argument that selects what needs it, e.g. ``"reward"``; ``None``
            when the whole env needs it (a suite adapter such as TextWorld).
        values: The values of ``kwarg`` that need it, e.g. ``("bleu",)``; empty when ``kwarg``
            is ``None``.
    """

    module: str
    extra: str
    kwarg: str | None = None
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class EnvEntry:
    """One registered env.

    Attributes:
        id: Gymnasium id, ``llmgym/<Name>-v0``.
        entry_point: ``"module:Class"`` string.
        description: One line shown by ``llmgym envs``.
        kwargs: Constructor arguments.
        max_episode_steps: Time limit added by :func:`gymnasium.make`, if any.
        extras: The optional packages some of its settings need.
    """

    id: str
    entry_point: str
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None
    extras: tuple[EnvExtra, ...] = ()


_BABYAI = "llmgym.envs.babyai_text:BabyAITextEnv"
_TOY = "llmgym.envs.toy_text"
_SYN = "llmgym.envs.synthetic"

# Kept in sync with llmgym.envs.babyai_text.LEVELS and GLAM_TRAIN_LEVELS (a test checks it); not
# imported from there so that registering does not import minigrid's wrapper module.
_BABYAI_LEVELS: dict[str, str] = {
    "GoToRedBall": "go to the red ball, among distractors, in one room",
    "GoToRedBallNoDists": "go to the red ball, alone in one room",
    "GoToObj": "go to the only object in one room",
    "GoToLocal": "go to an object among distractors in one room",
    "PickupLocal": "pick up an object among distractors in one room",
    "PutNextLocal": "put an object next to another in one room",
    "OpenDoor": "open a door described by its color or location",
    "Open": "open a door in a 3x3 maze of rooms",
    "UnlockLocal": "fetch the key and open the locked door of the room",
    "PickUpSeqGoTo": "pick up an object, then go to another (GLAM's sequence task)",
    "GoTo": "go to an object in a 3x3 maze of rooms",
    "Pickup": "pick up an object in a 3x3 maze of rooms",
}
# Kept in sync with the require() calls of llmgym.envs.rewards (a test checks it).
_REWARD_EXTRAS = (
    EnvExtra("sacrebleu", "metrics", "reward", ("bleu", "sacre_bleu", "chrf", "ter")),
    EnvExtra("rouge_score", "metrics", "reward", ("rouge", "rouge_combined", "rouge_l_max")),
    EnvExtra("nltk", "metrics", "reward", ("meteor",)),
    EnvExtra("bert_score", "metrics", "reward", ("bert_score",)),
)
_GLAM_TRAIN = ("GoToLocal", "PickupLocal", "PutNextLocal", "UnlockLocal", "PickUpSeqGoTo")

ENV_SPECS: tuple[EnvEntry, ...] = (
    *(
        EnvEntry(f"llmgym/BabyAI-Text-{level}-v0", _BABYAI, f"BabyAI-Text: {text}.", {"level": level})
        for level, text in _BABYAI_LEVELS.items()
    ),
    EnvEntry(
        "llmgym/BabyAI-Text-MixedTrain-v0",
        _BABYAI,
        "BabyAI-Text: GLAM's training mix, one of go to / pick up / put next / unlock / pick up then go to per episode.",
        {"level": list(_GLAM_TRAIN)},
    ),
    EnvEntry(
        "llmgym/Blackjack-Text-v0",
        f"{_TOY}:BlackjackTextEnv",
        "Blackjack in words: hit or stay against the dealer.",
    ),
    EnvEntry(
        "llmgym/FrozenLake-Text-v0",
        f"{_TOY}:FrozenLakeTextEnv",
        "FrozenLake 4x4 in words: walk to the goal without falling into a hole.",
        max_episode_steps=100,
    ),
    EnvEntry(
        "llmgym/Taxi-Text-v0",
        f"{_TOY}:TaxiTextEnv",
        "Taxi in words: pick up the passenger and drop them at their destination.",
        max_episode_steps=200,
    ),
    EnvEntry(
        "llmgym/CliffWalking-Text-v0",
        f"{_TOY}:CliffWalkingTextEnv",
        "CliffWalking in words: reach the goal along the cliff without falling.",
        max_episode_steps=200,
    ),
    EnvEntry(
        "llmgym/TextGen-v0",
        "llmgym.envs.generation:TextGenEnv",
        "Text generation: complete a prompt from a datapool, scored by a reward function.",
        extras=_REWARD_EXTRAS,
    ),
    EnvEntry(
        "llmgym/EchoWord-v0",
        f"{_SYN}:EchoWordEnv",
        "Say the word you are shown (one step, reward 1 if right).",
    ),
    EnvEntry(
        "llmgym/Countdown-v0",
        f"{_SYN}:CountdownEnv",
        "Repeat the named action 3 times in a row (sparse reward at the end).",
    ),
    EnvEntry(
        "llmgym/ConstantReward-v0",
        f"{_SYN}:ConstantRewardEnv",
        "Reward 1 at every step, truncated after 10 steps (value checks).",
    ),
    # ScienceWorld: one id per task, plus one taking task= (the table does not import scienceworld).
    EnvEntry(
        "llmgym/ScienceWorld-v0",
        "llmgym.envs.scienceworld_env:ScienceWorldTextEnv",
        "ScienceWorld: the science task named by task= (default boil), in a simulated house.",
        max_episode_steps=100,
        extras=(EnvExtra("scienceworld", "scienceworld"),),
    ),
    *(
        EnvEntry(
            f"llmgym/ScienceWorld-{task_id_name(task)}-v0",
            "llmgym.envs.scienceworld_env:ScienceWorldTextEnv",
            f"ScienceWorld {task}: {text}.",
            {"task": task},
            max_episode_steps=100,
            extras=(EnvExtra("scienceworld", "scienceworld"),),
        )
        for task, text in SCIENCEWORLD_TASKS.items()
    ),
    # TextWorld: the tw-make settings of each challenge and level are in llmgym.envs._textworld_games.
    *(
        EnvEntry(
            f"llmgym/TextWorld-{challenge}-{level}-v0",
            "llmgym.envs.textworld_env:TextWorldEnv",
            f"TextWorld {challenge} ({level}): {family.description}; {family.pool_size} generated games.",
            {"challenge": challenge, "level": level},
            max_episode_steps=family.max_episode_steps,
            extras=(EnvExtra("textworld", "textworld"),),
        )
        for (challenge, level), family in FAMILIES.items()
    ),
    EnvEntry(
        "llmgym/TextWorld-v0",
        "llmgym.envs.textworld_env:TextWorldEnv",
        "TextWorld: your own game with game_path= (.z8 from tw-make, or any .z1-.z8), else TextWorld's simple game.",
        max_episode_steps=DEFAULT_GAME.max_episode_steps,
        extras=(EnvExtra("textworld", "textworld"),),
    ),
    # TextArena: one id per game that runs offline (llmgym.envs.textarena_games), plus game=.
    *(
        EnvEntry(
            textarena_games.llmgym_id(game),
            "llmgym.envs.textarena_env:TextArenaEnv",
            f"TextArena: {text}.",
            {"game": game},
            extras=(EnvExtra("textarena", "textarena"),),
        )
        for game, text in {**textarena_games.SINGLE_PLAYER, **textarena_games.TWO_PLAYER}.items()
    ),
    EnvEntry(
        "llmgym/TextArena-v0",
        "llmgym.envs.textarena_env:TextArenaEnv",
        "TextArena: the game or variant passed as game= (default GuessTheNumber-v0).",
        extras=(EnvExtra("textarena", "textarena"),),
    ),
)


#: Outermost wrapper of every llmgym env made by :func:`gymnasium.make`.
_GUARD = WrapperSpec("EpisodeGuard", "llmgym.envs.core:EpisodeGuard", {})


def register_envs() -> None:
    """Register every llmgym env with Gymnasium (idempotent: registered ids are skipped).

    ``gymnasium.make`` wraps each in :class:`~llmgym.envs.core.EpisodeGuard`, outside its time
    limit, so stepping a finished episode is an error.
    """
    for entry in ENV_SPECS:
        if entry.id not in gym.registry:
            gym.register(
                id=entry.id,
                entry_point=entry.entry_point,
                kwargs=dict(entry.kwargs),
                max_episode_steps=entry.max_episode_steps,
                additional_wrappers=(_GUARD,),
            )


def list_envs() -> list[tuple[str, str]]:
    """Return ``(id, one-line description)`` of every llmgym env, in registration order."""
    return [(entry.id, entry.description) for entry in ENV_SPECS]


def extras_note(entry: EnvEntry) -> str:
    """What to install for the settings of an env that need an optional package, or ``""``.

    Args:
        entry: A registered env.

    Returns:
        E.g. ``"pip install 'llmgym[metrics]' for reward=bleu or reward=rouge"``, or
        ``"needs pip install 'llmgym[textworld]'"`` for an env that always needs its extra.
    """
    whole = [extra.extra for extra in entry.extras if extra.kwarg is None]
    settings: dict[str, list[str]] = {}
    for extra in entry.extras:
        if extra.kwarg is not None:
            settings.setdefault(extra.extra, []).extend(f"{extra.kwarg}={value}" for value in extra.values)
    notes = [f"needs pip install 'llmgym[{name}]'" for name in dict.fromkeys(whole)]
    notes += [f"pip install 'llmgym[{name}]' for {' or '.join(used)}" for name, used in settings.items()]
    return "; ".join(notes)


def import_env_module(env_id: str) -> str:
    """Import the module of a ``module:Namespace/Name-v0`` id, as ``gymnasium.make`` does; return the bare id.

    Gymnasium's convention for an env registered in the user's own module: the part before ``:``
    is imported (registering the env), the part after is the registered id.

    Args:
        env_id: A Gymnasium id, with or without a ``module:`` prefix.

    Returns:
        The id without its module prefix (``env_id`` itself when it has none).

    Raises:
        ConfigError: If the module cannot be found (the message names it and the fix).
    """
    module, sep, name = env_id.partition(":")
    if not sep:
        return env_id
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"env id {env_id!r} names the module {module!r}, which cannot be imported ({exc}). Fix: put the folder "
            "holding it on PYTHONPATH (or pip install its package), or drop the 'module:' prefix."
        ) from exc
    return name


def check_env_id(env_id: str, kwargs: Mapping[str, Any] | None = None) -> None:
    """Check, without building the env, that an env id can be made.

    Meant to run before anything slow (loading a model, creating a run directory). An llmgym
    env's module is not imported; an id of the form ``module:Namespace/Name-v0`` (Gymnasium's
    convention for an env registered in the user's own module) imports ``module`` first, as
    ``gymnasium.make`` does.

    Args:
        env_id: A Gymnasium id, e.g. ``"llmgym/BabyAI-Text-GoToLocal-v0"`` or ``"mymodule:my/Env-v0"``.
        kwargs: The keyword arguments it will be made with (``env.kwargs``), which may select a
            feature that needs an optional package (e.g. ``reward="bleu"``).

    Raises:
        ConfigError: If the id is not registered (the message lists close matches and points
            to ``llmgym envs``), or its ``module:`` prefix cannot be imported.
        MissingDependencyError: If it is an llmgym env whose ``kwargs`` need an optional package that
            is not installed.
    """
    register_envs()
    if not isinstance(env_id, str):
        raise ConfigError(
            f"env id {env_id!r:.100} is a {type(env_id).__name__}; expected a string such as 'llmgym/EchoWord-v0'."
        )
    name = import_env_module(env_id)
    try:
        spec = gym.spec(name)
    except gym.error.Error as exc:
        close = difflib.get_close_matches(name, list(gym.registry), n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(
            f"env id {env_id!r} is not a registered Gymnasium env.{hint} Fix: run `llmgym envs` to list "
            "llmgym's envs (`llmgym envs MODULE` adds those MODULE registers; give those as 'MODULE:ID'), or pass "
            "env factories instead of an id."
        ) from exc
    for entry in ENV_SPECS:
        if entry.id != spec.id:
            continue
        used = {**entry.kwargs, **(kwargs or {})}
        for extra in entry.extras:
            if extra.kwarg is None:
                require_installed(extra.module, extra.extra, spec.id)
                continue
            value = used.get(extra.kwarg)
            if isinstance(value, str) and value in extra.values:
                require_installed(extra.module, extra.extra, f"{spec.id} with {extra.kwarg}={value!r}")
