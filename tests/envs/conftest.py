"""Env tests: make sure llmgym's envs are registered (``import llmgym`` does it too)."""

from __future__ import annotations

from llmgym.envs.registration import register_envs

register_envs()
