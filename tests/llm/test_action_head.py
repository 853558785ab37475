"""ActionHead: the candidate policy's logits start as prior_weight * score, train, and are what agents sample."""

from __future__ import annotations

import pytest
import torch

from llmgym.agents.policies import CandidatePolicy, policy_logits_key
from llmgym.agents.scoring import ScoringAgent
from llmgym.config import AgentConfig, ModelConfig
from llmgym.errors import InputError
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import POLICY_KEY, SCORE_KEY, ActionHead

CONTEXTS = ["You see a red ball. Action:", "You see a wall. Action:", "Goal: go to the key. Action:"]
CANDIDATES = [[" go forward", " turn left"], [" toggle"], [" pick up", " drop", " turn right"]]


def _llm(tiny_llama, head: ActionHead) -> LocalLLM:
    model, tok = tiny_llama
    return LocalLLM(ModelConfig(name="tiny"), {POLICY_KEY: head}, model=model, tokenizer=tok)


@pytest.mark.parametrize(("prior_weight", "normalize"), [(0.3, "sum"), (1.0, "mean"), (0.0, "sum")])
def test_logits_start_as_prior_weight_times_the_candidate_scores(tiny_llama, prior_weight, normalize):
    llm = _llm(tiny_llama, ActionHead(prior_weight=prior_weight, normalize=normalize))
    out = llm.forward([POLICY_KEY], CONTEXTS, CANDIDATES, normalize=normalize)
    scores = llm.score(CONTEXTS, CANDIDATES, normalize=normalize)
    for o, s in zip(out, scores):
        assert o[POLICY_KEY].shape == s.shape
        assert torch.allclose(o[POLICY_KEY], prior_weight * s, atol=1e-5)


def test_prior_weight_zero_starts_exactly_uniform(tiny_llama):
    llm = _llm(tiny_llama, ActionHead(prior_weight=0.0))
    for o, options in zip(llm.forward([POLICY_KEY], CONTEXTS, CANDIDATES), CANDIDATES):
        logits = o[POLICY_KEY]
        assert torch.equal(logits, torch.zeros(len(options)))
        probs = CandidatePolicy(temperature=1.0).log_probs(logits).exp()
        assert torch.allclose(probs, torch.full((len(options),), 1.0 / len(options)), atol=1e-7)


def test_the_head_and_its_prior_weight_get_gradients_through_the_hidden_states(tiny_llama):
    head = ActionHead(prior_weight=0.5)
    llm = _llm(tiny_llama, head)
    out = llm.forward([POLICY_KEY], CONTEXTS, CANDIDATES, require_grad=True)
    loss = -sum(torch.log_softmax(o[POLICY_KEY], -1)[0] for o in out)
    loss.backward()
    assert head.linear.weight.grad is not None and head.linear.weight.grad.abs().sum() > 0
    assert head.prior_weight.grad is not None and head.prior_weight.grad != 0


def test_the_agent_samples_from_the_head_and_stores_that_log_prob(tiny_llama):
    head = ActionHead(prior_weight=0.7)
    llm = _llm(tiny_llama, head)
    with torch.no_grad():
        head.linear.weight.normal_(0, 0.5)  # a trained-looking head: logits differ from 0.7 * score
    assert policy_logits_key(llm.module_function_keys) == POLICY_KEY
    agent = ScoringAgent(
        llm,
        AgentConfig(system_prompt="", use_chat_template=False, history_length=0, temperature=0.8),
        num_envs=3,
    )
    infos = [{"valid_actions": [c.strip() for c in cands]} for cands in CANDIDATES]
    agent.act_batch([c.removesuffix(" Action:") for c in CONTEXTS], infos)
    for decision in agent.last_decisions:
        logits = llm.forward([POLICY_KEY], [decision.prompt], [decision.choice.candidates])[0][POLICY_KEY]
        scores = llm.forward([SCORE_KEY], [decision.prompt], [decision.choice.candidates])[0][SCORE_KEY]
        assert not torch.allclose(logits, 0.7 * scores, atol=1e-3)
        expected = torch.log_softmax(logits / 0.8, -1)[decision.choice.index]
        assert decision.log_prob == pytest.approx(float(expected), abs=1e-5)


def test_without_the_head_the_agent_samples_the_scores(tiny_llama):
    model, tok = tiny_llama
    llm = LocalLLM(ModelConfig(name="tiny"), {}, model=model, tokenizer=tok)
    assert policy_logits_key(llm.module_function_keys) == SCORE_KEY


def test_forward_without_candidates_is_refused(tiny_llama):
    llm = _llm(tiny_llama, ActionHead())
    with pytest.raises(InputError, match="candidates"):
        llm.forward([POLICY_KEY], CONTEXTS)


def test_bad_normalize_is_refused():
    with pytest.raises(InputError, match="normalize"):
        ActionHead(normalize="max")
