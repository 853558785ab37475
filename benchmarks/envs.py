"""Env throughput: BabyAI-Text GoToLocal, 16 envs, env steps/s including prompt building.

Compares, in one run, raw minigrid stepping (16 ``BabyAI-GoToLocal-v0`` envs in a loop, no text)
with llmgym's ``TextVectorEnv`` in sync and async mode (GLAM descriptions, autoreset, prompts).
Random actions among the 6, same seeds everywhere.

Run: ``python benchmarks/envs.py [--steps 300] [--num-envs 16]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time

import gymnasium as gym
import numpy as np

from llmgym.envs import make_vec

ENV_ID = "llmgym/BabyAI-Text-GoToLocal-v0"


def _actions(steps: int, num_envs: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 6, size=(steps, num_envs))


def bench_raw(steps: int, num_envs: int) -> float:
    import minigrid  # noqa: F401  (registers the BabyAI-* ids)

    envs = [gym.make("BabyAI-GoToLocal-v0").unwrapped for _ in range(num_envs)]
    actions = _actions(steps, num_envs).tolist()
    with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints rejected layouts
        for i, env in enumerate(envs):
            env.reset(seed=i)
        start = time.perf_counter()
        for row in actions:
            for env, action in zip(envs, row):
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()
        elapsed = time.perf_counter() - start
    return steps * num_envs / elapsed


def bench_text(mode: str, steps: int, num_envs: int) -> float:
    with make_vec(ENV_ID, num_envs, mode, seed=0) as envs:
        envs.reset()
        actions = _actions(steps, num_envs).tolist()
        start = time.perf_counter()
        for row in actions:
            envs.step(row)
            prompts = envs.prompts  # built at every step
        elapsed = time.perf_counter() - start
    assert len(prompts) == num_envs
    return steps * num_envs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="vector steps per measurement")
    parser.add_argument("--num-envs", type=int, default=16)
    args = parser.parse_args()
    bench_raw(20, args.num_envs)  # warm-up
    rows = [("raw minigrid (no text), loop", bench_raw(args.steps, args.num_envs))]
    rows.append(("llmgym TextVectorEnv sync", bench_text("sync", args.steps, args.num_envs)))
    rows.append(("llmgym TextVectorEnv async", bench_text("async", args.steps, args.num_envs)))
    baseline = rows[0][1]
    print(f"BabyAI-Text GoToLocal, {args.num_envs} envs, {args.steps} vector steps, random actions")
    print(f"{'setup':<32} {'env steps/s':>12} {'vs raw':>8}")
    for name, rate in rows:
        print(f"{name:<32} {rate:>12,.0f} {rate / baseline:>7.2f}x")


if __name__ == "__main__":
    main()
