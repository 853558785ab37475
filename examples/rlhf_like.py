"""Token-level PPO where each token is an action (Lamorel's RLHF-like example, RL4LMs' setup).

``llmgym/TextGen-v0`` in ``mode="token"`` gives a review opening as the prompt; every step the
``TokenAgent`` samples one token (the action), the env appends it, and the episode ends at EOS or
after 16 tokens with a lexicon sentiment reward. A per-token KL penalty to the reference policy
(the LLM with its LoRA adapter disabled) keeps the text fluent, and a value head on each token's
state gives the per-token advantages (see ``configs/rlhf_like_token.yaml``, which this loads).

Run::

    python examples/rlhf_like.py                         # SmolLM2-135M-Instruct + LoRA, 8192 tokens
    python examples/rlhf_like.py --steps 1024 --eval-episodes 10
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym

from llmgym import load_config
from llmgym.algorithms import PPO
from llmgym.algorithms.trainer import build_agent, build_llm, evaluate, make_envs

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "rlhf_like_token.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options: the model, the budget, and any dotted config override."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="SmolLM2-135M-Instruct", help="model name or local folder")
    parser.add_argument("--steps", type=int, default=None, help="env steps to train (default: the config's)")
    parser.add_argument("--eval-episodes", type=int, default=None, help="greedy evaluation episodes before and after")
    parser.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. algorithm.learning_rate=1e-5")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Train and evaluate; returns the mean greedy reward before and after training."""
    args = parse_args(argv)
    overrides = [f"model.name={args.model}", *args.overrides]
    if args.steps is not None:
        overrides.append(f"train.total_env_steps={args.steps}")
    config = load_config(CONFIG, overrides)
    episodes = args.eval_episodes if args.eval_episodes is not None else config.train.eval_episodes

    probe = gym.make(config.env.id)
    instructions = getattr(probe.unwrapped, "instructions", None)  # the env's description of its actions
    probe.close()
    llm = build_llm(config)                      # the LLM with a value head and the PPO updater
    envs = make_envs(config)                     # env.num_envs TextGen envs in token mode
    agent = build_agent(config, llm, envs.num_envs, instructions)  # TokenAgent: one sampled token per step
    eval_agent = build_agent(config, llm, max(1, min(envs.num_envs, episodes)), instructions)
    try:
        before = evaluate(eval_agent, config, episodes, seed=10_000)["episode_return"]
        ppo = PPO(agent, envs, config.algorithm, seed=config.train.seed)
        ppo.learn(config.train.total_env_steps, callback=lambda algo, m: print(
            f"env steps {algo.env_steps:>7}  return {m.get('episode_return', float('nan')):.3f}  "
            f"success {m.get('success_rate', float('nan')):.2f}  loss {m.get('loss', float('nan')):.4f}"
        ))
        after = evaluate(eval_agent, config, episodes, seed=10_000)["episode_return"]
    finally:
        envs.close()
        llm.close()
    print(f"greedy mean reward on {episodes} prompts: {before:.3f} before, {after:.3f} after training")
    return {"before": before, "after": after}


if __name__ == "__main__":
    main()
