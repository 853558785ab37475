"""NLPO: PPO on the mask policy's top-p tokens, the mask policy refreshed every mask_update_interval updates."""

from __future__ import annotations

import pytest
import torch

from llmgym.agents import GenerativeAgent
from llmgym.agents.learning import Episode
from llmgym.algorithms import NLPO, PPO, algorithm_class
from llmgym.config import AgentConfig, AlgorithmConfig, ModelConfig, NLPOSection
from llmgym.errors import ConfigError
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import ValueHead
from llmgym.llm.sampling import Sampling
from llmgym.testing import tiny_causal_lm
from tests.algorithms.helpers import build, tiny_config

PROMPTS = ["Goal: go to the", "You see a red ball 2 steps left and", "héllo"]
# Token-level text generation: every token an action, rewarded at the end for containing a "k".
TOKEN_TEXTGEN = [
    "env.kwargs.datapool=review_openings",
    "env.kwargs.reward=keywords",
    "env.kwargs.reward_kwargs={keywords: [k]}",
    "env.kwargs.mode=token",
    "env.kwargs.max_tokens=3",
    "env.kwargs.eos_token=<|im_end|>",
    "agent.type=token",
    "algorithm.name=nlpo",
    "algorithm.gamma=1.0",
    "algorithm.gae_lambda=1.0",
]


def _snapshot(llm) -> list[torch.Tensor]:
    return [t.clone() for t in (llm.backend.mask_policy.params or {}).values()]


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_nlpo_is_registered_and_exported():
    import llmgym

    assert algorithm_class("nlpo") is NLPO and llmgym.NLPO is NLPO and issubclass(NLPO, PPO)
    config = AlgorithmConfig(name="nlpo")
    assert (config.nlpo.mask_top_p, config.nlpo.mask_update_interval) == (0.9, 5)
    with pytest.raises(ConfigError, match="mask_top_p=1.5"):
        AlgorithmConfig(name="nlpo", nlpo=NLPOSection(mask_top_p=1.5))
    with pytest.raises(ConfigError, match="mask_update_interval=0"):
        AlgorithmConfig(name="nlpo", nlpo=NLPOSection(mask_update_interval=0))


def test_the_first_epoch_ratio_is_one_on_the_masked_policy(tiny_llama):
    model, tok = tiny_llama
    nlpo = NLPO(
        config=AlgorithmConfig(
            name="nlpo",
            nlpo=NLPOSection(mask_top_p=0.6),
            learning_rate=1e-9,
            head_learning_rate=1e-9,
            epochs=1,
            minibatch_size=64,
        )
    )
    llm = LocalLLM(
        ModelConfig(name="tiny"), {"value": ValueHead()}, nlpo.updater(), model=model, tokenizer=tok
    )
    agent = GenerativeAgent(llm, AgentConfig(use_chat_template=False, max_new_tokens=5, temperature=0.8))
    nlpo.prepare(agent)
    assert agent.policy.sampling == Sampling(temperature=0.8, mask_top_p=0.6)
    torch.manual_seed(0)
    episodes = []
    for obs in PROMPTS:
        agent.act_batch([obs], [{}])
        decision = agent.last_decisions[0]
        masked = llm.token_logprobs(
            [decision.prompt_ids],
            [decision.choice.token_ids],
            require_grad=False,
            sampling=agent.policy.sampling,
        )[0]["logprobs"]
        assert decision.log_prob == pytest.approx(
            float(masked.sum()), abs=1e-4
        )  # stored = the masked distribution's
        episodes.append(Episode([decision], [1.0]))
        agent.observe([1.0], [True], [False])
    stats = nlpo.learn_from_episodes(agent, episodes)
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and stats["approx_kl"] == pytest.approx(
        0.0, abs=1e-6
    )


def test_the_mask_policy_is_refreshed_every_interval_updates_and_not_in_between(tmp_path):
    config = tiny_config(
        tmp_path,
        "llmgym/TextGen-v0",
        *TOKEN_TEXTGEN,
        "algorithm.rollout_steps=2",
        "algorithm.nlpo.mask_update_interval=2",
    )
    llm, envs, agent, algorithm = build(config)
    try:
        assert agent.policy.sampling.mask_top_p == 0.9
        initial = [p.detach().clone() for p in llm.model.parameters() if p.requires_grad]
        assert _equal(_snapshot(llm), initial)  # the first snapshot: the initial policy
        refreshed = []
        for _ in range(4):
            algorithm.collect_rollout()
            before = _snapshot(llm)
            stats = algorithm.update()
            refreshed.append(stats["mask_refreshed"])
            current = [p.detach().clone() for p in llm.model.parameters() if p.requires_grad]
            assert not _equal(current, before)  # the update moved the policy
            assert _equal(_snapshot(llm), current if stats["mask_refreshed"] else before)
        assert refreshed == [0.0, 1.0, 0.0, 1.0]
    finally:
        envs.close()


def test_a_scoring_agent_is_refused_naming_the_fix(tmp_path):
    config = tiny_config(tmp_path, "llmgym/EchoWord-v0", "algorithm.name=nlpo")
    with pytest.raises(ConfigError, match="agent.type=generative or agent.type=token"):
        build(config)


def test_actions_sampled_without_the_mask_are_refused(tiny_llama):
    model, tok = tiny_llama
    nlpo = NLPO(config=AlgorithmConfig(name="nlpo"))
    llm = LocalLLM(ModelConfig(name="tiny"), updater=nlpo.updater(), model=model, tokenizer=tok)
    agent = GenerativeAgent(llm, AgentConfig(use_chat_template=False, max_new_tokens=2))  # never prepared
    agent.act_batch([PROMPTS[0]], [{}])
    with pytest.raises(ConfigError, match=r"nlpo.prepare\(agent\)"):
        nlpo.learn_from_episodes(agent, [Episode([agent.last_decisions[0]], [1.0])])


def test_masked_logprobs_equal_generates_on_gpt2_too():
    model, tok = tiny_causal_lm("gpt2", seed=0)
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    llm.refresh_mask_policy()
    sampling = Sampling(temperature=1.0, mask_top_p=0.3)
    torch.manual_seed(0)
    gens = [
        g for group in llm.generate(PROMPTS, max_new_tokens=4, **sampling.generation_kwargs()) for g in group
    ]
    rescored = llm.token_logprobs(
        [g.prompt_ids for g in gens], [g.token_ids for g in gens], require_grad=False, sampling=sampling
    )
    for g, r in zip(gens, rescored):
        torch.testing.assert_close(r["logprobs"], g.logprobs, atol=1e-5, rtol=0)


def test_greedy_under_the_mask_keeps_the_mask(tiny_llama):
    from llmgym.agents.policies import TokenPolicy

    masked = TokenPolicy().masked(0.5, 3)
    assert masked.generation_kwargs(greedy=True) == {
        "max_new_tokens": 32,
        "do_sample": False,
        "mask_top_p": 0.5,
        "mask_min_tokens": 3,
    }
    assert "mask_top_p" not in TokenPolicy().generation_kwargs(greedy=True)


def test_llmgym_eval_of_an_nlpo_config_masks_with_the_first_snapshot_training_takes(tmp_path, tiny_model_dir):
    from llmgym.run.evaluation import evaluate
    from llmgym.run.trainer import Trainer, evaluate_run

    config = tiny_config(
        tmp_path,
        "llmgym/TextGen-v0",
        *TOKEN_TEXTGEN,
        f"model.name={tiny_model_dir}",
        "train.run_name=z",
        "agent.max_prompt_tokens=64",
    )
    trainer = Trainer(config)  # NLPO snapshots the initial weights as its mask policy before any rollout
    try:
        want = evaluate(trainer.eval_agent, trainer.config, 3, seed=3)
        assert not trainer.eval_agent.policy.sampling.is_masked  # masked only while it evaluates
    finally:
        trainer.close()
    path = tmp_path / "z" / "config.yaml"
    # zero-shot: no snapshot saved, so the evaluation takes NLPO's first one (not "no snapshot yet")
    assert evaluate_run(path, episodes=3, seed=3, report=False) == want
    sampled = evaluate_run(path, episodes=3, seed=3, report=False, greedy=False)
    assert sampled["episodes"] == 3.0
