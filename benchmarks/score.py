"""Benchmark LLM.score on the BabyAI-like workload (SmolLM2-135M-Instruct, CPU).

Every baseline is measured in the same run and printed as a ratio:

* naive loop: one full transformers forward (all positions through the LM head) per
  context-candidate pair, as a straightforward implementation would do;
* KV-cache sharing: the alternative shared-prefix design (prefix forward, cache repeated per
  candidate, candidate forward) that the packed prefix-sharing mask was chosen over;
* compute floor: 2 x non-embedding parameters x (context + candidate tokens) + the LM head on
  candidate positions, over the fp32 matmul rate measured here;
* peak memory of ``score`` for several ``minibatch_size`` values (fresh subprocess each);
* a bf16 row (speed and max deviation from fp32).

Usage: ``python benchmarks/score.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

WORKLOAD = Path(__file__).parent / "data" / "score_workload.json"


def load_workload() -> tuple[list[str], list[list[str]]]:
    """Contexts and candidates of the workload."""
    data = json.loads(WORKLOAD.read_text())
    return data["contexts"], data["candidates"]


def load_llm(dtype: str = "float32") -> Any:
    """SmolLM2-135M-Instruct on CPU through llmgym (GGUF dequantised once, then cached)."""
    from llmgym.config import ModelConfig
    from llmgym.llm.client import LLM

    return LLM(ModelConfig(name="SmolLM2-135M-Instruct", device="cpu", dtype=dtype))


def best_time(fn: Callable[[], Any], repeats: int) -> float:
    """Best wall time of ``fn`` over ``repeats`` runs (after one warm-up run)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_flops(rows: int, hidden: int, out: int, repeats: int) -> float:
    """Measured fp32 matmul rate (FLOP/s) on the model's own shapes."""
    a, b = torch.randn(rows, hidden), torch.randn(hidden, out)
    seconds = best_time(lambda: a @ b, repeats)
    return 2.0 * rows * hidden * out / seconds


def naive_loop(
    model: Any, tokenizer: Any, contexts: list[str], candidates: list[list[str]]
) -> list[torch.Tensor]:
    """One full forward per context-candidate pair (joint tokenization, all logits)."""
    results = []
    with torch.inference_mode():
        for context, group in zip(contexts, candidates):
            scores = []
            for candidate in group:
                enc = tokenizer(context + candidate, return_offsets_mapping=True)
                ids = enc["input_ids"]
                start = next(i for i, (_, end) in enumerate(enc["offset_mapping"]) if end > len(context))
                logprobs = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
                scores.append(sum(logprobs[i - 1, ids[i]] for i in range(start, len(ids))))
            results.append(torch.stack(scores))
    return results


def kv_cache_sharing(model: Any, items: list[Any], pad_id: int) -> list[torch.Tensor]:
    """Shared prefix through the KV cache: prefix forward, cache repeated k times, tails forward."""
    from llmgym.llm.layout import common_prefix_length

    k = len(items[0].candidate_ids)
    prefixes = [item.candidate_ids[0][: common_prefix_length(item.candidate_ids)] for item in items]
    width = max(len(p) for p in prefixes)
    prefix_ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prefixes])
    prefix_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prefixes])
    positions = (prefix_mask.cumsum(-1) - 1).clamp(min=0)
    tails = [ids[len(p) :] for item, p in zip(items, prefixes) for ids in item.candidate_ids]
    tail_width = max(len(t) for t in tails)
    tail_ids = torch.tensor([t + [pad_id] * (tail_width - len(t)) for t in tails])
    tail_mask = torch.tensor([[1] * len(t) + [0] * (tail_width - len(t)) for t in tails])
    tail_pos = torch.tensor([[len(p) + i for i in range(tail_width)] for p in prefixes for _ in range(k)])
    with torch.inference_mode():
        out = model(
            input_ids=prefix_ids,
            attention_mask=prefix_mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out.past_key_values
        cache.batch_repeat_interleave(k)
        mask = torch.cat([prefix_mask.repeat_interleave(k, 0), tail_mask], 1)
        logits = model(
            input_ids=tail_ids, attention_mask=mask, position_ids=tail_pos, past_key_values=cache
        ).logits
        last = out.logits[:, -1].float().log_softmax(-1).repeat_interleave(k, 0)
        logprobs = logits.float().log_softmax(-1)
    scores = [
        last[row, tail[0]] + sum(logprobs[row, i - 1, tail[i]] for i in range(1, len(tail)))
        for row, tail in enumerate(tails)
    ]
    return list(torch.stack(scores).split(k))


def peak_memory_mb(minibatch_size: int) -> float:
    """Peak RSS growth (MiB) of one ``score`` call, measured in a fresh subprocess."""
    code = f"""
import gc, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from score import load_llm, load_workload
def rss(key):
    for line in open('/proc/self/status'):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
llm = load_llm(); c, k = load_workload()
llm.score(c[:1], k[:1]); gc.collect()
open('/proc/self/clear_refs', 'w').write('5')
base = rss('VmRSS:')
llm.score(c, k, minibatch_size={minibatch_size})
print(rss('VmHWM:') - base)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one timed repeat, fewer memory points")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    contexts, candidates = load_workload()
    llm = load_llm()
    model, tokenizer, local = llm.model, llm.tokenizer, llm.backend
    items = local.encoder.encode_items(contexts, candidates, add_eos=False)
    context_tokens = sum(len(item.context_ids) for item in items)
    candidate_tokens = sum(
        len(ids) - s for item in items for ids, s in zip(item.candidate_ids, item.candidate_starts)
    )
    embed = model.get_input_embeddings().weight
    non_embedding = sum(p.numel() for p in model.parameters()) - embed.numel()
    floor_flops = (
        2.0 * non_embedding * (context_tokens + candidate_tokens) + 2.0 * embed.numel() * candidate_tokens
    )
    hidden, inter = model.config.hidden_size, model.config.intermediate_size
    rate = matmul_flops(context_tokens // 4, hidden, inter, repeats + 2)
    floor_s = floor_flops / rate

    ours = llm.score(contexts, candidates)
    t_ours = best_time(lambda: llm.score(contexts, candidates), repeats)
    start = time.perf_counter()
    naive = naive_loop(model, tokenizer, contexts, candidates)
    t_naive = time.perf_counter() - start
    kv = kv_cache_sharing(model, items, local.pad_token_id)
    t_kv = best_time(lambda: kv_cache_sharing(model, items, local.pad_token_id), repeats)
    err_naive = max((a - b).abs().max().item() for a, b in zip(ours, naive))
    err_kv = max((a - b).abs().max().item() for a, b in zip(ours, kv))

    print(
        f"workload: {len(contexts)} contexts x {len(candidates[0])} candidates, "
        f"{context_tokens} context + {candidate_tokens} candidate tokens; threads={torch.get_num_threads()}"
    )
    print(
        f"fp32 matmul rate: {rate / 1e9:.1f} GFLOP/s; compute floor {floor_flops / 1e9:.1f} GFLOP = {floor_s:.3f} s"
    )
    print(f"{'method':<34}{'seconds':>9}{'ratio':>22}{'max |diff|':>12}")
    print(
        f"{'llmgym score (packed prefix mask)':<34}{t_ours:>9.3f}{f'{floor_s / t_ours:.0%} of floor':>22}{0.0:>12.1e}"
    )
    print(
        f"{'naive loop (1 forward per pair)':<34}{t_naive:>9.3f}{f'score {t_naive / t_ours:.1f}x faster':>22}{err_naive:>12.1e}"
    )
    print(
        f"{'KV-cache prefix sharing':<34}{t_kv:>9.3f}{f'score {t_kv / t_ours:.2f}x faster':>22}{err_kv:>12.1e}"
    )

    bf16 = load_llm("bfloat16")
    got = bf16.score(contexts, candidates)
    t_bf16 = best_time(lambda: bf16.score(contexts, candidates), repeats)
    err_bf16 = max((a - b).abs().max().item() for a, b in zip(got, ours))
    print(
        f"{'llmgym score bf16':<34}{t_bf16:>9.3f}{f'{t_ours / t_bf16:.2f}x fp32 speed':>22}{err_bf16:>12.1e}"
    )
    bf16.close()

    sizes = [6, 48, 192] if args.quick else [6, 24, 96, 192]
    print("peak memory of score (RSS growth over the loaded model):")
    for size in sizes:
        print(f"  minibatch_size={size:<4} {peak_memory_mb(size):8.1f} MiB")


if __name__ == "__main__":
    main()
