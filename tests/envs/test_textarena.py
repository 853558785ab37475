from __future__ import annotations

import random
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from llmgym.envs import check_text_env, make_vec
from llmgym.envs.registration import list_envs
from llmgym.envs.textarena_games import EXCLUDED, SINGLE_PLAYER, TWO_PLAYER, VARIANTS, llmgym_id
from llmgym.errors import ConfigError, InputError, InvalidActionError, MissingDependencyError

pytest.importorskip("textarena")


def _play(env_id, seed, steps=30, **kwargs):
    """A seeded random-move rollout: (observation, reward, terminated, info) per step."""
    env = gym.make(env_id, **kwargs)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    trace = [(obs, info.get("valid_actions"))]
    for _ in range(steps):
        moves = info.get("valid_actions") or ["[0]", "[1 1]", "hello"]
        obs, reward, terminated, _, info = env.step(moves[int(rng.integers(len(moves)))])
        trace.append((obs, reward, terminated, info.get("success")))
        if terminated:
            break
    return trace


def test_every_runnable_game_has_one_id_and_the_tables_are_consistent():
    ids = {env_id for env_id, _ in list_envs() if env_id.startswith("llmgym/TextArena-")}
    assert ids == {llmgym_id(game) for game in [*SINGLE_PLAYER, *TWO_PLAYER]} | {"llmgym/TextArena-v0"}
    assert not set(SINGLE_PLAYER) & set(TWO_PLAYER)
    assert set(VARIANTS.values()) <= set(SINGLE_PLAYER) | set(TWO_PLAYER)
    assert not (set(SINGLE_PLAYER) | set(TWO_PLAYER) | set(VARIANTS)) & set(EXCLUDED)


def test_seeded_episodes_are_deterministic_and_leave_global_random_alone():
    state = random.getstate()
    assert _play("llmgym/TextArena-ConnectFour-v0", 3) == _play("llmgym/TextArena-ConnectFour-v0", 3)
    assert _play("llmgym/TextArena-ConnectFour-v0", 3) != _play("llmgym/TextArena-ConnectFour-v0", 4)
    assert random.getstate() == state


def test_valid_actions_where_listed_and_illegal_moves_raise():
    env = gym.make("llmgym/TextArena-TicTacToe-v0")
    obs, info = env.reset(seed=0)
    assert info["valid_actions"] == [f"[{i}]" for i in range(9)] and "Tic Tac Toe" in obs
    obs, reward, terminated, _, info = env.step("[4]")
    assert "[4]" not in info["valid_actions"] and len(info["valid_actions"]) == 7  # the opponent moved too
    for bad in ("[4]", "[9]", "center please", 3.5):
        with pytest.raises(
            InvalidActionError, match=r"not a legal move of TicTacToe-v0.*'\[0\]'|not a legal move"
        ):
            env.step(bad)
    assert env.step(0)[4]["valid_actions"] != info["valid_actions"]  # an index into valid_actions works
    hanoi = gym.make("llmgym/TextArena-TowerOfHanoi-v0")
    assert hanoi.reset(seed=0)[1]["valid_actions"] == ["[A B]", "[A C]"]
    assert "valid_actions" not in gym.make("llmgym/TextArena-Mastermind-v0").reset(seed=0)[1]


def _hanoi(n, source, target, spare):
    if n:
        yield from _hanoi(n - 1, source, spare, target)
        yield f"[{source} {target}]"
        yield from _hanoi(n - 1, spare, target, source)


@pytest.mark.parametrize("game, disks", [("TowerOfHanoi-v0", 3), ("TowerOfHanoi-v0-medium", 4)])
def test_tower_of_hanoi_solved_by_the_recursive_solution(game, disks):
    env = gym.make("llmgym/TextArena-v0", game=game)
    env.reset(seed=0)
    moves = list(_hanoi(disks, "A", "C", "B"))
    for i, move in enumerate(moves):
        _, reward, terminated, _, info = env.step(move.lower())  # case does not matter
        assert terminated == (i == len(moves) - 1) and info["success"] == terminated
    assert reward == 1.0 and "solved" in info["reason"]


def test_guess_the_number_solved_by_binary_search():
    for seed in range(3):
        env = gym.make("llmgym/TextArena-GuessTheNumber-v0")
        obs, info = env.reset(seed=seed)
        low, high, terminated = 1, 20, False
        while not terminated:
            guess = (low + high) // 2
            obs, reward, terminated, _, info = env.step(f"[{guess}]")
            if "higher" in obs.splitlines()[-1]:
                low = guess + 1
            elif "lower" in obs.splitlines()[-1]:
                high = guess - 1
        assert reward == 1.0 and info["success"]


def test_free_text_invalid_moves_follow_textarena_retry_then_loss():
    env = gym.make("llmgym/TextArena-Mastermind-v0")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("no brackets here")
    assert not terminated and info["invalid_move"] and "invalid move" in obs.lower() and reward == 0.0
    _, reward, terminated, _, info = env.step("still none")
    assert terminated and info["invalid_move"] and not info["success"]
    with pytest.raises(InputError, match="after the episode ended"):
        env.step("[1 2 3 4]")


def test_two_player_agent_side_and_opponent_determinism():
    first = gym.make("llmgym/TextArena-TicTacToe-v0", agent_player=1)
    obs, info = first.reset(seed=5)
    assert len(info["valid_actions"]) == 8 and "Opponent: [" in obs  # the opponent moved first
    assert _play("llmgym/TextArena-Othello-v0", 1) == _play(
        "llmgym/TextArena-Othello-v0", 1
    )  # bracket-token opponent
    outcomes = {trace[-1][1:] for trace in (_play("llmgym/TextArena-TicTacToe-v0", s) for s in range(12))}
    assert {reward for reward, *_ in outcomes} >= {1.0, -1.0}
    assert all(success == (reward == 1.0) for reward, terminated, success in outcomes if terminated)


def test_variant_and_agent_player_pass_check_text_env():
    check_text_env(gym.make("llmgym/TextArena-v0", game="ConnectFour-v0-large", agent_player=1), num_steps=10)
    check_text_env(gym.make("llmgym/TextArena-v0", game="Nim-v0-medium"), num_steps=10)


def test_render_ansi_is_the_observation():
    env = gym.make("llmgym/TextArena-Nim-v0", render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert env.render() == obs and "Nim" in env.unwrapped.instructions


def test_make_vec_sync_equals_async():
    traces = []
    for mode in ("sync", "async"):
        with make_vec("llmgym/TextArena-TicTacToe-v0", 2, mode, seed=7, num_workers=2) as envs:
            envs.reset()
            rng = np.random.default_rng(0)
            trace = []
            for _ in range(20):
                actions = [c[int(rng.integers(len(c)))] for c in envs.candidates]
                _, rewards, terminated, _, infos = envs.step(actions)
                trace.append((list(envs.prompts), rewards.tolist(), terminated.tolist()))
            traces.append(trace)
    assert traces[0] == traces[1]
    assert any(any(t[2]) for t in traces[0])


@pytest.mark.parametrize(
    "game, reason",
    [("Wordle-v0", "NLTK"), ("Debate-v0", "API key"), ("Chess-v0", "SyntaxError"), ("Taboo-v0", "players")],
)
def test_excluded_games_say_why(game, reason):
    with pytest.raises(ConfigError, match=rf"{game!r} is not available in llmgym: it .*{reason}"):
        gym.make("llmgym/TextArena-v0", game=game)


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="Did you mean 'TicTacToe-v0'"):
        gym.make("llmgym/TextArena-v0", game="TicTacToe-v1")
    with pytest.raises(ConfigError, match="agent_player=1 is invalid for 'Sudoku-v0', a 1-player game"):
        gym.make("llmgym/TextArena-Sudoku-v0", agent_player=1)
    with pytest.raises(ConfigError, match="history"):
        gym.make("llmgym/TextArena-Sudoku-v0", history=-1)


def test_missing_textarena_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "textarena", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'llmgym\[textarena\]'"):
        gym.make("llmgym/TextArena-TicTacToe-v0")


def test_import_llmgym_does_not_import_textarena():
    code = (
        "import sys, gymnasium as gym, llmgym; assert 'llmgym/TextArena-Sudoku-v0' in gym.registry; "
        "assert 'textarena' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
