"""Each LLM server's training state, replicated vs sharded (``distributed.sharding=fsdp``), measured.

Builds ``--servers`` Ray LLM servers twice on a randomly initialised Llama model (``--hidden-size``,
``--layers``; fp32, full fine-tuning with a value head, or ``--lora`` adapters), first as whole
replicas and then as one FSDP2 group, runs one PPO update on each (so the gradients and AdamW's
state exist), and prints every server's bytes of parameters (model and heads; a shard counts its
own part), gradients and optimizer state as it holds them between calls, with the sharded/replica
ratio of the largest server. The gathered copy a sharded server holds during a call (the whole
parameters in the compute dtype, and the whole gradients during an update) is not counted: it
is freed when the call ends. CPU and gloo, a private local Ray instance.

Run: ``python benchmarks/sharding_memory.py [--servers 2] [--hidden-size 256] [--layers 4] [--lora]``.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from llmgym.agents.policies import CandidateActions, CandidatePolicy
from llmgym.algorithms import PPO, UpdateBatch
from llmgym.config import AlgorithmConfig, DistributedConfig, LoRAConfig, ModelConfig
from llmgym.llm.distributed.backend import make_backend
from llmgym.llm.distributed.ray_runtime import start_ray
from llmgym.llm.modules import ValueHead
from llmgym.testing import tiny_causal_lm

CONTEXTS = ["Go to the red ball. Action:", "You see a wall. Action:", "The door is open. Action:"]
CANDIDATES = [[" turn left", " go forward"], [" turn right", " go forward"], [" go forward", " pick up"]]
KINDS = ("parameters", "gradients", "optimizer")


def measure(args: argparse.Namespace, sharding: str) -> tuple[int, list[dict[str, int]]]:
    """Build the servers, run one PPO update; return (model parameter count, each server's bytes)."""
    model, tokenizer = tiny_causal_lm("llama", seed=0, hidden_size=args.hidden_size, num_layers=args.layers)
    count = sum(p.numel() for p in model.parameters())
    config = ModelConfig(name="random-llama", lora=LoRAConfig(r=8) if args.lora else None, trunk_cache_mb=0)
    llm: Any = make_backend(
        config,
        {"value": ValueHead(hidden_sizes=(64,))},
        PPO(config=AlgorithmConfig(learning_rate=1e-4)).updater(),
        model=model,
        tokenizer=tokenizer,
        distributed=DistributedConfig(llm_processes=args.servers, sharding=sharding, timeout_s=120.0),
    )
    try:
        n = len(CONTEXTS)
        batch = UpdateBatch(
            objective=PPO().objective(),
            policy=CandidatePolicy(temperature=1.0),
            actions=CandidateActions(CANDIDATES, torch.zeros(n, dtype=torch.long)),
            minibatches=[list(range(n))],
            old_log_probs=torch.full((n,), -0.7),
            old_values=torch.zeros(n),
            advantages=torch.tensor([1.0, -0.5, 0.25]),
            returns=torch.tensor([1.0, 0.0, 0.5]),
        )
        llm.update(CONTEXTS, CANDIDATES, batch=batch)
        found = llm._request({rank: ("state_bytes", (), {}) for rank in range(args.servers)})
        return count, [found[rank] for rank in range(args.servers)]
    finally:
        llm.close()


def main() -> None:
    """Measure both layouts and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument(
        "--lora", action="store_true", help="train LoRA adapters (r=8) instead of the full model"
    )
    args = parser.parse_args()
    runtime = start_ray(DistributedConfig(llm_processes=args.servers))
    try:
        results = {sharding: measure(args, sharding) for sharding in ("none", "fsdp")}
    finally:
        runtime.shutdown()
    count = results["none"][0]
    what = "LoRA adapters (r=8)" if args.lora else "full fine-tuning"
    print(
        f"random Llama, {count:,} parameters (hidden {args.hidden_size}, {args.layers} blocks), fp32, {what}"
    )
    print(
        f"{'layout':<8} {'server':>6} "
        + " ".join(f"{k:>12}" for k in KINDS)
        + f" {'total':>12} {'B/param':>8}"
    )
    largest = {}
    for sharding, (_, servers) in results.items():
        for rank, found in enumerate(servers):
            total = sum(found[k] for k in KINDS)
            cells = " ".join(f"{found[k]:>12,}" for k in KINDS)
            print(f"{sharding:<8} {rank:>6} {cells} {total:>12,} {total / count:>8.2f}")
        largest[sharding] = max(sum(found[k] for k in KINDS) for found in servers)
    print(
        f"largest fsdp server / replica: {largest['fsdp'] / largest['none']:.3f} with {args.servers} servers"
    )


if __name__ == "__main__":
    main()
