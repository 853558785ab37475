"""On 2 LLM servers each policy re-scores what it drew: the first ratio of an update is 1."""

from __future__ import annotations

import pytest

from llmgym.agents import GenerativeAgent, ScoringAgent
from llmgym.agents.learning import Episode
from llmgym.agents.policies import TokenPolicy
from llmgym.algorithms import PPO
from llmgym.config import AgentConfig, AlgorithmConfig
from llmgym.llm.sampling import Sampling
from tests.distributed.test_algorithms import CANDIDATES, _build
from tests.distributed.test_local_equivalence import CONTEXTS

# One minibatch and one epoch: the statistics are those of the policy before its step.
ONE_STEP = AlgorithmConfig(epochs=1, minibatch_size=64)


def _first_ratio(agent, infos):
    agent.act_batch(CONTEXTS, infos)
    episodes = [Episode([decision], [1.0]) for decision in agent.last_decisions]
    return PPO(config=ONE_STEP).learn_from_episodes(agent, episodes)


@pytest.mark.timeout(240)
def test_both_policies_re_score_their_actions_on_two_servers():
    llm = _build(2)
    try:
        scoring = ScoringAgent(llm, AgentConfig(use_chat_template=False, temperature=0.7), num_envs=len(CONTEXTS))
        stats = _first_ratio(scoring, [{"valid_actions": c} for c in CANDIDATES])
        assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and stats["approx_kl"] == pytest.approx(0.0, abs=1e-6)
        generative = GenerativeAgent(llm, AgentConfig(use_chat_template=False, max_new_tokens=3), num_envs=len(CONTEXTS))
        generative.policy = TokenPolicy(Sampling(temperature=0.8, top_p=0.9), max_new_tokens=3).masked(0.5)
        llm.refresh_mask_policy()  # NLPO's mask, the same snapshot on both servers
        stats = _first_ratio(generative, [{} for _ in CONTEXTS])
        assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and stats["approx_kl"] == pytest.approx(0.0, abs=1e-5)
    finally:
        llm.close()
