"""TextWorld adapter: generated families, game_path, admissible and free-text commands, the cache.

Games are generated into the default cache (``~/.cache/llmgym/textworld``, or
``$LLMGYM_TEXTWORLD_CACHE``) on first use and reused by later runs; only the concurrency test
generates into a fresh folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from llmgym.envs import _textworld_games as games
from llmgym.envs import check_text_env, make_vec
from llmgym.envs.registration import ENV_SPECS, check_env_id
from llmgym.errors import ConfigError, GenerationError, InvalidActionError, MissingDependencyError

needs_textworld = pytest.mark.skipif(
    importlib.util.find_spec("textworld") is None, reason="needs pip install 'llmgym[textworld]'"
)
EASY = "llmgym/TextWorld-CoinCollector-Easy-v0"


def _portable_json(game: Path) -> dict:
    """A game's .json less ``KB.text_grammars_path``, where tw-make records its own install folder."""
    data = json.loads(game.with_suffix(".json").read_text())
    data["KB"].pop("text_grammars_path", None)
    return data


def _cached_game(challenge: str = "CoinCollector", level: str = "Easy", index: int = 0) -> Path:
    return games.game_file(f"{challenge}-{level}", games.family(challenge, level), index)


def _random_rollout(env: gym.Env, seed: int, steps: int) -> list:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    trace = [obs]
    for _ in range(steps):
        valid = info["valid_actions"]
        obs, reward, terminated, truncated, info = env.step(valid[int(rng.integers(len(valid)))])
        trace.append((obs, reward, terminated, truncated, info["score"]))
        if terminated or truncated:
            obs, info = env.reset()
            trace.append(obs)
    return trace


def test_clean_text_drops_banner_prompt_backslashes_and_blank_runs():
    raw = (
        "\n\n   ________  __ \n  |        \\|  \\\n   \\$$$$$$$$| $$\n\n"
        "Welcome! Take the coin.\n\n\n\n-= Attic =-\nA back\\slash.   \n\n"
        ">                                  -= Attic =-0/1"
    )
    from llmgym.envs.textworld_env import clean_text  # imports without TextWorld

    assert clean_text(raw) == "Welcome! Take the coin.\n\n-= Attic =-\nA backslash."
    end = "You win.\n\n        *** The End ***\n\nWould you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command?\n>"
    assert clean_text(end) == "You win.\n\n*** The End ***"


def test_registered_ids_follow_the_family_table():
    entries = {e.id: e for e in ENV_SPECS if e.id.startswith("llmgym/TextWorld")}
    expected = {f"llmgym/TextWorld-{c}-{lv}-v0" for c, lv in games.FAMILIES} | {"llmgym/TextWorld-v0"}
    assert set(entries) == expected and len(expected) == 10
    ids = [e.id for e in ENV_SPECS]
    block = ids[ids.index("llmgym/TextWorld-CoinCollector-Easy-v0") : ids.index("llmgym/TextWorld-v0") + 1]
    assert set(block) == expected  # one contiguous block
    for (challenge, level), family in games.FAMILIES.items():
        entry = entries[f"llmgym/TextWorld-{challenge}-{level}-v0"]
        assert entry.kwargs == {"challenge": challenge, "level": level}
        assert entry.max_episode_steps == family.max_episode_steps
        assert gym.spec(entry.id).max_episode_steps == family.max_episode_steps
    assert all(e.extras[0].extra == "textworld" and e.extras[0].kwarg is None for e in entries.values())


def test_without_textworld_check_env_id_and_make_name_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld", None)
    message = r"needs the optional package 'textworld'.*pip install 'llmgym\[textworld\]'"
    for env_id in (EASY, "llmgym/TextWorld-v0"):
        with pytest.raises(MissingDependencyError, match=message):
            check_env_id(env_id)
        with pytest.raises(MissingDependencyError, match=message):
            gym.make(env_id)


@needs_textworld
@pytest.mark.parametrize(
    "env_id",
    [EASY, "llmgym/TextWorld-TreasureHunter-Easy-v0", "llmgym/TextWorld-Cooking-Easy-v0"],
)
def test_following_the_walkthrough_wins_with_the_full_score(env_id):
    env = gym.make(env_id)
    obs, info = env.reset(seed=1)
    objective = info["objective"]
    assert objective and objective in obs and "$$" not in obs and not obs.startswith("\n")
    assert info["success"] is False and info["score"] == 0 and info["max_score"] >= 1
    walkthrough = env.unwrapped.walkthrough
    total = 0.0
    for i, command in enumerate(walkthrough):
        assert command in info["valid_actions"], (command, info["valid_actions"])
        obs, reward, terminated, truncated, info = env.step(command)
        total += reward
        assert terminated == (i == len(walkthrough) - 1) and not truncated
    assert info["success"] is True and total == info["score"] == info["max_score"]
    assert "*** The End ***" in obs and "RESTART" not in obs


@needs_textworld
def test_seeds_pick_games_and_episodes_are_deterministic():
    env, other = gym.make(EASY), gym.make(EASY)
    first = env.reset(seed=3)[0]
    assert env.unwrapped.game_index == 3 and env.unwrapped.pool_size == games.POOL_SIZE
    assert env.reset(seed=3 + games.POOL_SIZE)[0] == first and env.unwrapped.game_index == 3
    env.reset()
    assert env.unwrapped.game_index == 4  # reset() without a seed plays the next game
    assert env.reset(seed=2)[0] != first
    assert _random_rollout(env, 5, 30) == _random_rollout(other, 5, 30)


@needs_textworld
def test_valid_actions_are_sorted_and_the_action_space_samples_them():
    env = gym.make("llmgym/TextWorld-Cooking-Easy-v0")
    _, info = env.reset(seed=0)
    valid = info["valid_actions"]
    assert valid == sorted(set(valid)) and "look" in valid and "inventory" in valid
    env.action_space.seed(0)
    assert {env.action_space.sample() for _ in range(20)} == {"inventory", "look"}  # admitted in every state
    assert "the coin, please" in env.action_space  # any text is a command; admissibility is the env's


@needs_textworld
def test_an_inadmissible_command_is_an_error_that_lists_the_admissible_ones_and_changes_nothing():
    env = gym.make(EASY)
    obs, info = env.reset(seed=0)
    for action in ("fly to the moon", 3, ""):
        with pytest.raises(InvalidActionError) as caught:
            env.step(action)
        assert all(repr(a) in str(caught.value) for a in info["valid_actions"])
        assert "admissible_only=False" in str(caught.value)
    assert env.render() is None and env.unwrapped._render_text() == obs  # the game did not move
    command = info["valid_actions"][0]
    expected = gym.make(EASY)
    expected.reset(seed=0)
    assert env.step(f"  {command.upper()} ") == expected.step(command)  # case and blanks do not matter


@needs_textworld
def test_free_text_goes_to_the_parser():
    env = gym.make(EASY, admissible_only=False)
    _, info = env.reset(seed=0)
    obs, reward, terminated, _, after = env.step("dance   wildly")
    assert obs and reward == 0 and not terminated and after["valid_actions"] == info["valid_actions"]
    env.step(info["valid_actions"][0])
    for bad in ("   ", "x" * 300, None):
        with pytest.raises(InvalidActionError, match="not a command|admissible"):
            env.step(bad)
    with pytest.raises(ConfigError, match="admissible_only="):
        gym.make(EASY, admissible_only="yes")


@needs_textworld
def test_sync_and_async_vector_envs_give_identical_trajectories():
    traces = []
    for mode in ("sync", "async"):
        with make_vec(EASY, 3, mode, seed=2, num_workers=2) as envs:
            envs.reset()
            rng = np.random.default_rng(0)
            trace = [list(envs.prompts)]
            for _ in range(25):
                actions = [c[int(rng.integers(len(c)))] for c in envs.candidates]
                _, rewards, terminated, truncated, infos = envs.step(actions)
                trace.append(
                    (list(envs.prompts), rewards.tolist(), terminated.tolist(), [i["score"] for i in infos])
                )
            traces.append(trace)
    assert traces[0] == traces[1]


@needs_textworld
@pytest.mark.filterwarnings("ignore:Game .* is not fully supported")  # Jericho on the bare game: expected
def test_game_path_plays_your_own_games(tmp_path):
    source = _cached_game()
    for suffix in (".z8", ".json"):
        shutil.copy(source.with_suffix(suffix), tmp_path / f"mine{suffix}")
    mine = tmp_path / "mine.z8"
    env = gym.make("llmgym/TextWorld-v0", game_path=str(mine))
    check_text_env(env, num_steps=10)
    _, info = env.reset(seed=0)
    for command in env.unwrapped.walkthrough:
        *_, info = env.step(command)
    assert info["success"] is True

    shutil.copy(mine, tmp_path / "bare.z8")  # no .json: the parser only, no admissible commands
    with pytest.raises(ConfigError, match="no admissible commands.*admissible_only=False"):
        gym.make("llmgym/TextWorld-v0", game_path=tmp_path / "bare.z8").reset(seed=0)
    free = gym.make("llmgym/TextWorld-v0", game_path=[tmp_path / "bare.z8", mine], admissible_only=False)
    assert free.unwrapped.pool_size == 2
    obs, info = free.reset(seed=0)
    assert "valid_actions" not in info and free.step("look")[0]


@needs_textworld
def test_game_path_errors_name_the_problem(tmp_path):
    (tmp_path / "notes.z8").write_text("not a story file")
    (tmp_path / "game.txt").write_bytes(bytes([8]) * 64)
    (tmp_path / "old.ulx").write_bytes(b"Glul" + bytes(60))
    cases = {
        tmp_path / "missing.z8": "does not exist",
        tmp_path / "notes.z8": "is not a game file",
        tmp_path / "game.txt": "is not a game file",
        tmp_path: "does not exist or is not a file",
    }
    for path, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            gym.make("llmgym/TextWorld-v0", game_path=path)
    import textworld

    if textworld.__version__ >= "1.7":
        with pytest.raises(ConfigError, match="cannot be played by TextWorld.*Glulx"):
            gym.make("llmgym/TextWorld-v0", game_path=tmp_path / "old.ulx").reset(seed=0)
    with pytest.raises(ConfigError, match="both given"):
        gym.make(EASY, game_path=tmp_path / "notes.z8")
    with pytest.raises(ConfigError, match="not a TextWorld game family.*CoinCollector/Easy"):
        gym.make("llmgym/TextWorld-v0", challenge="Zork", level="Easy")


@needs_textworld
def test_two_processes_generating_at_once_make_one_game_identical_to_another_generation(tmp_path):
    cached = _cached_game()  # generated earlier, in another process, maybe on another day
    code = (
        "from llmgym.envs import _textworld_games as g; "
        "print(g.game_file('CoinCollector-Easy', g.family('CoinCollector', 'Easy'), 0))"
    )
    env = {**os.environ, games.CACHE_ENV: str(tmp_path)}
    workers = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    paths = {worker.communicate(timeout=240)[0].strip() for worker in workers}
    assert [worker.returncode for worker in workers] == [0, 0] and len(paths) == 1
    fresh = Path(paths.pop())
    assert fresh.parent.parent.parent.parent == tmp_path
    assert fresh.with_suffix(".z8").read_bytes() == cached.with_suffix(".z8").read_bytes()
    assert _portable_json(fresh) == _portable_json(cached)
    leftovers = [p.name for p in fresh.parent.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no temporary folder left behind


@needs_textworld
def test_a_failed_generation_is_an_error_with_tw_make_output_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(games.CACHE_ENV, str(tmp_path))
    broken = games.GameFamily("tw-coin_collector", {"level": 0}, 10, "no such level")
    with pytest.raises(
        GenerationError,
        match=r"(?s)tw-make tw-coin_collector with \{'level': 0\}.*Expected level to be within",
    ):
        games.game_file("Broken", broken, 0)
    with pytest.raises(ConfigError, match=r"index=8 is out of range"):
        games.game_file("Broken", broken, 8)
    folder = next(tmp_path.glob("textworld-*/Broken-*"))
    assert sorted(p.name for p in folder.iterdir()) == ["game-0.lock"]


_PLAY = """
import sys, gymnasium as gym, llmgym
from llmgym.errors import ConfigError
try:
    gym.make("llmgym/TextWorld-v0", game_path=sys.argv[1]).reset(seed=0)
except ConfigError as exc:
    print("ConfigError:", exc)
"""


def _copy_game(tmp_path: Path) -> Path:
    source = _cached_game()
    for suffix in (".z8", ".json"):
        shutil.copy(source.with_suffix(suffix), tmp_path / f"mine{suffix}")
    return tmp_path / "mine.z8"


@needs_textworld
def test_a_truncated_story_file_is_a_config_error_not_an_exit(tmp_path):
    """The interpreter exits the process on a truncated story file: played in a subprocess to see it."""
    game = _copy_game(tmp_path)
    data = game.read_bytes()
    game.write_bytes(data[: len(data) // 2])
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    played = subprocess.run(
        [sys.executable, "-c", _PLAY, str(game)], capture_output=True, text=True, timeout=120, env=env
    )
    assert played.returncode == 0, played.stdout + played.stderr
    assert f"ConfigError: game_path {str(game)!r} is truncated" in played.stdout
    assert f"{len(data) // 2} bytes" in played.stdout and "regenerate" in played.stdout


@needs_textworld
@pytest.mark.parametrize("damage", ["not json", "no KB", "not an object"])
def test_a_broken_game_json_is_a_config_error_naming_it(tmp_path, damage):
    game = _copy_game(tmp_path)
    description = game.with_suffix(".json")
    if damage == "not json":
        description.write_text("{not json")
    elif damage == "no KB":
        data = json.loads(description.read_text())
        del data["KB"]
        description.write_text(json.dumps(data))
    else:
        description.write_text("[1, 2]")
    with pytest.raises(ConfigError) as info:
        gym.make("llmgym/TextWorld-v0", game_path=game).reset(seed=0)
    message = str(info.value)
    assert str(description) in message and "tw-make" in message and "admissible_only=False" in message
    assert "Glulx" not in message
