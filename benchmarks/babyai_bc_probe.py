"""How fast can a config's policy learn to read BabyAI-Text at all? Behaviour cloning of the scripted GoTo policy.

An RL run learns from a noisy reward what this probe gives as labels: it trains the policy that
``llmgym train`` builds for a config (same model, LoRA, action head, prompt) by cross-entropy on the
action of the scripted text-reading policy of ``babyai_scripted.py``, on states visited by a
behaviour that follows the script half of the time and a uniform action otherwise. It prints the
test accuracy (on states of other seeds) along the way and, at the end, the greedy success of the
cloned policy on the trainer's evaluation episodes (seed ``10000 + train.seed``, 100 episodes).

If the policy class needs more labelled states than a run sees in its time budget to read the
target's position, no choice of exploration or advantage estimator gets the run there in that
budget: this separates "the RL signal is too weak" from "the policy learns to read too slowly".

    python benchmarks/babyai_bc_probe.py gotoredball --steps 160
    python benchmarks/babyai_bc_probe.py gotoredball --learning-rate 2e-3 model.lora.layers=[-8,-7,-6,-5,-4,-3,-2,-1]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch
from babyai_scripted import scripted_action

from llmgym.agents.base import BaseAgent
from llmgym.agents.policies import scored_candidates
from llmgym.config import Config, load_config
from llmgym.llm.client import LLM
from llmgym.llm.modules import POLICY_KEY
from llmgym.llm.updater import Updater
from llmgym.run.build import build_agent, build_heads, env_instructions, seed_everything
from llmgym.run.evaluation import evaluate

Sample = tuple[str, list[str], int]  # prompt, scored candidates, index of the scripted action


class CloningUpdater(Updater):
    """One AdamW step of cross-entropy between the action head's logits and the scripted actions."""

    def __init__(self, learning_rate: float, head_learning_rate: float) -> None:
        self.learning_rate = learning_rate
        self.head_learning_rate = head_learning_rate

    def setup(self) -> None:
        """AdamW with the adapters' and the heads' learning rates, as the PPO updater builds it."""
        heads = [p for p in self.llm.module_functions.parameters() if p.requires_grad]
        head_ids = {id(p) for p in heads}
        adapters = [p for p in self.llm.trainable_parameters() if id(p) not in head_ids]
        self.optimizer = torch.optim.AdamW(
            [
                {"params": adapters, "lr": self.learning_rate},
                {"params": heads, "lr": self.head_learning_rate},
            ],
            eps=1e-5,
            weight_decay=0.0,
        )

    def perform_update(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]] | None,
        _current_batch_ids: Sequence[int],
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Cross-entropy step on this minibatch (``labels=``: the scripted action's index per sample)."""
        labels = torch.tensor([kwargs["labels"][i] for i in _current_batch_ids])
        outputs = self.llm.forward(
            [POLICY_KEY], list(contexts), [list(c) for c in candidates or []], require_grad=True
        )
        logits = torch.stack([o[POLICY_KEY] for o in outputs]).float()
        loss = torch.nn.functional.cross_entropy(logits, labels)
        assert self.optimizer is not None
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": float(loss.detach()), "accuracy": float((logits.argmax(-1) == labels).float().mean())}


def collect(config: Config, agent: BaseAgent, count: int, seed: int) -> list[Sample]:
    """``count`` labelled states from episodes of seeds ``seed, seed + 1, ...`` (script or uniform, half each)."""
    rng = random.Random(seed)
    env = gym.make(config.env.id, max_episode_steps=config.env.max_episode_steps, **dict(config.env.kwargs))
    samples: list[Sample] = []
    episode = 0
    while len(samples) < count:
        obs, info = env.reset(seed=seed + episode)
        episode += 1
        history = agent.make_history()
        done = False
        while not done and len(samples) < count:
            history.add_observation(agent.format_observation(obs))
            prompt = history.render().text
            options = list(info["valid_actions"])
            target = scripted_action(obs["view"])
            samples.append((prompt, scored_candidates(prompt, options), options.index(target)))
            action = target if rng.random() < 0.5 else rng.choice(options)
            history.add_action(action)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
    env.close()
    return samples


def accuracy(llm: LLM, samples: list[Sample]) -> float:
    """Share of samples whose most likely candidate is the scripted action."""
    correct = 0
    for start in range(0, len(samples), 64):
        chunk = samples[start : start + 64]
        outputs = llm.forward([POLICY_KEY], contexts=[s[0] for s in chunk], candidates=[s[1] for s in chunk])
        correct += sum(int(torch.as_tensor(o[POLICY_KEY]).argmax()) == s[2] for o, s in zip(outputs, chunk))
    return correct / len(samples)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config", nargs="?", default="gotoredball")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model.lora.r=16")
    parser.add_argument("--steps", type=int, default=160, help="gradient steps")
    parser.add_argument("--minibatch", type=int, default=32)
    parser.add_argument(
        "--learning-rate", type=float, default=None, help="adapters (default: algorithm.learning_rate)"
    )
    parser.add_argument(
        "--head-learning-rate", type=float, default=None, help="default: algorithm.head_learning_rate"
    )
    parser.add_argument("--train-states", type=int, default=2048)
    parser.add_argument("--test-states", type=int, default=256)
    parser.add_argument("--log-every", type=int, default=20)
    parser.add_argument("--eval-episodes", type=int, default=100)
    args = parser.parse_args()
    config = load_config(args.config, args.overrides)
    if not (config.agent.type == "scoring" and config.agent.action_head):
        parser.error(
            "the probe clones into the action head: use a scoring config with agent.action_head=true"
        )
    seed_everything(config.train.seed)
    updater = CloningUpdater(
        args.learning_rate or config.algorithm.learning_rate,
        args.head_learning_rate or config.algorithm.head_learning_rate,
    )
    llm = LLM(
        config.model, module_functions=build_heads(config), updater=updater, distributed=config.distributed
    )
    try:
        agent = build_agent(
            config, llm, min(args.eval_episodes, config.train.eval_num_envs or 16), env_instructions(config)
        )
        train = collect(config, agent, args.train_states, seed=0)
        test = collect(config, agent, args.test_states, seed=500_000)
        print(f"{len(train)} train states, {len(test)} test states (episodes from seed 500000)")
        started = time.perf_counter()
        print(f"step 0: test accuracy {accuracy(llm, test):.3f}", flush=True)
        rng = random.Random(config.train.seed)
        for step in range(1, args.steps + 1):
            batch = rng.sample(train, args.minibatch)
            stats = llm.update([s[0] for s in batch], [s[1] for s in batch], labels=[s[2] for s in batch])[0]
            if step % args.log_every == 0 or step == args.steps:
                print(
                    f"step {step} ({step * args.minibatch} labelled states seen): loss {stats['loss']:.3f}, "
                    f"test accuracy {accuracy(llm, test):.3f}, {time.perf_counter() - started:.0f} s",
                    flush=True,
                )
        if args.eval_episodes:
            result = evaluate(agent, config, args.eval_episodes, seed=10_000 + config.train.seed, greedy=True)
            print(
                f"cloned policy, greedy: success {result['success_rate']:.2f} on {args.eval_episodes} episodes"
            )
    finally:
        llm.close()


if __name__ == "__main__":
    main()
