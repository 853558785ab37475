"""A token agent's ``agent.min_new_tokens`` (RL4LMs' ``min_length``): EOS banned at decision t of an episode while t < it.

The models here put most of their mass on EOS (a +6 bias on its logit), so a ban that is missing, or
one that outlives the minimum, shows in the tokens drawn and in the log-probs, which are checked
against a hand computation from the model's logits, then against the update's re-scoring.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import llmgym
from llmgym.agents import TokenAgent
from llmgym.config import AgentConfig, ModelConfig
from llmgym.llm.modules import ValueHead
from llmgym.testing import tiny_causal_lm, tiny_seq2seq_lm

MINIMUM = 2  # agent.min_new_tokens
TOKENS = 4  # tokens per episode (the env's max_tokens; EOS does not end it)


def _eos_heavy_llm(kind: str):
    model, tok = tiny_causal_lm("gpt2", seed=0) if kind == "causal" else tiny_seq2seq_lm()
    bias = torch.zeros(model.config.vocab_size)
    bias[tok.eos_token_id] = 6.0
    model.get_output_embeddings().register_forward_hook(lambda module, inputs, out: out + bias.to(out.dtype))
    return llmgym.LLM(ModelConfig(name="tiny"), {"value": ValueHead()}, model=model, tokenizer=tok)


def _episodes(agent, num_envs: int, episodes: int, greedy: bool):
    """Run ``episodes`` rounds of ``num_envs`` token episodes; every decision with its step index."""
    envs = [
        gym.make(
            "llmgym/TextGen-v0",
            datapool=["Write:", "Once upon"],
            reward="length_penalty",
            mode="token",
            max_tokens=TOKENS,
        )
        for _ in range(num_envs)
    ]
    steps = []
    for episode in range(episodes):
        observations = [env.reset(seed=episode * num_envs + i)[0] for i, env in enumerate(envs)]
        for t in range(TOKENS):
            actions = agent.act_batch(observations, [{} for _ in envs], greedy=greedy)
            steps.extend((t, d) for d in agent.last_decisions)
            results = [env.step(a) for env, a in zip(envs, actions)]
            observations = [r[0] for r in results]
            done = [r[2] or r[3] for r in results]
            assert all(done) == (t == TOKENS - 1)
            agent.observe([r[1] for r in results], [r[2] for r in results], [r[3] for r in results])
    return steps


def _next_token_logits(llm, decision) -> torch.Tensor:
    model = llm.model
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            start = model.config.decoder_start_token_id
            decoder = torch.tensor([[start, *decision.choice.decoder_prefix]])
            return model(input_ids=torch.tensor([decision.prompt_ids]), decoder_input_ids=decoder).logits[
                0, -1
            ]
        return model(input_ids=torch.tensor([decision.prompt_ids])).logits[0, -1]


def _banning_agent(llm, num_envs: int) -> TokenAgent:
    """A token agent on the bare prompt that bans EOS for its first ``MINIMUM`` tokens of each episode."""
    config = AgentConfig(
        type="token", use_chat_template=False, history_length=0, system_prompt="", min_new_tokens=MINIMUM
    )
    return TokenAgent(llm, config, num_envs=num_envs)


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_eos_is_banned_before_min_new_tokens_when_sampling_and_when_rescoring(kind):
    llm = _eos_heavy_llm(kind)
    eos = llm.tokenizer.eos_token_id
    agent = _banning_agent(llm, num_envs=4)
    torch.manual_seed(0)
    steps = _episodes(agent, num_envs=4, episodes=2, greedy=False)
    for t, decision in steps:
        assert decision.choice.episode_tokens == t  # counted per episode, from 0 again after a reset
        token = decision.choice.token_ids[0]
        logits = _next_token_logits(llm, decision)
        banned = torch.log_softmax(logits.masked_fill(torch.arange(len(logits)) == eos, float("-inf")), -1)
        plain = torch.log_softmax(logits, -1)
        expected = banned if t < MINIMUM else plain
        assert decision.choice.token_log_probs[0] == pytest.approx(float(expected[token]), abs=1e-4)
        other = plain if t < MINIMUM else banned
        if token != eos:  # the two distributions differ by log(1 - p(EOS)), about 1 nat here
            assert abs(decision.choice.token_log_probs[0] - float(other[token])) > 0.1
    assert not any(d.choice.token_ids[0] == eos for t, d in steps if t < MINIMUM)
    assert any(d.choice.token_ids[0] == eos for t, d in steps if t >= MINIMUM)  # allowed (and likely) after

    # The update re-scores each token under the distribution it was drawn from: the PPO ratio is exactly 1.
    decisions = [d for _, d in steps]
    actions = agent.policy.actions(decisions)
    assert actions.episode_tokens == [t for t, _ in steps]
    outputs = agent.policy.evaluate(llm, [d.prompt for d in decisions], actions, require_grad=False)
    recorded = torch.tensor([d.log_prob for d in decisions])
    assert torch.allclose(outputs.log_probs.float(), recorded, atol=1e-4)
    assert torch.allclose(
        torch.exp(outputs.log_probs.float() - recorded), torch.ones(len(decisions)), atol=1e-4
    )


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_greedy_evaluation_keeps_the_ban_then_takes_eos(kind):
    # RL4LMs' evaluation min_length: the argmax is EOS (its +6 bias) except while it is banned
    llm = _eos_heavy_llm(kind)
    eos = llm.tokenizer.eos_token_id
    agent = _banning_agent(llm, num_envs=2)
    steps = _episodes(agent, num_envs=2, episodes=1, greedy=True)
    assert [d.choice.token_ids[0] == eos for t, d in steps] == [t >= MINIMUM for t, _ in steps]
