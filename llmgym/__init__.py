"""llmgym: online reinforcement learning of LLM agents in Gymnasium text environments.

``import llmgym`` is light: it registers the ``llmgym/...`` environments with Gymnasium and
exposes the public API, whose heavy parts (torch, transformers) load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llmgym import errors
from llmgym.config import (
    AgentConfig,
    AlgorithmConfig,
    Config,
    DistributedConfig,
    EnvConfig,
    LoggingConfig,
    LoRAConfig,
    ModelConfig,
    TrainConfig,
    load_config,
)
from llmgym.envs.registration import register_envs
from llmgym.version import __version__

_LAZY: dict[str, str] = {
    "LLM": "llmgym.llm.client",
    "ModuleFunction": "llmgym.llm.modules",
    "ValueHead": "llmgym.llm.modules",
    "LogitsHead": "llmgym.llm.modules",
    "Updater": "llmgym.llm.updater",
    "Generation": "llmgym.llm.generation",
    "load_model": "llmgym.llm.models",
    "make_vec": "llmgym.envs.vector",
    "TextVectorEnv": "llmgym.envs.vector",
    "check_text_env": "llmgym.envs.checker",
    "Agent": "llmgym.agents.generative",
    "BaseAgent": "llmgym.agents.base",
    "ScoringAgent": "llmgym.agents.scoring",
    "GenerativeAgent": "llmgym.agents.generative",
    "algorithms": "llmgym.algorithms",
    "PPO": "llmgym.algorithms.ppo",
    "A2C": "llmgym.algorithms.a2c",
    "GRPO": "llmgym.algorithms.grpo",
    "RLOO": "llmgym.algorithms.rloo",
    "ReBN": "llmgym.algorithms.rebn",
    "NLPO": "llmgym.algorithms.nlpo",
    "TRPO": "llmgym.algorithms.trpo",
}

__all__ = [
    "AgentConfig",
    "AlgorithmConfig",
    "Config",
    "DistributedConfig",
    "EnvConfig",
    "LoRAConfig",
    "LoggingConfig",
    "ModelConfig",
    "TrainConfig",
    "errors",
    "load_config",
    "register_envs",
    *sorted(_LAZY),
]

if TYPE_CHECKING:
    from llmgym import algorithms
    from llmgym.agents.base import BaseAgent
    from llmgym.agents.generative import Agent, GenerativeAgent
    from llmgym.agents.scoring import ScoringAgent
    from llmgym.algorithms.a2c import A2C
    from llmgym.algorithms.grpo import GRPO
    from llmgym.algorithms.nlpo import NLPO
    from llmgym.algorithms.ppo import PPO
    from llmgym.algorithms.rebn import ReBN
    from llmgym.algorithms.rloo import RLOO
    from llmgym.algorithms.trpo import TRPO
    from llmgym.envs.checker import check_text_env
    from llmgym.envs.vector import TextVectorEnv, make_vec
    from llmgym.llm.client import LLM
    from llmgym.llm.generation import Generation
    from llmgym.llm.models import load_model
    from llmgym.llm.modules import LogitsHead, ModuleFunction, ValueHead
    from llmgym.llm.updater import Updater


def __getattr__(name: str) -> Any:
    """Import the heavy parts of the public API on first access."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'llmgym' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if module_name == f"llmgym.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


register_envs()
