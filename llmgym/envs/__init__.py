"""Gymnasium text environments and the vector layer that batches them into prompts."""

from llmgym.envs.registration import list_envs, register_envs

__all__ = ["list_envs", "register_envs"]
