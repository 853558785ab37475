"""Ray backend overhead: one PPO iteration in-process vs on N Ray LLM servers, and Ray's start-up time.

Builds the run of a config (default ``quickstart``: SmolLM2-135M + LoRA + PPO on BabyAI-Text, 16
envs) in-process and with ``distributed.llm_processes=N`` for each ``--servers N`` (Ray actors in a
private local Ray instance; one server with ``--model-parallelism-size`` > 1 is a Ray server too),
runs ``--warmup`` iterations (rollout + update) on each, then times ``--iterations`` more, and
prints the seconds per iteration and each run's ratio to the baseline (in-process, or with
``--no-local`` the first ``--servers`` run). It also prints Ray's start-up (``ray.init`` of the
private instance) and each run's build time (actors, model loading, process group). On a 2-core
machine the servers share the cores of the in-process run, so the ratio measures the backend's
overhead (splitting, serialisation, the gradient all-reduce), not a speed-up; with one GPU (or
enough cores) per server it shows the speed-up.

Run: ``python benchmarks/distributed.py [--config quickstart] [--model NAME] [--servers 2 [4 ...]]
[--model-parallelism-size 1] [--no-local] [--iterations 1] [--warmup 1] [overrides such as train.seed=1 ...]``;
``benchmarks/gpu_check.sh`` runs it on 2+ GPUs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

from llmgym.config import Config, DistributedConfig, load_config
from llmgym.llm.distributed.ray_runtime import start_ray
from llmgym.run.trainer import Trainer


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
    parser.add_argument("--model", default=None, help="Override model.name (e.g. a local folder).")
    parser.add_argument("--servers", type=int, nargs="+", default=[2], help="Ray LLM server counts to time.")
    parser.add_argument("--model-parallelism-size", type=int, default=1, help="GPUs per server.")
    parser.add_argument(
        "--no-local", action="store_true", help="Skip the in-process run (baseline: the first count)."
    )
    parser.add_argument("--iterations", type=int, default=1, help="Timed PPO iterations per run.")
    parser.add_argument(
        "--warmup", type=int, default=1, help="Untimed iterations first (model warm-up, caches)."
    )
    parser.add_argument("overrides", nargs="*", help="Config overrides, e.g. env.num_envs=8.")
    args = parser.parse_args()
    overrides = [*args.overrides, *([f"model.name={args.model}"] if args.model else [])]
    size = args.model_parallelism_size
    runs = {} if args.no_local else {"in-process": load_config(args.config, overrides)}
    for servers in args.servers:
        extra = [f"distributed.llm_processes={servers}", f"distributed.model_parallelism_size={size}"]
        where = "on Ray" if servers > 1 or size > 1 else "in-process"  # make_backend's rule
        label = f"{servers} server(s){f' x {size} GPUs' if size > 1 else ''} {where}"
        runs[label] = load_config(args.config, [*overrides, *extra])
    seconds: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        runtime = start_ray(DistributedConfig(llm_processes=max(args.servers)))
        ray_start_s = time.perf_counter() - start
        try:
            for index, (name, config) in enumerate(runs.items()):
                seconds[name] = iteration_seconds(config, f"{out}/run{index}", args.iterations, args.warmup)
        finally:
            runtime.shutdown()
    first = next(iter(runs.values()))
    steps = first.algorithm.rollout_steps * first.env.num_envs
    baseline_name, (_, baseline) = next(iter(seconds.items()))
    print(f"config {args.config}: one PPO iteration = {steps} env steps + update")
    for name, (built, per_iteration) in seconds.items():
        print(f"{name:28s} {per_iteration:8.2f} s / iteration (built in {built:.1f} s)")
    for name, (_, per_iteration) in list(seconds.items())[1:]:
        print(f"ratio {name} / {baseline_name} = {per_iteration / baseline:.2f}")
    print(f"ray start-up (ray.init of the private instance) {ray_start_s:.1f} s")


if __name__ == "__main__":
    main()
