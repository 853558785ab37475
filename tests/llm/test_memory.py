"""model.gradient_checkpointing really recomputes the blocks in backward, with the same gradients."""

from __future__ import annotations

import torch

from llmgym.config import LoRAConfig, ModelConfig
from llmgym.llm.local import LocalLLM
from llmgym.testing import tiny_causal_lm


def _count_mlp_calls(layers):
    """Count calls of each block's MLP ``forward`` (the recompute in backward runs it without module hooks)."""
    calls = []
    for layer in layers:
        forward = layer.mlp.forward
        layer.mlp.forward = lambda *args, _f=forward, **kwargs: calls.append(1) or _f(*args, **kwargs)
    return calls


def _grads_and_block_calls(checkpointing: bool):
    model, tok = tiny_causal_lm()
    config = ModelConfig(lora=LoRAConfig(r=4), trunk_cache_mb=0, gradient_checkpointing=checkpointing)
    llm = LocalLLM(config, model=model, tokenizer=tok)
    calls = _count_mlp_calls(model.model.layers)
    out = llm.forward(
        ["score"], ["go to the red ball", "open"], [[" left", " right"], [" door"]], require_grad=True
    )
    forward_calls = len(calls)
    sum(o["score"].sum() for o in out).backward()
    grads = [p.grad.clone() for p in llm.trainable_parameters()]
    return grads, forward_calls, len(calls), model


def test_gradient_checkpointing_recomputes_every_block_in_backward():
    plain, plain_forward, plain_total, _ = _grads_and_block_calls(False)
    ckpt, ckpt_forward, ckpt_total, model = _grads_and_block_calls(True)
    assert plain_forward == ckpt_forward == 2  # one pass, 2 blocks
    assert plain_total == 2 and ckpt_total == 4  # each block ran again in backward
    for a, b in zip(plain, ckpt):
        assert torch.allclose(a, b, atol=1e-6)
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert not any(m.training for m in dropouts)  # no dropout switched on


def test_scoring_without_gradients_does_not_recompute():
    model, tok = tiny_causal_lm()
    llm = LocalLLM(ModelConfig(trunk_cache_mb=0, gradient_checkpointing=True), model=model, tokenizer=tok)
    calls = _count_mlp_calls(model.model.layers[:1])
    llm.score(["go"], [[" left"]])
    assert len(calls) == 1


def test_the_trunk_cache_takes_at_most_a_quarter_of_the_free_gpu_memory(monkeypatch):
    from llmgym.llm.memory import trunk_cache_bytes

    assert trunk_cache_bytes(1024, torch.device("cpu")) == 1024 * 2**20
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2 * 2**30, 80 * 2**30))  # 2 GiB free
    assert trunk_cache_bytes(1024, torch.device("cuda:0")) == 2**29  # a quarter of it, not the 1 GiB asked
    assert trunk_cache_bytes(100, torch.device("cuda:0")) == 100 * 2**20
    assert trunk_cache_bytes(0, torch.device("cuda:0")) == 0
