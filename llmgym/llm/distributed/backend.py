"""Choosing the backend: in-process ``LocalLLM``, or LLM servers as Ray actors."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from llmgym.config import DistributedConfig, ModelConfig, check_sharding
from llmgym.llm.collectives import Collectives
from llmgym.llm.distributed.placement import Placement
from llmgym.llm.protocols import LLMBackend

__all__ = ["LocalLLMFactory", "ServerFactory", "make_backend", "shard_model"]


class ServerFactory(Protocol):
    """Builds what one Ray LLM server runs (shipped to every server, where it is called once).

    The result has the backend methods the driver calls (``score``, ``forward``, ``update``...;
    see :data:`~.ray_server.SERVER_METHODS`), ``trainable_parameters()`` and ``close()``.
    """

    @property
    def config(self) -> ModelConfig | str | None:
        """The model section the servers load."""

    @property
    def module_function_keys(self) -> list[str]:
        """Names of the module functions every server carries."""

    def __call__(self, placement: Placement, collectives: Collectives) -> Any:
        """Build the server's backend on ``placement``'s devices, reaching its peers through ``collectives``."""


def shard_model(model: Any, num_gpus: int) -> Any:
    """Spread a model over ``cuda:0..num_gpus-1`` with Accelerate (balanced ``max_memory``).

    Args:
        model: A transformers model on the CPU.
        num_gpus: GPUs visible to this server (its ``CUDA_VISIBLE_DEVICES`` holds only its own).

    Returns:
        The dispatched model (its first layers on ``cuda:0``).
    """
    from accelerate import dispatch_model, infer_auto_device_map
    from accelerate.utils import get_balanced_memory

    no_split = getattr(model, "_no_split_modules", None) or []
    max_memory = get_balanced_memory(model, max_memory=None, no_split_module_classes=no_split)
    max_memory = {key: value for key, value in max_memory.items() if key == "cpu" or int(key) < num_gpus}
    device_map = infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=no_split)
    return dispatch_model(model, device_map=device_map)


@dataclass
class LocalLLMFactory:
    """Builds a server's ``LocalLLM`` on that server's devices (shipped to the Ray actors, pickled by Ray).

    Attributes:
        config: The model section (a name or ``None`` is turned into one); its ``device`` is
            replaced by the server's.
        module_functions: Heads to attach (initialised on every server, then broadcast from server 0).
        updater: The Updater (instance or class).
        model: A prebuilt model (shipped to every server: only sensible for small models).
        tokenizer: The prebuilt model's tokenizer.
        sharding: ``distributed.sharding``: ``none`` (each server a ``LocalLLM`` holding the whole
            model) or ``fsdp`` (a :class:`~.fsdp.ShardedLLM`, the model sharded over the servers).
        rng_state: torch's global CPU generator state (``torch.random.get_rng_state()``), taken in
            the driver when the factory is made unless given. Every server starts from it, so what
            draws from torch's global generator while the backend is built (LoRA's initial
            ``lora_A``, broadcast from server 0) is what an in-process ``LocalLLM`` built at that
            point would draw, on every run; a server's own generator is seeded at random by Ray.
    """

    config: ModelConfig | str | None = None
    module_functions: Mapping[str, Any] | None = None
    updater: Any = None
    model: Any = None
    tokenizer: Any = None
    sharding: str = "none"
    rng_state: Any = None

    def __post_init__(self) -> None:
        import torch

        from llmgym.llm.validation import as_model_config

        self.config = as_model_config(self.config)
        if self.rng_state is None:
            self.rng_state = torch.random.get_rng_state()

    @property
    def module_function_keys(self) -> list[str]:
        """Names of the heads."""
        return list(self.module_functions or {})

    def __call__(self, placement: Placement, collectives: Collectives | None = None) -> Any:
        """Build the backend for ``placement``, reaching its peers through ``collectives``.

        Sets torch's global generators first: the CPU one to :attr:`rng_state`, the CUDA ones
        seeded with that state's seed (``torch.manual_seed``'s, as the driver's were).
        """
        import torch

        from llmgym.llm.local import LocalLLM
        from llmgym.llm.models import load_model
        from llmgym.llm.validation import as_model_config

        torch.random.set_rng_state(self.rng_state)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(torch.initial_seed())
        config = dataclasses.replace(as_model_config(self.config), device=placement.device)
        model, tokenizer = self.model, self.tokenizer
        if placement.model_parallel:
            if (
                model is None and config.load_in_4bit
            ):  # quantised weights load straight onto the server's GPUs
                model, tokenizer = load_model(config, shard=True)
            else:
                if model is None:
                    model, tokenizer = load_model(dataclasses.replace(config, device="cpu"))
                model = shard_model(model, len(placement.gpus))
        elif model is not None:
            model = model.to(placement.device)
        backend: type[LocalLLM] = LocalLLM
        if self.sharding == "fsdp":
            from llmgym.llm.distributed.fsdp import ShardedLLM

            backend = ShardedLLM
        return backend(
            config,
            self.module_functions,
            self.updater,
            model=model,
            tokenizer=tokenizer,
            collectives=collectives,
        )


def make_backend(
    config: ModelConfig | str | None,
    module_functions: Mapping[str, Any] | None = None,
    updater: Any = None,
    *,
    model: Any = None,
    tokenizer: Any = None,
    distributed: DistributedConfig | None = None,
) -> LLMBackend:
    """Build the backend ``LLM`` delegates to.

    * With ``distributed.llm_processes > 1`` (or one server spread over
      ``model_parallelism_size > 1`` GPUs): a :class:`~.ray_backend.RayLLM` whose servers are Ray
      actors (a private local Ray instance, or the cluster at ``distributed.ray_address``).
    * Else: an in-process ``LocalLLM``.

    Args:
        config: The model section.
        module_functions: Heads by name.
        updater: Updater instance or class.
        model: Prebuilt model (skips loading).
        tokenizer: Its tokenizer.
        distributed: The ``distributed`` section; ``None`` means one in-process LLM.

    Returns:
        An :class:`~llmgym.llm.protocols.LLMBackend`.
    """
    if distributed is not None and (distributed.llm_processes > 1 or distributed.model_parallelism_size > 1):
        from llmgym.llm.distributed.ray_backend import RayLLM
        from llmgym.llm.validation import as_model_config

        check_sharding(as_model_config(config), distributed)
        factory = LocalLLMFactory(config, module_functions, updater, model, tokenizer, distributed.sharding)
        return RayLLM(factory, distributed)
    from llmgym.llm.local import LocalLLM

    return LocalLLM(config, module_functions, updater, model=model, tokenizer=tokenizer)
