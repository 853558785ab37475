"""Random admissible policy on every llmgym/TextWorld-* id: mean success and normalised score.

For each id, plays ``--episodes`` episodes with seeds ``0..episodes-1`` (so every game of the pool of
8), each command drawn uniformly among the admissible ones with a generator seeded by the episode
seed, until the game ends or the registered time limit cuts it. Prints a Markdown table of the mean
success and the mean final score over the game's maximum score. Games come from the TextWorld
cache (generated on first use: the first run takes minutes).

Run: ``python benchmarks/textworld_baseline.py [--episodes 20]``.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

import llmgym  # noqa: F401  (registers the ids)
from llmgym.envs._textworld_games import FAMILIES


def run_episode(env: gym.Env, seed: int) -> tuple[bool, float, int]:
    """Play one random admissible episode; return success, normalised score and length."""
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    steps, done = 0, False
    while not done:
        valid = info["valid_actions"]
        _, _, terminated, truncated, info = env.step(valid[int(rng.integers(len(valid)))])
        steps += 1
        done = terminated or truncated
    return bool(info["success"]), info["score"] / info["max_score"], steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    args = parser.parse_args()
    print(f"Random admissible policy, {args.episodes} seeded episodes per id")
    print("| id | max steps | success | normalised score | mean length |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for (challenge, level), family in FAMILIES.items():
        env_id = f"llmgym/TextWorld-{challenge}-{level}-v0"
        env = gym.make(env_id)
        results = [run_episode(env, seed) for seed in range(args.episodes)]
        env.close()
        success, score, length = (float(np.mean(column)) for column in zip(*results))
        print(
            f"| `{env_id}` | {family.max_episode_steps} | {success:.2f} | {score:.2f} | {length:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
