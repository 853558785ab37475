"""Block-sparse tree attention: the dense prefix-sharing mask's result at a fraction of its cost."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgym.errors import BackendError, InputError
from llmgym.llm.layout import ItemSpec, collate_rows, pack_item, pack_items, prefix_sharing_mask
from llmgym.llm.tree_attention import (
    TREE_ATTENTION,
    ancestor_table,
    packed_row_attention,
    plan_tree_attention,
    supports_tree_attention,
    tree_attention,
    tree_attention_pass,
)
from llmgym.testing.tiny_models import tiny_causal_lm, tiny_seq2seq_lm

_tokens = st.lists(st.integers(1, 4), min_size=1, max_size=6)
_items = st.lists(
    st.tuples(_tokens, st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3), max_size=3)),
    min_size=1,
    max_size=5,
)


def _batch(raw: list[tuple[list[int], list[list[int]]]]):
    items = [ItemSpec(ctx, [ctx + tail for tail in tails], [len(ctx)] * len(tails)) for ctx, tails in raw]
    # a trie row, a one-item row (not in depth-first order when tails differ) and a short row: left padding
    rows = [pack_items(items), pack_item(items[-1]), pack_items(items[:1])]
    return collate_rows(rows, pad_token_id=0, device=torch.device("cpu"))


def test_ancestor_table_lists_generations_up_to_the_root():
    parents = torch.tensor([[0, 0, 1, 1, 4]])  # 0 <- 1 <- {2, 3}; 4 a root of its own
    table = ancestor_table(parents)
    assert table.tolist() == [[[0, 0, 0], [1, 0, 0], [2, 1, 0], [3, 1, 0], [4, 4, 4]]]


@settings(max_examples=60, deadline=None)
@given(_items, st.sampled_from([1, 2, 3, 5, 64]))
def test_plan_allows_exactly_the_prefix_sharing_mask(raw, block):
    batch = _batch(raw)
    dense = prefix_sharing_mask(batch, torch.float32)[:, 0] == 0  # [R, L, L]
    plan = plan_tree_attention(batch.parents, block)
    rows, length = batch.parents.shape
    allowed = plan.allowed.reshape(rows, -1, block, plan.key_index.shape[-1])
    for r in range(rows):
        for q in range(length):
            blk, offset = divmod(q, block)
            keys = plan.key_index[r, blk][allowed[r, blk, offset]].tolist()
            assert sorted(keys) == torch.nonzero(dense[r, q]).flatten().tolist()


@pytest.mark.parametrize("block", [4, 16, 64])
def test_tree_attention_equals_dense_masked_attention(block):
    raw = [
        ([1, 2, 3, 4, 1, 2], [[3], [4, 4]]),
        ([1, 2, 3, 1], [[2, 2, 2]]),
        ([1, 2], [[1], [2], [3]]),
        ([4, 4, 4, 4, 4], []),
    ]
    batch = _batch(raw)
    rows, length = batch.parents.shape
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(rows, 6, length, 8, generator=gen)
    key = torch.randn(rows, 2, length, 8, generator=gen)
    value = torch.randn(rows, 2, length, 8, generator=gen)
    mask = prefix_sharing_mask(batch, torch.float32)
    dense = F.scaled_dot_product_attention(
        query, key.repeat_interleave(3, 1), value.repeat_interleave(3, 1), attn_mask=mask, scale=0.3
    )
    tree = tree_attention(query, key, value, plan_tree_attention(batch.parents, block), scaling=0.3)
    assert tree.shape == (rows, length, 6, 8)
    assert torch.allclose(tree, dense.transpose(1, 2), atol=1e-5)


def test_tree_attention_gradients_equal_dense():
    batch = _batch([([1, 2, 3], [[1], [2, 3]]), ([1, 2, 4], [[4]])])
    rows, length = batch.parents.shape
    gen = torch.Generator().manual_seed(1)
    states = [torch.randn(rows, 2, length, 4, generator=gen, requires_grad=True) for _ in range(3)]
    mask = prefix_sharing_mask(batch, torch.float32)
    plan = plan_tree_attention(batch.parents, 3)
    dense_grads = torch.autograd.grad(
        F.scaled_dot_product_attention(*states, attn_mask=mask).pow(2).sum(), states
    )
    tree_grads = torch.autograd.grad(tree_attention(*states, plan).pow(2).sum(), states)
    for dense, tree in zip(dense_grads, tree_grads):
        assert torch.allclose(dense, tree, atol=1e-5)


def test_plan_rejects_an_empty_block():
    with pytest.raises(InputError, match="block=0"):
        plan_tree_attention(torch.zeros(1, 3, dtype=torch.long), 0)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_model_pass_under_a_plan_equals_the_dense_mask_pass(arch):
    model, _ = tiny_causal_lm(arch)
    assert supports_tree_attention(model)
    batch = _batch([([5, 6, 7, 8, 9], [[10], [11, 12]]), ([5, 6, 7, 13], [[14, 15]]), ([5, 16], [])])
    mask = prefix_sharing_mask(batch, torch.float32)
    with torch.no_grad():
        dense = model(input_ids=batch.input_ids, attention_mask=mask, position_ids=batch.position_ids).logits
        with tree_attention_pass(model, plan_tree_attention(batch.parents, 4)):
            tree = model(
                input_ids=batch.input_ids, attention_mask=None, position_ids=batch.position_ids
            ).logits
        after = model(input_ids=batch.input_ids, attention_mask=mask, position_ids=batch.position_ids).logits
    assert torch.allclose(tree, dense, atol=1e-5)
    assert model.config._attn_implementation == "sdpa" and torch.equal(after, dense)  # restored on exit


def test_supports_tree_attention_excludes_what_it_cannot_compute():
    seq2seq, _ = tiny_seq2seq_lm()
    assert not supports_tree_attention(seq2seq)
    windowed, _ = tiny_causal_lm("llama")
    windowed.config.sliding_window = 4
    assert not supports_tree_attention(windowed)


def test_packed_row_attention_yields_the_dense_mask_or_switches_to_the_plan():
    model, _ = tiny_causal_lm("llama")
    batch = _batch([([5, 6, 7], [[8], [9, 10]]), ([5, 11], [])])
    with packed_row_attention(model, batch, torch.float32, tree=False) as mask:
        assert mask is not None and torch.equal(mask, prefix_sharing_mask(batch, torch.float32))
        assert model.config._attn_implementation == "sdpa"
    with packed_row_attention(model, batch, torch.float32, tree=True) as mask:
        assert mask is None and model.config._attn_implementation == TREE_ATTENTION
        other = torch.zeros(1, batch.input_ids.shape[1] + 1, dtype=torch.long)
        with pytest.raises(BackendError, match="planned rows of"):
            model(input_ids=other)  # not the planned rows: an error, never a silent other attention
    assert model.config._attn_implementation == "sdpa"


@settings(max_examples=40, deadline=None)
@given(_items)
def test_token_depths_count_ancestors_without_walking_the_tree(raw):
    from llmgym.llm.tree_attention import token_depths

    batch = _batch(raw)
    table = ancestor_table(batch.parents)
    assert torch.equal(token_depths(batch.parents), (table[..., 1:] != table[..., :-1]).sum(-1))


def test_ancestor_table_syncs_with_the_device_once_not_once_per_depth(monkeypatch):
    parents = torch.tensor([[0, 0, 1, 2, 3, 4, 5, 6]])  # a chain 8 deep
    syncs = []
    for name in ("item", "__int__", "__bool__", "tolist"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor, name, lambda self, *a, _o=original, _n=name: syncs.append(_n) or _o(self, *a)
        )
    monkeypatch.setattr(torch, "equal", lambda *a: syncs.append("equal") or True)
    table = ancestor_table(parents)
    assert table.shape == (1, 8, 8) and len(syncs) == 1


def test_tree_attention_hands_sdpa_expanded_heads_and_no_enable_gqa(monkeypatch):
    """PyTorch's fused CUDA kernels refuse a mask together with enable_gqa=True (math kernel only)."""
    from llmgym.llm import tree_attention as module

    calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(
        module.F,
        "scaled_dot_product_attention",
        lambda q, k, v, **kw: calls.append((q, k, kw)) or sdpa(q, k, v, **kw),
    )
    batch = _batch([([1, 2, 3], [[1], [2, 3]])])
    rows, length = batch.parents.shape
    query, key = torch.randn(rows, 6, length, 4), torch.randn(rows, 2, length, 4)
    tree_attention(query, key, key, plan_tree_attention(batch.parents, 2))
    ((q, k, kwargs),) = calls
    assert k.shape[1] == q.shape[1] == 6 and not kwargs.get("enable_gqa", False)


def test_flash_attention_models_take_tree_attention_for_every_packed_row():
    from llmgym.errors import ConfigError
    from llmgym.llm.tree_attention import check_packed_attention, use_tree_attention

    model, _ = tiny_causal_lm("llama")
    assert not use_tree_attention(model, 16, 1024) and use_tree_attention(model, 2048, 1024)
    model.config._attn_implementation = "flash_attention_2"
    assert use_tree_attention(model, 16, 1024)  # FA2 never gets the dense mask
    model.config.attn_logit_softcapping = 30.0  # and where tree attention cannot stand in: refused
    with pytest.raises(ConfigError, match="model.attn_implementation=sdpa"):
        check_packed_attention(model)
