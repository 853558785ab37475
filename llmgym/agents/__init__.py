"""Agents: prompt and action hooks over an LLM (LlamaGym's API, GLAM's scoring policy)."""

from llmgym.agents.actions import Decision
from llmgym.agents.base import BaseAgent
from llmgym.agents.generative import Agent, GenerativeAgent, TokenAgent
from llmgym.agents.history import History, PlainTemplate, Prompt
from llmgym.agents.policies import CandidatePolicy, Policy, TokenPolicy
from llmgym.agents.scoring import ScoringAgent

__all__ = [
    "Agent",
    "BaseAgent",
    "CandidatePolicy",
    "Decision",
    "GenerativeAgent",
    "History",
    "PlainTemplate",
    "Policy",
    "Prompt",
    "ScoringAgent",
    "TokenAgent",
    "TokenPolicy",
]
