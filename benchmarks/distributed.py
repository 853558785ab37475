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

For each setting it also prints, from ``/proc`` (Linux), the CPU seconds per pass of every server
and of the other processes on the machine (a busy machine makes the wall times, and so the ratio,
meaningless), and, for the servers, the tokens of each server's share (contexts + candidates,
as dispatch balances them).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgym.config import ModelConfig
from llmgym.llm.distributed.backend import LocalLLMFactory, make_backend
from llmgym.llm.distributed.balance import context_costs, split_balanced, token_lengths
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


@dataclass
class Pass:
    """One timed pass over the workload.

    Attributes:
        seconds: Wall time.
        server_cpu: CPU seconds of each server (empty in-process or without ``/proc``).
        others_cpu: CPU seconds of the machine's other processes (``None`` without ``/proc``).
    """

    seconds: float
    server_cpu: list[float] = field(default_factory=list)
    others_cpu: float | None = None


def _ticks() -> float:
    return float(os.sysconf("SC_CLK_TCK"))


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid``; 0.0 when ``/proc`` has none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _ticks()


def machine_cpu() -> float | None:
    """CPU seconds all processes of the machine used so far (busy time in ``/proc/stat``)."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except OSError:
        return None
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / _ticks()


def _snapshot(pids: list[int]) -> tuple[list[float], float | None]:
    return [process_cpu(pid) for pid in pids], machine_cpu()


def run(llm: Any, contexts: list[str], candidates: list[list[str]], batch: int, repeats: int) -> Pass:
    """Best pass of scoring the whole workload ``repeats`` times (after one warm-up pass)."""
    servers = [info.pid for info in llm.servers] if isinstance(llm, DistributedLLM) else []
    ours = [os.getpid(), *servers]
    passes = []
    for attempt in range(repeats + 1):
        before, machine_before = _snapshot(ours)
        start = time.perf_counter()
        for i in range(0, len(contexts), batch):
            llm.score(contexts[i : i + batch], candidates[i : i + batch])
        seconds = time.perf_counter() - start
        after, machine_after = _snapshot(ours)
        used = [b - a for a, b in zip(before, after)]
        others = None if machine_before is None or machine_after is None else machine_after - machine_before - sum(used)
        if attempt:
            passes.append(Pass(seconds, used[1:], others))
    return min(passes, key=lambda p: p.seconds)


def share_tokens(llm: Any, contexts: list[str], candidates: list[list[str]], batch: int) -> list[int]:
    """Tokens (contexts + candidates) each server gets over one pass, as dispatch splits the calls."""
    totals = [0] * llm.num_servers
    for i in range(0, len(contexts), batch):
        costs = context_costs(contexts[i : i + batch], candidates[i : i + batch], token_lengths(llm.tokenizer))
        for rank, share in enumerate(split_balanced(costs, llm.num_servers)):
            totals[rank] += sum(costs[j] - 1 for j in share)
    return totals


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
            best = run(llm, contexts, candidates, args.batch, args.repeats)
            tokens = share_tokens(llm, contexts, candidates, args.batch) if servers else []
        finally:
            llm.close()
        name = "in-process" if servers == 0 else f"{servers} server(s)"
        results[name] = seconds = best.seconds
        print(f"{name:>14}: {len(contexts) / seconds:8.1f} contexts/s  ({seconds * 1000:.1f} ms per pass)")
        if tokens:
            cpu = ", ".join(f"{c:.2f}" for c in best.server_cpu)
            print(f"{'':>14}  tokens per server {tokens}; CPU s per server [{cpu}]")
        if best.others_cpu is not None:
            print(f"{'':>14}  other processes used {best.others_cpu:.2f} CPU s during the pass")
    if "1 server(s)" in results and "2 server(s)" in results:
        ratio = results["2 server(s)"] / results["1 server(s)"]
        print(f"ratio time(2 servers) / time(1 server) = {ratio:.3f}")
    if "in-process" in results and "1 server(s)" in results:
        print(f"ratio time(1 server) / time(in-process) = {results['1 server(s)'] / results['in-process']:.3f}")
    print(json.dumps({"model": args.model, "batch": args.batch, "seconds": results}))


if __name__ == "__main__":
    main()
