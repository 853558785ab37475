"""The LLM policy layer: scoring, generation, module functions, updaters, backends.

Names are imported lazily so that ``import llmgym.llm`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmgym.llm.adapters import apply_lora
    from llmgym.llm.client import LLM
    from llmgym.llm.generation import Generation
    from llmgym.llm.local import LocalLLM
    from llmgym.llm.models import load_model
    from llmgym.llm.modules import LogitsHead, ModuleFunction, ValueHead
    from llmgym.llm.scoring import ForwardOutputs, Minibatch
    from llmgym.llm.updater import Updater

__all__ = [
    "LLM",
    "LocalLLM",
    "ModuleFunction",
    "ValueHead",
    "LogitsHead",
    "Updater",
    "Generation",
    "ForwardOutputs",
    "Minibatch",
    "apply_lora",
    "load_model",
]

_WHERE = {
    "LLM": "client",
    "LocalLLM": "local",
    "ModuleFunction": "modules",
    "ValueHead": "modules",
    "LogitsHead": "modules",
    "Updater": "updater",
    "Generation": "generation",
    "ForwardOutputs": "scoring",
    "Minibatch": "scoring",
    "apply_lora": "adapters",
    "load_model": "models",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"llmgym.llm.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'llmgym.llm' has no attribute {name!r}")
