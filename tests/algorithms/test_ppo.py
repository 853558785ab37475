"""PPO/A2C mechanics with a tiny model: first-step ratio, what trains, determinism, custom updaters."""

import pytest
import torch

from llmgym.algorithms.updaters import resolve_updater
from llmgym.config import AlgorithmConfig
from llmgym.errors import ConfigError
from llmgym.llm.updater import Updater
from tests.algorithms.helpers import build, tiny_config

ECHO = "env.kwargs.words=[banana,cherry,dog,cat]"


# The update must compute the policy the agent sampled from: the same logits (the action head's or
# the raw scores), the same score normalisation and the same temperature, or the ratio is off.
@pytest.mark.parametrize("action_head", [True, False])
@pytest.mark.parametrize("normalize", ["sum", "mean"])
def test_first_minibatch_ratio_is_one_and_nothing_clipped(tmp_path, normalize, action_head):
    words = "env.kwargs.words=[banana split,dog,go forward now,cat]"  # candidates of 1 to 3 tokens
    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        words,
        "algorithm.epochs=1",
        "algorithm.minibatch_size=32",
        f"agent.score_normalize={normalize}",
        "agent.temperature=0.5",
        f"agent.action_head={str(action_head).lower()}",
        "agent.prior_weight=0.5",
    )
    llm, envs, _, algorithm = build(config)
    assert ("policy" in llm.module_function_keys) == action_head
    algorithm.collect_rollout()
    stats = algorithm.update()
    envs.close()
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert stats["ratio_max"] == pytest.approx(1.0, abs=1e-4)
    assert stats["clip_fraction"] == 0.0


# Generated actions: the stored log-probs are those of the distribution (agent.top_p / top_k, the
# repetition penalty, min_new_tokens) that the tokens were drawn from, and the update re-scores under
# the same one (LlamaGym used top_p 0.6); stop strings end generations without changing it.
@pytest.mark.parametrize(
    ("agent_type", "cut"),
    [
        ("generative", "agent.top_p=0.6"),
        ("generative", "agent.top_k=5"),
        ("token", "agent.top_p=0.6"),
        ("generative", "agent.repetition_penalty=3.0"),
        ("token", "agent.repetition_penalty=3.0"),
        ("generative", "agent.min_new_tokens=3"),
        ("token", "agent.min_new_tokens=3"),
        ("generative", "agent.stop=[a,e]"),
    ],
)
def test_first_minibatch_ratio_is_one_under_top_p_and_top_k(tmp_path, agent_type, cut):
    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        ECHO,
        "algorithm.epochs=1",
        "algorithm.minibatch_size=32",
        f"agent.type={agent_type}",
        "agent.max_new_tokens=3",
        "agent.temperature=0.8",
        cut,
    )
    _, envs, agent, algorithm = build(config)
    sampling, policy = agent.policy.sampling, agent.policy
    assert (
        sampling.top_p,
        sampling.top_k,
        sampling.repetition_penalty,
        sampling.min_new_tokens,
        policy.stop,
    ) == {
        "agent.top_p=0.6": (0.6, 0, 1.0, 0, ()),
        "agent.top_k=5": (1.0, 5, 1.0, 0, ()),
        "agent.repetition_penalty=3.0": (1.0, 0, 3.0, 0, ()),
        "agent.min_new_tokens=3": (1.0, 0, 1.0, 3, ()),
        "agent.stop=[a,e]": (1.0, 0, 1.0, 0, ("a", "e")),
    }[cut]
    algorithm.collect_rollout()
    if "stop" in cut:  # some generation ended at a stop string, before its 3 tokens
        assert any(
            len(d.choice.token_ids) < 3 and d.response.endswith(("a", "e"))
            for step in algorithm.buffer.decisions
            for d in step
        )
    stats = algorithm.update()
    envs.close()
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert stats["ratio_max"] == pytest.approx(1.0, abs=1e-4)
    assert stats["clip_fraction"] == 0.0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("agent.top_p=0", "agent.top_p=0"),
        ("agent.top_p=1.5", "agent.top_p=1.5"),
        ("agent.top_k=-1", "agent.top_k"),
    ],
)
def test_top_p_and_top_k_out_of_range_are_config_errors(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(tmp_path, "llmgym/EchoWord-v0", override)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["agent.repetition_penalty=0"], "agent.repetition_penalty=0"),
        (["agent.min_new_tokens=-1"], "agent.min_new_tokens"),
        (["agent.type=token", "agent.stop=[x]"], "agent.type=token generates one token"),
    ],
)
def test_generation_settings_out_of_range_are_config_errors(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(tmp_path, "llmgym/EchoWord-v0", *overrides)


def test_lora_trains_adapters_and_head_only(tmp_path):
    config = tiny_config(tmp_path, "llmgym/EchoWord-v0", ECHO, "model.lora.r=4", "algorithm.rollout_steps=4")
    llm, envs, _, algorithm = build(config)
    model = llm.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    head_before = {n: p.detach().clone() for n, p in llm.backend.module_functions.named_parameters()}
    algorithm.learn(total_env_steps=32)
    envs.close()
    for name, param in model.named_parameters():
        changed = not torch.equal(before[name], param.detach())
        assert changed == ("lora_" in name), name
    for name, param in llm.backend.module_functions.named_parameters():
        assert not torch.equal(head_before[name], param.detach()), name


def test_gradient_clipping_really_clips(tmp_path):
    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        ECHO,
        "algorithm.max_grad_norm=1e-6",
        "algorithm.epochs=1",
        "algorithm.minibatch_size=32",
    )
    llm, envs, _, algorithm = build(config)
    params = llm.backend.trainable_parameters()
    before = [p.detach().clone() for p in params]
    algorithm.collect_rollout()
    stats = algorithm.update()
    envs.close()
    assert stats["grad_norm"] > 1e-6  # the norm before clipping is reported
    # Adam normalises the step size, so check the clipped gradient itself: it is tiny.
    total = torch.sqrt(sum((p.grad.detach() ** 2).sum() for p in params if p.grad is not None))
    assert float(total) <= 1e-6 * 1.01
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, params))


def _run(tmp_path, seed):
    config = tiny_config(tmp_path, "llmgym/Countdown-v0", f"train.seed={seed}", "algorithm.rollout_steps=4")
    llm, envs, _, algorithm = build(config, seed=0)
    metrics = algorithm.learn(total_env_steps=48)
    envs.close()
    return metrics, [p.detach().clone() for p in llm.backend.trainable_parameters()]


def test_same_seed_same_run(tmp_path):
    metrics_a, params_a = _run(tmp_path, seed=3)
    metrics_b, params_b = _run(tmp_path, seed=3)
    assert metrics_a == metrics_b
    assert all(torch.equal(a, b) for a, b in zip(params_a, params_b))
    metrics_c, params_c = _run(tmp_path, seed=4)
    assert not all(torch.equal(a, c) for a, c in zip(params_a, params_c))


class CountingUpdater(Updater):
    """A user updater: counts calls, trains nothing."""

    calls = 0

    def perform_update(self, contexts, candidates, _current_batch_ids, **kwargs):
        CountingUpdater.calls += 1
        return {"num_samples": len(contexts), "seen": float(len(contexts))}


def test_custom_updater_by_import_path(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGYM_ALLOW_IMPORTS", "tests,nowhere,collections")
    assert isinstance(
        resolve_updater(AlgorithmConfig(updater=f"{__name__}:CountingUpdater")), CountingUpdater
    )
    with pytest.raises(ConfigError, match="could not be imported"):
        resolve_updater(AlgorithmConfig(updater="nowhere.module:Nope"))
    with pytest.raises(ConfigError, match="not an llmgym.Updater"):
        resolve_updater(AlgorithmConfig(updater="collections:OrderedDict"))
    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        ECHO,
        f"algorithm.updater={__name__}:CountingUpdater",
        "algorithm.rollout_steps=2",
    )
    _, envs, _, algorithm = build(config)
    stats = algorithm.learn(total_env_steps=8)
    envs.close()
    assert CountingUpdater.calls == 4 * 1 and stats["seen"] == 8.0  # 4 epochs of one update, 8 samples


@pytest.mark.parametrize("row_tokens", [0, 512])
def test_trunk_cache_gives_the_same_training(tmp_path, row_tokens):
    """PPO with LoRA on the top block: updates from the frozen-trunk cache equal full-model updates.

    With ``row_tokens`` the contexts are packed several per row, composed differently at collection
    and in each update minibatch.
    """
    results = []
    for cache_mb, rows in ((0, 0), (64, row_tokens)):
        config = tiny_config(
            tmp_path,
            "llmgym/EchoWord-v0",
            ECHO,
            "model.lora.r=4",
            "model.lora.layers=[-1]",
            "algorithm.rollout_steps=4",
            "algorithm.epochs=2",
            f"model.trunk_cache_mb={cache_mb}",
            f"model.row_tokens={rows}",
        )
        llm, envs, _, algorithm = build(config)
        metrics = algorithm.learn(total_env_steps=32)
        envs.close()
        results.append(
            (
                metrics,
                [p.detach().clone() for p in llm.backend.trainable_parameters()],
                llm.backend.trunk_cache,
            )
        )
    (plain, plain_params, plain_cache), (cached, cached_params, cache) = results
    assert plain_cache.hits == 0 and len(plain_cache) == 0
    # 32 collected samples, 2 epochs of updates on them: the update items ran from the collection's
    # states, and so did collected prompts met before
    assert cache.hits >= 2 * 32 and cache.misses < 32
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(plain_params, cached_params))
    assert plain["policy_loss"] == pytest.approx(cached["policy_loss"], abs=1e-5)


def test_kl_penalty_with_the_action_head_is_refused_before_training(tmp_path):
    config = tiny_config(tmp_path, "llmgym/EchoWord-v0", ECHO, "algorithm.kl.coef=0.1")
    with pytest.raises(ConfigError, match="agent.action_head=false"):
        build(config)
    build(
        tiny_config(
            tmp_path,
            "llmgym/EchoWord-v0",
            ECHO,
            "algorithm.kl.coef=0.1",
            "agent.action_head=false",
            "model.reference_copy=true",
        )
    )


def test_a_negative_prior_weight_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="prior_weight"):
        tiny_config(tmp_path, "llmgym/EchoWord-v0", "agent.prior_weight=-1")


def test_update_copies_its_statistics_to_the_host_once_per_epoch(tmp_path, monkeypatch):
    """No float()/.item() per statistic and accumulation chunk in the updater (each a GPU sync): one .tolist() an epoch."""
    import sys

    from llmgym.algorithms import updaters

    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        ECHO,
        "algorithm.epochs=2",
        "algorithm.minibatch_size=16",
        "algorithm.gradient_accumulation_steps=4",
    )
    _, envs, _, algorithm = build(config)
    algorithm.collect_rollout()
    syncs = []
    for name in ("tolist", "item", "__float__", "__bool__", "__int__", "cpu", "numpy"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            if sys._getframe(1).f_code.co_filename == updaters.__file__:
                syncs.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    stats = algorithm.update()
    envs.close()
    assert stats["epochs"] == 2 and syncs == ["tolist", "tolist"]
