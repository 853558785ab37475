"""GPU check of the LLM layer: one line per check, ``PASS|FAIL|SKIP <check>: <number> <unit> (<detail>)``.

Checks, on one device: placement of every tensor, score equality with a plain transformers forward
(fp32, TF32 off; bf16; and bf16 against the fp32 reference), the fused attention kernels (SDPA's
math fallback disabled: dense-mask rows, a tree-attention row over 1,024 tokens, generation),
score speed against a per-pair loop and one padded batch, generate speed (built-in, and vLLM where
installed) against a per-prompt loop, vLLM's greedy tokens after a full fine-tuning update against
the trained model's, the peak memory of a full fine-tuning update against the budget docs/gpus.md
states, a short quickstart run (PPO with LoRA: update time and env steps/s), QLoRA (a 4-bit base,
LoRA, one update), 2 LLM servers on one GPU, and 2 FSDP servers (``distributed.sharding=fsdp``,
where this llmgym has it). Exits 1 when a check fails; a check that cannot run here is a SKIP
with its reason.

``--device cpu --tiny`` runs every check on a tiny offline model on the CPU in about a minute
(timings meaningless, not judged), so the script cannot rot; ``benchmarks/gpu_check.sh`` sets up
and runs it. Speed checks pass on a GPU when llmgym is at least as fast as the per-item loop.

Run: ``python benchmarks/gpu_check.py [--device cuda|cpu] [--tiny] [--model NAME]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from llmgym.config import LoRAConfig, ModelConfig
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import ValueHead
from llmgym.llm.updater import Updater

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "benchmarks" / "data" / "score_workload.json"
FAILED: list[str] = []


def report(status: str, name: str, number: float | int | None, unit: str = "", detail: str = "") -> None:
    if status == "FAIL":
        FAILED.append(name)
    value = "-" if number is None else (f"{number:.4g}" if isinstance(number, float) else str(number))
    print(
        f"{status} {name}: {value}{(' ' + unit) if unit else ''}{f' ({detail})' if detail else ''}",
        flush=True,
    )


def run_check(name: str, check: Callable[[], None]) -> None:
    try:
        check()
    except Exception as exc:  # a check that crashes is a failed check, and the others still run
        report(
            "FAIL",
            name,
            None,
            detail=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}",
        )
        traceback.print_exc(file=sys.stderr)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn: Callable[[], Any], repeats: int = 2) -> float:
    """Best wall time of ``repeats`` calls after one warm-up call."""
    fn()
    best = math.inf
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def workload(tiny: bool) -> tuple[list[str], list[list[str]]]:
    data = json.loads(WORKLOAD.read_text())
    count = 8 if tiny else 32
    contexts = data["contexts"][:count]
    return contexts, [list(c) for c in data["candidates"][:count]]


def build(model_name: str, device: str, dtype: str, updater: Any = None, **kwargs: Any) -> LocalLLM:
    config = ModelConfig(name=model_name, device=device, dtype=dtype, trunk_cache_mb=0, **kwargs)
    return LocalLLM(config, module_functions={"value": ValueHead(hidden_sizes=(64,))}, updater=updater)


class LikelihoodStep(Updater):
    """One AdamW step up the candidates' log-likelihood (what every update holds: gradients and optimizer state)."""

    learning_rate = 1e-3

    def setup(self) -> None:
        self.adamw = torch.optim.AdamW(self.llm.trainable_parameters(), lr=self.learning_rate)
        self.optimizer = self.adamw

    def perform_update(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]] | None,
        _current_batch_ids: Sequence[int],
        **kwargs: Any,
    ) -> dict[str, Any]:
        out = self.llm.forward(["score"], contexts, candidates, require_grad=True)
        loss = -torch.stack([o["score"].sum() for o in out]).sum()
        self.adamw.zero_grad()
        loss.backward()
        self.llm.sync_gradients(len(contexts))
        self.adamw.step()
        return {"loss": float(loss.detach())}


class BigStep(LikelihoodStep):
    """A large step: enough to change a tiny or small model's greedy choices."""

    learning_rate = 1e-2


def item_pairs(
    llm: LocalLLM, contexts: Sequence[str], candidates: Sequence[Sequence[str]]
) -> list[tuple[list[int], int]]:
    """Every (context + candidate token ids, first candidate position), tokenized exactly as llmgym does."""
    items = llm.encoder.encode_items(
        llm.encoder.fit_contexts(list(contexts)), [list(c) for c in candidates], False
    )
    return [
        (list(ids), start) for item in items for ids, start in zip(item.candidate_ids, item.candidate_starts)
    ]


def per_pair_scores(llm: LocalLLM, pairs: Sequence[tuple[list[int], int]]) -> list[float]:
    """The plain transformers reference: one full forward per (context, candidate), log-softmax, gather."""
    scores = []
    with torch.inference_mode(), llm.autocast():
        for ids, start in pairs:
            logits = llm.model(torch.tensor([ids], device=llm.device)).logits[0].float()
            logprobs = logits.log_softmax(-1)
            target = torch.tensor(ids[start:], device=llm.device)
            scores.append(logprobs[torch.arange(start - 1, len(ids) - 1, device=llm.device), target].sum())
    return [float(s) for s in torch.stack(scores).cpu()]


def padded_batch_scores(llm: LocalLLM, pairs: Sequence[tuple[list[int], int]]) -> list[float]:
    """Every (context, candidate) sequence left-padded into one batch, one forward."""
    width = max(len(ids) for ids, _ in pairs)
    pad = llm.pad_token_id
    ids = torch.tensor([[pad] * (width - len(i)) + i for i, _ in pairs], device=llm.device)
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i, _ in pairs], device=llm.device)
    with torch.inference_mode(), llm.autocast():
        logprobs = llm.model(input_ids=ids, attention_mask=mask).logits.float().log_softmax(-1)
        picked = logprobs[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
        starts = torch.tensor([width - len(i) + s for i, s in pairs], device=llm.device)
        keep = torch.arange(1, width, device=llm.device)[None, :] >= starts[:, None]
        return [float(s) for s in (picked * keep).sum(-1).cpu()]


def check_placement(
    llm: LocalLLM, device: torch.device, contexts: list[str], candidates: list[list[str]]
) -> None:
    tensors = [*llm.model.parameters(), *llm.model.buffers(), *llm.module_functions.parameters()]
    out = llm.forward(["value", "score"], contexts[:4], candidates[:4], require_grad=True)
    tensors += [o[key] for o in out for key in ("value", "score")]
    wrong = [t for t in tensors if t.device.type != device.type]
    report(
        "PASS" if not wrong else "FAIL",
        "placement",
        len(tensors) - len(wrong),
        f"of {len(tensors)} tensors on {device.type}",
    )


def check_equality(
    name: str, llm: LocalLLM, contexts: list[str], candidates: list[list[str]], tolerance: float
) -> None:
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # TF32 off: fp32 means fp32 here
    try:
        got = torch.cat(llm.score(contexts, candidates)).tolist()
        reference = per_pair_scores(llm, item_pairs(llm, contexts, candidates))
    finally:
        torch.set_float32_matmul_precision(precision)
    worst = max(abs(g - r) / (1.0 + abs(r)) for g, r in zip(got, reference))
    report(
        "PASS" if worst <= tolerance else "FAIL",
        name,
        worst,
        "max |diff| / (1 + |ref|)",
        f"{len(got)} scores, tolerance {tolerance:g}",
    )


def check_score_speed(
    llm: LocalLLM, device: torch.device, contexts: list[str], candidates: list[list[str]]
) -> None:
    pairs = item_pairs(llm, contexts, candidates)
    ours = timed(device, lambda: llm.score(contexts, candidates))
    loop = timed(device, lambda: per_pair_scores(llm, pairs), repeats=1)
    padded = timed(device, lambda: padded_batch_scores(llm, pairs))
    judged = device.type == "cuda"
    status = "PASS" if not judged or ours <= loop else "FAIL"
    detail = f"llmgym {ours * 1e3:.1f} ms, per-pair loop {loop * 1e3:.1f} ms, one padded batch {padded * 1e3:.1f} ms ({padded / ours:.2f}x)"
    report(
        status,
        "score_speed",
        loop / ours,
        "x vs per-pair loop",
        detail + ("" if judged else "; cpu: not judged"),
    )


def check_generate_speed(llm: LocalLLM, device: torch.device, contexts: list[str], new_tokens: int) -> None:
    kwargs = {"max_new_tokens": new_tokens, "do_sample": False}
    ours = timed(device, lambda: llm.generate(contexts, **kwargs), repeats=1)
    loop = timed(device, lambda: [llm.generate([c], **kwargs) for c in contexts], repeats=1)
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # TF32 rounding could flip a near-tie of the greedy choice
    try:
        batched = [g[0].token_ids for g in llm.generate(contexts[:2], **kwargs)]
        alone = [llm.generate([c], **kwargs)[0][0].token_ids for c in contexts[:2]]
    finally:
        torch.set_float32_matmul_precision(precision)
    judged = device.type == "cuda"
    status = "PASS" if (not judged or ours <= loop) and batched == alone else "FAIL"
    detail = (
        f"{len(contexts)} prompts x {new_tokens} tokens: batched {ours:.2f} s, per-prompt loop {loop:.2f} s; "
        f"greedy batched == alone: {batched == alone}" + ("" if judged else "; cpu: not judged")
    )
    report(status, "generate_speed", loop / ours, "x vs per-prompt loop", detail)


def check_vllm_generate_speed(
    model_name: str, device: torch.device, contexts: list[str], new_tokens: int
) -> None:
    """``model.generation_engine: vllm`` against a per-prompt loop of the built-in engine, and its greedy tokens against it."""
    if importlib.util.find_spec("vllm") is None:
        report(
            "SKIP", "vllm_generate_speed", None, detail="vLLM is not installed (pip install 'llmgym[vllm]')"
        )
        return
    from llmgym.llm import generation

    llm = LocalLLM(
        ModelConfig(name=model_name, device=str(device), dtype="float32", generation_engine="vllm")
    )
    kwargs = {"max_new_tokens": new_tokens, "do_sample": False}

    def builtin(prompts: list[str]) -> list[list[Any]]:
        with llm.autocast():
            return generation.generate(llm.model, llm.tokenizer, llm.encoder, prompts, **kwargs)

    try:
        llm.generate(contexts[:2], **kwargs)  # warms the engine up
        ours = timed(device, lambda: llm.generate(contexts, **kwargs), repeats=1)
        vllm_tokens = [g[0].token_ids for g in llm.generate(contexts[:2], **kwargs)]
        loop = timed(device, lambda: [builtin([c]) for c in contexts], repeats=1)
        builtin_tokens = [g[0].token_ids for g in builtin(contexts[:2])]
    finally:
        llm.close()
    judged = device.type == "cuda"
    same = vllm_tokens == builtin_tokens
    status = "PASS" if (not judged or ours <= loop) and same else "FAIL"
    detail = (
        f"{len(contexts)} prompts x {new_tokens} tokens: vLLM + llmgym log-probs {ours:.2f} s, built-in per-prompt loop "
        f"{loop:.2f} s; greedy vLLM == built-in: {same}" + ("" if judged else "; cpu: not judged")
    )
    report(status, "vllm_generate_speed", loop / ours, "x vs per-prompt loop", detail)


def check_quickstart(model_name: str, device: str, tiny: bool, workdir: Path) -> None:
    steps, envs = (32, 4) if tiny else (512, 16)
    overrides = [
        f"model.name={model_name}",
        f"model.device={device}",
        f"train.total_env_steps={steps}",
        f"env.num_envs={envs}",
        "train.eval_episodes=0",
        "train.eval_before=false",
        f"train.output_dir={workdir}",
        "train.run_name=quickstart",
    ]
    if tiny:
        overrides += ["model.dtype=float32", "model.lora.layers=null", "algorithm.minibatch_size=16"]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "llmgym.cli", "train", "quickstart", *overrides],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        report(
            "FAIL",
            "ppo_lora_update",
            None,
            detail=(proc.stderr.strip().splitlines() or ["no output"])[-1][:300],
        )
        report("FAIL", "quickstart", None, detail="the run failed")
        return
    records = [
        json.loads(line) for line in (workdir / "quickstart" / "metrics.jsonl").read_text().splitlines()
    ]
    train = [r for r in records if r.get("kind") == "train"]
    finite = train and all(math.isfinite(r["loss"]) for r in train)
    updates = [r["update_s"] for r in train]
    report(
        "PASS" if finite else "FAIL",
        "ppo_lora_update",
        sum(updates) / max(len(updates), 1),
        "s per update",
        f"{len(updates)} updates, losses finite: {bool(finite)}",
    )
    last = train[-1] if train else {}
    rate = last.get("env_steps", 0) / max(last.get("time_s", math.inf), 1e-9)
    report(
        "PASS" if last.get("env_steps") == steps else "FAIL",
        "quickstart",
        rate,
        "env steps/s",
        f"{last.get('env_steps')} env steps",
    )


def check_qlora(
    model_name: str, device: torch.device, contexts: list[str], candidates: list[list[str]]
) -> None:
    if device.type != "cuda":
        report("SKIP", "qlora", None, detail="4-bit kernels (bitsandbytes) need a CUDA GPU")
        return
    if importlib.util.find_spec("bitsandbytes") is None:
        report(
            "SKIP",
            "qlora",
            None,
            detail="bitsandbytes is not installed (pip install 'llmgym[quantization]')",
        )
        return
    torch.cuda.reset_peak_memory_stats(device)
    llm = build(
        model_name, str(device), "bfloat16", load_in_4bit=True, lora=LoRAConfig(r=8), updater=LikelihoodStep
    )
    scores = torch.cat(llm.score(contexts, candidates))
    loss = llm.update(contexts, [c[:1] for c in candidates])[0]["loss"]
    after = torch.cat(llm.score(contexts, candidates))
    memory = torch.cuda.max_memory_allocated(device) / 2**20
    finite = bool(torch.isfinite(scores).all() and torch.isfinite(after).all()) and math.isfinite(loss)
    moved = not torch.equal(scores, after)
    report(
        "PASS" if finite and moved else "FAIL",
        "qlora",
        memory,
        "MiB peak",
        f"4-bit base + LoRA: {len(scores)} scores and one update, all finite: {finite}; the update moved the scores: {moved}",
    )
    llm.close()


#: The memory budget of full fine-tuning with AdamW that docs/gpus.md states, in bytes per parameter:
#: fp32 weights, gradients and two moments (16), plus the half-precision copies autocast makes (2)
#: and an allowance for the rest (2); plus a fixed allowance for the activations of the check's batch.
FULL_FT_BYTES_PER_PARAMETER = 20
ACTIVATION_ALLOWANCE_MB = 1024

SENTENCE = "The agent walks through the rooms of the house and reports what it sees. "
#: A prompt long enough for a row over 1,024 tokens (tree attention).
LONG_CONTEXT = SENTENCE * 120
#: A prompt that fills whole blocks of vLLM's prefix cache and fits the tiny model's window too.
CACHED_CONTEXT = SENTENCE * 10


def check_fused_attention(
    llm: LocalLLM, device: torch.device, contexts: list[str], candidates: list[list[str]]
) -> None:
    """Scoring (dense-mask rows, and tree attention on a row over 1,024 tokens) and generation with SDPA's math kernel off.

    PyTorch falls back to its slow math kernel when no fused kernel takes the inputs; with the
    math backend disabled it raises instead, so a pass here means a fused kernel ran every call.
    """
    if device.type != "cuda":
        report("SKIP", "fused_attention", None, detail="the fused SDPA kernels are CUDA kernels")
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    long_tokens = len(llm.tokenizer(LONG_CONTEXT)["input_ids"])
    with sdpa_kernel(fused):
        dense = torch.cat(llm.score(contexts, candidates))
        tree = torch.cat(llm.score([LONG_CONTEXT], [[" It sees a door.", " It sees a key."]]))
        generated = llm.generate(contexts[:4], max_new_tokens=4, do_sample=False)
    finite = bool(torch.isfinite(dense).all() and torch.isfinite(tree).all()) and len(generated) == 4
    report(
        "PASS" if finite else "FAIL",
        "fused_attention",
        len(dense) + len(tree),
        "scores",
        f"SDPA math kernel disabled: {len(dense)} dense-mask scores, a {long_tokens}-token row through tree "
        f"attention and 4 greedy generations ran on fused kernels; finite: {finite}",
    )


def check_bf16_against_fp32(
    model_name: str, device: torch.device, contexts: list[str], candidates: list[list[str]], tolerance: float
) -> None:
    """llmgym's bf16 scores against a plain fp32 transformers forward (TF32 off)."""
    fp32 = build(model_name, str(device), "float32")
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        reference = per_pair_scores(fp32, item_pairs(fp32, contexts, candidates))
    finally:
        torch.set_float32_matmul_precision(precision)
        fp32.close()
    bf16 = build(model_name, str(device), "bfloat16")
    try:
        got = torch.cat(bf16.score(contexts, candidates)).tolist()
    finally:
        bf16.close()
    worst = max(abs(g - r) / (1.0 + abs(r)) for g, r in zip(got, reference))
    report(
        "PASS" if worst <= tolerance else "FAIL",
        "score_bf16_vs_fp32",
        worst,
        "max |diff| / (1 + |ref|)",
        f"{len(got)} bf16 scores against the fp32 reference, tolerance {tolerance:g}",
    )


def check_peak_memory(
    model_name: str, device: torch.device, contexts: list[str], candidates: list[list[str]]
) -> None:
    """Peak GPU memory of one full fine-tuning AdamW update against the budget docs/gpus.md states."""
    if device.type != "cuda":
        report("SKIP", "peak_memory", None, detail="torch.cuda's allocator statistics need a CUDA GPU")
        return
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    llm = build(model_name, str(device), "bfloat16", updater=LikelihoodStep)
    try:
        parameters = sum(p.numel() for p in llm.model.parameters())
        llm.update(contexts, [c[:1] for c in candidates])
        peak = torch.cuda.max_memory_allocated(device) - start
    finally:
        llm.close()
    budget = FULL_FT_BYTES_PER_PARAMETER * parameters + ACTIVATION_ALLOWANCE_MB * 2**20
    report(
        "PASS" if peak <= budget else "FAIL",
        "peak_memory",
        peak / 2**20,
        "MiB peak",
        f"one full fine-tuning AdamW update of {parameters / 1e6:.0f}M parameters in bf16 ({len(contexts)} contexts); "
        f"budget {FULL_FT_BYTES_PER_PARAMETER} B/parameter + {ACTIVATION_ALLOWANCE_MB} MiB = {budget / 2**20:.0f} MiB "
        f"({peak / parameters:.1f} B/parameter measured)",
    )


def check_vllm_after_update(model_name: str, device: torch.device) -> None:
    """vLLM beside the trainer: after a full fine-tuning update its greedy tokens are the trained model's."""
    if importlib.util.find_spec("vllm") is None:
        report("SKIP", "vllm_after_update", None, detail="vLLM is not installed (pip install 'llmgym[vllm]')")
        return
    from llmgym.llm import generation

    config = ModelConfig(
        name=model_name, device=str(device), dtype="float32", generation_engine="vllm", trunk_cache_mb=0
    )
    llm = LocalLLM(config, updater=BigStep)
    kwargs = {"max_new_tokens": 8, "do_sample": False}
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # TF32 rounding could flip a near-tie of the greedy choice
    try:
        before = llm.generate([CACHED_CONTEXT], **kwargs)[0][0].token_ids
        llm.update([CACHED_CONTEXT], [[" The door is locked and the key is gone."]])
        after = llm.generate([CACHED_CONTEXT], **kwargs)[0][0]
        with llm.autocast():
            trained = generation.generate(llm.model, llm.tokenizer, llm.encoder, [CACHED_CONTEXT], **kwargs)
    finally:
        torch.set_float32_matmul_precision(precision)
        llm.close()
    same = after.token_ids == trained[0][0].token_ids
    gap = (
        float((after.engine_logprobs - trained[0][0].logprobs).abs().max())
        if same and after.engine_logprobs is not None
        else math.nan
    )
    report(
        "PASS" if same else "FAIL",
        "vllm_after_update",
        gap,
        "max |engine - llmgym| log-prob",
        f"greedy vLLM after a full fine-tuning update == the trained model's: {same}; the update changed the "
        f"greedy output: {after.token_ids != before}",
    )


def check_fsdp(
    model_name: str, device: torch.device, contexts: list[str], candidates: list[list[str]]
) -> None:
    """Two sharded servers (``distributed.sharding=fsdp``) on the GPUs seen score like one in-process LLM and update."""
    from llmgym.config import DistributedConfig

    if device.type != "cuda":
        report("SKIP", "fsdp", None, detail="needs a CUDA GPU (its CPU runs are the ray tests)")
        return
    if importlib.util.find_spec("ray") is None:
        report("SKIP", "fsdp", None, detail="ray is not installed (pip install 'llmgym[ray]')")
        return
    from llmgym.llm.client import LLM

    config = ModelConfig(name=model_name, device=str(device), dtype="float32", trunk_cache_mb=0)
    local = LocalLLM(config)
    want = torch.cat(local.score(contexts, candidates))
    local.close()
    share = 1.0 if torch.cuda.device_count() >= 2 else 0.5
    distributed = DistributedConfig(llm_processes=2, gpus_per_server=share, timeout_s=120.0, sharding="fsdp")
    llm = LLM(config, updater=LikelihoodStep, distributed=distributed)
    try:
        got = torch.cat(llm.score(contexts, candidates))
        losses = [r["loss"] for r in llm.update(contexts, [c[:1] for c in candidates])]
    finally:
        llm.close()
    gap = float((got - want).abs().max())
    finite = all(math.isfinite(x) for x in losses)
    report(
        "PASS" if gap <= 1e-4 and finite else "FAIL",
        "fsdp",
        gap,
        "max score gap",
        f"2 FSDP servers ({share} GPU each) against one in-process LLM; one update, losses finite: {finite}",
    )


def check_two_servers(
    model_name: str,
    device: torch.device,
    contexts: list[str],
    candidates: list[list[str]],
    on_cpu: bool = False,
) -> None:
    """Two Ray LLM servers sharing ``device`` (half a GPU each) score like one in-process LLM; seconds per score call.

    On a CPU the script skips it (it starts Ray); ``on_cpu=True`` runs it with servers that take no
    GPU, as ``tests/distributed/test_gpu_check_servers.py`` does.
    """
    if device.type != "cuda" and not on_cpu:
        report("SKIP", "two_servers_one_gpu", None, detail="needs a CUDA GPU (its CPU run is a ray test)")
        return
    if importlib.util.find_spec("ray") is None:
        report("SKIP", "two_servers_one_gpu", None, detail="ray is not installed (pip install 'llmgym[ray]')")
        return
    from llmgym.config import DistributedConfig
    from llmgym.llm.client import LLM

    config = ModelConfig(name=model_name, device=str(device), dtype="float32")
    local = LocalLLM(config)
    want = torch.cat(local.score(contexts, candidates))
    local.close()
    share = 0.5 if device.type == "cuda" else 0
    llm = LLM(config, distributed=DistributedConfig(llm_processes=2, gpus_per_server=share, timeout_s=120.0))
    try:
        llm.score(contexts, candidates)  # warm-up
        start = time.perf_counter()
        got = torch.cat(llm.score(contexts, candidates))
        seconds = time.perf_counter() - start
    finally:
        llm.close()
    gap = float((got - want).abs().max())
    status = "PASS" if gap <= 1e-4 else "FAIL"
    report(
        status,
        "two_servers_one_gpu",
        seconds,
        "s",
        f"2 Ray servers on {device} ({share} GPU each), max score gap to in-process {gap:.1e}",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda, cuda:N or cpu."
    )
    parser.add_argument(
        "--tiny", action="store_true", help="A tiny offline model and small workloads (CPU smoke run)."
    )
    parser.add_argument("--model", default="SmolLM2-135M-Instruct", help="Model name (ignored with --tiny).")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print(
        f"device: {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), torch {torch.__version__}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="llmgym-gpu-check-") as tmp:
        workdir = Path(tmp)
        model_name = args.model
        if args.tiny:
            from llmgym.testing import save_tiny_model

            model_name = str(
                save_tiny_model(workdir / "tiny", num_layers=2, hidden_size=64, num_heads=2)
            )  # 32-wide heads: vLLM takes them
        contexts, candidates = workload(args.tiny)
        fp32 = build(model_name, str(device), "float32", lora=LoRAConfig(r=8))
        run_check("placement", lambda: check_placement(fp32, device, contexts, candidates))
        run_check(
            "score_equal_fp32", lambda: check_equality("score_equal_fp32", fp32, contexts, candidates, 1e-4)
        )
        run_check("score_speed", lambda: check_score_speed(fp32, device, contexts, candidates))
        run_check(
            "generate_speed", lambda: check_generate_speed(fp32, device, contexts, 8 if args.tiny else 32)
        )
        run_check("fused_attention", lambda: check_fused_attention(fp32, device, contexts, candidates))
        run_check(
            "vllm_generate_speed",
            lambda: check_vllm_generate_speed(model_name, device, contexts, 8 if args.tiny else 32),
        )
        fp32.close()
        run_check("vllm_after_update", lambda: check_vllm_after_update(model_name, device))
        if device.type == "cpu" or torch.cuda.is_bf16_supported():
            bf16 = build(model_name, str(device), "bfloat16")
            run_check(
                "score_equal_bf16",
                lambda: check_equality("score_equal_bf16", bf16, contexts, candidates, 0.02),
            )
            bf16.close()
            run_check(
                "score_bf16_vs_fp32",
                lambda: check_bf16_against_fp32(model_name, device, contexts, candidates, 0.05),
            )
        else:
            report("SKIP", "score_equal_bf16", None, detail="this GPU has no bf16")
            report("SKIP", "score_bf16_vs_fp32", None, detail="this GPU has no bf16")
        run_check("peak_memory", lambda: check_peak_memory(model_name, device, contexts, candidates))
        run_check("quickstart", lambda: check_quickstart(model_name, str(device), args.tiny, workdir))
        run_check("qlora", lambda: check_qlora(model_name, device, contexts, candidates))
        run_check("two_servers_one_gpu", lambda: check_two_servers(model_name, device, contexts, candidates))
        run_check("fsdp", lambda: check_fsdp(model_name, device, contexts, candidates))
    print(
        f"{'FAIL' if FAILED else 'PASS'} all: {len(FAILED)} failed"
        + (f" ({', '.join(FAILED)})" if FAILED else ""),
        flush=True,
    )
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
