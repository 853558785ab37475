"""The typed seams of the LLM layer: what an agent acts with and what an updater trains.

* :class:`PolicyLLM`: what an agent and an algorithm's client hold (:class:`llmgym.LLM`, local or
  distributed): forward passes, generation, token log-probs and ``update``.
* :class:`LLMBackend`: what :class:`llmgym.LLM` delegates to (:class:`~llmgym.llm.local.LocalLLM`
  or :class:`~llmgym.llm.distributed.ray_backend.RayLLM`): a :class:`PolicyLLM` that also saves,
  loads and closes.
* :class:`TrainableLLM`: what an :class:`~llmgym.llm.updater.Updater` and a policy's ``evaluate``
  run on, next to the model (:class:`~llmgym.llm.local.LocalLLM` on every LLM server): the heads,
  the trainable parameters, the frozen reference and the cross-server reductions.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from llmgym.config import ModelConfig
    from llmgym.llm.generation import Generation

__all__ = ["LLMBackend", "PolicyLLM", "TrainableLLM"]


@runtime_checkable
class PolicyLLM(Protocol):
    """An LLM an agent acts with and an algorithm updates (:class:`llmgym.LLM`)."""

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer the prompts are rendered with."""
        ...

    @property
    def module_function_keys(self) -> list[str]:
        """Names of the module functions (heads), e.g. ``["value", "policy"]``."""
        ...

    def forward(
        self,
        keys: Sequence[str],
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]] | None = None,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """Module outputs (and the built-in ``"score"``): one dict per context."""
        ...

    def generate(self, contexts: Sequence[str], **generation_kwargs: Any) -> list[list[Generation]]:
        """Sampled continuations: per context, per returned sequence, a :class:`~llmgym.llm.generation.Generation`."""
        ...

    def token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], **kwargs: Any
    ) -> list[dict[str, Any]]:
        """Per-token log-probs ``[T_i]`` of given completions (``"logprobs"``): one dict per sample."""
        ...

    def update(
        self, contexts: Sequence[str], candidates: Sequence[Sequence[str]] | None = None, **kwargs: Any
    ) -> list[dict[str, Any]]:
        """Run the updater on every LLM server; one result per server."""
        ...

    def refresh_mask_policy(self) -> None:
        """Snapshot the trainable weights as NLPO's mask policy, on every LLM server."""
        ...


@runtime_checkable
class LLMBackend(PolicyLLM, Protocol):
    """What :class:`llmgym.LLM` delegates to: a :class:`PolicyLLM` with its model, config and files."""

    @property
    def config(self) -> ModelConfig:
        """The model settings."""
        ...

    @property
    def model(self) -> Any:
        """The transformers model (in-process backends)."""
        ...

    def score(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        normalize: str = "sum",
        add_eos: bool = False,
        minibatch_size: int | None = None,
    ) -> list[Any]:
        """``[k_i]`` log p(candidate | context) per context, without gradients."""
        ...

    def trainable_parameters(self) -> list[Any]:
        """The parameters an update moves."""
        ...

    def save(self, path: str) -> Any:
        """Save the trainable state to a folder."""
        ...

    def load(self, path: str) -> None:
        """Load what :meth:`save` wrote."""
        ...

    def close(self) -> None:
        """Release the model or the LLM servers."""
        ...


@runtime_checkable
class TrainableLLM(Protocol):
    """The in-process LLM an updater trains and a policy re-scores actions on (with gradients)."""

    @property
    def module_functions(self) -> torch.nn.ModuleDict:
        """The heads by name (``"value"``, ``"policy"``...)."""
        ...

    @property
    def module_function_keys(self) -> list[str]:
        """Names of :attr:`module_functions`."""
        ...

    def forward(
        self,
        keys: Sequence[str],
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]] | None = None,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """Module outputs (and ``"score"``), with gradients when ``require_grad=True``."""
        ...

    def token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], **kwargs: Any
    ) -> list[dict[str, Any]]:
        """Per-token log-probs of given completions, with gradients when ``require_grad=True``."""
        ...

    def reference(self) -> AbstractContextManager[None]:
        """A block in which the model is the frozen reference (the LoRA adapter disabled)."""
        ...

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """Parameters that require gradients: the adapter (or the model) and the heads."""
        ...

    def sync_gradients(self, num_samples: int) -> None:
        """Average the gradients across LLM servers, weighted by ``num_samples``."""
        ...

    def all_reduce_mean(self, values: torch.Tensor, num_samples: int) -> torch.Tensor:
        """The sample-weighted mean of ``values`` over the LLM servers."""
        ...
