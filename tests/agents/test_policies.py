"""The policy re-scores what it drew: at unchanged weights ``evaluate`` gives the stored log-probs and values."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgym.agents import GenerativeAgent, ScoringAgent
from llmgym.agents.policies import CandidatePolicy, TokenPolicy
from llmgym.config import AgentConfig, ModelConfig
from llmgym.errors import ConfigError, InputError
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import POLICY_KEY, VALUE_KEY, ActionHead, ValueHead
from llmgym.llm.sampling import Sampling
from llmgym.testing import tiny_causal_lm

PROMPTS = ["Goal: go to the", "You see a red ball 2 steps left and", "héllo"]
CANDIDATES = [["go forward", "turn left", "pick up the ball"], ["turn right", "go forward"], ["toggle", "drop", "done"]]
_LLMS: dict[bool, LocalLLM] = {}


def _llm(action_head: bool) -> LocalLLM:
    """One tiny LLM per head configuration, built once (the weights never change here)."""
    if action_head not in _LLMS:
        model, tokenizer = tiny_causal_lm("llama", seed=0)
        heads = {VALUE_KEY: ValueHead()}
        if action_head:
            heads[POLICY_KEY] = ActionHead(prior_weight=0.5)
        _LLMS[action_head] = LocalLLM(ModelConfig(name="tiny"), heads, model=model, tokenizer=tokenizer)
    return _LLMS[action_head]


@settings(max_examples=12, deadline=None)
@given(
    action_head=st.booleans(),
    temperature=st.floats(0.3, 3.0),
    normalize=st.sampled_from(["sum", "mean"]),
    greedy=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_candidate_policy_evaluate_reproduces_what_act_stored(action_head, temperature, normalize, greedy, seed):
    llm = _llm(action_head)
    agent = ScoringAgent(llm, AgentConfig(use_chat_template=False, temperature=temperature, score_normalize=normalize),
                         num_envs=len(PROMPTS), seed=seed)
    assert agent.policy == CandidatePolicy(temperature, normalize)
    agent.act_batch(PROMPTS, [{"valid_actions": c} for c in CANDIDATES], greedy=greedy)
    decisions = agent.last_decisions
    outputs = agent.policy.evaluate(llm, [d.prompt for d in decisions], agent.policy.actions(decisions),
                                    require_grad=False)
    torch.testing.assert_close(outputs.log_probs, torch.tensor([d.log_prob for d in decisions]), atol=1e-5, rtol=0)
    torch.testing.assert_close(outputs.values, torch.tensor([d.value for d in decisions]), atol=1e-5, rtol=0)
    assert outputs.candidate_log_probs is not None and outputs.candidate_mask is not None
    probs = outputs.candidate_log_probs.exp() * outputs.candidate_mask
    torch.testing.assert_close(probs.sum(-1), torch.ones(len(PROMPTS)))
    torch.testing.assert_close(agent.policy.kl(outputs, outputs), torch.zeros(len(PROMPTS)), atol=1e-6, rtol=0)


@settings(max_examples=10, deadline=None)
@given(
    temperature=st.floats(0.5, 2.0),
    top_k=st.sampled_from([0, 5]),
    top_p=st.floats(0.5, 1.0),
    mask_top_p=st.sampled_from([1.0, 0.9, 0.5]),
    seed=st.integers(0, 1000),
)
def test_token_policy_evaluate_reproduces_what_act_stored(temperature, top_k, top_p, mask_top_p, seed):
    llm = _llm(action_head=False)
    agent = GenerativeAgent(llm, AgentConfig(use_chat_template=False, max_new_tokens=4), num_envs=len(PROMPTS))
    agent.policy = TokenPolicy(Sampling(temperature=temperature, top_k=top_k, top_p=top_p), max_new_tokens=4)
    if mask_top_p < 1.0:
        agent.policy = agent.policy.masked(mask_top_p)  # NLPO: every token from the mask policy's top-p set
        llm.refresh_mask_policy()
    torch.manual_seed(seed)
    agent.act_batch(PROMPTS, [{} for _ in PROMPTS])
    decisions = agent.last_decisions
    outputs = agent.policy.evaluate(llm, [d.prompt for d in decisions], agent.policy.actions(decisions),
                                    require_grad=False)
    torch.testing.assert_close(outputs.log_probs, torch.tensor([d.log_prob for d in decisions]), atol=1e-4, rtol=0)
    torch.testing.assert_close(outputs.values, torch.tensor([d.value for d in decisions]), atol=1e-5, rtol=0)
    torch.testing.assert_close(agent.policy.kl(outputs, outputs), torch.zeros(len(PROMPTS)), atol=1e-6, rtol=0)


def test_masking_is_a_token_policy_s_and_the_kinds_do_not_mix():
    token = TokenPolicy(Sampling(temperature=0.7), max_new_tokens=3)
    assert token.masked(0.9) == TokenPolicy(Sampling(temperature=0.7, mask_top_p=0.9), max_new_tokens=3)
    with pytest.raises(InputError, match="mask_top_p=1.5"):
        token.masked(1.5)
    with pytest.raises(ConfigError, match="generates no tokens"):
        CandidatePolicy().masked(0.9)
    with pytest.raises(InputError, match="must be > 0"):
        CandidatePolicy(temperature=0.0)
    llm = _llm(action_head=False)
    agent = ScoringAgent(llm, AgentConfig(use_chat_template=False), num_envs=1)
    agent.act_batch(PROMPTS[:1], [{"valid_actions": CANDIDATES[0]}])
    with pytest.raises(InputError, match="re-scores generated token sequences"):
        token.evaluate(llm, PROMPTS[:1], agent.policy.actions(agent.last_decisions))
