"""Everything a run is built from its config: the LLM with its heads and updater, the envs, the agents.

``llmgym train`` (:class:`~llmgym.run.trainer.Trainer`), ``llmgym eval``, ``llmgym export``
and the examples build their pieces here, so a config means the same run everywhere.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch

from llmgym.agents.base import BaseAgent
from llmgym.algorithms.updaters import resolve_updater
from llmgym.config import Config, config_to_dict
from llmgym.errors import ConfigError

if TYPE_CHECKING:
    from llmgym.envs.vector import TextVectorEnv
    from llmgym.llm.client import LLM
    from llmgym.llm.modules import ModuleFunction
    from llmgym.llm.protocols import PolicyLLM

__all__ = ["build_agent", "build_heads", "build_llm", "env_instructions", "make_envs", "seed_everything"]


def build_heads(config: Config) -> dict[str, ModuleFunction]:
    """The module functions of a run: a value head, and the action head of scoring agents.

    Args:
        config: The run config (``agent``, ``algorithm``).

    Returns:
        Unbound heads by key (:data:`~llmgym.llm.modules.VALUE_KEY`, and
        :data:`~llmgym.llm.modules.POLICY_KEY` when ``agent.action_head`` applies).

    Raises:
        ConfigError: ``agent.action_head`` together with ``algorithm.kl.coef > 0``.
    """
    from llmgym.llm.modules import POLICY_KEY, VALUE_KEY, ActionHead, ValueHead

    heads: dict[str, ModuleFunction] = {
        VALUE_KEY: ValueHead(detach_input=config.algorithm.value_head == "detached")
    }
    if config.agent.type == "scoring" and config.agent.action_head:
        if config.algorithm.kl.coef > 0:
            raise ConfigError(
                f"algorithm.kl.coef={config.algorithm.kl.coef:g} penalises the KL to the LLM's own scoring policy, which "
                "agent.action_head replaces; set agent.action_head=false to keep the KL penalty, or algorithm.kl.coef=0."
            )
        heads[POLICY_KEY] = ActionHead(
            prior_weight=config.agent.prior_weight, normalize=config.agent.score_normalize
        )
    return heads


def build_llm(config: Config, *, model: Any = None, tokenizer: Any = None) -> LLM:
    """An :class:`llmgym.LLM` with the heads of :func:`build_heads` and the configured updater.

    Args:
        config: The run config (``model``, ``agent``, ``algorithm``, ``distributed``).
        model: Optional prebuilt transformers model (tests pass tiny models).
        tokenizer: Its tokenizer.

    Raises:
        ConfigError: As :func:`build_heads`; a KL to the reference (``algorithm.kl.coef > 0``) with neither LoRA nor
            ``model.reference_copy``.
    """
    from llmgym.llm.client import LLM

    heads = build_heads(config)  # its ConfigError (an action head under a KL) names the first thing to fix
    if config.algorithm.kl.coef > 0 and config.model.lora is None and not config.model.reference_copy:
        raise ConfigError(
            f"algorithm.kl.coef={config.algorithm.kl.coef:g} measures the KL to a reference model, but the full model "
            "trains (model.lora is null) and keeps no reference. Fix: model.reference_copy=true (a frozen copy of the "
            "initial weights on the same device: one more copy of the weights in memory), or model.lora (the "
            "reference is the model with its adapter disabled), or algorithm.kl.coef=0."
        )
    return LLM(
        config.model,
        module_functions=heads,
        updater=resolve_updater(config.algorithm),
        model=model,
        tokenizer=tokenizer,
        distributed=config.distributed,
    )


def build_agent(
    config: Config, llm: PolicyLLM, num_envs: int, system_prompt: Optional[str] = None
) -> BaseAgent:
    """The agent named by ``agent.type`` (``scoring``, ``generative`` or ``token``) for ``num_envs`` envs."""
    from llmgym.agents.generative import GenerativeAgent, TokenAgent
    from llmgym.agents.scoring import ScoringAgent

    agent_config = config.agent
    if system_prompt is not None and agent_config.system_prompt is None:
        agent_config = type(agent_config)(**{**config_to_dict(agent_config), "system_prompt": system_prompt})
    if agent_config.type == "scoring":
        return ScoringAgent(llm, agent_config, num_envs=num_envs, seed=config.train.seed)
    cls = {"generative": GenerativeAgent, "token": TokenAgent}[agent_config.type]
    return cls(llm, agent_config, num_envs=num_envs, seed=config.train.seed)


def make_envs(config: Config, num_envs: Optional[int] = None) -> TextVectorEnv:
    """The vector env of the ``env`` section."""
    from llmgym.envs.vector import make_vec

    return make_vec(
        config.env.id,
        num_envs=num_envs or config.env.num_envs,
        vectorization_mode=config.env.vectorization_mode,
        env_kwargs=dict(config.env.kwargs),
        max_episode_steps=config.env.max_episode_steps,
        reward_clip=config.env.reward_clip,
    )


def env_instructions(config: Config) -> Optional[str]:
    """The env's ``instructions`` text (the agents' system prompt when ``agent.system_prompt`` is unset), if any."""
    import gymnasium as gym

    env = gym.make(config.env.id, **dict(config.env.kwargs))
    try:
        text = getattr(env.unwrapped, "instructions", None)
    finally:
        env.close()
    return text if isinstance(text, str) else None


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
