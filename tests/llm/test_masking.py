"""NLPO's mask policy: the top-p mask by hand, masked log-probs equal generate's, the snapshot's life cycle."""

from __future__ import annotations

import math

import pytest
import torch

from llmgym.config import LoRAConfig, ModelConfig
from llmgym.errors import InputError
from llmgym.llm.local import LocalLLM
from llmgym.llm.masking import IncrementalMask, top_p_mask
from llmgym.llm.sampling import Sampling, sampled_logprobs
from llmgym.testing import tiny_causal_lm

PROMPTS = ["Goal: go to the", "You see a red ball 2 steps left and", "héllo"]
PROBS = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.15, 0.5, 0.05, 0.3]])


@pytest.mark.parametrize(
    ("top_p", "always_keep", "want"),
    [
        # sorted masses before each token: 0, 0.5, 0.8, 0.95 (row 0); the same tokens permuted in row 1
        (0.7, (), [[1, 1, 0, 0], [0, 1, 0, 1]]),
        (0.79, (), [[1, 1, 0, 0], [0, 1, 0, 1]]),  # 0.5 + 0.3 reaches 0.79: the third token is not needed
        (0.81, (), [[1, 1, 1, 0], [1, 1, 0, 1]]),
        (0.3, (), [[1, 0, 0, 0], [0, 1, 0, 0]]),  # the most likely token is always kept
        (1.0, (), [[1, 1, 1, 1], [1, 1, 1, 1]]),
        (0.3, (3,), [[1, 0, 0, 1], [0, 1, 0, 1]]),  # special tokens are kept whatever their mass
    ],
)
def test_top_p_mask_keeps_the_smallest_set_reaching_top_p(top_p, always_keep, want):
    keep = top_p_mask(PROBS.log() + 2.0, top_p, always_keep)  # a constant shift: the same distribution
    assert keep.dtype == torch.bool and keep.tolist() == [[bool(v) for v in row] for row in want]


def test_top_p_mask_refuses_a_mass_outside_the_unit_interval():
    with pytest.raises(InputError, match="mask_top_p=0"):
        top_p_mask(PROBS.log(), 0.0)
    with pytest.raises(InputError, match="mask_top_p=1.5"):
        Sampling(mask_top_p=1.5)


def test_masked_logprobs_renormalise_on_the_mask_then_apply_temperature():
    logits = torch.tensor([[4.0, 3.0, 0.0, -1.0]], requires_grad=True)
    keep = torch.tensor([[True, False, True, True]])
    sampling = Sampling(temperature=2.0, mask_top_p=0.9)
    kept = sampled_logprobs(logits, torch.tensor([2]), sampling, keep)
    by_hand = 0.0 / 2 - math.log(math.exp(4.0 / 2) + math.exp(0.0 / 2) + math.exp(-1.0 / 2))
    assert float(kept.detach()) == pytest.approx(by_hand, abs=1e-6)
    # a token outside the mask (moved out by an update) is scored against the mask and itself: finite
    cut = sampled_logprobs(logits, torch.tensor([1]), sampling, keep)
    by_hand = 3.0 / 2 - math.log(sum(math.exp(v / 2) for v in (4.0, 3.0, 0.0, -1.0)))
    assert float(cut.detach()) == pytest.approx(by_hand, abs=1e-6)
    kept.backward()
    assert logits.grad is not None and logits.grad[0, 1] == 0.0 and torch.isfinite(logits.grad).all()
    assert Sampling(mask_top_p=0.9).without_mask() == Sampling() and not Sampling(mask_top_p=0.9).is_plain


def _llm(lora: bool = False) -> LocalLLM:
    model, tok = tiny_causal_lm("llama", seed=0)
    return LocalLLM(
        ModelConfig(name="tiny", lora=LoRAConfig(r=4, alpha=8) if lora else None), model=model, tokenizer=tok
    )


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_generation_samples_inside_the_mask_and_token_logprobs_recompute_its_logprobs(lora):
    llm = _llm(lora)
    llm.refresh_mask_policy()
    if lora:
        assert llm.mask_policy.params and all("lora_" in name for name in llm.mask_policy.params)
    with (
        torch.no_grad()
    ):  # move the policy away from its snapshot: the mask is the snapshot's, not the policy's
        for p in llm.trainable_parameters():
            p.add_(0.05 * torch.randn_like(p))
    sampling = Sampling(temperature=0.8, mask_top_p=0.5)
    torch.manual_seed(0)
    gens = [
        g
        for group in llm.generate(
            PROMPTS, max_new_tokens=6, num_return_sequences=2, **sampling.generation_kwargs()
        )
        for g in group
    ]
    prompts, completions = [g.prompt_ids for g in gens], [g.token_ids for g in gens]
    special = llm.tokenizer.all_special_ids
    sequences = [p + c[:-1] for p, c in zip(prompts, completions)]
    logits = llm.mask_policy.last_logits(
        llm.model, sequences, [len(c) for c in completions], llm.pad_token_id
    )
    masks = [top_p_mask(lg, 0.5, special) for lg in logits]  # the plain masks, without keep_masks' guard
    for g, keep in zip(gens, masks):
        assert keep[
            torch.arange(len(g.token_ids)), torch.tensor(g.token_ids)
        ].all()  # every token inside its mask
    assert sum(int(m.sum()) for m in masks) < 0.5 * sum(m.numel() for m in masks)  # the mask does cut
    masked = llm.token_logprobs(prompts, completions, require_grad=False, sampling=sampling)
    unmasked = llm.token_logprobs(prompts, completions, require_grad=False, sampling=sampling.without_mask())
    for g, m, u in zip(gens, masked, unmasked):
        torch.testing.assert_close(m["logprobs"], g.logprobs, atol=1e-5, rtol=0)
        assert (u["logprobs"] <= m["logprobs"] + 1e-6).all()  # renormalised on a subset: never less likely
    assert not all(torch.allclose(m["logprobs"], u["logprobs"], atol=1e-3) for m, u in zip(masked, unmasked))


def _left_padded(rows, pad):
    width = max(len(r) for r in rows)
    return torch.tensor([[pad] * (width - len(r)) + r for r in rows]), torch.tensor(
        [width - len(r) for r in rows]
    )


def test_the_incremental_mask_equals_the_mask_of_the_whole_rows():
    llm = _llm(lora=True)
    llm.refresh_mask_policy()
    special = llm.tokenizer.all_special_ids
    rows = [llm.tokenizer(p)["input_ids"] for p in PROMPTS]
    incremental = IncrementalMask(llm.mask_policy, llm.model, 0.6, special, llm.pad_token_id)
    ids, pads = _left_padded(rows, llm.pad_token_id)
    for step in range(4):
        got = incremental(ids, pads)
        whole = llm.mask_policy.last_logits(llm.model, rows, [1] * len(rows), llm.pad_token_id)
        assert torch.equal(got, top_p_mask(torch.cat(whole), 0.6, special)), step
        chosen = [int(torch.nonzero(k)[0, 0]) for k in got]
        rows = [r + [c] for r, c in zip(rows, chosen)]  # one more token per row
        ids = torch.cat([ids, torch.tensor(chosen)[:, None]], dim=1)
    assert incremental._shape == (3, ids.shape[1] - 1) and incremental._cache is not None
    short = [r[:2] for r in rows]
    fresh = incremental(
        *_left_padded(short, llm.pad_token_id)
    )  # not an extension of the last rows: from scratch
    whole = llm.mask_policy.last_logits(llm.model, short, [1] * 3, llm.pad_token_id)
    assert torch.equal(fresh, top_p_mask(torch.cat(whole), 0.6, special))


def test_masked_decoding_never_syncs_with_the_host(monkeypatch):
    """NLPO's mask runs at every decoding step: no .tolist()/.item()/bool()/.cpu() in it (each a GPU sync).

    Counted where llmgym's masking code calls them (transformers' own mask helpers sync in every
    model forward, generate's included).
    """
    import sys

    from llmgym.llm import masking

    llm = _llm(lora=True)
    llm.refresh_mask_policy()
    inside, syncs, steps = [False], [], []
    for name in ("tolist", "item", "__bool__", "__int__", "__float__", "cpu", "numpy"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            if inside[0] and sys._getframe(1).f_code.co_filename == masking.__file__:
                syncs.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    call = masking.MaskLogitsProcessor.__call__

    def spy(self, input_ids, scores):
        inside[0] = True
        steps.append(1)
        try:
            return call(self, input_ids, scores)
        finally:
            inside[0] = False

    monkeypatch.setattr(masking.MaskLogitsProcessor, "__call__", spy)
    gens = llm.generate(PROMPTS, max_new_tokens=5, **Sampling(mask_top_p=0.6).generation_kwargs())
    assert len(steps) >= 4 and syncs == []
    assert all(len(g[0].token_ids) >= 1 for g in gens)


def test_keep_masks_keep_the_sampled_token_even_where_rounding_moved_it_out():
    llm = _llm()
    llm.refresh_mask_policy()
    prompt = llm.tokenizer(PROMPTS[0])["input_ids"]
    logits = llm.mask_policy.last_logits(llm.model, [prompt], [1], llm.pad_token_id)[0][0]
    unlikely = int(logits.argmin())  # far outside any top-p set
    keep = llm.mask_policy.keep_masks(llm.model, [prompt], [[unlikely]], 0.5, llm.pad_token_id)[0]
    plain = top_p_mask(logits[None], 0.5)
    assert keep[0, unlikely] and not plain[0, unlikely]
    assert torch.equal(
        keep[0].clone().index_fill_(0, torch.tensor([unlikely]), False), plain[0]
    )  # nothing else added


def test_masked_sampling_without_a_snapshot_names_the_fix(tiny_llama):
    model, tok = tiny_llama
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    with pytest.raises(InputError, match="refresh_mask_policy"):
        llm.generate(PROMPTS[:1], max_new_tokens=2, **Sampling(mask_top_p=0.9).generation_kwargs())
    with pytest.raises(InputError, match="refresh_mask_policy"):
        llm.token_logprobs([[1, 5]], [[6]], sampling=Sampling(mask_top_p=0.9))


def test_seq2seq_generation_samples_inside_the_decoder_mask_and_token_logprobs_recompute_it(tiny_t5):
    model, tok = tiny_t5
    llm = LocalLLM(ModelConfig(name="tiny", lora=LoRAConfig(r=4, alpha=8)), model=model, tokenizer=tok)
    llm.refresh_mask_policy()
    with torch.no_grad():  # the mask is the snapshot's, not the policy's
        for p in llm.trainable_parameters():
            p.add_(0.05 * torch.randn_like(p))
    sampling = Sampling(temperature=0.8, mask_top_p=0.5)
    prefixes = [[5, 6], [], [7]]  # a token agent's decoder prefixes: continued after, not scored
    for decoder_prefixes in (None, prefixes):
        torch.manual_seed(0)
        gens = [
            g[0]
            for g in llm.generate(
                PROMPTS, max_new_tokens=4, decoder_prefixes=decoder_prefixes, **sampling.generation_kwargs()
            )
        ]
        prompts, completions = [g.prompt_ids for g in gens], [g.token_ids for g in gens]
        firsts = [0] * 3 if decoder_prefixes is None else [len(p) for p in prefixes]
        decoded = completions if decoder_prefixes is None else [p + c for p, c in zip(prefixes, completions)]
        keep = llm.mask_policy.keep_masks(
            llm.model, prompts, decoded, 0.5, llm.pad_token_id, tok.all_special_ids, firsts
        )
        logits = llm.mask_policy.decoder_logits(llm.model, prompts, decoded, firsts, llm.pad_token_id)
        for mask, lg, ids in zip(keep, logits, completions):
            assert mask.shape == (len(ids), lg.shape[-1])
            assert torch.equal(
                mask, top_p_mask(lg, 0.5, tok.all_special_ids)
            )  # every sampled token was inside
            assert mask.sum(-1).lt(mask.shape[-1]).all()  # and the mask cut something
        scored = llm.token_logprobs(
            prompts, completions, require_grad=False, sampling=sampling, decoder_prefixes=decoder_prefixes
        )
        for out, gen in zip(scored, gens):
            torch.testing.assert_close(out["logprobs"], gen.logprobs, atol=1e-4, rtol=0)


def test_decoder_prefixes_are_refused_for_causal_models():
    llm = _llm()
    with pytest.raises(InputError, match="decoder_prefixes is for encoder-decoder"):
        llm.generate(PROMPTS[:1], max_new_tokens=2, decoder_prefixes=[[5]])
    with pytest.raises(InputError, match="decoder_prefixes is for encoder-decoder"):
        llm.token_logprobs([[1, 5]], [[6]], decoder_prefixes=[[5]])


def test_the_snapshot_is_saved_and_loaded_with_the_weights(tmp_path):
    llm = _llm(lora=True)
    llm.refresh_mask_policy()
    snapshot = {name: t.clone() for name, t in (llm.mask_policy.params or {}).items()}
    with torch.no_grad():
        for p in llm.trainable_parameters():
            p.add_(1.0)
    llm.save(tmp_path / "ckpt")
    other = _llm(lora=True)
    other.refresh_mask_policy()  # overwritten by the checkpoint's
    other.load(tmp_path / "ckpt")
    loaded = other.mask_policy.params or {}
    assert sorted(loaded) == sorted(snapshot) and all(torch.equal(loaded[k], snapshot[k]) for k in snapshot)
    assert not all(torch.equal(a, b) for a, b in zip(snapshot.values(), other.trainable_parameters()))


def test_min_tokens_to_keep_keeps_the_mask_policys_most_likely_tokens():
    # RL4LMs' maskable policies keep min_tokens_to_keep (100 by default) whatever their mass
    assert top_p_mask(PROBS.log(), 0.3, min_tokens=3).tolist() == [
        [True, True, True, False],
        [True, True, False, True],
    ]
    with pytest.raises(InputError, match="mask_min_tokens=0"):
        Sampling(mask_top_p=0.9, mask_min_tokens=0)
    llm = _llm()
    llm.refresh_mask_policy()
    narrow, wide = Sampling(mask_top_p=0.05), Sampling(mask_top_p=0.05, mask_min_tokens=100)
    assert wide.generation_kwargs()["mask_min_tokens"] == 100
    torch.manual_seed(0)
    gens = [g for group in llm.generate(PROMPTS, max_new_tokens=5, **wide.generation_kwargs()) for g in group]
    prompts, completions = [g.prompt_ids for g in gens], [g.token_ids for g in gens]
    scored = llm.token_logprobs(prompts, completions, require_grad=False, sampling=wide)
    for g, s in zip(gens, scored):  # generate and the update's re-scoring agree on the wider mask
        torch.testing.assert_close(s["logprobs"], g.logprobs, atol=1e-5, rtol=0)
    masks = llm.mask_policy.keep_masks(
        llm.model, prompts, completions, 0.05, llm.pad_token_id, llm.tokenizer.all_special_ids, min_tokens=100
    )
    assert all((m.sum(-1) >= 100).all() for m in masks)
    cut = llm.token_logprobs(prompts, completions, require_grad=False, sampling=narrow)
    # a 100-token mask spreads the mass the 1-token top-p set put on one token
    assert (
        sum(float(c["logprobs"].sum()) for c in cut) > sum(float(s["logprobs"].sum()) for s in scored) + 1.0
    )
