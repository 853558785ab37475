"""Rollout collection with and without the frozen-trunk cache (a config's PPO run, CPU).

A step that changes nothing in the environment (BabyAI's "pick up", "drop" and "toggle" in a
"go to" level, a turn that comes back to the same view) gives the agent the same prompt again.
With LoRA on the top blocks only, the frozen-trunk cache (``model.trunk_cache_mb``) runs such a
prompt through the trainable top blocks alone. This script runs the trainer's own collection
(``--iterations`` rollouts of the config's PPO run, from its seed) twice in this run: with the
config's cache, and with ``model.trunk_cache_mb=0`` (the baseline, every prompt through the whole
model). It prints the time of each side, the ratio, the share of scored prompts that ran from
the cache, and whether both sides took the same actions (bf16 rounds differently in another
batch layout, so an action sampled near a tie may differ).

``--checkpoint RUN_DIR`` loads a trained adapter first (a policy that walks towards the goal
repeats fewer prompts than the zero-shot one).

Usage: ``python benchmarks/collect.py [--config gotoredball] [--iterations 2]
[--checkpoint RUN_DIR]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import torch


def collect(
    config_path: str, cache_mb: int, iterations: int, checkpoint: str | None
) -> tuple[float, list[Any], float]:
    """Run ``iterations`` collections of the config's PPO run; returns ``(seconds, actions, hit share)``."""
    from llmgym.checkpoint import latest_checkpoint
    from llmgym.config import load_config
    from llmgym.run.trainer import Trainer

    config = load_config(config_path, [f"model.trunk_cache_mb={cache_mb}"])
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(
            config, run_dir
        )  # the trainer's own LLM, envs, agent and algorithm, seeded as in a run
        if checkpoint is not None:
            trainer.llm.load(latest_checkpoint(checkpoint) / "llm")
        start = time.perf_counter()
        for _ in range(iterations):
            trainer.algorithm.collect_rollout()
        seconds = time.perf_counter() - start
        cache = trainer.llm.backend.trunk_cache
        share = cache.hits / max(cache.hits + cache.misses, 1)
        trainer.close()
    return seconds, trainer.algorithm.action_log, share


def main() -> None:
    """Run both sides and print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default="gotoredball", help="YAML config file or shipped config name")
    parser.add_argument("--iterations", type=int, default=2, help="rollouts to collect per side")
    parser.add_argument("--checkpoint", default=None, help="run directory whose latest adapter to load")
    parser.add_argument("--cache-mb", type=int, default=1024, help="cache budget of the cached side")
    args = parser.parse_args()
    rows = {
        name: collect(args.config, cache_mb, args.iterations, args.checkpoint)
        for name, cache_mb in (("whole model for every prompt", 0), ("frozen-trunk cache", args.cache_mb))
    }
    print(
        f"{args.config}: {args.iterations} rollouts per side, "
        f"{'trained adapter of ' + args.checkpoint if args.checkpoint else 'zero-shot policy'}, "
        f"threads={torch.get_num_threads()}"
    )
    print(f"{'method':<30}{'collect s':>10}{'from cache':>12}")
    for name, (seconds, _, share) in rows.items():
        print(f"{name:<30}{seconds:>10.2f}{share:>12.0%}")
    (plain, plain_actions, _), (cached, cached_actions, _) = rows.values()
    same = sum(
        a == b for step_a, step_b in zip(plain_actions, cached_actions) for a, b in zip(step_a, step_b)
    )
    total = sum(len(step) for step in plain_actions)
    print(f"collection {plain / cached:.2f}x faster with the cache; same action in {same}/{total} env steps")


if __name__ == "__main__":
    main()
