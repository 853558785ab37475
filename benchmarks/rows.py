"""Benchmark the row layout of scoring on a BabyAI-Text rollout step (SmolLM2-135M-Instruct, CPU).

The contexts are those of one collection step of the GoToRedBall runs: ``--envs`` envs, each
reset with its own seed and walked a few random steps, so the prompts differ in length. They are
scored with one context per row (``model.row_tokens: 0``, the default) and with several contexts
per row as a token trie (``model.row_tokens: N``), in the same run; the ratio is printed with the
largest difference of the policy's log-probs (the scores are equal up to rounding: bf16 rounds
differently in another layout).

Usage: ``python benchmarks/rows.py [--dtype bfloat16] [--envs 16] [--row-tokens 512]``.
"""

from __future__ import annotations

import argparse
import random

import torch
from score import best_time

ACTIONS = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]
PROMPT = "Possible actions of the agent: " + ", ".join(ACTIONS) + "\n{obs}\nAction:"


def rollout_contexts(envs: int, seed: int = 0) -> list[str]:
    """Prompts of one collection step: each env reset with its own seed, then 0-5 random moves."""
    import gymnasium as gym

    import llmgym  # noqa: F401  (registers the envs)

    env = gym.make("llmgym/BabyAI-Text-GoToRedBall-v0")
    rng = random.Random(seed)
    contexts = []
    for index in range(envs):
        obs, _ = env.reset(seed=seed * 1000 + index)
        for _ in range(rng.randint(0, 5)):
            obs, _, terminated, truncated, _ = env.step(rng.choice(ACTIONS[:3]))
            if terminated or truncated:  # a finished episode cannot step again
                break
        contexts.append(PROMPT.format(obs=obs["text"]))
    env.close()
    return contexts


def main() -> None:
    """Run the benchmark and print the table."""
    from llmgym.config import ModelConfig
    from llmgym.llm.client import LLM

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--envs", type=int, default=16, help="contexts per step (env.num_envs)")
    parser.add_argument("--row-tokens", type=int, default=512, help="row length of the packed layout")
    args = parser.parse_args()
    contexts = rollout_contexts(args.envs)
    candidates = [[" " + a for a in ACTIONS]] * len(contexts)
    llm = LLM(ModelConfig(name="SmolLM2-135M-Instruct", device="cpu", dtype=args.dtype))
    config = llm.backend.config
    results = {}
    for rows in (0, args.row_tokens):
        config.row_tokens = rows
        results[rows] = (
            best_time(lambda: llm.score(contexts, candidates), 3),
            llm.score(contexts, candidates),
        )
    (t_one, one), (t_packed, packed) = results[0], results[args.row_tokens]
    policy = [torch.log_softmax(torch.stack(s), -1) for s in (one, packed)]
    tokens = sum(len(llm.tokenizer(c)["input_ids"]) for c in contexts)
    print(
        f"{len(contexts)} GoToRedBall contexts x {len(ACTIONS)} actions, {tokens} context tokens, {args.dtype}, "
        f"threads={torch.get_num_threads()}"
    )
    print(f"{'layout':<36}{'seconds':>9}")
    print(f"{'one context per row (row_tokens 0)':<36}{t_one:>9.2f}")
    print(f"{f'token-trie rows (row_tokens {args.row_tokens})':<36}{t_packed:>9.2f}")
    print(
        f"packed rows are {t_one / t_packed:.2f}x faster; max |policy log-prob diff| "
        f"{(policy[0] - policy[1]).abs().max().item():.1e}"
    )


if __name__ == "__main__":
    main()
