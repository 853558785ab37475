"""PPO update with and without the frozen-trunk cache (SmolLM2-135M-Instruct + LoRA on the top blocks, CPU).

One iteration is what the trainer does per rollout: a collection forward (scores + value, no
gradients) over the batch, then ``--epochs`` PPO epochs of minibatches with gradients. With LoRA
on the top ``--lora-layers`` blocks only, the cache lets the epochs run those blocks alone from the
states the collection recorded; ``model.trunk_cache_mb=0`` runs the whole model every time (the
baseline). Both sides are measured in this run on the same batch, and the ratio is printed, with
the largest difference between the two sides' trained adapter weights.

Workload: the 32 BabyAI-like contexts x 6 actions of ``benchmarks/data/score_workload.json``,
repeated to ``--batch`` samples (distinct texts: each copy gets its own step number).

Usage: ``python benchmarks/update.py [--batch 64] [--epochs 2] [--lora-layers 4] [--dtype bfloat16]``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

WORKLOAD = Path(__file__).parent / "data" / "score_workload.json"


def build(cache_mb: int, lora_layers: int, dtype: str) -> Any:
    """SmolLM2 with a detached value head, PPO, and LoRA on the top ``lora_layers`` blocks."""
    from llmgym.algorithms import PPO
    from llmgym.config import AlgorithmConfig, LoRAConfig, ModelConfig
    from llmgym.llm.client import LLM
    from llmgym.llm.modules import ValueHead

    torch.manual_seed(0)
    layers = list(range(-lora_layers, 0))
    config = ModelConfig(
        name="SmolLM2-135M-Instruct",
        device="cpu",
        dtype=dtype,
        trunk_cache_mb=cache_mb,
        lora=LoRAConfig(r=8, alpha=16, layers=layers),
    )
    return LLM(
        config,
        {"value": ValueHead(detach_input=True)},
        updater=PPO(config=AlgorithmConfig(learning_rate=1e-3)).updater(),
    )


def iteration(
    llm: Any, contexts: list[str], candidates: list[list[str]], epochs: int, minibatch: int
) -> tuple[float, float]:
    """Collection forward, then PPO epochs; returns ``(collect_s, update_s)``."""
    from llmgym.agents.policies import CandidateActions, CandidatePolicy
    from llmgym.algorithms import PPO, UpdateBatch
    from llmgym.config import AlgorithmConfig

    start = time.perf_counter()
    outputs = llm.forward(["score", "value"], contexts, candidates)
    collect = time.perf_counter() - start
    n = len(contexts)
    logits = torch.stack([o["score"] for o in outputs])
    actions = torch.arange(n) % logits.shape[1]
    old = torch.log_softmax(logits, -1)[torch.arange(n), actions]
    values = torch.stack([o["value"].reshape(()) for o in outputs])
    advantages = torch.linspace(-1.0, 1.0, n)
    batch = UpdateBatch(
        objective=PPO(config=AlgorithmConfig()).objective(),
        policy=CandidatePolicy(),
        minibatches=[list(range(i, min(i + minibatch, n))) for i in range(0, n, minibatch)],
        old_log_probs=old,
        old_values=values,
        advantages=advantages,
        returns=values + advantages,
        actions=CandidateActions([list(c) for c in candidates], actions),
    )
    start = time.perf_counter()
    for _ in range(epochs):
        llm.update(contexts, candidates, batch=batch)
    return collect, time.perf_counter() - start


def main() -> None:
    """Run both sides and print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=64, help="samples per rollout")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--minibatch", type=int, default=32)
    parser.add_argument("--lora-layers", type=int, default=4, help="LoRA on this many top blocks")
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    data = json.loads(WORKLOAD.read_text())
    contexts = [
        c.replace("Action 2:", f"Action {2 + i // len(data['contexts'])}:")
        for i, c in enumerate(data["contexts"] * -(-args.batch // len(data["contexts"])))
    ][: args.batch]
    candidates = (data["candidates"] * -(-args.batch // len(data["candidates"])))[: args.batch]
    rows = {}
    weights = {}
    for name, cache_mb in (("whole model every epoch", 0), ("frozen-trunk cache", 1024)):
        llm = build(cache_mb, args.lora_layers, args.dtype)
        iteration(llm, contexts[:4], candidates[:4], 1, args.minibatch)  # warm-up
        llm = build(cache_mb, args.lora_layers, args.dtype)
        rows[name] = iteration(llm, contexts, candidates, args.epochs, args.minibatch)
        weights[name] = [p.detach().float().clone() for p in llm.backend.trainable_parameters()]
        llm.close()
    print(
        f"{args.batch} samples x 6 actions, {args.epochs} epochs of minibatches of {args.minibatch}, "
        f"LoRA on the top {args.lora_layers} blocks, {args.dtype}, threads={torch.get_num_threads()}"
    )
    print(f"{'method':<26}{'collect s':>10}{'update s':>10}{'total s':>9}")
    for name, (collect, update) in rows.items():
        print(f"{name:<26}{collect:>10.2f}{update:>10.2f}{collect + update:>9.2f}")
    (c0, u0), (c1, u1) = rows.values()
    drift = max((a - b).abs().max().item() for a, b in zip(*weights.values()))
    print(
        f"update {u0 / u1:.2f}x faster, iteration {(c0 + u0) / (c1 + u1):.2f}x faster with the cache; "
        f"max |adapter weight difference| after training {drift:.1e}"
    )


if __name__ == "__main__":
    main()
