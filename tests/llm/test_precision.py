"""dtype policy: auto dtype, TF32, fp32 trainable weights under autocast, fp16 loss scaling (bf16 on CPU)."""

from __future__ import annotations

import pytest
import torch

from llmgym.config import LoRAConfig, ModelConfig
from llmgym.llm.local import LocalLLM
from llmgym.llm.models import resolve_dtype
from llmgym.llm.modules import ValueHead
from llmgym.llm.precision import LossScaling, enable_tf32
from llmgym.testing import tiny_causal_lm

CONTEXTS = ["go to the red ball", "open the door"]
CANDIDATES = [[" left", " right", " forward"], [" toggle", " pick up"]]


def test_auto_dtype_is_bf16_on_a_cuda_gpu_that_supports_it_else_fp32(monkeypatch):
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("auto", torch.device("cuda:0")) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # e.g. a V100
    assert resolve_dtype("auto", torch.device("cuda:0")) == torch.float32
    assert resolve_dtype("float16", torch.device("cuda:0")) == torch.float16
    assert ModelConfig(dtype="auto").dtype == "auto"


def test_tf32_is_enabled_on_cuda_only():
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        enable_tf32(torch.device("cpu"))
        assert torch.get_float32_matmul_precision() == "highest"
        enable_tf32(torch.device("cuda:0"))
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)


def _bf16_llm(lora: bool, **kwargs):
    model, tok = tiny_causal_lm()
    model = model.to(torch.bfloat16)
    config = ModelConfig(lora=LoRAConfig(r=4) if lora else None, trunk_cache_mb=0)
    return LocalLLM(config, model=model, tokenizer=tok, **kwargs)


def test_bf16_scores_agree_with_fp32_and_lora_trains_in_fp32():
    fp32_model, tok = tiny_causal_lm()
    expected = LocalLLM(ModelConfig(trunk_cache_mb=0), model=fp32_model, tokenizer=tok).score(
        CONTEXTS, CANDIDATES
    )
    llm = _bf16_llm(lora=True, module_functions={"value": ValueHead(hidden_sizes=(8,))})
    assert llm.compute_dtype == torch.bfloat16
    trainable = llm.trainable_parameters()
    assert trainable and all(p.dtype == torch.float32 for p in trainable)
    frozen = [p for p in llm.model.parameters() if not p.requires_grad]
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)  # the base stays in half precision
    got = llm.score(CONTEXTS, CANDIDATES)
    for g, e in zip(got, expected):
        assert g.dtype == torch.float32 and torch.allclose(g, e, atol=0.15), (g, e)
    out = llm.forward(["value", "score"], CONTEXTS, CANDIDATES, require_grad=True)
    loss = sum(o["value"] + o["score"].sum() for o in out)
    loss.backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in trainable)


def test_full_fine_tuning_in_bf16_keeps_fp32_master_weights_so_small_updates_are_not_lost():
    llm = _bf16_llm(lora=False)
    params = llm.trainable_parameters()
    assert all(p.dtype == torch.float32 for p in params)
    optimizer = torch.optim.SGD(params, lr=1e-4)
    before = [p.detach().clone() for p in params]
    out = llm.forward(["score"], CONTEXTS, CANDIDATES, require_grad=True)
    (-sum(o["score"].sum() for o in out)).backward()
    optimizer.step()
    moved = [p for p, b in zip(params, before) if p.grad is not None and p.grad.abs().max() > 0]
    assert moved and all(
        not torch.equal(p, b) for p, b in zip(params, before) if p.grad is not None and p.grad.abs().max() > 0
    )
    # the same update on bf16 weights rounds away for most entries
    weight = llm.model.get_input_embeddings().weight
    lost = (
        weight.detach().to(torch.bfloat16).float()
        == (weight.detach() - 1e-4 * weight.grad).to(torch.bfloat16).float()
    )
    assert lost.float().mean() > 0.5


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_fp16_loss_scaling_skips_a_step_with_inf_or_nan_gradients(bad):
    layer = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    scaling = LossScaling(torch.float16, torch.device("cpu"))
    assert scaling.scaler is not None and scaling.scaler.get_scale() > 1
    before = layer.weight.detach().clone()
    scaling.backward(layer(torch.ones(1, 3)).sum() * bad)
    scaling.step(optimizer, list(layer.parameters()), max_norm=1.0)
    assert torch.equal(layer.weight, before)  # skipped
    assert scaling.state_dict()["scale"] < 2.0**16  # and the scale backed off
    optimizer.zero_grad()
    scaling.backward(layer(torch.ones(1, 3)).sum())
    norm = scaling.step(optimizer, list(layer.parameters()), max_norm=None)
    assert norm is None and not torch.equal(layer.weight, before)
    assert LossScaling(torch.bfloat16, torch.device("cpu")).scaler is None


def _clip_on_rank(rank: int, store: str, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from llmgym.llm.precision import clip_grad_norm

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    sharded = torch.nn.Parameter(distribute_tensor(torch.zeros(5, 3), mesh, [Shard(0)]))
    sharded.grad = distribute_tensor(torch.arange(15.0).view(5, 3), mesh, [Shard(0)])
    whole = torch.nn.Parameter(torch.zeros(4))
    whole.grad = torch.full((4,), 2.0)
    norm = clip_grad_norm([sharded, whole], 1.0)
    torch.save({"norm": norm, "sharded": sharded.grad.full_tensor(), "whole": whole.grad}, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.timeout(90)
def test_clip_grad_norm_spans_fsdp_shards_and_whole_tensors(tmp_path):
    import torch.multiprocessing as mp

    out = str(tmp_path / "result")
    mp.spawn(_clip_on_rank, args=(str(tmp_path / "store"), out), nprocs=2, join=True)
    sharded, whole = torch.arange(15.0).view(5, 3), torch.full((4,), 2.0)
    norm = torch.cat([sharded.reshape(-1), whole]).norm()
    for rank in range(2):
        result = torch.load(f"{out}.{rank}")
        torch.testing.assert_close(result["norm"], norm)  # the whole gradients' norm, on every server
        torch.testing.assert_close(result["sharded"], sharded / (norm + 1e-6))
        torch.testing.assert_close(result["whole"], whole / (norm + 1e-6))
