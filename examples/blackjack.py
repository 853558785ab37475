"""LlamaGym's README example on llmgym: an Agent with three hooks and a plain Gymnasium loop.

The agent generates a reply to each Blackjack observation (in words), :meth:`extract_action`
parses it, and every ``episodes_per_update`` episodes :meth:`terminate_episode` runs a PPO update
on LoRA adapters with a value head (the README's "An agent with LlamaGym's three hooks").

Run::

    python examples/blackjack.py                  # SmolLM2-135M-Instruct, 64 episodes
    python examples/blackjack.py --episodes 16 --episodes-per-update 4
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym

import llmgym


class BlackjackAgent(llmgym.Agent):
    """LlamaGym's Blackjack agent: the three hooks, nothing else."""

    def get_system_prompt(self) -> str:
        """How to answer."""
        return "You are an expert blackjack player. Reply 'Action: 0' to stay or 'Action: 1' to hit."

    def format_observation(self, observation: Any) -> str:
        """The (player sum, dealer card, usable ace) observation in words."""
        return f"You: {observation[0]}. Dealer: {observation[1]}. You have {'an' if observation[2] else 'no'} ace."

    def extract_action(self, response: str) -> int:
        """1 (hit) when the reply says so, else 0 (stay)."""
        return 1 if "1" in response or "hit" in response.lower() else 0


def main(argv: list[str] | None = None) -> list[float]:
    """Play and train; returns the return of every episode."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="SmolLM2-135M-Instruct", help="model name or local folder")
    parser.add_argument("--episodes", type=int, default=64, help="episodes to play")
    parser.add_argument("--episodes-per-update", type=int, default=8, help="episodes between PPO updates")
    parser.add_argument(
        "--max-new-tokens", type=int, default=llmgym.AgentConfig().max_new_tokens, help="reply length"
    )
    args = parser.parse_args(argv)

    ppo = llmgym.PPO(config=llmgym.AlgorithmConfig(learning_rate=1e-4))
    llm = llmgym.LLM(
        llmgym.ModelConfig(name=args.model, lora=llmgym.LoRAConfig(r=8)),
        module_functions={"value": llmgym.ValueHead()},
        updater=ppo.updater(),
    )
    agent = BlackjackAgent(
        llm,
        llmgym.AgentConfig(max_new_tokens=args.max_new_tokens),
        algorithm=ppo,
        episodes_per_update=args.episodes_per_update,
    )
    env = gym.make("llmgym/Blackjack-Text-v0")
    returns: list[float] = []
    try:
        for episode in range(args.episodes):
            observation, info = env.reset(seed=episode)
            done, total = False, 0.0
            while not done:
                action = agent.act(observation)
                observation, reward, terminated, truncated, info = env.step(action)
                agent.assign_reward(reward)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
            stats = agent.terminate_episode()  # trains every episodes_per_update episodes
            if stats:
                recent = returns[-args.episodes_per_update :]
                print(
                    f"episode {episode + 1:>4}  mean return {sum(recent) / len(recent):+.2f}  "
                    f"loss {stats.get('loss', float('nan')):.4f}"
                )
    finally:
        env.close()
        llm.close()
    print(f"mean return over {len(returns)} episodes: {sum(returns) / max(1, len(returns)):+.3f}")
    return returns


if __name__ == "__main__":
    main()
