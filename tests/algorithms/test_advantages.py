import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgym.algorithms.advantages import compute_gae, whiten
from llmgym.errors import InputError

GAMMAS = [0.9, 0.99, 1.0]


def col(*xs, dtype=torch.float32):
    return torch.tensor(xs, dtype=dtype).unsqueeze(1)


def false(t, n=1):
    return torch.zeros(t, n, dtype=torch.bool)


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("lam", GAMMAS)
def test_reward_only_at_the_end(gamma, lam):
    rewards = col(0.0, 0.0, 0.0, 1.0)
    values = torch.zeros(4, 1)
    terminated = col(False, False, False, True, dtype=torch.bool)
    adv, ret = compute_gae(rewards, values, terminated, false(4), torch.tensor([123.0]), gamma, lam)
    expected = [(gamma * lam) ** (3 - t) for t in range(4)]
    torch.testing.assert_close(adv[:, 0], torch.tensor(expected))
    torch.testing.assert_close(ret, adv)


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("lam", GAMMAS)
def test_constant_value_no_reward(gamma, lam):
    c, steps = 2.0, 5
    values = torch.full((steps, 1), c)
    adv, ret = compute_gae(
        torch.zeros(steps, 1), values, false(steps), false(steps), torch.tensor([c]), gamma, lam
    )
    delta = c * (gamma - 1.0)
    expected = [sum(delta * (gamma * lam) ** k for k in range(steps - t)) for t in range(steps)]
    torch.testing.assert_close(adv[:, 0], torch.tensor(expected))
    torch.testing.assert_close(ret, adv + values)
    if gamma == 1.0:
        assert torch.all(adv == 0)


def test_several_episodes_in_one_rollout_monte_carlo():
    # episode A: steps 0-1 (terminated at 1); episode B: steps 2-4, bootstrapped with last_values
    rewards = col(1.0, 2.0, 0.0, 0.0, 3.0)
    values = col(0.5, 0.5, 1.0, 1.0, 1.0)
    terminated = col(False, True, False, False, False, dtype=torch.bool)
    adv, ret = compute_gae(rewards, values, terminated, false(5), torch.tensor([2.0]), 0.9, 1.0)
    # G4 = 3 + .9*2, G3 = .9*G4, G2 = .9*G3, G1 = 2, G0 = 1 + .9*2
    torch.testing.assert_close(ret[:, 0], torch.tensor([2.8, 2.0, 3.888, 4.32, 4.8]))
    torch.testing.assert_close(adv, ret - values)


def test_several_episodes_td0():
    rewards = col(1.0, 2.0, 0.5)
    values = col(1.0, 3.0, 4.0)
    terminated = col(False, True, False, dtype=torch.bool)
    adv, _ = compute_gae(rewards, values, terminated, false(3), torch.tensor([10.0]), 0.5, 0.0)
    torch.testing.assert_close(adv[:, 0], torch.tensor([1 + 0.5 * 3 - 1, 2 - 3, 0.5 + 0.5 * 10 - 4]))


def test_truncation_bootstraps_with_final_observation_value():
    rewards = col(1.0, 1.0)
    values = col(0.0, 5.0)  # values[1] belongs to the next episode: must not be used for t=0
    truncated = col(True, False, dtype=torch.bool)
    trunc_values = col(10.0, 0.0)
    adv, ret = compute_gae(rewards, values, false(2), truncated, torch.tensor([7.0]), 0.9, 0.5, trunc_values)
    torch.testing.assert_close(adv[:, 0], torch.tensor([1 + 0.9 * 10, 1 + 0.9 * 7 - 5]))
    torch.testing.assert_close(ret, adv + values)


def test_terminated_wins_over_truncated():
    both = col(True, dtype=torch.bool)
    adv, _ = compute_gae(col(1.0), col(0.0), both, both, torch.tensor([9.0]), 0.9, 0.9, col(100.0))
    assert adv.item() == pytest.approx(1.0)


def test_truncated_without_values_is_an_error():
    with pytest.raises(InputError, match="truncation_values"):
        compute_gae(col(1.0), col(0.0), false(1), col(True, dtype=torch.bool), torch.zeros(1), 0.9, 0.9)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gamma": 1.5}, "gamma=1.5"),
        ({"gae_lambda": -0.1}, "gae_lambda"),
        ({"last_values": torch.zeros(3)}, "last_values"),
    ],
)
def test_bad_inputs(kwargs, match):
    args = {
        "rewards": torch.zeros(2, 2),
        "values": torch.zeros(2, 2),
        "terminated": torch.zeros(2, 2, dtype=torch.bool),
        "truncated": torch.zeros(2, 2, dtype=torch.bool),
        "last_values": torch.zeros(2),
        "gamma": 0.9,
        "gae_lambda": 0.9,
    }
    args.update(kwargs)
    with pytest.raises(InputError, match=match):
        compute_gae(**args)
    with pytest.raises(InputError, match="rewards"):
        compute_gae(
            torch.zeros(3, 2),
            torch.zeros(2, 2),
            torch.zeros(2, 2),
            torch.zeros(2, 2),
            torch.zeros(2),
            0.9,
            0.9,
        )


def _naive_returns(rewards, values, terminated, truncated, trunc_values, last_values, gamma):
    """Discounted returns per env with bootstrap, computed by walking each episode forward."""
    steps, envs = rewards.shape
    out = torch.zeros(steps, envs, dtype=torch.float64)
    for n in range(envs):
        for t in range(steps):
            total, discount, k = 0.0, 1.0, t
            while True:
                total += discount * float(rewards[k, n])
                discount *= gamma
                if terminated[k, n]:
                    break
                if truncated[k, n]:
                    total += discount * float(trunc_values[k, n])
                    break
                if k == steps - 1:
                    total += discount * float(last_values[n])
                    break
                k += 1
            out[t, n] = total
    return out


@settings(max_examples=40, deadline=None)
@given(
    steps=st.integers(1, 6),
    envs=st.integers(1, 3),
    gamma=st.sampled_from(GAMMAS),
    seed=st.integers(0, 10_000),
)
def test_lambda_one_equals_monte_carlo_and_lambda_zero_is_td(steps, envs, gamma, seed):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(steps, envs, generator=g, dtype=torch.float64)
    values = torch.randn(steps, envs, generator=g, dtype=torch.float64)
    terminated = torch.rand(steps, envs, generator=g) < 0.3
    truncated = torch.rand(steps, envs, generator=g) < 0.3
    trunc_values = torch.randn(steps, envs, generator=g, dtype=torch.float64)
    last = torch.randn(envs, generator=g, dtype=torch.float64)
    _, ret = compute_gae(rewards, values, terminated, truncated, last, gamma, 1.0, trunc_values)
    expected = _naive_returns(rewards, values, terminated, truncated, trunc_values, last, gamma)
    torch.testing.assert_close(ret, expected)
    adv0, _ = compute_gae(rewards, values, terminated, truncated, last, gamma, 0.0, trunc_values)
    next_v = torch.cat([values[1:], last[None]])
    next_v = torch.where(truncated & ~terminated, trunc_values, next_v)
    next_v = torch.where(terminated, torch.zeros_like(next_v), next_v)
    torch.testing.assert_close(adv0, rewards + gamma * next_v - values)


def test_whiten_full_and_masked():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    w = whiten(x)
    assert w.mean().abs() < 1e-6 and (w.pow(2).mean() - 1).abs() < 1e-4
    mask = torch.tensor([True, True, False, True])
    wm = whiten(x, mask)
    assert wm[2] == 0
    sel = wm[mask]
    assert sel.mean().abs() < 1e-6 and (sel.pow(2).mean() - 1).abs() < 1e-4
    torch.testing.assert_close(whiten(torch.tensor([5.0])), torch.tensor([0.0]))
    scaled = whiten(x, shift_mean=False)
    torch.testing.assert_close(scaled, x / x.var(unbiased=False).add(1e-8).sqrt())
    with pytest.raises(InputError, match="no True"):
        whiten(x, torch.zeros(4, dtype=torch.bool))
    with pytest.raises(InputError, match="shape"):
        whiten(x, torch.ones(3, dtype=torch.bool))
    assert math.isfinite(float(whiten(torch.ones(3)).sum()))


def test_rollout_statistics_by_hand():
    from llmgym.algorithms.on_policy import rollout_statistics

    stats = rollout_statistics(torch.tensor([1.0, -3.0]), torch.tensor([0.5, 1.5]), torch.tensor([1.5, -1.5]))
    assert stats == {
        "advantage_mean": -1.0,
        "advantage_std": 2.0,
        "advantage_abs_mean": 2.0,
        "value_mean": 1.0,
        "return_mean": 0.0,
    }
