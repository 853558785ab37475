"""Lamorel's API on llmgym: run Lamorel scripts after changing only the import.

Replace ``from lamorel import Caller, lamorel_init, BaseUpdater, BaseModuleFunction`` with
``from llmgym.compat.lamorel import ...``; the rest of a script written for Lamorel
(https://github.com/flowersteam/lamorel) runs unchanged::

    from llmgym.compat.lamorel import Caller, lamorel_init
    lamorel_init()
    lm_server = Caller(config_args.lamorel_args, custom_updater=MyUpdater(),
                       custom_module_functions={"value": ValueHeadModuleFn("causal")})
    lm_server.score(contexts=["Goal: go to the red ball. Action:"], candidates=[[" turn left", " go forward"]])
    lm_server.custom_module_fns(["value"], contexts=[...], candidates=[[...]])  # [{"value": tensor}]
    lm_server.update(contexts, candidates, labels=...)                         # one result per LLM server
    lm_server.close()

How Lamorel's conventions map onto llmgym:

- The LLM is an :class:`llmgym.LLM` built in this process from ``lamorel_args.llm_args``
  (see :mod:`llmgym.compat.lamorel_config`); Lamorel's launcher, ``accelerate_args`` and process
  groups are not needed. Settings that need several processes raise a
  :class:`~llmgym.errors.ConfigError` pointing to ``llmgym.DistributedConfig`` / ``llmgym launch``.
- ``score`` and the ``"__score"`` key return llmgym's log p(candidate | context) (summed token
  log-probs, computed with a shared-prefix forward pass), as recent Lamorel versions do.
- Custom module functions see Lamorel's inputs: per context, one batch of rows
  ``context + candidate`` (candidates tokenized without special tokens, right-padded with id 0;
  decoder rows ``[0] + candidate`` for seq2seq), ``forward_outputs`` the transformers output with
  ``"hidden_states"`` of every layer and ``"logits"`` (``"encoder_last_hidden_state"`` and
  ``"decoder_hidden_states"`` for seq2seq), ``minibatch`` the model inputs as a dict of tensors and
  ``tokenized_contexts`` the tokenizer's ``{"input_ids", "attention_mask"}`` of the context. Their
  outputs are concatenated per context over the minibatches of its candidates.
- An updater's ``self._llm_module`` is a module whose ``_LLM_model`` is the (PEFT-wrapped)
  transformers model, whose ``module._module_functions`` are the custom module functions, and
  whose call ``self._llm_module(keys, contexts=..., candidates=..., require_grad=True)`` runs
  them with gradients; it runs behind ``llmgym.LLM.update`` (an :class:`llmgym.Updater` adapter),
  so ``update`` returns a one-element list.
- ``generate`` returns Lamorel's dicts (``text``, ``tokens`` and probabilities or log-probs).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import torch

from llmgym.compat.lamorel_config import LamorelSettings, load_lamorel_config, parse_lamorel_args
from llmgym.errors import ConfigError, InputError
from llmgym.llm.updater import Updater

__all__ = [
    "BaseModelInitializer",
    "BaseModuleFunction",
    "BaseUpdater",
    "Caller",
    "lamorel_init",
    "load_lamorel_config",
]

lamorel_logger = logging.getLogger("lamorel_logger")

SCORE_KEY = "__score"


def lamorel_init() -> None:
    """Lamorel's initialisation call, kept so scripts run unchanged.

    Lamorel sets up its ``torch.distributed`` process groups here; the compatibility layer runs
    the LLM in the calling process, so the only thing to set up is the ``lamorel_logger`` logger
    (a stream handler, once), whose level :class:`Caller` sets from ``lamorel_args.log_level``.
    """
    if not lamorel_logger.handlers:
        lamorel_logger.addHandler(logging.StreamHandler())


class BaseModuleFunction(torch.nn.Module, abc.ABC):
    """A custom operation on the LLM's outputs (Lamorel's ``BaseModuleFunction``).

    Before :meth:`initialize` runs, ``self.llm_config`` (the transformers config) and
    ``self.device`` (the model's device) are set; the module is moved to that device afterwards.

    Attributes:
        llm_config: The transformers config of the LLM.
        device: The device of the LLM.
    """

    llm_config: Any
    device: torch.device

    @abc.abstractmethod
    def initialize(self) -> None:
        """Build the module's layers (``self.llm_config`` and ``self.device`` are set)."""

    @abc.abstractmethod
    def forward(self, forward_outputs: Any, minibatch: Mapping[str, Any], tokenized_contexts: Mapping[str, Any], **kwargs: Any) -> Any:
        """Compute the module's output for one minibatch of one context's candidates.

        Args:
            forward_outputs: The transformers output (``"hidden_states"``, ``"logits"``, ...).
            minibatch: The model inputs (``"input_ids"``, ``"attention_mask"``, ... as tensors).
            tokenized_contexts: ``{"input_ids": [...], "attention_mask": [...]}`` of the context.
            **kwargs: Extra keyword arguments of the call.

        Returns:
            A tensor (one row per candidate of the minibatch by convention).
        """


class BaseUpdater(abc.ABC):
    """A training step (Lamorel's ``BaseUpdater``); ``self._llm_module`` is set by :class:`Caller`.

    Attributes:
        _llm_module: The module running the LLM and the custom module functions (see the
            module docstring); ``None`` until the updater is given to a :class:`Caller`.
    """

    def __init__(self) -> None:
        self._llm_module: Any = None

    def set_llm_module(self, llm_module: Any) -> None:
        """Give the updater the module it trains."""
        self._llm_module = llm_module

    @abc.abstractmethod
    def perform_update(self, contexts: Sequence[str], candidates: Any, _current_batch_ids: Sequence[int], **kwargs: Any) -> Any:
        """Run one update.

        Args:
            contexts: The contexts of the batch.
            candidates: Their candidates.
            _current_batch_ids: Index of each context in the caller's batch (all of them here).
            **kwargs: Everything else given to :meth:`Caller.update`.

        Returns:
            Anything (by convention a dict of metrics).
        """


class BaseModelInitializer(abc.ABC):
    """Modifies the model before training (Lamorel's ``BaseModelInitializer``), e.g. freezes weights."""

    @abc.abstractmethod
    def initialize_model(self, model: torch.nn.Module) -> Any:
        """Modify ``model`` in place; ``model._modules['_LLM_model']`` is the transformers model."""


def _as_candidate_groups(contexts: Sequence[str], candidates: Any) -> list[list[str]] | None:
    """Normalise Lamorel's candidates: ``None``, one list per context, or one flat list for one context."""
    if candidates is None:
        return None
    if isinstance(candidates, str):
        raise InputError(f"candidates={candidates!r} is a string; give one list of strings per context.")
    groups = list(candidates)
    if len(contexts) == 1 and groups and all(isinstance(c, str) for c in groups):
        return [list(groups)]
    if len(groups) != len(contexts) or not all(isinstance(g, (list, tuple)) for g in groups):
        raise InputError(
            f"candidates has {len(groups)} entries for {len(contexts)} contexts; give one list of candidate "
            "strings per context, e.g. candidates=[['go forward', 'turn left']] for one context."
        )
    return [list(g) for g in groups]


class LamorelLLMModule(torch.nn.Module):
    """The LLM and the custom module functions as Lamorel's updaters see them (``self._llm_module``).

    Args:
        llm: The :class:`llmgym.LLM` (in-process backend).
        module_functions: The custom module functions by key.
        settings: The parsed ``lamorel_args``.
    """

    def __init__(self, llm: Any, module_functions: Mapping[str, BaseModuleFunction], settings: LamorelSettings) -> None:
        super().__init__()
        self._llm = llm
        self._settings = settings
        self._LLM_model = llm.model
        self._LLM_tokenizer = llm.tokenizer
        self._module_functions = torch.nn.ModuleDict(dict(module_functions))

    @property
    def module(self) -> LamorelLLMModule:
        """Return self (Lamorel wraps it in DistributedDataParallel, whose ``.module`` is the model)."""
        return self

    @property
    def device(self) -> torch.device:
        """The model's device."""
        return next(self._LLM_model.parameters()).device

    def _check_keys(self, keys: Sequence[str]) -> list[str]:
        if isinstance(keys, str):
            raise InputError(f"module_function_keys={keys!r} is a string; write [{keys!r}].")
        known = [SCORE_KEY, *self._module_functions]
        for key in keys:
            if key not in known:
                raise InputError(f"module_function_keys contains {key!r}; known keys: {known}.")
        return list(keys)

    def _model_inputs(self, context: Mapping[str, list[int]], candidates: Sequence[list[int]]) -> dict[str, torch.Tensor]:
        device = self.device
        if self._settings.model_type == "causal":
            width = max(len(context["input_ids"]) + len(c) for c in candidates)
            rows = [context["input_ids"] + c for c in candidates]
            return {
                "input_ids": torch.tensor([r + [0] * (width - len(r)) for r in rows], device=device),
                "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device),
            }
        width = max(len(c) for c in candidates) + 1
        decoder = [[0, *c] for c in candidates]
        return {
            "input_ids": torch.tensor([context["input_ids"]] * len(candidates), device=device),
            "attention_mask": torch.tensor([context["attention_mask"]] * len(candidates), device=device),
            "decoder_input_ids": torch.tensor([d + [0] * (width - len(d)) for d in decoder], device=device),
            "decoder_attention_mask": torch.tensor([[1] * len(d) + [0] * (width - len(d)) for d in decoder], device=device),
        }

    def forward(
        self,
        module_function_keys: Sequence[str],
        contexts: Sequence[str],
        candidates: Any = None,
        require_grad: bool = False,
        minibatch_size: int | None = None,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """Run ``"__score"`` and custom module functions on each context (Lamorel's ``forward``).

        Args:
            module_function_keys: Keys to compute (``"__score"``: log-probs of the candidates).
            contexts: Context strings.
            candidates: Per context a list of candidates (``None``: one empty candidate each).
            require_grad: Keep the autograd graph.
            minibatch_size: Rows per forward pass of custom module functions (default:
                ``llm_args.minibatch_size``).
            **kwargs: Passed to every custom module function.

        Returns:
            Per context a dict with one entry per key.
        """
        keys = self._check_keys(module_function_keys)
        contexts = list(contexts)
        groups = _as_candidate_groups(contexts, candidates)
        results: list[dict[str, Any]] = [{} for _ in contexts]
        if SCORE_KEY in keys:
            if groups is None:
                raise InputError(f"key {SCORE_KEY!r} needs candidates; pass candidates=[[...], ...].")
            scores = self._llm.forward(["score"], contexts, groups, require_grad=require_grad)
            for result, output in zip(results, scores):
                result[SCORE_KEY] = output["score"]
        custom = [k for k in keys if k != SCORE_KEY]
        if custom:
            size = minibatch_size if minibatch_size is not None else self._settings.minibatch_size
            if size <= 0:
                raise InputError(f"minibatch_size={size} must be a positive integer.")
            tokenizer = self._LLM_tokenizer
            with nullcontext() if require_grad else torch.no_grad():
                for index, context in enumerate(contexts):
                    tokenized = dict(tokenizer(context))
                    cands = groups[index] if groups is not None else [""]
                    cand_ids = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in cands]
                    parts: dict[str, list[Any]] = {k: [] for k in custom}
                    for start in range(0, len(cand_ids), size):
                        batch = self._model_inputs(tokenized, cand_ids[start : start + size])
                        outputs = self._LLM_model(**batch, output_hidden_states=True, use_cache=False)
                        for key in custom:
                            parts[key].append(self._module_functions[key](outputs, minibatch=batch, tokenized_contexts=tokenized, **kwargs))
                    for key, values in parts.items():
                        results[index][key] = torch.cat(values) if len(values) > 1 else values[0]
        if torch.cuda.is_available():
            if self._settings.synchronize_gpus_after_scoring:
                torch.cuda.synchronize()
            if self._settings.empty_cuda_cache_after_scoring:
                torch.cuda.empty_cache()
        return results


class _UpdaterAdapter(Updater):
    """Runs a Lamorel :class:`BaseUpdater` as an :class:`llmgym.Updater` (behind ``LLM.update``)."""

    def __init__(self, updater: BaseUpdater) -> None:
        self.lamorel_updater = updater

    def perform_update(
        self, contexts: Sequence[str], candidates: Sequence[Sequence[str]] | None, _current_batch_ids: Sequence[int], **kwargs: Any
    ) -> dict[str, Any]:
        """Call the Lamorel updater; a non-dict result is returned under ``"result"``."""
        result = self.lamorel_updater.perform_update(
            list(contexts), [list(c) for c in candidates] if candidates is not None else None, list(_current_batch_ids), **kwargs
        )
        return dict(result) if isinstance(result, Mapping) else {"result": result}

    def state_dict(self) -> dict[str, Any]:
        """The Lamorel updater's ``optimizer`` state, when it built one."""
        optimizer = getattr(self.lamorel_updater, "optimizer", None)
        return {"optimizer": optimizer.state_dict()} if isinstance(optimizer, torch.optim.Optimizer) else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the Lamorel updater's optimizer state."""
        optimizer = getattr(self.lamorel_updater, "optimizer", None)
        if isinstance(optimizer, torch.optim.Optimizer) and "optimizer" in state:
            optimizer.load_state_dict(state["optimizer"])


class Caller:
    """Lamorel's ``Caller``: the RL script's handle on the LLM, here run in-process by llmgym.

    Args:
        config: Lamorel's ``lamorel_args`` section (a ``DictConfig`` from Hydra or
            :func:`load_lamorel_config`, or a plain dict).
        custom_updater: A :class:`BaseUpdater` run by :meth:`update`.
        custom_module_functions: :class:`BaseModuleFunction` instances by key (``"__score"`` is reserved).
        custom_model_initializer: A :class:`BaseModelInitializer` applied once everything is built.

    Raises:
        ConfigError: On an unsupported ``lamorel_args`` key or value, a reserved or non-module
            function, or ``llm_args.model_type`` disagreeing with the loaded model.
    """

    def __init__(
        self,
        config: Any,
        custom_updater: BaseUpdater | None = None,
        custom_module_functions: Mapping[str, BaseModuleFunction] | None = None,
        custom_model_initializer: BaseModelInitializer | None = None,
    ) -> None:
        from llmgym.llm.client import LLM

        settings = parse_lamorel_args(config)
        lamorel_logger.setLevel(settings.log_level)
        functions = dict(custom_module_functions or {})
        for key, fn in functions.items():
            if key == SCORE_KEY or not isinstance(fn, BaseModuleFunction):
                raise ConfigError(
                    f"custom_module_functions[{key!r}]={type(fn).__name__} is not allowed: keys must differ from "
                    f"{SCORE_KEY!r} (built in) and values must subclass llmgym.compat.lamorel.BaseModuleFunction."
                )
        if custom_updater is not None and not isinstance(custom_updater, BaseUpdater):
            raise ConfigError(
                f"custom_updater={type(custom_updater).__name__} must subclass llmgym.compat.lamorel.BaseUpdater."
            )
        self._llm = LLM(settings.model, updater=_UpdaterAdapter(custom_updater) if custom_updater is not None else None)
        is_seq2seq = bool(getattr(self._llm.model.config, "is_encoder_decoder", False))
        if is_seq2seq != (settings.model_type == "seq2seq"):
            self._llm.close()
            raise ConfigError(
                f"lamorel_args.llm_args.model_type={settings.model_type!r} but {settings.model.name!r} is a "
                f"{'seq2seq' if is_seq2seq else 'causal'} model; set model_type to match the model."
            )
        device = next(self._llm.model.parameters()).device
        for fn in functions.values():
            fn.llm_config = self._llm.model.config
            fn.device = device
            fn.initialize()
            fn.to(device)
        self._llm_module = LamorelLLMModule(self._llm, functions, settings)
        self.updater_args = settings.updater_args
        if custom_model_initializer is not None:
            custom_model_initializer.initialize_model(self._llm_module)
        if custom_updater is not None:
            custom_updater.set_llm_module(self._llm_module)
        self._updater = custom_updater

    @property
    def llm(self) -> Any:
        """The underlying :class:`llmgym.LLM` (llmgym's native API)."""
        return self._llm

    def score(
        self, contexts: Sequence[str], candidates: Any, additional_module_function_keys: Sequence[str] = (), **kwargs: Any
    ) -> list[Any]:
        """Log p(candidate | context) per context (a tensor ``[k]``), or dicts with extra modules.

        Args:
            contexts: Context strings.
            candidates: One list of candidates per context (a flat list for a single context).
            additional_module_function_keys: Custom modules to compute too; then each context gets
                a dict with ``"__score"`` and one entry per key.
            **kwargs: Passed to the custom module functions (and ``minibatch_size``).

        Returns:
            Per context, a float tensor ``[k]`` or a dict.
        """
        groups = _as_candidate_groups(list(contexts), candidates)
        if groups is None:
            raise InputError("score() needs candidates: one list of candidate strings per context.")
        if not additional_module_function_keys:
            return list(self._llm.score(list(contexts), groups))
        return self._llm_module([SCORE_KEY, *additional_module_function_keys], contexts, groups, **kwargs)

    def custom_module_fns(self, module_function_keys: Sequence[str], contexts: Sequence[str], **kwargs: Any) -> list[dict[str, Any]]:
        """Run custom module functions (and ``"__score"``) without gradients.

        Args:
            module_function_keys: Keys of the modules to run.
            contexts: Context strings.
            **kwargs: ``candidates``, ``minibatch_size`` and arguments for the modules.

        Returns:
            Per context a dict keyed by module name.
        """
        kwargs.pop("require_grad", None)
        result: list[dict[str, Any]] = self._llm_module(module_function_keys, contexts, **kwargs)
        return result

    def generate(self, contexts: Sequence[str], return_logprobs: bool = False, **kwargs: Any) -> list[list[dict[str, Any]]]:
        """Generate continuations (any transformers generation argument, e.g. ``max_length``).

        Args:
            contexts: Prompts.
            return_logprobs: Return ``tokens_logprob``/``text_logprob`` instead of
                ``tokens_probability``/``text_probability``.
            **kwargs: Generation arguments.

        Returns:
            Per context, per sequence: ``{"text", "tokens", ...}``.
        """
        out: list[list[dict[str, Any]]] = []
        for generations in self._llm.generate(list(contexts), **kwargs):
            group = []
            for gen in generations:
                item: dict[str, Any] = {"text": gen.text, "tokens": list(gen.token_ids)}
                if return_logprobs:
                    item["tokens_logprob"] = gen.logprobs
                    item["text_logprob"] = gen.logprobs.sum()
                else:
                    item["tokens_probability"] = gen.logprobs.exp()
                    item["text_probability"] = gen.logprobs.sum().exp()
                group.append(item)
            out.append(group)
        return out

    def update(self, contexts: Sequence[str], candidates: Any, **kwargs: Any) -> list[Any]:
        """Run the custom updater on the batch; one result per LLM server (one here).

        Raises:
            ConfigError: When the Caller has no ``custom_updater``.
        """
        if self._updater is None:
            raise ConfigError("Caller.update needs an updater; build the Caller with custom_updater=MyUpdater().")
        groups = _as_candidate_groups(list(contexts), candidates)
        results: list[Any] = self._llm.update(list(contexts), groups, **kwargs)
        return [r["result"] if set(r) == {"result"} else r for r in results]

    def close(self) -> None:
        """Release the LLM."""
        self._llm.close()
