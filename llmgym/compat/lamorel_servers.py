"""Lamorel's LLM servers as Ray actors: what each server of a multi-server :class:`~llmgym.compat.lamorel.Caller` runs.

Lamorel starts ``n_llm_processes`` server processes that each hold the LLM, the custom module
functions and the updater, splits every call's batch over them in contiguous chunks
(``numpy.array_split``) and wraps the module an updater trains in ``DistributedDataParallel``, so
``loss.backward()`` averages the servers' gradients. Here each server is a Ray actor of the
llmgym backend (:class:`~llmgym.llm.distributed.ray_backend.RayLLM`, with Lamorel's split) whose
backend is a :class:`LamorelServer`, built on the actor by :class:`LamorelServerFactory`:

* the same seed as the RL process (``llm_args.seed``), then the :class:`~llmgym.llm.local.LocalLLM`,
  the module functions (``initialize()`` on the server's device), the model initializer and the
  :class:`~llmgym.compat.lamorel.LamorelLLMModule`; every trainable parameter then takes server 0's
  value (the backend's start broadcast);
* the updater gets the module wrapped in ``DistributedDataParallel`` over the servers' group
  (gloo on CPU, NCCL on GPUs; buffers are not re-broadcast at every forward: they are constants),
  so its gradients are the mean over the servers, as in Lamorel: every server must run the same
  number of backward passes per update, and every trainable parameter must get a gradient (freeze
  the LLM in a model initializer to train heads only) unless ``allow_subgraph_use_whith_gradient``
  is set; else DistributedDataParallel does not average (or fails at the next update).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from llmgym.compat.lamorel import (
    BaseModelInitializer,
    BaseModuleFunction,
    BaseUpdater,
    LamorelLLMModule,
    UpdaterAdapter,
    initialize_module_functions,
)
from llmgym.compat.lamorel_config import LamorelSettings
from llmgym.config import ModelConfig
from llmgym.llm.collectives import Collectives
from llmgym.llm.distributed.backend import LocalLLMFactory
from llmgym.llm.distributed.placement import Placement
from llmgym.llm.local import LocalLLM
from llmgym.llm.protocols import CandidateSets, Contexts, HeadOutputs

__all__ = ["LamorelServer", "LamorelServerFactory"]


class LamorelServer:
    """One LLM server of a multi-server Lamorel ``Caller``: the backend methods the driver calls.

    ``forward`` is Lamorel's (``"__score"`` and the custom module functions on Lamorel's rows,
    :meth:`LamorelLLMModule.forward`); ``score``, ``generate`` and ``update`` are the
    ``LocalLLM``'s (its updater runs the Lamorel updater).

    Args:
        llm: The server's LLM.
        module: The Lamorel module over ``llm`` and the custom module functions.
    """

    def __init__(self, llm: LocalLLM, module: LamorelLLMModule) -> None:
        self._llm = llm
        self._module = module

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer."""
        return self._llm.tokenizer

    def score(self, contexts: Contexts, candidates: CandidateSets, **kwargs: Any) -> list[torch.Tensor]:
        """Log p(candidate | context), per context a tensor ``[k]``."""
        return self._llm.score(contexts, candidates, **kwargs)

    def forward(
        self, keys: Sequence[str], contexts: Contexts, candidates: CandidateSets | None = None, **kwargs: Any
    ) -> HeadOutputs:
        """Lamorel's ``forward``: per context a dict with one entry per key."""
        result: HeadOutputs = self._module(keys, contexts, candidates, **kwargs)
        return result

    def generate(self, contexts: Contexts, **kwargs: Any) -> list[Any]:
        """Generations, per context, per returned sequence."""
        return self._llm.generate(contexts, **kwargs)

    def update(self, contexts: Contexts, candidates: CandidateSets | None = None, **kwargs: Any) -> list[Any]:
        """Run the Lamorel updater on this server's share (``_current_batch_ids`` in ``kwargs``)."""
        return self._llm.update(contexts, candidates, **kwargs)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The model's and the module functions' parameters that require a gradient."""
        return [p for p in self._module.parameters() if p.requires_grad]

    def close(self) -> None:
        """Release the model."""
        self._llm.close()


@dataclass
class LamorelServerFactory:
    """Builds a :class:`LamorelServer` on each Ray server (shipped to the actors, pickled by Ray).

    Attributes:
        settings: The parsed ``lamorel_args``.
        module_functions: The custom module functions by key (each server initialises its copy).
        updater: The Lamorel updater (each server runs its copy), or ``None``.
        model_initializer: Applied to each server's module once built, or ``None``.
    """

    settings: LamorelSettings
    module_functions: Mapping[str, BaseModuleFunction] = field(default_factory=dict)
    updater: BaseUpdater | None = None
    model_initializer: BaseModelInitializer | None = None

    @property
    def config(self) -> ModelConfig:
        """The model section the servers load."""
        return self.settings.model

    @property
    def module_function_keys(self) -> list[str]:
        """The custom module functions' keys."""
        return list(self.module_functions)

    def __call__(self, placement: Placement, collectives: Collectives) -> LamorelServer:
        """Build this server's LLM, modules and updater (see the module docstring)."""
        import torch.distributed as dist
        from transformers import set_seed

        set_seed(self.settings.seed)
        config = dataclasses.replace(self.settings.model, device=placement.device)
        adapter = UpdaterAdapter(self.updater) if self.updater is not None else None
        llm = LocalLLMFactory(config, None, adapter)(placement, collectives)
        functions = dict(self.module_functions)
        initialize_module_functions(llm, functions, self.settings)
        module = LamorelLLMModule(llm, functions, self.settings)
        if self.model_initializer is not None:
            self.model_initializer.initialize_model(module)
        if self.updater is not None:
            self.updater.set_llm_module(self._synchronised(module) if dist.is_initialized() else module)
        return LamorelServer(llm, module)

    def _synchronised(self, module: LamorelLLMModule) -> torch.nn.Module:
        """``module`` in ``DistributedDataParallel``: ``backward`` averages the gradients over the servers."""
        from torch.nn.parallel import DistributedDataParallel

        # gloo cannot broadcast bool buffers (Lamorel's own workaround); buffers are constants anyway
        module._ddp_params_and_buffers_to_ignore = [  # type: ignore[assignment]
            name for name, buffer in module.named_buffers() if buffer.dtype == torch.bool
        ]
        return DistributedDataParallel(
            module, find_unused_parameters=self.settings.find_unused_parameters, forward_sync_buffers=False
        )
