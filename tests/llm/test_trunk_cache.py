"""Frozen-trunk cache: passes run from the cached trunk states and compute what the full model does."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from llmgym.config import LoRAConfig, ModelConfig
from llmgym.llm.client import LLM
from llmgym.llm.modules import ValueHead
from llmgym.llm.trunk_cache import TrunkCache, decoder_blocks, frozen_depth
from llmgym.llm.updater import Updater
from llmgym.testing import tiny_causal_lm

CONTEXTS = [
    "You see a red ball. Action:",
    "You see a wall. Action:",
    "Goal: go to the key, it is far away. Action:",
]
CANDIDATES = [[" go forward", " turn left"], [" toggle"], [" pick up", " drop", " turn right"]]


class Probe(Updater):
    """Computes scores, values, reference scores, token log-probs and gradients inside an update."""

    def perform_update(
        self, contexts: Any, candidates: Any, _current_batch_ids: Any, **kwargs: Any
    ) -> dict[str, Any]:
        params = self.llm.trainable_parameters()
        for p in params:
            p.grad = None
        out = self.llm.forward(["score", "value"], contexts, candidates, require_grad=True, minibatch_size=4)
        sum(o["score"].sum() + o["value"] for o in out).backward()
        with torch.no_grad(), self.llm.reference():
            reference = self.llm.forward(["score"], contexts, candidates)
        tokens = self.llm.token_logprobs([[5, 6, 7, 8], [9, 10]], [[11, 12], [13]], require_grad=False)
        return {
            "scores": [o["score"].detach() for o in out],
            "values": [o["value"].detach() for o in out],
            "reference": [o["score"] for o in reference],
            "tokens": [o["logprobs"] for o in tokens],
            "grads": [p.grad.clone() for p in params],
        }


def _llm(arch: str, cache_mb: int, layers: tuple[int, ...] | None = (-1,), row_tokens: int = 0) -> LLM:
    model, tok = tiny_causal_lm(arch, seed=1, num_layers=3)
    torch.manual_seed(0)
    lora = LoRAConfig(r=2, layers=list(layers) if layers is not None else None)
    config = ModelConfig(name="tiny", lora=lora, trunk_cache_mb=cache_mb, row_tokens=row_tokens)
    llm = LLM(config, {"value": ValueHead()}, updater=Probe, model=model, tokenizer=tok)
    with torch.no_grad():  # make the adapters do something
        for name, p in llm.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.05)
    return llm


def _close(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.allclose(x, y, atol=1e-5) for x, y in zip(a, b))


@pytest.mark.parametrize(("row_tokens", "tree"), [(0, False), (512, False), (512, True)])
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_update_from_cached_trunk_equals_full_model(arch, row_tokens, tree, monkeypatch):
    # with row_tokens, the collection packs the three contexts in one row and the update (4
    # sequences per pass) in other rows: the cached states are per item, not per row; with tree,
    # every row attends through block-sparse tree attention, gradients included
    if tree:
        from llmgym.llm import scoring

        monkeypatch.setattr(scoring, "DENSE_MASK_MAX_TOKENS", 0)
    plain, cached = _llm(arch, 0, row_tokens=row_tokens), _llm(arch, 64, row_tokens=row_tokens)
    expected = plain.update(CONTEXTS, CANDIDATES)[0]
    cached.forward(["score", "value"], CONTEXTS, CANDIDATES)  # collection: records the trunk states
    cache = cached.backend.trunk_cache
    assert len(cache) == len(CONTEXTS) and cache.hits == 0
    result = cached.update(CONTEXTS, CANDIDATES)[0]
    # the forward and the reference forward (adapter disabled) reuse the recorded rows; only the
    # collection and the token_logprobs rows, never seen before, run the whole model
    assert cache.hits == 2 * len(CONTEXTS) and cache.misses == len(CONTEXTS) + 2
    for key in ("scores", "values", "reference", "tokens", "grads"):
        assert _close(result[key], expected[key]), key
    assert all(g.abs().sum() > 0 for g in result["grads"])


def test_update_without_collection_computes_fully_then_reuses():
    plain, cached = _llm("llama", 0), _llm("llama", 64)
    expected = plain.update(CONTEXTS, CANDIDATES)[0]
    cache = cached.backend.trunk_cache
    first = cached.update(CONTEXTS, CANDIDATES)[0]
    assert cache.misses > 0 and len(cache) > 0  # the first forward records, the reference forward reuses
    misses = cache.misses
    second = cached.update(CONTEXTS, CANDIDATES)[0]
    assert cache.misses == misses  # every row was recorded by the first update
    for key in ("scores", "grads"):
        assert _close(first[key], expected[key]) and _close(second[key], expected[key]), key


def _scores(llm: LLM, contexts: list[str], candidates: list[list[str]]) -> list[torch.Tensor]:
    return [o["score"] for o in llm.forward(["score"], contexts, candidates)]


@pytest.mark.parametrize("row_tokens", [0, 512])
def test_cached_items_run_from_the_cache_outside_updates_too(row_tokens):
    # a later rollout meeting the same prompt skips the frozen blocks: a mixed call puts the cached
    # item in a pass of its own and runs the others fully
    plain, cached = _llm("llama", 0, row_tokens=row_tokens), _llm("llama", 64, row_tokens=row_tokens)
    cache = cached.backend.trunk_cache
    first = _scores(cached, CONTEXTS[:1], CANDIDATES[:1])
    assert (cache.hits, cache.misses, len(cache)) == (0, 1, 1)
    mixed = _scores(cached, CONTEXTS, CANDIDATES)
    assert (cache.hits, cache.misses, len(cache)) == (1, 3, len(CONTEXTS))
    again = _scores(cached, CONTEXTS, CANDIDATES)
    assert (cache.hits, cache.misses) == (1 + len(CONTEXTS), 3)
    expected = _scores(plain, CONTEXTS, CANDIDATES)
    assert _close(first, expected[:1]) and _close(mixed, expected) and _close(again, expected)


def test_a_change_of_a_frozen_weight_empties_the_cache():
    plain, cached = _llm("llama", 0), _llm("llama", 64)
    cache = cached.backend.trunk_cache
    before = _scores(cached, CONTEXTS, CANDIDATES)
    for llm in (plain, cached):
        with torch.no_grad():  # an in-place edit of the frozen trunk, as load_state_dict makes
            llm.model.get_input_embeddings().weight.mul_(0.5)
    after = _scores(cached, CONTEXTS, CANDIDATES)
    assert cache.hits == 0 and cache.misses == 2 * len(CONTEXTS)
    assert not _close(after, before) and _close(after, _scores(plain, CONTEXTS, CANDIDATES))
    _scores(cached, CONTEXTS, CANDIDATES)
    assert cache.hits == len(CONTEXTS)  # the new states are reused


def test_save_and_load_empty_the_cache(tmp_path):
    llm = _llm("llama", 64)
    cache = llm.backend.trunk_cache
    _scores(llm, CONTEXTS, CANDIDATES)
    assert len(cache) == len(CONTEXTS)
    llm.save(tmp_path / "ckpt")
    assert len(cache) == 0 and cache.nbytes == 0
    _scores(llm, CONTEXTS, CANDIDATES)
    llm.load(tmp_path / "ckpt")
    assert len(cache) == 0 and cache.nbytes == 0


def test_no_cache_when_the_bottom_block_trains():
    llm = _llm("llama", 64, layers=None)
    llm.forward(["score"], CONTEXTS, CANDIDATES)
    llm.update(CONTEXTS, CANDIDATES)
    assert len(llm.backend.trunk_cache) == 0


def test_frozen_depth_and_blocks():
    model, _ = tiny_causal_lm("llama", seed=0, num_layers=3)
    backbone = model.model
    blocks = decoder_blocks(backbone)
    assert blocks is backbone.layers
    for p in model.parameters():
        p.requires_grad_(False)
    assert frozen_depth(backbone, blocks) == 2  # nothing trains: the last block's input
    blocks[1].mlp.up_proj.weight.requires_grad_(True)
    assert frozen_depth(backbone, blocks) == 1
    backbone.embed_tokens.weight.requires_grad_(True)
    assert frozen_depth(backbone, blocks) == 0


def test_memory_budget_drops_least_recently_used_rows():
    llm = _llm("llama", 64)
    cache: TrunkCache = llm.backend.trunk_cache
    llm.forward(["score"], CONTEXTS[:1], CANDIDATES[:1])
    one_row = cache.nbytes
    cache.max_bytes = 2 * one_row + 1
    llm.forward(["score"], CONTEXTS[1:], CANDIDATES[1:])
    assert len(cache) <= 2 and cache.nbytes <= cache.max_bytes


def test_negative_budget_is_a_config_error():
    from llmgym.errors import ConfigError

    with pytest.raises(ConfigError, match="trunk_cache_mb=-1 must be >= 0"):
        ModelConfig(name="tiny", trunk_cache_mb=-1)
