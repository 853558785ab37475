"""Env throughput: BabyAI-Text GoToLocal, 16 envs, env steps/s including prompt building.

Compares, in one run, raw minigrid stepping (16 ``BabyAI-GoToLocal-v0`` envs in a loop, no text)
with llmgym's ``TextVectorEnv`` in sync and async mode (GLAM descriptions, autoreset, prompts).
Random actions among the 6, same seeds everywhere. Next to each rate it prints the env time per
vector step as a share of one LLM step: one ``LLM.score`` call on the 16 BabyAI prompts x 6 actions
with SmolLM2-135M-Instruct on CPU (what ``benchmarks/score.py`` measures), timed in the same run
when the model is available (skip with ``--no-llm``).

Run: ``python benchmarks/envs.py [--steps 300] [--num-envs 16] [--no-llm]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time

import gymnasium as gym
import numpy as np

from llmgym.envs import make_vec
from llmgym.errors import LLMGymError

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
            prompts = envs.prompts  # what a prompt-per-step loop would read
        elapsed = time.perf_counter() - start
    assert len(prompts) == num_envs
    return steps * num_envs / elapsed


def bench_llm(num_envs: int, repeats: int = 3) -> float:
    """Best time of one ``LLM.score`` call on the first prompts of ``num_envs`` envs x 6 actions."""
    from llmgym.config import ModelConfig
    from llmgym.llm.client import LLM

    with make_vec(ENV_ID, num_envs, "sync", seed=0) as envs:
        envs.reset()
        prompts = envs.prompts
        candidates = [list(actions or ()) for actions in envs.candidates]
    llm = LLM(ModelConfig(name="SmolLM2-135M-Instruct", device="cpu"))
    try:
        llm.score(prompts, candidates)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            llm.score(prompts, candidates)
            times.append(time.perf_counter() - start)
    finally:
        llm.close()
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="vector steps per measurement")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--no-llm", action="store_true", help="skip timing the LLM scoring step")
    args = parser.parse_args()
    bench_raw(20, args.num_envs)  # warm-up
    rows = [("raw minigrid (no text), loop", bench_raw(args.steps, args.num_envs))]
    rows.append(("llmgym TextVectorEnv sync", bench_text("sync", args.steps, args.num_envs)))
    rows.append(("llmgym TextVectorEnv async", bench_text("async", args.steps, args.num_envs)))
    llm_seconds = None
    if not args.no_llm:
        try:
            llm_seconds = bench_llm(args.num_envs)
        except (ImportError, LLMGymError) as error:  # torch/transformers or the model missing
            print(f"LLM scoring step not timed: {error}")
    baseline = rows[0][1]
    print(f"BabyAI-Text GoToLocal, {args.num_envs} envs, {args.steps} vector steps, random actions")
    if llm_seconds is not None:
        print(
            f"LLM step (LLM.score, {args.num_envs} prompts x 6 actions, SmolLM2-135M CPU): "
            f"{llm_seconds * 1e3:,.0f} ms"
        )
    print(f"{'setup':<32} {'env steps/s':>12} {'vs raw':>8} {'ms/vector step':>15} {'% of LLM step':>14}")
    for name, rate in rows:
        seconds = args.num_envs / rate
        share = f"{seconds / llm_seconds:.2%}" if llm_seconds is not None else "n/a"
        print(f"{name:<32} {rate:>12,.0f} {rate / baseline:>7.2f}x {seconds * 1e3:>15.2f} {share:>14}")


if __name__ == "__main__":
    main()
