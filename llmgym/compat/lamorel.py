"""Lamorel's API on llmgym: run Lamorel scripts after changing only the import.

Replace ``from lamorel import Caller, lamorel_init, BaseUpdater, BaseModuleFunction`` with
``from llmgym.compat.lamorel import ...``; the rest of a script written for Lamorel
(https://github.com/flowersteam/lamorel) runs unchanged::

    from llmgym.compat.lamorel import Caller, lamorel_init
    lamorel_init()
    lm_server = Caller(config_args.lamorel_args, custom_updater=MyUpdater(),
                       custom_module_functions={"value": ValueHeadModuleFn("causal", True)})
    lm_server.score(contexts=["Goal: go to the red ball. Action:"], candidates=[[" turn left", " go forward"]])
    lm_server.custom_module_fns(["value"], contexts=[...], candidates=[[...]])  # [{"value": tensor}]
    lm_server.update(contexts, candidates, labels=...)                         # one result per LLM server
    lm_server.close()

How Lamorel's conventions map onto llmgym:

- With one LLM server (``n_llm_processes: 1``, one machine), the LLM is an :class:`llmgym.LLM`
  built in this process from ``lamorel_args.llm_args`` (see :mod:`llmgym.compat.lamorel_config`);
  Lamorel's launcher, ``accelerate_args`` and process groups are not needed.
- With ``n_llm_processes: N > 1`` (or ``num_machines > 1``, or ``model_parallelism_size > 1``) the
  servers are Ray actors (:mod:`llmgym.compat.lamorel_servers`, docs/distributed.md): the script
  runs once and is the driver; each call's batch is split in contiguous chunks over the servers as
  Lamorel splits it, and each server's updater trains a ``DistributedDataParallel`` module, so its
  gradients are averaged over the servers as in Lamorel.
- ``score`` and the ``"__score"`` key return llmgym's log p(candidate | context) (summed token
  log-probs, computed with a shared-prefix forward pass), as recent Lamorel versions do.
- Custom module functions see what Lamorel's ``HF_LLM.forward`` gives them (Lamorel since its
  2023-11 decoder-only rework), laid out by :func:`lamorel_rows`: contexts and candidates are
  tokenized without special tokens; a causal model's rows are the context less its last token,
  left-padded with id 0 to the longest, then that last token and the candidate, right-padded
  with id 0. The rows of all contexts are cut into minibatches of ``minibatch_size`` rows. With
  ``llm_args.pre_encode_inputs: true`` each context is encoded once and ``minibatch["input_ids"]``
  holds only the rows' last context token and candidate (the context is in
  ``minibatch["past_key_values"]``), so position 0 of ``forward_outputs["hidden_states"][-1]`` is
  the last context token; with ``false`` the rows hold the whole padded context and that token is
  at ``len(tokenized_contexts[0]["input_ids"])``. ``tokenized_contexts`` is the list of the rows'
  padded context parts (``{"input_ids", "attention_mask"}`` each). Seq2seq rows: the context
  right-padded, decoder ``[0] + candidate``. A module returns one row per minibatch row; per
  context the caller gets its rows.
- An updater's ``self._llm_module`` is a module whose ``_LLM_model`` is the (PEFT-wrapped)
  transformers model, whose ``module._module_functions`` are the custom module functions, and
  whose call ``self._llm_module(keys, contexts=..., candidates=..., require_grad=True)`` runs
  them with gradients; it runs behind ``llmgym.LLM.update`` (an :class:`llmgym.Updater` adapter),
  so ``update`` returns one result per LLM server.
- ``generate`` returns Lamorel's dicts (``text``, ``tokens`` and probabilities or log-probs).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from llmgym.compat.lamorel_config import LamorelSettings, load_lamorel_config, parse_lamorel_args
from llmgym.errors import BackendError, ConfigError, InputError
from llmgym.llm.protocols import CandidateSets, Contexts, HeadOutputs
from llmgym.llm.updater import Updater

__all__ = [
    "BaseModelInitializer",
    "BaseModuleFunction",
    "BaseUpdater",
    "Caller",
    "LamorelLLMModule",
    "LamorelRows",
    "UpdaterAdapter",
    "initialize_module_functions",
    "lamorel_init",
    "lamorel_rows",
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
    def forward(
        self,
        forward_outputs: Any,
        minibatch: Mapping[str, Any],
        tokenized_contexts: Mapping[str, Any],
        **kwargs: Any,
    ) -> Any:
        """Compute the module's output for one minibatch of one context's candidates.

        Args:
            forward_outputs: The transformers output of the minibatch (``"hidden_states"``,
                ``"logits"``, ...).
            minibatch: The model inputs (``"input_ids"``, ``"attention_mask"``, ... as tensors;
                see :class:`LamorelLLMModule`).
            tokenized_contexts: Per row, ``{"input_ids": [...], "attention_mask": [...]}`` of its
                padded context part (see :func:`lamorel_rows`).
            **kwargs: Extra keyword arguments of the call.

        Returns:
            A tensor with one row per row of the minibatch.
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
    def perform_update(
        self, contexts: Contexts, candidates: Any, _current_batch_ids: Sequence[int], **kwargs: Any
    ) -> Any:
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


def _as_candidate_groups(contexts: Contexts, candidates: Any) -> list[list[str]] | None:
    """Normalise Lamorel's candidates: ``None`` (or empty), one list per context, or one flat list for one context."""
    if candidates is None or len(candidates) == 0:
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


#: Lamorel pads every row with token id 0, whatever the tokenizer's pad token (``hf_llm.py``).
PAD_TOKEN = 0


def _tokenize(tokenizer: Any, text: str) -> dict[str, list[int]]:
    """Lamorel's tokenization of a context or candidate: no special tokens, no token type ids."""
    encoded = tokenizer(text, return_token_type_ids=False, add_special_tokens=False)
    return {"input_ids": list(encoded["input_ids"]), "attention_mask": list(encoded["attention_mask"])}


def _pad(sequence: Mapping[str, list[int]], size: int, right: bool = True) -> dict[str, list[int]]:
    """``sequence`` padded to ``size`` with :data:`PAD_TOKEN` (attention mask 0), on the right or the left."""
    missing = size - len(sequence["input_ids"])
    ids, mask = [PAD_TOKEN] * missing, [0] * missing
    if right:
        return {"input_ids": sequence["input_ids"] + ids, "attention_mask": sequence["attention_mask"] + mask}
    return {"input_ids": ids + sequence["input_ids"], "attention_mask": mask + sequence["attention_mask"]}


@dataclass
class LamorelRows:
    """The rows of one Lamorel ``forward`` call before minibatching (step 1 of ``HF_LLM.forward``).

    Attributes:
        inputs: Per row, its context part, which module functions get as ``tokenized_contexts``:
            the context less its last token, left-padded to the longest such (causal), or the
            context right-padded to the longest (seq2seq); the rows of a context share one dict.
        outputs: Per row, its candidate part, unpadded: the context's last token then the
            candidate (causal), or the candidate (seq2seq).
        owners: The context index of each row.
        tables: Per context, the indices of its rows.
    """

    inputs: list[dict[str, list[int]]]
    outputs: list[dict[str, list[int]]]
    owners: list[int]
    tables: list[list[int]]


def lamorel_rows(
    tokenizer: Any, contexts: Contexts, candidates: CandidateSets, model_type: str
) -> LamorelRows:
    """Lay contexts and candidates out in rows exactly as Lamorel's ``HF_LLM.forward`` does.

    Args:
        tokenizer: The model's tokenizer.
        contexts: Context strings.
        candidates: One non-empty list of candidate strings per context.
        model_type: ``"causal"`` or ``"seq2seq"``.

    Returns:
        The rows (see :class:`LamorelRows`).

    Raises:
        InputError: When a context of a causal model tokenizes to no token (Lamorel moves the last
            context token into every candidate row).
    """
    tokenized = [_tokenize(tokenizer, context) for context in contexts]
    longest = max(len(t["input_ids"]) for t in tokenized)
    rows = LamorelRows([], [], [], [])
    for index, (context, group) in enumerate(zip(tokenized, candidates)):
        rows.tables.append(list(range(len(rows.owners), len(rows.owners) + len(group))))
        outputs = [_tokenize(tokenizer, candidate) for candidate in group]
        if model_type == "causal":
            if not context["input_ids"]:
                raise InputError(
                    f"contexts[{index}]={contexts[index]!r} tokenizes to no token; Lamorel's causal rows start with the "
                    "context's last token, so give a non-empty context."
                )
            padded = _pad({k: v[:-1] for k, v in context.items()}, longest - 1, right=False)
            last = {k: v[-1:] for k, v in context.items()}
            outputs = [{k: last[k] + o[k] for k in last} for o in outputs]
        else:
            padded = _pad(context, longest)
        rows.inputs.extend([padded] * len(outputs))
        rows.outputs.extend(outputs)
        rows.owners.extend([index] * len(outputs))
    return rows


def _positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids of (left-)padded rows: each real token's index among the real tokens of its row."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


class LamorelLLMModule(torch.nn.Module):
    """The LLM and the custom module functions as Lamorel's updaters see them (``self._llm_module``).

    Custom module functions get the structures of Lamorel's ``HF_LLM.forward`` (see
    :func:`lamorel_rows`): the rows of all contexts' candidates are cut into minibatches of
    ``minibatch_size`` rows; ``minibatch`` holds the tensors the model ran on, ``input_ids`` and
    ``attention_mask`` (causal; with ``pre_encode_inputs`` the ``input_ids`` hold the candidate
    part only and ``past_key_values`` the context's, per layer a ``(keys, values)`` pair), or
    ``decoder_input_ids``, ``decoder_attention_mask``, ``attention_mask`` and ``input_ids`` (or,
    pre-encoded, ``encoder_outputs``) for seq2seq, and ``output_hidden_states``;
    ``forward_outputs`` is the transformers output of those rows (``logits``, ``hidden_states``...)
    and ``tokenized_contexts`` the rows' context parts (a list of dicts). The model also gets
    position ids counting only real tokens, so left padding does not move positions.

    Args:
        llm: The in-process LLM (an :class:`llmgym.LLM`, or the `LocalLLM` of a Ray server).
        module_functions: The custom module functions by key.
        settings: The parsed ``lamorel_args``.
    """

    def __init__(
        self, llm: Any, module_functions: Mapping[str, BaseModuleFunction], settings: LamorelSettings
    ) -> None:
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

    def _tensor(self, values: Any) -> torch.Tensor:
        return torch.tensor(values, device=self.device)

    def _context_cache(
        self, contexts: Sequence[Mapping[str, list[int]]], size: int
    ) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """Per layer ``(keys, values)`` ``[n_contexts, heads, L, d]`` of the contexts' parts (causal pre-encoding).

        Raises:
            InputError: When the model's cache is not a plain per-layer key/value cache.
        """
        if not contexts[0]["input_ids"]:
            return None
        chunks: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
        for start in range(0, len(contexts), size):
            part = contexts[start : start + size]
            mask = self._tensor([c["attention_mask"] for c in part])
            out = self._LLM_model(
                input_ids=self._tensor([c["input_ids"] for c in part]),
                attention_mask=mask,
                position_ids=_positions(mask),
                use_cache=True,
            )
            cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            layers = getattr(cache, "layers", None)
            if not layers or any(getattr(layer, "keys", None) is None for layer in layers):
                raise InputError(
                    f"pre_encode_inputs: true needs a model with a plain key/value cache and {type(self._LLM_model).__name__} "
                    "has another kind; set lamorel_args.llm_args.pre_encode_inputs: false."
                )
            chunks.append([(layer.keys, layer.values) for layer in layers])
        return [
            (torch.cat([c[i][0] for c in chunks]), torch.cat([c[i][1] for c in chunks]))
            for i in range(len(chunks[0]))
        ]

    def _encoder_states(self, contexts: Sequence[Mapping[str, list[int]]], size: int) -> torch.Tensor:
        """Encoder hidden states ``[n_contexts, L, H]`` of the contexts (seq2seq pre-encoding)."""
        encoder = self._LLM_model.get_encoder()
        parts = [
            encoder(
                input_ids=self._tensor([c["input_ids"] for c in contexts[start : start + size]]),
                attention_mask=self._tensor([c["attention_mask"] for c in contexts[start : start + size]]),
            ).last_hidden_state
            for start in range(0, len(contexts), size)
        ]
        return torch.cat(parts)

    def _causal_minibatch(
        self, rows: LamorelRows, indices: Sequence[int], cache: list[tuple[torch.Tensor, torch.Tensor]] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(minibatch, model inputs)`` of some rows of a causal model (Lamorel's decoder minibatch)."""
        from transformers import DynamicCache

        from llmgym.llm.adapters import cache_kwarg

        width = max(len(rows.outputs[i]["input_ids"]) for i in indices)
        outputs = [_pad(rows.outputs[i], width) for i in indices]
        inputs = [rows.inputs[i] for i in indices]
        ids = [
            o["input_ids"] if cache is not None else c["input_ids"] + o["input_ids"]
            for c, o in zip(inputs, outputs)
        ]
        mask = self._tensor([c["attention_mask"] + o["attention_mask"] for c, o in zip(inputs, outputs)])
        minibatch: dict[str, Any] = {"input_ids": self._tensor(ids), "attention_mask": mask}
        model_inputs = dict(
            minibatch, position_ids=_positions(mask)[:, -len(ids[0]) :], use_cache=cache is not None
        )
        if cache is not None:
            owners = self._tensor([rows.owners[i] for i in indices])
            minibatch["past_key_values"] = tuple((keys[owners], values[owners]) for keys, values in cache)
            past = DynamicCache()
            for layer, (keys, values) in enumerate(minibatch["past_key_values"]):
                past.update(keys, values, layer)
            model_inputs[cache_kwarg(self._LLM_model)] = past
        return minibatch, model_inputs

    def _seq2seq_minibatch(
        self, rows: LamorelRows, indices: Sequence[int], states: torch.Tensor | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(minibatch, model inputs)`` of some rows of a seq2seq model (Lamorel's encoder-decoder minibatch)."""
        from transformers.modeling_outputs import BaseModelOutput

        width = max(len(rows.outputs[i]["input_ids"]) for i in indices) + 1
        decoder = [
            _pad(
                {k: [v] + rows.outputs[i][k] for k, v in (("input_ids", PAD_TOKEN), ("attention_mask", 1))},
                width,
            )
            for i in indices
        ]
        minibatch: dict[str, Any] = {
            "decoder_input_ids": self._tensor([d["input_ids"] for d in decoder]),
            "decoder_attention_mask": self._tensor([d["attention_mask"] for d in decoder]),
            "attention_mask": self._tensor([rows.inputs[i]["attention_mask"] for i in indices]),
        }
        model_inputs = dict(minibatch, use_cache=False)
        if states is None:
            minibatch["input_ids"] = model_inputs["input_ids"] = self._tensor(
                [rows.inputs[i]["input_ids"] for i in indices]
            )
        else:
            hidden = states[self._tensor([rows.owners[i] for i in indices])]
            minibatch["encoder_outputs"] = (hidden,)
            model_inputs["encoder_outputs"] = BaseModelOutput(last_hidden_state=hidden)
        return minibatch, model_inputs

    def _custom_outputs(
        self,
        keys: Sequence[str],
        contexts: Contexts,
        groups: CandidateSets,
        size: int,
        kwargs: Mapping[str, Any],
    ) -> HeadOutputs:
        """Run custom module functions on Lamorel's minibatches; per context, its rows of each output."""
        causal = self._settings.model_type == "causal"
        rows = lamorel_rows(self._LLM_tokenizer, contexts, groups, self._settings.model_type)
        firsts = [rows.inputs[table[0]] for table in rows.tables]
        states: Any = None
        if self._settings.pre_encode_inputs:
            states = self._context_cache(firsts, size) if causal else self._encoder_states(firsts, size)
        parts: dict[str, list[torch.Tensor]] = {key: [] for key in keys}
        for start in range(0, len(rows.owners), size):
            indices = list(range(start, min(start + size, len(rows.owners))))
            build = self._causal_minibatch if causal else self._seq2seq_minibatch
            minibatch, model_inputs = build(rows, indices, states)
            minibatch["output_hidden_states"] = torch.tensor(True)
            outputs = self._LLM_model(**model_inputs, output_hidden_states=True)
            tokenized_contexts = [rows.inputs[i] for i in indices]
            for key in keys:
                value = self._module_functions[key](
                    outputs, minibatch=minibatch, tokenized_contexts=tokenized_contexts, **kwargs
                )
                if not isinstance(value, torch.Tensor):
                    raise InputError(
                        f"module function {key!r} returned a {type(value).__name__}; Lamorel module functions return a "
                        "tensor with one row per row of the minibatch."
                    )
                parts[key].append(value)
        merged = {key: torch.cat(values) for key, values in parts.items()}
        return [{key: value[table] for key, value in merged.items()} for table in rows.tables]

    def forward(
        self,
        module_function_keys: Sequence[str],
        contexts: Contexts,
        candidates: Any = None,
        require_grad: bool = False,
        minibatch_size: int | None = None,
        **kwargs: Any,
    ) -> HeadOutputs:
        """Run ``"__score"`` and custom module functions on each context (Lamorel's ``forward``).

        Args:
            module_function_keys: Keys to compute (``"__score"``: log-probs of the candidates).
            contexts: Context strings.
            candidates: Per context a list of candidates (``None`` or an empty list: one empty
                candidate, as in Lamorel).
            require_grad: Keep the autograd graph.
            minibatch_size: Rows per forward pass of custom module functions (default:
                ``llm_args.minibatch_size``).
            **kwargs: Passed to every custom module function.

        Returns:
            Per context a dict with one entry per key; a custom module's entry holds the rows of
            that context's candidates.
        """
        keys = self._check_keys(module_function_keys)
        contexts = list(contexts)
        groups = _as_candidate_groups(contexts, candidates)
        results: HeadOutputs = [{} for _ in contexts]
        if SCORE_KEY in keys:
            if groups is None:
                raise InputError(f"key {SCORE_KEY!r} needs candidates; pass candidates=[[...], ...].")
            scores = self._llm.forward(["score"], contexts, groups, require_grad=require_grad)
            for result, output in zip(results, scores):
                result[SCORE_KEY] = output["score"]
        custom = [k for k in keys if k != SCORE_KEY]
        if custom and contexts:
            size = minibatch_size if minibatch_size is not None else self._settings.minibatch_size
            if size <= 0:
                raise InputError(f"minibatch_size={size} must be a positive integer.")
            rows_of = (
                [list(g) if g else [""] for g in groups] if groups is not None else [[""] for _ in contexts]
            )
            with nullcontext() if require_grad else torch.no_grad():
                for result, output in zip(
                    results, self._custom_outputs(custom, contexts, rows_of, size, kwargs)
                ):
                    result.update(output)
        if torch.cuda.is_available():
            if self._settings.synchronize_gpus_after_scoring:
                torch.cuda.synchronize()
            if self._settings.empty_cuda_cache_after_scoring:
                torch.cuda.empty_cache()
        return results


class UpdaterAdapter(Updater):
    """Runs a Lamorel :class:`BaseUpdater` as an :class:`llmgym.Updater` (behind ``LLM.update``)."""

    def __init__(self, updater: BaseUpdater) -> None:
        self.lamorel_updater = updater

    def perform_update(
        self,
        contexts: Contexts,
        candidates: CandidateSets | None,
        _current_batch_ids: Sequence[int],
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Call the Lamorel updater; a non-dict result is returned under ``"result"``."""
        result = self.lamorel_updater.perform_update(
            list(contexts),
            [list(c) for c in candidates] if candidates is not None else None,
            list(_current_batch_ids),
            **kwargs,
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


def initialize_module_functions(
    llm: Any, functions: Mapping[str, BaseModuleFunction], settings: LamorelSettings
) -> None:
    """Check the model type, then give every module function the model's config and device and initialise it.

    Args:
        llm: The in-process LLM (``llmgym.LLM`` or ``LocalLLM``) holding the model.
        functions: The custom module functions (initialised and moved to the model's device in place).
        settings: The parsed ``lamorel_args``.

    Raises:
        ConfigError: When ``llm_args.model_type`` disagrees with the loaded model.
    """
    is_seq2seq = bool(getattr(llm.model.config, "is_encoder_decoder", False))
    if is_seq2seq != (settings.model_type == "seq2seq"):
        raise ConfigError(
            f"lamorel_args.llm_args.model_type={settings.model_type!r} but {settings.model.name!r} is a "
            f"{'seq2seq' if is_seq2seq else 'causal'} model; set model_type to match the model."
        )
    device = next(llm.model.parameters()).device
    for fn in functions.values():
        fn.llm_config = llm.model.config
        fn.device = device
        fn.initialize()
        fn.to(device)


class Caller:
    """Lamorel's ``Caller``: the RL script's handle on the LLM, run in-process or on Ray servers by llmgym.

    Args:
        config: Lamorel's ``lamorel_args`` section (a ``DictConfig`` from Hydra or
            :func:`load_lamorel_config`, or a plain dict).
        custom_updater: A :class:`BaseUpdater` run by :meth:`update` (on every server, with its
            share of the batch, when there are several).
        custom_module_functions: :class:`BaseModuleFunction` instances by key (``"__score"`` is reserved).
        custom_model_initializer: A :class:`BaseModelInitializer` applied once everything is built.

    Raises:
        ConfigError: On an unsupported ``lamorel_args`` key or value, a reserved or non-module
            function, or ``llm_args.model_type`` disagreeing with the loaded model.
        BackendError: When a Ray server fails to start (a wrong ``model_type`` is reported so).
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
        from transformers import set_seed

        set_seed(settings.seed)
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
        self.updater_args = settings.updater_args
        self._updater = custom_updater
        self._llm: LLM | None = None
        self._servers: Any = None
        if settings.distributed is not None:
            from llmgym.compat.lamorel_servers import LamorelServerFactory
            from llmgym.llm.distributed.ray_backend import RayLLM

            factory = LamorelServerFactory(settings, functions, custom_updater, custom_model_initializer)
            self._servers = RayLLM(factory, settings.distributed, balance_by_tokens=False)
            self._backend: Any = self._servers
            self._modules: Any = self._servers.forward
            return
        self._llm = LLM(
            settings.model, updater=UpdaterAdapter(custom_updater) if custom_updater is not None else None
        )
        try:
            initialize_module_functions(self._llm, functions, settings)
        except ConfigError:
            self._llm.close()
            raise
        self._llm_module = LamorelLLMModule(self._llm, functions, settings)
        if custom_model_initializer is not None:
            custom_model_initializer.initialize_model(self._llm_module)
        if custom_updater is not None:
            custom_updater.set_llm_module(self._llm_module)
        self._backend = self._llm
        self._modules = self._llm_module

    @property
    def llm(self) -> Any:
        """The underlying in-process :class:`llmgym.LLM` (llmgym's native API).

        Raises:
            BackendError: With several LLM servers, whose models live in the Ray actors.
        """
        if self._llm is None:
            raise BackendError(
                "Caller.llm is the in-process LLM, but this Caller's LLMs run on Ray servers "
                "(n_llm_processes > 1); use the Caller's score/custom_module_fns/generate/update."
            )
        return self._llm

    def score(
        self,
        contexts: Contexts,
        candidates: Any,
        additional_module_function_keys: Sequence[str] = (),
        **kwargs: Any,
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

        Raises:
            InputError: On missing candidates, or on keyword arguments other than ``minibatch_size``
                with no ``additional_module_function_keys`` to receive them.
        """
        groups = _as_candidate_groups(list(contexts), candidates)
        if groups is None:
            raise InputError("score() needs candidates: one list of candidate strings per context.")
        if not additional_module_function_keys:
            unused = sorted(set(kwargs) - {"minibatch_size"})
            if unused:
                raise InputError(
                    f"score() got keyword arguments {unused} but no module function to pass them to; name the "
                    "custom modules that read them with additional_module_function_keys=[...], or remove them."
                )
            return list(self._backend.score(list(contexts), groups))
        return list(
            self._modules([SCORE_KEY, *additional_module_function_keys], list(contexts), groups, **kwargs)
        )

    def custom_module_fns(
        self, module_function_keys: Sequence[str], contexts: Contexts, **kwargs: Any
    ) -> HeadOutputs:
        """Run custom module functions (and ``"__score"``) without gradients.

        Args:
            module_function_keys: Keys of the modules to run.
            contexts: Context strings.
            **kwargs: ``candidates``, ``minibatch_size`` and arguments for the modules.

        Returns:
            Per context a dict keyed by module name.
        """
        kwargs.pop("require_grad", None)
        groups = _as_candidate_groups(list(contexts), kwargs.pop("candidates", None))
        return list(self._modules(module_function_keys, list(contexts), groups, **kwargs))

    def generate(
        self, contexts: Contexts, return_logprobs: bool = False, **kwargs: Any
    ) -> list[list[dict[str, Any]]]:
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
        for generations in self._backend.generate(list(contexts), **kwargs):
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

    def update(self, contexts: Contexts, candidates: Any, **kwargs: Any) -> list[Any]:
        """Run the custom updater on the batch; one result per LLM server.

        With several servers each runs the updater on its contiguous share of the batch (its
        positions in ``_current_batch_ids``), as Lamorel does.

        Raises:
            ConfigError: When the Caller has no ``custom_updater``.
        """
        if self._updater is None:
            raise ConfigError(
                "Caller.update needs an updater; build the Caller with custom_updater=MyUpdater()."
            )
        groups = _as_candidate_groups(list(contexts), candidates)
        results: list[Any] = self._backend.update(list(contexts), groups, **kwargs)
        return [r["result"] if set(r) == {"result"} else r for r in results]

    def close(self) -> None:
        """Release the LLM (and stop the Ray servers)."""
        self._backend.close()
