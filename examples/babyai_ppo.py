"""Lamorel's PPO_finetuning as a plain script: a scoring agent fine-tuned with PPO on BabyAI-Text.

The policy is the softmax over the LLM's log-probs of BabyAI's 6 actions given a GLAM prompt
(goal, the last 3 observations and actions); a value head sits on the LLM's last context token
(same forward pass) and PPO fine-tunes the whole LLM (see ``llmgym/configs/babyai_ppo.yaml``,
whose settings this script loads; ``babyai_ppo_lora.py`` trains LoRA adapters instead).

Run::

    python examples/babyai_ppo.py                        # SmolLM2-135M-Instruct, 100k env steps
    python examples/babyai_ppo.py --steps 2048 --eval-episodes 20
"""

from __future__ import annotations

import argparse

import gymnasium as gym

from llmgym import load_config
from llmgym.algorithms import PPO
from llmgym.run.build import build_agent, build_llm, make_envs
from llmgym.run.evaluation import evaluate

CONFIG = "babyai_ppo"  # a shipped config (llmgym/configs/babyai_ppo.yaml)


def parse_args(argv: list[str] | None = None, description: str | None = __doc__) -> argparse.Namespace:
    """Command-line options: the model, the budget, and any dotted config override."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="SmolLM2-135M-Instruct", help="model name or local folder")
    parser.add_argument("--steps", type=int, default=None, help="env steps to train (default: the config's)")
    parser.add_argument(
        "--eval-episodes", type=int, default=None, help="greedy evaluation episodes before and after"
    )
    parser.add_argument(
        "overrides", nargs="*", help="dotted config overrides, e.g. algorithm.learning_rate=1e-5"
    )
    return parser.parse_args(argv)


def main(
    argv: list[str] | None = None,
    config_path: str = CONFIG,
    metric: str = "success_rate",
    description: str | None = __doc__,
) -> dict[str, float]:
    """Train with PPO from a config and evaluate greedily before and after.

    ``babyai_ppo_lora.py`` and ``rlhf_like.py`` are this script with another config (and, for the
    token-level task, the mean reward as the metric).

    Returns:
        ``{"before": ..., "after": ...}``, the evaluation ``metric`` before and after training.
    """
    args = parse_args(argv, description)
    overrides = [f"model.name={args.model}", *args.overrides]
    if args.steps is not None:
        overrides.append(f"train.total_env_steps={args.steps}")
    config = load_config(config_path, overrides)
    episodes = args.eval_episodes if args.eval_episodes is not None else config.train.eval_episodes

    probe = gym.make(config.env.id)
    instructions = getattr(probe.unwrapped, "instructions", None)  # the env's description of its actions
    probe.close()
    llm = build_llm(config)  # the LLM with a value head and the PPO updater
    envs = make_envs(config)  # env.num_envs envs, autoreset
    agent = build_agent(config, llm, envs.num_envs, instructions)  # the config's agent.type
    eval_agent = build_agent(config, llm, max(1, min(envs.num_envs, episodes)), instructions)
    try:
        before = evaluate(eval_agent, config, episodes, seed=10_000)[metric]
        ppo = PPO(agent, envs, config.algorithm, seed=config.train.seed)
        ppo.learn(
            config.train.total_env_steps,
            callback=lambda algo, m: print(
                f"env steps {algo.env_steps:>7}  return {m.get('episode_return', float('nan')):.3f}  "
                f"success {m.get('success_rate', float('nan')):.2f}  loss {m.get('loss', float('nan')):.4f}"
            ),
        )
        after = evaluate(eval_agent, config, episodes, seed=10_000)[metric]
    finally:
        envs.close()
        llm.close()
    print(f"greedy {metric} on {episodes} episodes: {before:.3f} before, {after:.3f} after training")
    return {"before": before, "after": after}


if __name__ == "__main__":
    main()
