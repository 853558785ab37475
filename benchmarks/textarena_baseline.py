"""Random baseline of every ``llmgym/TextArena-*`` id: mean reward and success over seeded episodes.

The policy plays a random one of ``info["valid_actions"]`` where the game lists its moves
("random-valid"), else a random bracketed token of the observation (the rules and boards show the
move format and often the legal moves: "random-token"), with a seeded NumPy generator. Episode
``k`` is reset with seed ``k``; an episode is cut after ``--max-steps`` steps (counted, reward so far).

Run: ``python benchmarks/textarena_baseline.py [--episodes 20] [--max-steps 300] [IDS...]``.
"""

from __future__ import annotations

import argparse
import re
import time

import gymnasium as gym
import numpy as np

from llmgym.envs import list_envs

_TOKEN = re.compile(r"\[[^\[\]\n]{1,40}\]")


def _action(obs: str, info: dict, rng: np.random.Generator) -> str:
    moves = info.get("valid_actions") or sorted(set(_TOKEN.findall(obs))) or ["[0]"]
    return moves[int(rng.integers(len(moves)))]


def baseline(env_id: str, episodes: int, max_steps: int) -> tuple[str, float, float, float, int]:
    """Play the random policy on one id.

    Args:
        env_id: An ``llmgym/TextArena-*`` id.
        episodes: Episodes, seeded 0 to ``episodes - 1``.
        max_steps: Steps after which an episode is cut.

    Returns:
        ``(policy, mean return, success rate, mean length, episodes cut)``.
    """
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    returns, successes, lengths, cut, listed = [], [], [], 0, False
    for seed in range(episodes):
        obs, info = env.reset(seed=seed)
        listed = listed or "valid_actions" in info
        total, steps, terminated = 0.0, 0, False
        while not terminated and steps < max_steps:
            obs, reward, terminated, truncated, info = env.step(_action(obs, info, rng))
            total, steps = total + float(reward), steps + 1
            terminated = terminated or truncated
        cut += not terminated
        returns.append(total)
        successes.append(bool(info.get("success")))
        lengths.append(steps)
    policy = "random-valid" if listed else "random-token"
    return policy, float(np.mean(returns)), float(np.mean(successes)), float(np.mean(lengths)), cut


def main() -> None:
    """Print the baseline table (Markdown) of the ids given, all TextArena ids by default."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="llmgym ids (default: every llmgym/TextArena-* game id)")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=300)
    args = parser.parse_args()
    ids = args.ids or [
        i for i, _ in list_envs() if i.startswith("llmgym/TextArena-") and i != "llmgym/TextArena-v0"
    ]
    print("| id | policy | mean reward | success | mean steps | cut |")
    print("|---|---|---:|---:|---:|---:|")
    for env_id in ids:
        start = time.perf_counter()
        policy, mean, success, length, cut = baseline(env_id, args.episodes, args.max_steps)
        print(
            f"| `{env_id}` | {policy} | {mean:+.2f} | {success:.2f} | {length:.1f} | {cut} |",
            f"<!-- {time.perf_counter() - start:.1f} s -->",
            flush=True,
        )


if __name__ == "__main__":
    main()
