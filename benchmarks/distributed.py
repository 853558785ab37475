"""Distributed backend overhead: `score` throughput with 1 vs 2 LLM servers (and in-process).

Scores the shared BabyAI-like workload (32 contexts x 6 actions, ``benchmarks/data/
score_workload.json``) in calls of ``--batch`` contexts, as an RL loop with that many envs would,
and prints contexts/s for the in-process ``LocalLLM`` and for ``--servers`` server counts, then
``ratio = time(2 servers) / time(1 server)``. On a 2-core machine two CPU servers share the same
cores, so the ratio measures the overhead of splitting, pickling and gathering (target < 1.15),
not a speed-up; on a machine with one GPU (or enough cores) per server it shows the speed-up.

Run: ``python benchmarks/distributed.py [--model tiny|SmolLM2-135M-Instruct] [--repeats 3]
[--batch 32] [--servers 1 2] [--model-parallelism-size 1] [--threads N]``. By default each CPU
server gets its share of the cores (``OMP_NUM_THREADS``); ``--threads 1`` gives every process one
thread, which isolates the cost of the plumbing (1 server vs in-process).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from llmgym.config import ModelConfig
from llmgym.llm.distributed.backend import LocalLLMFactory, make_backend
from llmgym.llm.distributed.client import DistributedLLM

WORKLOAD = Path(__file__).with_name("data") / "score_workload.json"


def build(model: str, servers: int, model_parallelism_size: int) -> Any:
    """The in-process LocalLLM (``servers=0``) or ``servers`` spawned LLM servers."""
    prebuilt: dict[str, Any] = {}
    if model == "tiny":
        from llmgym.testing import tiny_causal_lm

        prebuilt["model"], prebuilt["tokenizer"] = tiny_causal_lm("llama", seed=0)
    config = ModelConfig(name=model)
    if servers == 0:
        return make_backend(config, **prebuilt)
    return DistributedLLM.spawn(
        LocalLLMFactory(config, **prebuilt), servers, timeout_s=300, model_parallelism_size=model_parallelism_size
    )


def run(llm: Any, contexts: list[str], candidates: list[list[str]], batch: int, repeats: int) -> float:
    """Best wall time of scoring the whole workload ``repeats`` times (after one warm-up pass)."""
    times = []
    for attempt in range(repeats + 1):
        start = time.perf_counter()
        for i in range(0, len(contexts), batch):
            llm.score(contexts[i : i + batch], candidates[i : i + batch])
        if attempt:
            times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny (offline test model) or a model name/path, e.g. SmolLM2-135M-Instruct.")
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2], help="Server counts to compare.")
    parser.add_argument("--model-parallelism-size", type=int, default=1, help="GPUs per server.")
    parser.add_argument("--batch", type=int, default=32, help="Contexts per score call.")
    parser.add_argument("--repeats", type=int, default=3, help="Timed passes (the best is kept).")
    parser.add_argument(
        "--threads", type=int, default=None,
        help="Torch threads of every process (in-process and each server); default: the cores split between servers.",
    )
    parser.add_argument("--no-local", action="store_true", help="Skip the in-process baseline.")
    args = parser.parse_args()
    if args.threads is not None:
        import torch

        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # inherited by the servers
        torch.set_num_threads(args.threads)
    workload = json.loads(WORKLOAD.read_text())
    contexts, candidates = workload["contexts"], workload["candidates"]
    results: dict[str, float] = {}
    for servers in ([] if args.no_local else [0]) + args.servers:
        llm = build(args.model, servers, args.model_parallelism_size)
        try:
            seconds = run(llm, contexts, candidates, args.batch, args.repeats)
        finally:
            llm.close()
        name = "in-process" if servers == 0 else f"{servers} server(s)"
        results[name] = seconds
        print(f"{name:>14}: {len(contexts) / seconds:8.1f} contexts/s  ({seconds * 1000:.1f} ms per pass)")
    if "1 server(s)" in results and "2 server(s)" in results:
        ratio = results["2 server(s)"] / results["1 server(s)"]
        print(f"ratio time(2 servers) / time(1 server) = {ratio:.3f}")
    if "in-process" in results and "1 server(s)" in results:
        print(f"ratio time(1 server) / time(in-process) = {results['1 server(s)'] / results['in-process']:.3f}")
    print(json.dumps({"model": args.model, "batch": args.batch, "seconds": results}))


if __name__ == "__main__":
    main()
