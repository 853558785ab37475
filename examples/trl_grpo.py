"""Train a model on an llmgym env with TRL's GRPOTrainer, through either adapter (docs/trl.md).

- ``--adapter rollout`` (default): ``rollout_func=EnvRollout(...)`` plays whole episodes token-in/token-out;
  works with any causal LM (SmolLM2 included), no tool-calling chat template needed.
- ``--adapter environment``: ``environment_factory=EnvFactory(...)``; the env is a tool the model calls.
  Needs a chat template TRL parses for tool calls (Qwen2.5/Qwen3, Llama 3.1, ...).

Each GRPO group of ``--generations`` episodes starts from one seeded state.

Run::

    python examples/trl_grpo.py                                   # SmolLM2-135M-Instruct, EchoWord, rollout_func
    python examples/trl_grpo.py --env llmgym/Countdown-v0 --steps 50
    python examples/trl_grpo.py --model Qwen/Qwen2.5-0.5B-Instruct --adapter environment
"""

from __future__ import annotations

import argparse
import os
import tempfile

from llmgym.config import ModelConfig
from llmgym.integrations.trl import EnvFactory, EnvRollout, env_return_reward, environment_dataset
from llmgym.llm.models import load_model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", default="SmolLM2-135M-Instruct", help="model name, folder or hub id (llmgym's model.name)"
    )
    parser.add_argument("--env", default="llmgym/EchoWord-v0", help="llmgym env id")
    parser.add_argument("--adapter", choices=("rollout", "environment"), default="rollout")
    parser.add_argument("--steps", type=int, default=20, help="GRPO optimizer steps")
    parser.add_argument(
        "--generations", type=int, default=4, help="episodes per group (one start state each)"
    )
    parser.add_argument("--seeds", type=int, default=64, help="start states (dataset rows)")
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--max-new-tokens", type=int, default=16, help="tokens per action (rollout adapter)")
    args = parser.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = load_model(ModelConfig(name=args.model, dtype="float32"))
    with tempfile.TemporaryDirectory(prefix="trl-grpo-") as out:
        config = GRPOConfig(
            output_dir=out,
            max_steps=args.steps,
            per_device_train_batch_size=args.generations,
            num_generations=args.generations,
            learning_rate=args.learning_rate,
            logging_steps=1,
            max_completion_length=256,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            use_cpu=model.device.type == "cpu",
        )
        if args.adapter == "rollout":
            rollout = EnvRollout(args.env, max_new_tokens=args.max_new_tokens)
            trainer = GRPOTrainer(
                model,
                reward_funcs=env_return_reward,
                args=config,
                processing_class=tokenizer,
                train_dataset=rollout.dataset(range(args.seeds)),
                rollout_func=rollout,
            )
        else:
            factory = EnvFactory(args.env)
            trainer = GRPOTrainer(
                model,
                args=config,
                processing_class=tokenizer,
                environment_factory=factory,
                train_dataset=environment_dataset(factory, range(args.seeds)),
            )
        trainer.train()
    rewards = [round(h["reward"], 3) for h in trainer.state.log_history if "reward" in h]
    print(f"mean episode return per step: {rewards}")


if __name__ == "__main__":
    main()
