"""Encoder-decoder (T5) policies train with every token-level algorithm: the prompt in the encoder, the tokens in the decoder.

The task: token-level generation (``llmgym/TextGen-v0``, ``mode="token"``) of 2 tokens after a review
opening, rewarded 1 when the completion contains an "e"; the tiny random T5 writes one 12-19% of the
time. At learning rate 1e-2, 8 envs and 320 env steps, the sampled return (32 episodes) went
0.16/0.19/0.12 -> 0.53/0.53/0.34 with PPO and 0.12/0.19/0.12 -> 0.44/0.66/0.47 with NLPO on seeds
0-2 (OMP_NUM_THREADS=1), about 5 s a run.
"""

from __future__ import annotations

import math

import pytest
import torch

from llmgym.agents.generative import DecoderHistory
from llmgym.algorithms import algorithm_class
from llmgym.run.build import build_agent, build_llm, make_envs
from llmgym.run.evaluation import evaluate
from llmgym.testing import tiny_seq2seq_lm
from tests.algorithms.helpers import tiny_config

TASK = [
    "env.num_envs=8",
    "env.kwargs.datapool=review_openings",
    "env.kwargs.reward=keywords",
    "env.kwargs.reward_kwargs={keywords: [e]}",
    "env.kwargs.mode=token",
    "env.kwargs.max_tokens=2",
    "env.kwargs.eos_token=<|im_end|>",
    "agent.type=token",
    "algorithm.gamma=1.0",
    "algorithm.gae_lambda=1.0",
    "algorithm.learning_rate=1e-2",
    "algorithm.head_learning_rate=1e-2",
]


def _build(tmp_path, algo, seed, *overrides):
    config = tiny_config(
        tmp_path, "llmgym/TextGen-v0", f"train.seed={seed}", *TASK, f"algorithm.name={algo}", *overrides
    )
    model, tokenizer = tiny_seq2seq_lm(seed=seed)
    llm = build_llm(config, model=model, tokenizer=tokenizer)
    envs = make_envs(config)
    agent = build_agent(config, llm, envs.num_envs)
    assert all(isinstance(h, DecoderHistory) for h in agent.histories) == (config.agent.type == "token")
    return config, llm, envs, agent, algorithm_class(algo)(agent, envs, config.algorithm, seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("algo", ["ppo", "nlpo"])
def test_t5_token_policy_return_rises(tmp_path, algo, seed):
    config, llm, envs, agent, algorithm = _build(tmp_path, algo, seed)
    before = evaluate(agent, config, episodes=32, seed=1000, greedy=False)["episode_return"]
    algorithm.learn(total_env_steps=320)
    after = evaluate(agent, config, episodes=32, seed=1000, greedy=False)["episode_return"]
    envs.close()
    assert after >= before + 0.15, (before, after)


@pytest.mark.parametrize("algo", ["a2c", "trpo"])
def test_a2c_and_trpo_update_a_t5_policy(tmp_path, algo):
    config, llm, envs, agent, algorithm = _build(tmp_path, algo, 0, "algorithm.rollout_steps=4")
    weights = [p.detach().clone() for p in llm.backend.trainable_parameters()]
    algorithm.collect_rollout()
    stats = algorithm.update()
    envs.close()
    assert all(math.isfinite(v) for v in stats.values() if isinstance(v, float))
    assert not all(torch.equal(a, b) for a, b in zip(weights, llm.backend.trainable_parameters()))


# The completion agent: one generated completion per step, re-scored in the decoder under the cut (and NLPO's mask)
# it was drawn from, so the first minibatch's ratio is 1.
@pytest.mark.parametrize("algo", ["ppo", "nlpo"])
def test_first_minibatch_ratio_is_one_for_a_t5_completion_policy(tmp_path, algo):
    config, llm, envs, agent, algorithm = _build(
        tmp_path,
        algo,
        0,
        "env.kwargs.mode=completion",
        "agent.type=generative",
        "agent.max_new_tokens=4",
        "agent.top_p=0.7",
        "algorithm.rollout_steps=2",
        "algorithm.epochs=1",
        "algorithm.minibatch_size=16",
    )
    algorithm.collect_rollout()
    stats = algorithm.update()
    envs.close()
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and stats["clip_fraction"] == 0.0
