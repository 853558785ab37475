"""Ray backend overhead: one PPO iteration in-process vs on 2 Ray LLM servers, and Ray's start-up time.

Builds the run of a config (default ``quickstart``: SmolLM2-135M + LoRA + PPO on BabyAI-Text, 16
envs) twice, in-process and with ``distributed.llm_processes=2`` (a private local Ray instance),
runs ``--warmup`` iterations (rollout + update) on each, then times ``--iterations`` more, and
prints the seconds per iteration and ``ratio = ray / in-process``. It also prints Ray's start-up
(``ray.init`` of the private instance) and the servers' start-up (actors, model loading, process
group). On a 2-core machine the two servers share the cores of the in-process run, so the ratio
measures the backend's overhead (splitting, serialisation, the gradient all-reduce), not a
speed-up; with one GPU (or enough cores) per server it shows the speed-up.

Run: ``python benchmarks/distributed.py [--config quickstart] [--iterations 1] [--warmup 1]
[--servers 2] [overrides such as train.seed=1 ...]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

from llmgym.algorithms.trainer import Trainer
from llmgym.config import Config, DistributedConfig, load_config
from llmgym.llm.distributed.ray_runtime import start_ray


def iteration_seconds(config: Config, run_dir: str, iterations: int, warmup: int) -> tuple[float, float]:
    """Build the run of ``config``; return (build seconds, mean seconds per timed PPO iteration)."""
    start = time.perf_counter()
    trainer = Trainer(config, run_dir=run_dir)
    built = time.perf_counter() - start
    try:
        algorithm: Any = trainer.algorithm
        steps = config.algorithm.rollout_steps * config.env.num_envs
        if warmup:
            algorithm.learn(total_env_steps=steps * warmup)
        start = time.perf_counter()
        algorithm.learn(total_env_steps=steps * (warmup + iterations))  # a total: it goes on from the warm-up
        return built, (time.perf_counter() - start) / iterations
    finally:
        trainer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="quickstart", help="A shipped config's name or a YAML file.")
    parser.add_argument("--iterations", type=int, default=1, help="Timed PPO iterations per backend.")
    parser.add_argument("--warmup", type=int, default=1, help="Untimed iterations first (model warm-up, caches).")
    parser.add_argument("--servers", type=int, default=2, help="Ray LLM servers.")
    parser.add_argument("overrides", nargs="*", help="Config overrides, e.g. env.num_envs=8.")
    args = parser.parse_args()
    local = load_config(args.config, args.overrides)
    ray_config = load_config(args.config, [*args.overrides, f"distributed.llm_processes={args.servers}"])
    with tempfile.TemporaryDirectory() as out:
        _, local_s = iteration_seconds(local, f"{out}/local", args.iterations, args.warmup)
        start = time.perf_counter()
        runtime = start_ray(DistributedConfig(llm_processes=args.servers))
        ray_start_s = time.perf_counter() - start
        try:
            servers_s, ray_s = iteration_seconds(ray_config, f"{out}/ray", args.iterations, args.warmup)
        finally:
            runtime.shutdown()
    steps = local.algorithm.rollout_steps * local.env.num_envs
    print(f"config {args.config}: one PPO iteration = {steps} env steps + update")
    print(f"in-process         {local_s:8.2f} s / iteration")
    print(f"ray, {args.servers} servers     {ray_s:8.2f} s / iteration")
    print(f"ratio ray / in-process = {ray_s / local_s:.2f}")
    print(f"ray start-up (ray.init of the private instance) {ray_start_s:.1f} s; servers' start-up "
          f"(actors, model, process group) {servers_s:.1f} s")


if __name__ == "__main__":
    main()
