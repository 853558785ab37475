"""Zero-shot success of a ScoringAgent (greedy) on BabyAI-Text levels, next to a uniform-random policy.

This is the baseline training must beat. Both policies play the same seeded episodes
(episode j uses seed SEED + j).

    python benchmarks/zero_shot.py --episodes 100 --levels GoToRedBall GoToLocal [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import random
import time

import gymnasium as gym

import llmgym
from llmgym.config import load_config
from llmgym.run.build import build_agent
from llmgym.run.evaluation import evaluate


def random_policy(env_id: str, episodes: int, seed: int, max_steps: int) -> float:
    rng = random.Random(seed)
    env = gym.make(env_id, max_episode_steps=max_steps)
    wins = 0
    for episode in range(episodes):
        _, info = env.reset(seed=seed + episode)
        done = False
        while not done:
            _, reward, terminated, truncated, info = env.step(rng.choice(info["valid_actions"]))
            done = terminated or truncated
        wins += bool(info.get("success"))
    env.close()
    return wins / episodes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--levels", nargs="+", default=["GoToRedBall", "GoToLocal"])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=32, help="episode step limit")
    parser.add_argument("--dtype", default="float32", help="model.dtype (bfloat16 scores ~3x faster on CPU)")
    parser.add_argument("--seed", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=3, help="agent.history_length")
    parser.add_argument("--chat-template", action="store_true", help="render prompts with the chat template")
    args = parser.parse_args()
    print(f"{'level':<14} {'llm greedy':>10} {'random':>8} {'episodes':>8} {'seconds':>8}")
    llm = None
    for level in args.levels:
        env_id = f"llmgym/BabyAI-Text-{level}-v0"
        config = load_config(
            None,
            [
                f"model.name={args.model}",
                f"model.dtype={args.dtype}",
                f"env.id={env_id}",
                f"env.num_envs={args.num_envs}",
                f"env.max_episode_steps={args.max_steps}",
                f"agent.history_length={args.history}",
                f"agent.use_chat_template={str(args.chat_template).lower()}",
            ],
        )
        if llm is None:
            llm = llmgym.LLM(config.model)
        env = gym.make(env_id)
        instructions = env.unwrapped.instructions
        env.close()
        agent = build_agent(config, llm, args.num_envs, instructions)
        start = time.perf_counter()
        result = evaluate(agent, config, args.episodes, seed=args.seed)
        seconds = time.perf_counter() - start
        rand = random_policy(env_id, args.episodes, args.seed, args.max_steps)
        print(
            f"{level:<14} {result['success_rate']:>10.3f} {rand:>8.3f} {args.episodes:>8d} {seconds:>8.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
