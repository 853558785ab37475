"""LLM: the one user-facing class, with the same API whatever the backend."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

import torch

from llmgym.config import DistributedConfig, ModelConfig
from llmgym.llm.generation import Generation
from llmgym.llm.modules import ModuleFunction
from llmgym.llm.protocols import CandidateSets, Contexts, HeadOutputs, LLMBackend
from llmgym.llm.updater import Updater

__all__ = ["LLM"]


class LLM(AbstractContextManager["LLM"]):
    """An LLM policy: score candidates, generate, run heads and update, on any backend.

    Every method delegates to the backend (in-process :class:`~llmgym.llm.local.LocalLLM` here),
    which has the same methods; see it for the full argument lists.

    Args:
        config: Model settings, a model name/path, or ``None`` for the default model.
        module_functions: Heads by name (e.g. ``{"value": ValueHead()}``).
        updater: An :class:`~llmgym.llm.updater.Updater` instance or class.
        model: A prebuilt transformers model (skips loading; needs ``tokenizer``).
        tokenizer: The prebuilt model's tokenizer.
        distributed: The ``distributed`` section: with ``llm_processes > 1`` (or
            ``model_parallelism_size > 1``) the LLM runs on that many LLM servers (Ray actors, see
            docs/distributed.md); ``None`` runs it in-process.

    Example:
        >>> llm = LLM(ModelConfig(name="SmolLM2-135M-Instruct"))  # doctest: +SKIP
        >>> llm.score(["Action:"], [[" go forward", " turn left"]])  # doctest: +SKIP
        [tensor([-3.1, -4.2])]
    """

    def __init__(
        self,
        config: ModelConfig | str | None = None,
        module_functions: Mapping[str, ModuleFunction] | None = None,
        updater: Updater | type[Updater] | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        distributed: DistributedConfig | None = None,
    ) -> None:
        from llmgym.llm.distributed.backend import make_backend

        self._backend: LLMBackend = make_backend(
            config, module_functions, updater, model=model, tokenizer=tokenizer, distributed=distributed
        )

    @property
    def backend(self) -> LLMBackend:
        """The backend serving this LLM."""
        return self._backend

    @property
    def model(self) -> Any:
        """The underlying transformers model (local backend)."""
        return self._backend.model

    @property
    def tokenizer(self) -> Any:
        """The underlying tokenizer."""
        return self._backend.tokenizer

    @property
    def module_function_keys(self) -> list[str]:
        """Names of the module functions (heads) on the LLM, e.g. ``["value"]``."""
        return list(self._backend.module_function_keys)

    @property
    def config(self) -> ModelConfig:
        """The model config."""
        config: ModelConfig = self._backend.config
        return config

    def score(self, contexts: Contexts, candidates: CandidateSets, **kwargs: Any) -> list[torch.Tensor]:
        """Score log p(candidate | context): per context a float tensor ``[k_i]``."""
        result: list[torch.Tensor] = self._backend.score(contexts, candidates, **kwargs)
        return result

    def forward(
        self, keys: Sequence[str], contexts: Contexts, candidates: CandidateSets | None = None, **kwargs: Any
    ) -> HeadOutputs:
        """Compute module outputs (and the built-in ``"score"``): one dict per context."""
        result: HeadOutputs = self._backend.forward(keys, contexts, candidates, **kwargs)
        return result

    def generate(self, contexts: Contexts, **generation_kwargs: Any) -> list[list[Generation]]:
        """Sample continuations: per context, per returned sequence, a :class:`Generation`."""
        result: list[list[Generation]] = self._backend.generate(contexts, **generation_kwargs)
        return result

    def token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], **kwargs: Any
    ) -> HeadOutputs:
        """Per-token log-probs of given completions (and module outputs per token): one dict per sample."""
        result: HeadOutputs = self._backend.token_logprobs(prompt_ids, completion_ids, **kwargs)
        return result

    def update(
        self, contexts: Contexts, candidates: CandidateSets | None = None, **kwargs: Any
    ) -> HeadOutputs:
        """Run the updater; one result dict per LLM server."""
        result: HeadOutputs = self._backend.update(contexts, candidates, **kwargs)
        return result

    def refresh_mask_policy(self) -> None:
        """Snapshot the current trainable weights as NLPO's mask policy, on every LLM server."""
        self._backend.refresh_mask_policy()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save trainable weights, module functions, updater state and mask policy to a folder (atomic)."""
        self._backend.save(os.fspath(path))

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load what :meth:`save` wrote."""
        self._backend.load(os.fspath(path))

    def close(self) -> None:
        """Release the backend (the model, or the LLM servers)."""
        self._backend.close()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
