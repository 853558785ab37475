import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgym.agents.distributions import (
    categorical_entropy,
    categorical_log_prob,
    kl_estimate,
    pad_candidate_scores,
)
from llmgym.algorithms.a2c import A2CObjective
from llmgym.algorithms.losses import actor_critic_loss, masked_mean, value_loss
from llmgym.errors import InputError


def test_value_loss_plain_and_clipped_by_hand():
    values = torch.tensor([3.0, 3.0], requires_grad=True)
    returns = torch.tensor([2.0, 4.0])
    old = torch.tensor([1.0, 1.0])
    plain, stats = value_loss(values, returns)
    assert plain.item() == pytest.approx(0.5 * (1 + 1) / 2)
    assert stats["value_clip_fraction"].item() == 0.0
    # clipped prediction = 1 + clip(2, -.5, .5) = 1.5: row 0 max(1, .25) = 1, row 1 max(1, 6.25) = 6.25
    clipped, stats = value_loss(values, returns, old, clip_range=0.5)
    assert clipped.item() == pytest.approx(0.5 * (1 + 6.25) / 2)
    assert stats["value_clip_fraction"].item() == pytest.approx(0.5)
    clipped.backward()
    torch.testing.assert_close(values.grad, torch.tensor([0.5, 0.0]))
    with pytest.raises(InputError, match="old_values"):
        value_loss(values, returns, clip_range=0.5)
    with pytest.raises(InputError, match="clip_range"):
        value_loss(values, returns, old, clip_range=-1.0)


def test_value_loss_explained_variance():
    returns = torch.tensor([1.0, 2.0, 3.0])
    _, stats = value_loss(returns.clone(), returns)
    assert stats["explained_variance"].item() == pytest.approx(1.0)
    _, stats = value_loss(torch.zeros(3), torch.ones(3))
    assert math.isnan(stats["explained_variance"].item())


@pytest.mark.parametrize("k", [1, 2, 5, 17])
def test_entropy_of_uniform_is_log_k(k):
    assert categorical_entropy(torch.zeros(k)).item() == pytest.approx(math.log(k), abs=1e-6)


def test_entropy_with_padding_and_mask():
    logits = torch.tensor(
        [[0.0, 0.0, float("-inf"), float("-inf")], [1.0, 1.0, 1.0, 1.0], [5.0, float("-inf"), 0, 0]]
    )
    mask = torch.tensor([[True, True, False, False], [True, True, True, False], [True, False, False, False]])
    ent = categorical_entropy(logits, mask)
    torch.testing.assert_close(ent, torch.tensor([math.log(2), math.log(3), 0.0]))
    ent_no_mask = categorical_entropy(logits[:1])
    assert ent_no_mask.item() == pytest.approx(math.log(2))
    # log-probs and logits give the same entropy; the gradient is finite with -inf padding
    raw = torch.tensor([[2.0, 0.5, float("-inf")]], requires_grad=True)
    e = categorical_entropy(raw)
    torch.testing.assert_close(e, categorical_entropy(torch.log_softmax(raw.detach(), -1)))
    e.sum().backward()
    assert torch.isfinite(raw.grad).all()
    vocab = torch.zeros(2, 3, 7)
    torch.testing.assert_close(categorical_entropy(vocab), torch.full((2, 3), math.log(7)))
    with pytest.raises(InputError, match="no finite entry"):
        categorical_entropy(torch.tensor([[float("-inf"), float("-inf")]]))


def test_kl_estimators_by_hand_and_zero_at_equality():
    lp = torch.tensor([-0.3, -2.0])
    for kind in ("k1", "k2", "k3"):
        torch.testing.assert_close(kl_estimate(lp, lp.clone(), kind), torch.zeros(2))
    logp, ref = torch.tensor([0.0]), torch.tensor([math.log(0.5)])
    assert kl_estimate(logp, ref, "k1").item() == pytest.approx(math.log(2))
    assert kl_estimate(logp, ref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert kl_estimate(logp, ref, "k3").item() == pytest.approx(0.5 - 1 + math.log(2))
    with pytest.raises(InputError, match="estimator='k4'"):
        kl_estimate(logp, ref, "k4")  # type: ignore[arg-type]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(-20, 0), st.floats(-20, 0)), min_size=1, max_size=8))
def test_k3_is_nonnegative(pairs):
    lp = torch.tensor([a for a, _ in pairs], dtype=torch.float64)
    ref = torch.tensor([b for _, b in pairs], dtype=torch.float64)
    assert (kl_estimate(lp, ref, "k3") >= -1e-12).all()
    assert (kl_estimate(lp, ref, "k2") >= 0).all()


def test_k1_and_k3_are_unbiased_in_expectation():
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.2, 0.5, 0.3])
    true_kl = float((p * (p / q).log()).sum())
    for kind in ("k1", "k3"):
        expected = float((p * kl_estimate(p.log(), q.log(), kind)).sum())
        assert expected == pytest.approx(true_kl, rel=1e-5)


def test_masked_mean():
    x = torch.tensor([[1.0, 2.0], [3.0, 100.0]])
    mask = torch.tensor([[True, True], [True, False]])
    assert masked_mean(x, mask).item() == pytest.approx(2.0)
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0
    with pytest.raises(InputError, match="mask has shape"):
        masked_mean(x, torch.ones(3, dtype=torch.bool))


def test_pad_candidate_scores_and_log_prob():
    a = torch.tensor([-1.0, -2.0], requires_grad=True)
    b = torch.tensor([-0.5, -0.5, -3.0])
    logits, mask = pad_candidate_scores([a, b], temperature=2.0)
    assert logits.shape == (2, 3) and logits[0, 2].item() == float("-inf")
    torch.testing.assert_close(mask, torch.tensor([[True, True, False], [True, True, True]]))
    logp = categorical_log_prob(logits, torch.tensor([1, 0]), mask)
    expected0 = torch.log_softmax(torch.tensor([-0.5, -1.0]), -1)[1]
    expected1 = torch.log_softmax(b / 2, -1)[0]
    torch.testing.assert_close(logp, torch.stack([expected0, expected1]))
    logp.sum().backward()
    assert torch.isfinite(a.grad).all() and a.grad.abs().sum() > 0
    with pytest.raises(InputError, match="padded or masked-out"):
        categorical_log_prob(logits.detach(), torch.tensor([2, 0]))
    with pytest.raises(InputError, match=r"actions must lie in \[0, 3\)"):
        categorical_log_prob(logits.detach(), torch.tensor([3, 0]))
    with pytest.raises(InputError, match="temperature"):
        pad_candidate_scores([a], temperature=0.0)
    with pytest.raises(InputError, match=r"scores\[1\]"):
        pad_candidate_scores([a, torch.zeros(0)])
    with pytest.raises(InputError, match="empty"):
        pad_candidate_scores([])


def test_actor_critic_loss_weighs_its_terms_and_reports_them_in_order():
    objective = A2CObjective(value_coef=0.5, entropy_coef=0.1, kl_coef=0.2)
    policy_loss = torch.tensor(1.0, requires_grad=True)
    critic_loss = torch.tensor(4.0)
    entropy, ref_kl = torch.tensor([1.0, 3.0]), torch.tensor([0.5, 1.5])
    loss, stats = actor_critic_loss(
        objective, policy_loss, critic_loss, entropy, ref_kl, [{"clip_fraction": torch.tensor(0.25)}]
    )
    assert loss.item() == pytest.approx(1.0 + 0.5 * 4.0 - 0.1 * 2.0 + 0.2 * 1.0)
    assert list(stats) == ["loss", "policy_loss", "value_loss", "entropy", "kl_ref", "clip_fraction"]
    assert loss.requires_grad and not any(value.requires_grad for value in stats.values())
