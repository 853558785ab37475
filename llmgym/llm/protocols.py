"""The typed seams of the LLM layer: what an agent acts with and what an updater trains.

* :class:`HeadsLLM`: what the two below share: the heads' outputs (``forward``) and per-token
  log-probs (``token_logprobs``).
* :class:`PolicyLLM`: what an agent and an algorithm's client hold (:class:`llmgym.LLM`, local or
  distributed): forward passes, generation, token log-probs and ``update``.
* :class:`LLMBackend`: what :class:`llmgym.LLM` delegates to (:class:`~llmgym.llm.local.LocalLLM`
  or :class:`~llmgym.llm.distributed.ray_backend.RayLLM`): a :class:`PolicyLLM` that also saves,
  loads and closes.
* :class:`TrainableLLM`: what an :class:`~llmgym.llm.updater.Updater` and a policy's ``evaluate``
  run on, next to the model (:class:`~llmgym.llm.local.LocalLLM` on every LLM server): the heads,
  the trainable parameters, the frozen reference and the cross-server reductions.
* :class:`GenerationEngine`: who samples for a :class:`~llmgym.llm.local.LocalLLM` (llmgym's own
  batched ``generate``, :class:`~llmgym.llm.builtin_engine.BuiltinEngine`, or vLLM,
  :class:`~llmgym.llm.vllm_engine.VLLMEngine`), chosen once when the LLM is built; it reads the
  model and the scorer from its :class:`EngineHost`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    import torch

    from llmgym.config import ModelConfig
    from llmgym.llm.generation import Generation
    from llmgym.llm.masking import MaskPolicy, TokenMask
    from llmgym.llm.tokenization import TextEncoder

__all__ = [
    "CandidateSets",
    "Contexts",
    "EngineHost",
    "GenerationEngine",
    "HeadOutputs",
    "HeadsLLM",
    "LLMBackend",
    "PolicyLLM",
    "TrainableLLM",
]

#: The prompts of one call, one text per context.
Contexts: TypeAlias = Sequence[str]
#: Per context, the candidate texts to score or run the heads on: ``candidates[i]`` goes with ``contexts[i]``.
CandidateSets: TypeAlias = Sequence[Sequence[str]]
#: Per context (or sample), one dict of outputs keyed by head (module function) name; the built-in keys are
#: ``"score"`` (candidate log-probs) and ``"logprobs"`` (per-token log-probs).
HeadOutputs: TypeAlias = list[dict[str, Any]]


@runtime_checkable
class HeadsLLM(Protocol):
    """What :class:`PolicyLLM` and :class:`TrainableLLM` share: the heads' outputs and per-token log-probs."""

    @property
    def module_function_keys(self) -> list[str]:
        """Names of the module functions (heads), e.g. ``["value", "policy"]``."""
        ...

    def forward(
        self, keys: Sequence[str], contexts: Contexts, candidates: CandidateSets | None = None, **kwargs: Any
    ) -> HeadOutputs:
        """Module outputs (and the built-in ``"score"``): one dict per context.

        In process, with gradients when ``require_grad=True``.
        """
        ...

    def token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], **kwargs: Any
    ) -> HeadOutputs:
        """Per-token log-probs ``[T_i]`` of given completions (``"logprobs"``): one dict per sample.

        In process, with gradients when ``require_grad=True``.
        """
        ...


@runtime_checkable
class PolicyLLM(HeadsLLM, Protocol):
    """An LLM an agent acts with and an algorithm updates (:class:`llmgym.LLM`)."""

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer the prompts are rendered with."""
        ...

    def generate(self, contexts: Contexts, **generation_kwargs: Any) -> list[list[Generation]]:
        """Sampled continuations: per context, per returned sequence, a :class:`~llmgym.llm.generation.Generation`."""
        ...

    def update(
        self, contexts: Contexts, candidates: CandidateSets | None = None, **kwargs: Any
    ) -> HeadOutputs:
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
        contexts: Contexts,
        candidates: CandidateSets,
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
class TrainableLLM(HeadsLLM, Protocol):
    """The in-process LLM an updater trains and a policy re-scores actions on (with gradients)."""

    @property
    def module_functions(self) -> torch.nn.ModuleDict:
        """The heads by name (``"value"``, ``"policy"``...)."""
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


class EngineHost(Protocol):
    """What a :class:`GenerationEngine` reads of the LLM it samples for (a :class:`~llmgym.llm.local.LocalLLM`).

    Read at every call, not kept: the model is another one inside ``LocalLLM.reference()``.
    """

    config: ModelConfig
    model: Any
    tokenizer: Any
    encoder: TextEncoder
    is_seq2seq: bool
    pad_token_id: int
    mask_policy: MaskPolicy
    compute_dtype: torch.dtype
    device: torch.device
    window: int | None

    def special_ids(self) -> list[int]:
        """Token ids NLPO's mask always keeps (the tokenizer's special tokens)."""
        ...

    def autocast(self) -> AbstractContextManager[None]:
        """The autocast forward passes of this model run under."""
        ...

    def token_logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], **kwargs: Any
    ) -> HeadOutputs:
        """Per-token log-probs ``[T_i]`` of given completions (``"logprobs"``), llmgym's scorer."""
        ...


class GenerationEngine(Protocol):
    """Who samples a :class:`~llmgym.llm.local.LocalLLM`'s generations, after every update from its current weights.

    The LLM calls :meth:`release` before its trained weights change (an update, a load) and
    :meth:`sync_weights` before every :meth:`generate`.
    """

    def generate(
        self, contexts: list[str], generation_kwargs: dict[str, Any], mask: TokenMask
    ) -> list[list[Generation]]:
        """Sample continuations of ``B`` validated contexts.

        Args:
            contexts: The prompts (checked, not empty).
            generation_kwargs: Transformers-style sampling settings (``max_new_tokens``,
                ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``num_return_sequences``...).
            mask: NLPO's mask (each token restricted to the mask policy's top-p set), or an inactive one.

        Returns:
            Per context, ``num_return_sequences`` generations.
        """
        ...

    def sync_weights(self, version: int) -> None:
        """Sample from the host's trained weights of ``version`` from now on (nothing to do when already)."""
        ...

    def release(self) -> None:
        """The trained weights are about to change: free what the engine can until the next :meth:`sync_weights`."""
        ...

    def close(self) -> None:
        """Free everything the engine holds (memory, files); safe to call twice."""
        ...
