"""Each algorithm's loss against hand computations: the policy losses and the objectives, no model."""

import math

import pytest
import torch

from llmgym.agents.policies import CandidatePolicy, TokenPolicy
from llmgym.algorithms import A2CObjective, PolicyOutputs, PPOObjective, SampleTargets
from llmgym.algorithms.a2c import a2c_policy_loss
from llmgym.algorithms.ppo import ppo_policy_loss
from llmgym.algorithms.trpo import (
    conjugate_gradient,
    line_search,
    surrogate_objective,
    trpo_step_size,
)
from llmgym.errors import InputError


def test_ppo_ratio_one_gives_minus_mean_advantage():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    adv = torch.tensor([1.0, -2.0, 0.5])
    loss, stats = ppo_policy_loss(logp, logp.detach().clone(), adv, 0.2)
    assert loss.item() == pytest.approx(-adv.mean().item())
    assert stats["clip_fraction"].item() == 0.0
    assert stats["approx_kl"].item() == pytest.approx(0.0, abs=1e-7)
    assert stats["ratio_mean"].item() == pytest.approx(1.0)
    loss.backward()
    torch.testing.assert_close(logp.grad, -adv / 3)
    assert all(not v.requires_grad for v in stats.values())


@pytest.mark.parametrize(
    ("ratio", "adv", "expected", "clipped_grad"),
    [
        (1.5, 1.0, -1.2, True),  # positive advantage, ratio above 1+eps: clipped, no gradient
        (1.5, -1.0, 1.5, False),  # negative advantage, ratio above: unclipped term is the max
        (0.5, 1.0, -0.5, False),  # positive advantage, ratio below 1-eps: unclipped is pessimistic
        (0.5, -1.0, 0.8, True),  # negative advantage, ratio below: clipped at 0.8
        (1.1, 2.0, -2.2, False),  # inside the clip range
    ],
)
def test_ppo_clipping_by_hand(ratio, adv, expected, clipped_grad):
    old = torch.tensor([-1.0])
    logp = (old + math.log(ratio)).clone().requires_grad_(True)
    loss, stats = ppo_policy_loss(logp, old, torch.tensor([adv]), 0.2)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert stats["clip_fraction"].item() == (0.0 if ratio == 1.1 else 1.0)
    assert stats["approx_kl"].item() == pytest.approx(ratio - 1 - math.log(ratio), rel=1e-4)
    loss.backward()
    if clipped_grad:
        assert logp.grad.item() == 0.0
    else:
        assert logp.grad.item() == pytest.approx(-adv * ratio, rel=1e-5)


def test_ppo_token_level_mask():
    old = torch.zeros(2, 3)
    logp = torch.zeros(2, 3)
    logp[1, 2] = 5.0  # masked out: would be clipped and dominate
    adv = torch.tensor([[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    loss, stats = ppo_policy_loss(logp, old, adv, 0.2, mask)
    assert loss.item() == pytest.approx(-(1 + 1 + 1 + 3) / 4)
    assert stats["clip_fraction"].item() == 0.0
    assert stats["ratio_max"].item() == pytest.approx(1.0)


def test_ppo_errors():
    with pytest.raises(InputError, match="clip_range=0"):
        ppo_policy_loss(torch.zeros(2), torch.zeros(2), torch.zeros(2), 0)
    with pytest.raises(InputError, match="advantages has shape"):
        ppo_policy_loss(torch.zeros(2), torch.zeros(2), torch.zeros(3), 0.2)


def test_a2c_loss():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    adv = torch.tensor([2.0, -1.0], requires_grad=True)
    loss = a2c_policy_loss(logp, adv)
    assert loss.item() == pytest.approx(-(-1 * 2 + -2 * -1) / 2)
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([-1.0, 0.5]))
    assert adv.grad is None
    mask = torch.tensor([True, False])
    assert a2c_policy_loss(logp, adv, mask).item() == pytest.approx(2.0)


def _outputs_and_targets():
    outputs = PolicyOutputs(
        log_probs=torch.tensor([math.log(1.5) - 1.0, -1.0], requires_grad=True),
        entropy=torch.tensor([0.5, 1.5]),
        values=torch.tensor([1.0, 0.0], requires_grad=True),
        ref_kl=torch.tensor([0.2, 0.4]),
    )
    targets = SampleTargets(
        old_log_probs=torch.tensor([-1.0, -1.0]),
        old_values=torch.tensor([0.0, 0.0]),
        advantages=torch.tensor([1.0, -2.0]),
        returns=torch.tensor([2.0, 1.0]),
    )
    return outputs, targets


def test_ppo_objective_by_hand():
    outputs, targets = _outputs_and_targets()
    objective = PPOObjective(
        clip_range=0.2, value_clip_range=0.5, value_coef=0.5, entropy_coef=0.1, kl_coef=0.3
    )
    loss, stats = objective.loss(outputs, targets)
    # policy: ratios 1.5 (A=1: clipped at 1.2) and 1 (A=-2): -mean(1.2, -2) = 0.4
    # value: sample 0 moves 1.0 from 0, clipped to 0.5: max((1-2)^2, (0.5-2)^2) = 2.25; sample 1: (0-1)^2 = 1
    policy, value = 0.4, 0.5 * (2.25 + 1.0) / 2
    expected = policy + 0.5 * value - 0.1 * 1.0 + 0.3 * 0.3
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert stats["policy_loss"].item() == pytest.approx(policy, rel=1e-6)
    assert stats["value_loss"].item() == pytest.approx(value, rel=1e-6)
    assert stats["clip_fraction"].item() == 0.5 and stats["kl_ref"].item() == pytest.approx(0.3)
    assert all(not v.requires_grad for v in stats.values())
    loss.backward()
    assert outputs.log_probs.grad[0].item() == 0.0  # clipped: no gradient


def test_a2c_objective_by_hand():
    outputs, targets = _outputs_and_targets()
    loss, stats = A2CObjective(value_coef=0.5, entropy_coef=0.1, kl_coef=0.0).loss(outputs, targets)
    log_probs = outputs.log_probs.detach()
    policy = -float((log_probs * targets.advantages).mean())
    value = 0.5 * ((1.0 - 2.0) ** 2 + (0.0 - 1.0) ** 2) / 2  # unclipped
    assert loss.item() == pytest.approx(policy + 0.5 * value - 0.1 * 1.0, rel=1e-6)
    assert "clip_fraction" not in stats and stats["value_clip_fraction"].item() == 0.0


# ---------------------------------------------------------------------------------------------- TRPO
def test_trpo_surrogate_and_its_gradient_by_hand():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    old = torch.tensor([-1.5, -2.0])
    adv = torch.tensor([2.0, -1.0])
    value = surrogate_objective(logp, old, adv)
    assert value.item() == pytest.approx((math.exp(0.5) * 2.0 - 1.0) / 2)
    value.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([math.exp(0.5) * 2.0 / 2, -1.0 / 2]))
    with pytest.raises(InputError):
        surrogate_objective(logp, old[:1], adv)


def _candidates(log_p, mask, chosen):
    zeros = torch.zeros(log_p.shape[0])
    return PolicyOutputs(chosen, zeros, zeros, zeros, candidate_log_probs=log_p, candidate_mask=mask)


def test_trpo_kl_is_exact_over_candidates_and_k3_on_generated_actions():
    mask = torch.tensor([[True, True, True], [True, True, False]])
    old_p = torch.tensor([[0.5, 0.3, 0.2], [0.6, 0.4, 1.0]])
    new_p = torch.tensor([[0.2, 0.3, 0.5], [0.5, 0.5, 1.0]])
    kl = CandidatePolicy().kl(
        _candidates(old_p.log(), mask, torch.zeros(2)), _candidates(new_p.log(), mask, torch.zeros(2))
    )
    want = [
        sum(p * math.log(p / q) for p, q in zip(o[:k], n[:k]))
        for o, n, k in zip(old_p.tolist(), new_p.tolist(), [3, 2])
    ]
    torch.testing.assert_close(kl, torch.tensor(want))
    zeros = torch.zeros(2)
    old, new = (
        PolicyOutputs(torch.tensor([-1.0, -2.0]), zeros, zeros, zeros),
        PolicyOutputs(torch.tensor([-1.5, -1.0]), zeros, zeros, zeros),
    )
    ratio = torch.tensor([math.exp(-0.5), math.exp(1.0)])  # pi_new / pi_old of the sampled actions
    torch.testing.assert_close(TokenPolicy().kl(old, new), ratio - 1 - ratio.log())


def test_conjugate_gradient_solves_a_small_spd_system():
    torch.manual_seed(0)
    a = torch.randn(5, 5, dtype=torch.float64)
    fisher = a @ a.T + 0.5 * torch.eye(5, dtype=torch.float64)
    b = torch.randn(5, dtype=torch.float64)
    x = conjugate_gradient(lambda v: fisher @ v, b, steps=5)  # exact in n steps
    torch.testing.assert_close(x, torch.linalg.solve(fisher, b))
    one = conjugate_gradient(lambda v: fisher @ v, b, steps=1)  # one step: the optimal multiple of b
    torch.testing.assert_close(one, (b @ b) / (b @ fisher @ b) * b)
    calls = []
    zero = conjugate_gradient(
        lambda v: calls.append(v) or fisher @ v, torch.zeros(5, dtype=torch.float64), steps=5
    )
    assert calls == [] and torch.equal(zero, torch.zeros(5, dtype=torch.float64))  # converged at once


def test_trpo_step_size_puts_the_quadratic_kl_at_max_kl():
    fisher = torch.tensor([[2.0, 0.5], [0.5, 1.0]])
    x = torch.tensor([1.0, -2.0])
    beta = trpo_step_size(x, fisher @ x, max_kl=0.01)
    assert beta == pytest.approx(math.sqrt(2 * 0.01 / float(x @ fisher @ x)))
    assert 0.5 * float((beta * x) @ fisher @ (beta * x)) == pytest.approx(0.01)
    assert trpo_step_size(torch.zeros(2), torch.zeros(2), 0.01) == 0.0


def test_line_search_accepts_the_first_fraction_in_the_region_that_improves():
    tried = []

    def evaluate(fraction):  # KL grows like fraction^2; the gain is negative beyond fraction 0.6
        tried.append(fraction)
        return fraction * (0.6 - fraction), 0.04 * fraction**2

    result = line_search(evaluate, max_kl=0.01, steps=10, shrink=0.5)
    assert tried == [1.0, 0.5]  # 1.0 leaves the region (KL 0.04) and loses; 0.5 has KL 0.01 and gains
    assert (result.fraction, result.trials, result.accepted) == (0.5, 2, True)
    assert result.improvement == pytest.approx(0.05) and result.kl == pytest.approx(0.01)
    shrinking = line_search(lambda f: (f * (0.6 - f), 0.0), max_kl=0.01, steps=10, shrink=0.8)
    assert shrinking.fraction == pytest.approx(0.8**3)  # 1, 0.8, 0.64 lose; 0.512 gains


def test_line_search_rejects_when_no_fraction_improves_within_the_region():
    tried = []
    result = line_search(lambda f: tried.append(f) or (-f, 0.0), max_kl=0.01, steps=3, shrink=0.5)
    assert tried == [1.0, 0.5, 0.25]
    assert (result.fraction, result.trials, result.accepted, result.improvement, result.kl) == (
        0.0,
        3,
        False,
        0.0,
        0.0,
    )
    assert not line_search(lambda f: (1.0, 0.02), max_kl=0.01, steps=4, shrink=0.5).accepted  # always outside
