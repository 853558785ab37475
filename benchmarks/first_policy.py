"""The policy a run starts from: how often each action is sampled on the first states, and its success.

A run can only learn from what its first policy tries. This prints, for a config, the mean
probability of each candidate action on the first observation of ``--states`` seeded episodes
(at the training temperature, with the heads ``llmgym train`` builds), and the success rate of the
untrained policy sampled and greedy over ``--episodes`` seeded episodes.

    python benchmarks/first_policy.py quickstart
    python benchmarks/first_policy.py quickstart agent.action_head=false agent.temperature=2
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import gymnasium as gym
import torch

from llmgym.agents.policies import CandidatePolicy, policy_logits_key, scored_candidates
from llmgym.config import load_config
from llmgym.run.build import build_agent, build_llm, env_instructions, seed_everything
from llmgym.run.evaluation import evaluate


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. agent.temperature=2")
    parser.add_argument("--states", type=int, default=64, help="first observations averaged over")
    parser.add_argument("--episodes", type=int, default=100, help="episodes of each success rate (0: skip)")
    parser.add_argument("--seed", type=int, default=12345)
    args = parser.parse_args()
    config = load_config(args.config, args.overrides)
    seed_everything(config.train.seed)
    llm = build_llm(config)
    try:
        agent = build_agent(config, llm, 1, env_instructions(config))
        env = gym.make(config.env.id, **dict(config.env.kwargs))
        totals: dict[str, float] = defaultdict(float)
        key = policy_logits_key(llm.module_function_keys)
        for j in range(args.states):
            obs, info = env.reset(seed=args.seed + j)
            agent.reset_env(0)
            agent.histories[0].add_observation(agent.format_observation(obs))
            prompt = agent.histories[0].render().text
            agent.reset_env(0)
            options = agent.get_candidates(obs, info) or []
            out = llm.forward(
                [key],
                contexts=[prompt],
                candidates=[scored_candidates(prompt, options)],
                normalize=config.agent.score_normalize,
            )[0]
            probs = CandidatePolicy(config.agent.temperature).log_probs(torch.as_tensor(out[key])).exp()
            for option, p in zip(options, probs.tolist()):
                totals[option] += p / args.states
        env.close()
        print(
            f"policy logits: {key}, temperature {config.agent.temperature:g}; mean probability on {args.states} first states"
        )
        for option, p in sorted(totals.items(), key=lambda kv: -kv[1]):
            print(f"  {option:<20} {p:.3f}")
        if args.episodes:
            width = min(args.episodes, config.train.eval_num_envs)
            for greedy in (False, True):
                agent = build_agent(config, llm, width, env_instructions(config))
                result = evaluate(agent, config, args.episodes, seed=args.seed, greedy=greedy)
                label = "greedy" if greedy else "sampled"
                print(
                    f"untrained policy, {label}: success {result['success_rate']:.3f}, return {result['episode_return']:.3f}"
                )
    finally:
        llm.close()


if __name__ == "__main__":
    main()
