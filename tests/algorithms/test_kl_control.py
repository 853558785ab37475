"""algorithm.kl: the controller's arithmetic by hand, the config, and the KL penalty on every algorithm's path."""

from __future__ import annotations

import warnings

import pytest
import torch

from llmgym.algorithms.callbacks import Callback
from llmgym.algorithms.kl_control import KLController, KLMeasurement, adaptive_kl_coef, reward_penalty
from llmgym.config import KLConfig, load_config
from llmgym.errors import ConfigError
from tests.algorithms.helpers import build, tiny_config

ECHO = "env.kwargs.words=[banana,cherry,dog,cat]"


# ---------------------------------------------------------------------- the controller, by hand
@pytest.mark.parametrize(
    ("measured", "expected"),
    [
        (9.0, 0.2 * (1 + 0.2 * 256 / 10000)),  # error 0.5 clipped to 0.2
        (3.0, 0.2 * (1 - 0.2 * 256 / 10000)),  # error -0.5 clipped to -0.2
        (6.6, 0.2 * (1 + 0.1 * 256 / 10000)),  # error 0.1
        (6.0, 0.2),  # on target
    ],
)
def test_adaptive_coef_is_ziegler_and_trls_formula(measured, expected):
    # TRL's defaults: init_kl_coef 0.2, target 6, horizon 10000, n_steps = the batch of 256 completions
    assert adaptive_kl_coef(0.2, measured, 6.0, 256, 10000) == pytest.approx(expected, rel=1e-12)


def test_horizon_ten_times_the_update_is_rl4lms_step():
    # RL4LMs: beta <- beta * (1 + 0.1 * clip((kl - target) / target, -0.2, 0.2)) once per update
    assert adaptive_kl_coef(0.1, 0.13, 0.1, 16, 160) == pytest.approx(0.1 * (1 + 0.1 * 0.2))
    assert adaptive_kl_coef(0.1, 0.09, 0.1, 16, 160) == pytest.approx(0.1 * (1 + 0.1 * -0.1))


def test_controller_follows_its_unit_and_keeps_a_fixed_coef():
    measurement = KLMeasurement(total=32.0, actions=16, tokens=160)  # 2 nats per completion, 0.2 per token
    assert (measurement.per_action, measurement.per_token) == (2.0, 0.2)
    per_completion = KLController(
        KLConfig(coef=0.1, controller="adaptive", target=1.0, horizon=160, penalty="reward")
    )
    assert per_completion.update(measurement) == pytest.approx(0.1 * (1 + 0.2 * 16 / 160))
    per_token = KLController(KLConfig(coef=0.1, controller="adaptive", target=0.4, horizon=160, unit="token"))
    assert per_token.update(measurement) == pytest.approx(0.1 * (1 - 0.2 * 16 / 160))
    assert (per_token.loss_coef, per_token.in_reward, per_completion.loss_coef, per_completion.in_reward) == (
        pytest.approx(0.1 * 0.98),
        False,
        0.0,
        True,
    )
    fixed = KLController(KLConfig(coef=0.05))
    assert fixed.update(measurement) == 0.05
    assert fixed.metrics(measurement) == {"kl_coef": 0.05, "kl_ref": 2.0, "kl_ref_per_token": 0.2}
    restored = KLController(KLConfig(coef=0.1, controller="adaptive", target=1.0))
    restored.load_state_dict(per_completion.state_dict())
    assert restored.coef == per_completion.coef
    assert reward_penalty(torch.tensor([2.0, -1.0]), 0.5).tolist() == [-1.0, 0.5]


# ---------------------------------------------------------------------- the config
def test_old_kl_coef_loads_as_kl_coef_with_a_rename_warning(tmp_path):
    with pytest.warns(FutureWarning, match=r"algorithm.kl_coef .* is renamed algorithm.kl.coef"):
        config = load_config(None, ["algorithm.kl_coef=0.05"])
    assert (config.algorithm.kl.coef, config.algorithm.kl.penalty, config.algorithm.kl.controller) == (
        0.05,
        "loss",
        "fixed",
    )
    path = tmp_path / "old.yaml"
    path.write_text("algorithm:\n  kl_coef: 0.2\n  kl:\n    penalty: reward\n")
    with pytest.warns(FutureWarning):
        config = load_config(path)
    assert (config.algorithm.kl.coef, config.algorithm.kl.penalty) == (0.2, "reward")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.kl.controller=adaptive", "algorithm.kl.coef=0.1"], "needs algorithm.kl.target"),
        (["algorithm.kl.controller=adaptive", "algorithm.kl.target=1.0"], "coef > 0"),
        (["algorithm.kl.penalty=value"], "algorithm.kl.penalty='value'"),
        (["algorithm.kl.target=-1"], "algorithm.kl.target=-1"),
        (["algorithm.kl.horizon=0"], "algorithm.kl.horizon=0"),
    ],
)
def test_bad_kl_settings_are_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


# ---------------------------------------------------------------------- the penalty, on a tiny model
def _perturb_adapter(llm, seed: int = 0) -> None:
    """LoRA's B starts at zero (policy = reference, KL 0): give it weights so the two differ."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in llm.model.named_parameters():
            if "lora_B" in name:
                param.copy_(0.5 * torch.randn(param.shape, generator=generator))


class _EnvRewards(Callback):
    """A callback keeping the env's rewards and the decisions of every rollout step."""

    def __init__(self) -> None:
        self.rewards: list[list[float]] = []
        self.decisions: list = []

    def on_step(self, algorithm, step) -> None:
        self.rewards.append(step.rewards.tolist())
        self.decisions.append(list(step.decisions))


def test_reward_penalty_is_minus_beta_times_the_tokens_log_ratio_to_the_reference(tmp_path):
    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        ECHO,
        "agent.type=generative",
        "agent.max_new_tokens=3",
        "model.lora.r=4",
        "algorithm.rollout_steps=2",
        "algorithm.epochs=1",
        "algorithm.kl.coef=0.5",
        "algorithm.kl.penalty=reward",
        "algorithm.kl.controller=adaptive",
        "algorithm.kl.target=0.01",
        "algorithm.kl.horizon=80",
    )
    llm, envs, _, algorithm = build(config)
    _perturb_adapter(llm)
    observer = _EnvRewards()
    algorithm.collect_rollout(observer)
    decisions = [d for step in observer.decisions for d in step]
    with torch.no_grad(), llm.model.disable_adapter():  # the reference: the base model, by peft itself
        ref = llm.token_logprobs(
            [d.prompt_ids for d in decisions], [d.choice.token_ids for d in decisions], require_grad=False
        )
    kl = torch.tensor(
        [sum(d.choice.token_log_probs) - float(r["logprobs"].sum()) for d, r in zip(decisions, ref)]
    )
    env_rewards = torch.tensor(observer.rewards, dtype=torch.float64).reshape(-1)
    stored = algorithm.buffer.rewards[:2].reshape(-1)
    assert kl.abs().max() > 0.1
    torch.testing.assert_close(stored.double(), env_rewards - 0.5 * kl.double(), atol=1e-4, rtol=0)
    stats = algorithm.update()
    envs.close()
    tokens = sum(len(d.choice.token_ids) for d in decisions)
    assert stats["kl_coef"] == 0.5  # the weight this update's rewards were penalised with
    assert stats["kl_ref"] == pytest.approx(float(kl.mean()), abs=1e-4)
    assert stats["kl_ref_per_token"] == pytest.approx(float(kl.sum()) / tokens, abs=1e-4)
    # 8 completions, |KL| far from the 0.01 target: the error clips at +-0.2
    error = 0.2 if float(kl.mean()) > 0.01 else -0.2
    assert algorithm.kl.coef == pytest.approx(0.5 * (1 + error * 8 / 80))
    assert algorithm.state_dict()["kl"] == {"coef": algorithm.kl.coef}


# Every algorithm takes the KL as a reward penalty or as a loss term, and logs the weight and the KL.
@pytest.mark.parametrize("penalty", ["reward", "loss"])
@pytest.mark.parametrize(
    ("name", "agent_type", "extra"),
    [
        ("ppo", "generative", ()),
        ("a2c", "generative", ()),
        ("grpo", "generative", ("algorithm.group.size=2",)),
        ("rloo", "generative", ("algorithm.group.size=2",)),
        ("nlpo", "generative", ()),
        ("trpo", "generative", ()),
        ("ppo", "scoring", ("agent.action_head=false",)),
    ],
)
def test_every_algorithm_applies_and_logs_the_kl(tmp_path, name, agent_type, extra, penalty):
    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        ECHO,
        f"algorithm.name={name}",
        f"agent.type={agent_type}",
        "agent.max_new_tokens=2",
        "model.lora.r=4",
        "algorithm.rollout_steps=2",
        "algorithm.epochs=1",
        "algorithm.kl.coef=0.3",
        f"algorithm.kl.penalty={penalty}",
        "algorithm.kl.controller=adaptive",
        "algorithm.kl.target=100",
        "algorithm.kl.horizon=40",
        "algorithm.kl.estimator=k3",
        *extra,
    )
    llm, envs, _, algorithm = build(config)
    _perturb_adapter(llm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metrics = algorithm.collect_rollout()
        stats = algorithm.update()
    envs.close()
    assert stats["kl_coef"] == 0.3
    assert stats["kl_ref"] > 0.01  # k3 of sampled tokens (>= 0), or the exact KL over candidates
    # far below the target of 100 nats: beta shrinks by the clipped 20% times actions / horizon
    actions = metrics.get("actions", len(algorithm.buffer))
    assert algorithm.kl.coef == pytest.approx(0.3 * (1 - 0.2 * actions / 40))


def test_reward_penalty_refuses_an_action_head(tmp_path):
    with pytest.raises(ConfigError, match="agent.action_head=false"):
        build(
            tiny_config(
                tmp_path, "llmgym/EchoWord-v0", ECHO, "algorithm.kl.coef=0.1", "algorithm.kl.penalty=reward"
            )
        )


def test_full_fine_tuning_penalises_the_kl_to_a_frozen_copy_of_the_initial_weights(tmp_path):
    overrides = (
        "agent.type=generative",
        "agent.max_new_tokens=2",
        "algorithm.rollout_steps=2",
        "algorithm.epochs=1",
        "algorithm.kl.coef=0.3",
        "algorithm.kl.penalty=reward",
        "algorithm.kl.estimator=k3",
    )
    with pytest.raises(ConfigError, match="model.reference_copy=true"):
        build(tiny_config(tmp_path, "llmgym/EchoWord-v0", ECHO, *overrides))
    llm, envs, _, algorithm = build(
        tiny_config(tmp_path, "llmgym/EchoWord-v0", ECHO, "model.reference_copy=true", *overrides)
    )
    reference = {name: p.clone() for name, p in llm.backend.reference_model.named_parameters()}
    algorithm.collect_rollout()
    first = algorithm.update()
    algorithm.collect_rollout()
    second = algorithm.update()
    envs.close()
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-5)  # the policy starts at the reference
    assert second["kl_ref"] > 1e-4  # one update moved the weights, not the copy's
    assert all(torch.equal(p, reference[name]) for name, p in llm.backend.reference_model.named_parameters())


@pytest.mark.parametrize(
    "cut",
    [
        ("agent.top_k=3",),
        ("algorithm.name=nlpo", "algorithm.nlpo.mask_top_p=0.3"),
    ],
    ids=["top_k", "nlpo_mask"],
)
@pytest.mark.parametrize("penalty", ["reward", "loss"])
def test_the_kl_is_zero_at_update_one_under_top_k_and_nlpo_mask(tmp_path, cut, penalty):
    # RL4LMs measures log pi_raw - log pi_ref (raw_log_probs): the sampling cut (top-k, NLPO's mask) is not on
    # the KL's policy side, so while the policy is the reference the KL is 0 (before: 0.061 nats/token at top_k 20)
    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        ECHO,
        "agent.type=generative",
        "agent.max_new_tokens=3",
        "algorithm.rollout_steps=2",
        "algorithm.epochs=1",
        "algorithm.kl.coef=0.3",
        f"algorithm.kl.penalty={penalty}",
        "algorithm.kl.estimator=k1",
        "model.reference_copy=true",
        *cut,
    )
    llm, envs, agent, algorithm = build(config)
    algorithm.collect_rollout()
    cut_sums = [d.log_prob for d in agent.last_decisions]
    raw_sums = [sum(d.choice.raw_log_probs) for d in agent.last_decisions]
    # the ratio's log-probs are the cut distribution's: higher than the model's own where the cut renormalised
    assert any(c > r + 1e-3 for c, r in zip(cut_sums, raw_sums))
    first = algorithm.update()
    envs.close()
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-4)
