"""Duplicate valid actions: merged at the vector env, first occurrence kept, named in a warning.

Before, an env listing ``["left", "left", "right"]`` gave ``left`` two candidates' probability
mass under a scoring agent (2/3 of a uniform policy), silently.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from llmgym.envs.vector import make_vec


class RepeatingEnv(gym.Env[str, str]):
    """Lists ``left`` twice among its valid actions."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Text(64)
        self.action_space = gym.spaces.Text(64)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "obs", {"valid_actions": ["left", "right", "left", "up", "right"]}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "obs", 0.0, True, False, {"valid_actions": ["left", "left"]}


def test_duplicates_are_merged_in_order_with_one_warning() -> None:
    envs = make_vec([RepeatingEnv, RepeatingEnv])
    with pytest.warns(
        RuntimeWarning, match=r"env 0 \(RepeatingEnv\) lists the valid actions \['left', 'right'\]"
    ):
        envs.reset(seed=0)
    assert envs.candidates == [["left", "right", "up"]] * 2
    _, _, _, _, infos = envs.step(["left", "up"])
    assert infos[0]["final_info"]["valid_actions"] == ["left"]
    assert envs.candidates == [["left", "right", "up"]] * 2  # the autoreset's first info, merged too
    envs.close()


def test_scoring_agent_gives_a_repeated_action_one_share(tiny_llama: Any) -> None:
    from llmgym.agents.scoring import ScoringAgent
    from llmgym.config import AgentConfig, ModelConfig
    from llmgym.llm.client import LLM

    model, tokenizer = tiny_llama
    llm = LLM(ModelConfig(name="tiny"), model=model, tokenizer=tokenizer)
    agent = ScoringAgent(llm, AgentConfig(use_chat_template=False), num_envs=1, seed=0)
    envs = make_vec([RepeatingEnv])
    with pytest.warns(RuntimeWarning):
        observations, infos = envs.reset(seed=0)
    agent.act_batch(observations, infos)
    candidates = agent.last_decisions[0].choice.candidates
    assert candidates is not None and len(candidates) == 3
    envs.close()
    llm.close()
