"""score() equals a plain transformers reference, whatever the batching."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from llmgym.errors import InputError
from llmgym.llm.scoring import score
from llmgym.llm.tokenization import TextEncoder
from tests.llm._reference import reference_score

CONTEXTS = [
    "Goal of the agent: go to the red ball. Action:",
    "You see a wall 3 steps forward. ",
    "héllo wörld ünïcode ✓ —",
    "x",
    "  leading and trailing spaces  ",
]
CANDIDATES = [
    [" go forward", " turn left", " turn right", "pick up"],
    ["toggle"],
    [" “quotes”", "ok", " ok ", "✓✓"],
    ["yes", "no"],
    [" drop ", "drop", "\n", " "],
]


@pytest.fixture(params=["tiny_llama", "tiny_gpt2", "tiny_t5"])
def model_and_tokenizer(request):
    return request.getfixturevalue(request.param)


def _check(model, tok, contexts, candidates, scores, add_eos=False):
    assert len(scores) == len(contexts)
    for context, group, got in zip(contexts, candidates, scores):
        assert got.shape == (len(group),)
        expected = torch.tensor([reference_score(model, tok, context, c, add_eos) for c in group])
        assert torch.allclose(got, expected, atol=1e-4), (context, group, got, expected)


@pytest.mark.parametrize("row_tokens", [0, 16, 512])
@pytest.mark.parametrize("minibatch_size", [1, 3, 64])
def test_score_matches_reference(model_and_tokenizer, minibatch_size, row_tokens):
    model, tok = model_and_tokenizer
    scores = score(model, tok, CONTEXTS, CANDIDATES, minibatch_size=minibatch_size, row_tokens=row_tokens)
    _check(model, tok, CONTEXTS, CANDIDATES, scores)


@pytest.mark.parametrize("minibatch_size", [3, 64])
def test_long_rows_attend_through_tree_attention_and_match_reference(
    model_and_tokenizer, minibatch_size, monkeypatch
):
    from llmgym.llm import scoring, tree_attention

    model, tok = model_and_tokenizer
    planned = []
    plan = tree_attention.plan_tree_attention
    monkeypatch.setattr(scoring, "DENSE_MASK_MAX_TOKENS", 0)  # every row counts as long
    monkeypatch.setattr(
        tree_attention,
        "plan_tree_attention",
        lambda parents: planned.append(parents.shape) or plan(parents, 4),
    )
    scores = score(model, tok, CONTEXTS, CANDIDATES, minibatch_size=minibatch_size, row_tokens=512)
    _check(model, tok, CONTEXTS, CANDIDATES, scores)
    assert bool(planned) != bool(model.config.is_encoder_decoder)


def test_add_eos_and_mean(model_and_tokenizer):
    model, tok = model_and_tokenizer
    scores = score(model, tok, CONTEXTS[:2], CANDIDATES[:2], add_eos=True)
    _check(model, tok, CONTEXTS[:2], CANDIDATES[:2], scores, add_eos=True)
    summed = score(model, tok, CONTEXTS[:1], CANDIDATES[:1])[0]
    mean = score(model, tok, CONTEXTS[:1], CANDIDATES[:1], normalize="mean")[0]
    encoder = TextEncoder(tok, model.config.is_encoder_decoder, None, "error", None)
    item = encoder.encode_items(CONTEXTS[:1], CANDIDATES[:1], add_eos=False)[0]
    counts = torch.tensor([len(ids) - s for ids, s in zip(item.candidate_ids, item.candidate_starts)])
    assert torch.allclose(mean * counts, summed, atol=1e-4)


@pytest.mark.parametrize("row_tokens", [0, 512])
def test_batch_composition_does_not_change_scores(tiny_llama, row_tokens):
    model, tok = tiny_llama
    full = score(model, tok, CONTEXTS, CANDIDATES, row_tokens=row_tokens)
    for i in range(len(CONTEXTS)):
        alone = score(model, tok, [CONTEXTS[i]], [CANDIDATES[i]])[0]
        assert torch.allclose(alone, full[i], atol=1e-5)
    reversed_scores = score(
        model, tok, CONTEXTS[::-1], CANDIDATES[::-1], minibatch_size=5, row_tokens=row_tokens
    )
    for got, want in zip(reversed_scores[::-1], full):
        assert torch.allclose(got, want, atol=1e-5)


def test_contexts_without_candidates_give_empty_tensors(tiny_llama):
    model, tok = tiny_llama
    out = score(model, tok, ["a", "b"], [[], ["c"]])
    assert out[0].shape == (0,) and out[1].shape == (1,)


texts = st.text(alphabet=st.sampled_from(list("ab xyzé✓.:\n")), min_size=1, max_size=12)


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(context=texts, candidates=st.lists(texts, min_size=1, max_size=3), minibatch_size=st.integers(1, 4))
def test_score_property(tiny_gpt2, context, candidates, minibatch_size):
    model, tok = tiny_gpt2
    try:
        scores = score(
            model, tok, [context, "Action:"], [candidates, candidates[:1]], minibatch_size=minibatch_size
        )
    except InputError as exc:
        # Documented refusal: the whole context merged into the candidate's first token (e.g. "a" + "y"
        # -> "ay") and the tokenizer adds no BOS, so that token has nothing to be conditioned on.
        assume("nothing to be conditioned on" not in str(exc))
        raise
    _check(model, tok, [context, "Action:"], [candidates, candidates[:1]], scores)


@pytest.mark.parametrize("implementation", ["eager", "sdpa", "flash_attention_2"])
@pytest.mark.parametrize("row_tokens", [0, 512])
def test_scores_equal_the_plain_forward_under_every_attention_implementation(
    tiny_llama, implementation, row_tokens
):
    """eager/sdpa read the dense prefix-sharing mask; a FlashAttention model (which cannot) takes tree attention."""
    import copy

    model, tok = tiny_llama
    expected = [
        torch.tensor([reference_score(model, tok, c, x) for x in group])
        for c, group in zip(CONTEXTS, CANDIDATES)
    ]
    other = copy.deepcopy(model)
    other.config._attn_implementation = implementation  # FA2's kernel is never called: no flash-attn needed
    scores = score(other, tok, CONTEXTS, CANDIDATES, row_tokens=row_tokens)
    for got, want in zip(scores, expected):
        assert torch.allclose(got, want, atol=1e-4)
