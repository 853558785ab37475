"""Agents: prompt and action hooks over an LLM (LlamaGym's API, GLAM's scoring policy)."""

from llmgym.agents.base import BaseAgent, Decision
from llmgym.agents.generative import Agent, GenerativeAgent, TokenAgent
from llmgym.agents.history import History, PlainTemplate, Prompt
from llmgym.agents.scoring import ScoringAgent, candidate_policy

__all__ = ["Agent", "BaseAgent", "Decision", "GenerativeAgent", "History", "PlainTemplate", "Prompt", "ScoringAgent", "TokenAgent", "candidate_policy"]
