import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgym.agents.policies import CandidateChoice, CandidatePolicy, Decision, TokenChoice, TokenPolicy
from llmgym.algorithms.advantages import compute_gae
from llmgym.algorithms.buffer import RolloutBuffer
from llmgym.errors import InputError


def _decision(prompt, log_prob=0.0, value=0.0, prompt_ids=(), choice=None):
    return Decision(
        prompt=prompt,
        prompt_ids=list(prompt_ids),
        action="a",
        response="a",
        log_prob=float(log_prob),
        value=float(value),
        choice=choice if choice is not None else CandidateChoice(["a"], 0),
    )


def fill_action_level(buf, seed=0, trunc_prob=0.2, term_prob=0.2):
    g = torch.Generator().manual_seed(seed)
    n = buf.num_envs
    for t in range(buf.num_steps):
        sizes = [2 + (t + i) % 3 for i in range(n)]
        terminated = (torch.rand(n, generator=g) < term_prob).numpy()
        truncated = (torch.rand(n, generator=g) < trunc_prob).numpy()
        log_probs, values = torch.randn(n, generator=g), torch.randn(n, generator=g).tolist()
        buf.add(
            [
                _decision(
                    f"p{t}-{i}",
                    log_probs[i],
                    values[i],
                    [t, i, 7],
                    CandidateChoice([f"c{j}" for j in range(k)], t % k),
                )
                for i, k in enumerate(sizes)
            ],
            rewards=np.asarray(torch.randn(n, generator=g), dtype=np.float32),
            terminated=terminated,
            truncated=truncated,
            truncation_values=torch.randn(n, generator=g),
        )


def test_action_level_roundtrip_and_gae_matches():
    buf = RolloutBuffer(num_envs=3, num_steps=4)
    fill_action_level(buf)
    assert buf.full and len(buf) == 12
    last = torch.tensor([0.1, 0.2, 0.3])
    adv, ret = buf.compute_returns_and_advantages(last, 0.9, 0.95)
    ref_adv, ref_ret = compute_gae(
        buf.rewards, buf.values, buf.terminated, buf.truncated, last, 0.9, 0.95, buf.truncation_values
    )
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)
    batch = buf.get(torch.tensor([5, 0]))  # t=1, n=2 then t=0, n=0
    actions = CandidatePolicy().actions(batch.decisions)
    assert batch.prompts == ["p1-2", "p0-0"]
    assert [d.prompt_ids for d in batch.decisions] == [[1, 2, 7], [0, 0, 7]]
    assert actions.candidates == [["c0", "c1"], ["c0", "c1"]]  # sizes 2 + (t + n) % 3
    assert actions.index.tolist() == [1, 0]
    assert batch.step_indices.tolist() == [1, 0] and batch.env_indices.tolist() == [2, 0]
    assert batch.advantages[0] == adv[1, 2] and batch.returns[1] == ret[0, 0]
    assert batch.old_log_probs[0] == buf.log_probs[1, 2] and batch.old_values[0] == buf.values[1, 2]
    with pytest.raises(InputError, match="chose candidates"):
        TokenPolicy().actions(batch.decisions)
    assert len(batch) == 2


def test_token_level_decisions_and_their_log_probs():
    buf = RolloutBuffer(num_envs=2, num_steps=1)
    token_lps = [torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-0.25])]
    choices = [TokenChoice([5, 6, 7]), TokenChoice([8])]
    buf.add(
        [_decision(p, lp.sum(), choice=c) for p, lp, c in zip(["a", "b"], token_lps, choices)],
        rewards=[1.0, 0.0],
        terminated=[True, False],
        truncated=[False, False],
    )
    torch.testing.assert_close(buf.log_probs[0], torch.tensor([-3.5, -0.25]))
    buf.compute_returns_and_advantages([0.0, 0.0], 1.0, 1.0)
    batch = buf.get(torch.arange(len(buf)))
    assert TokenPolicy().actions(batch.decisions).token_ids == [[5, 6, 7], [8]]
    with pytest.raises(InputError, match="generated tokens"):
        CandidatePolicy().actions(batch.decisions)


@settings(max_examples=30, deadline=None)
@given(envs=st.integers(1, 4), steps=st.integers(1, 5), seed=st.integers(0, 1000))
def test_get_returns_each_transition_with_its_fields(envs, steps, seed):
    buf = RolloutBuffer(envs, steps)
    fill_action_level(buf, seed)
    buf.compute_returns_and_advantages(torch.zeros(envs), 0.99, 0.95)
    order = torch.randperm(envs * steps, generator=torch.Generator().manual_seed(seed))
    b = buf.get(order)
    assert b.indices.tolist() == order.tolist()
    assert b.advantages.shape == b.returns.shape == b.old_values.shape == (len(b),)
    assert len(b.prompts) == len(CandidatePolicy().actions(b.decisions).candidates) == len(b)
    assert b.prompts == [f"p{t}-{n}" for t, n in zip(b.step_indices.tolist(), b.env_indices.tolist())]


def _base(**overrides):
    kwargs = {
        "decisions": [_decision("a"), _decision("b")],
        "rewards": [0.0, 0.0],
        "terminated": [False, False],
        "truncated": [False, False],
    }
    kwargs.update(overrides)
    return kwargs


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"rewards": [0.0, 0.0, 0.0]}, r"rewards has shape \[3\] but \[N\]=\[2\]"),
        ({"decisions": [_decision("only one")]}, "decisions must be a sequence of 2"),
        ({"decisions": "ab"}, "decisions must be a sequence of 2"),
        ({"decisions": [_decision("a"), 3]}, r"decisions\[1\]"),
        ({"truncated": [True, False]}, "truncation_values"),
    ],
)
def test_add_errors(overrides, match):
    buf = RolloutBuffer(2, 2)
    with pytest.raises(InputError, match=match):
        buf.add(**_base(**overrides))
    assert len(buf) == 0


def test_a_candidate_choice_checks_its_index():
    with pytest.raises(InputError, match=r"index 2 is outside \[0, 2\)"):
        CandidateChoice(["y", "z"], 2)


def test_overfull_inconsistent_fields_and_order_errors():
    buf = RolloutBuffer(2, 1)
    with pytest.raises(InputError, match="empty"):
        buf.compute_returns_and_advantages([0, 0], 0.9, 0.9)
    buf.add(**_base())
    with pytest.raises(InputError, match="compute_returns_and_advantages"):
        buf.get(torch.arange(2))
    with pytest.raises(InputError, match="is full"):
        buf.add(**_base())
    buf.compute_returns_and_advantages([0, 0], 0.9, 0.9)
    with pytest.raises(InputError, match=r"indices must lie in \[0, 2\)"):
        buf.get(torch.tensor([2]))
    with pytest.raises(InputError, match="last_values"):
        buf.compute_returns_and_advantages([0, 0, 0], 0.9, 0.9)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InputError, match="must be a positive int"):
            RolloutBuffer(bad, 4)
