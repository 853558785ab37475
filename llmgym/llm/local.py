"""LocalLLM: scoring, generation, module functions and updates in this process.

The distributed backend runs one ``LocalLLM`` per LLM server, unchanged.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

from llmgym.config import ModelConfig
from llmgym.errors import BackendError, ConfigError, InputError
from llmgym.llm.adapters import apply_lora, check_quantization, is_peft_model
from llmgym.llm.builtin_engine import BuiltinEngine
from llmgym.llm.collectives import Collectives, SingleProcess
from llmgym.llm.fingerprint import base_fingerprint
from llmgym.llm.generation import Generation, eos_token_ids
from llmgym.llm.layout import ItemSpec, plan_minibatches
from llmgym.llm.masking import MaskPolicy, TokenMask
from llmgym.llm.memory import enable_gradient_checkpointing, trunk_cache_bytes
from llmgym.llm.modules import SCORE_KEY, ModuleFunction
from llmgym.llm.persistence import load_llm_state, load_mask_policy, save_llm_state
from llmgym.llm.precision import compute_autocast, keep_trainable_fp32
from llmgym.llm.protocols import CandidateSets, Contexts, GenerationEngine, HeadOutputs
from llmgym.llm.sampling import Sampling, history_masks
from llmgym.llm.scoring import (
    Minibatch,
    forward_items,
    input_device,
    module_device,
    reduce_token_scores,
    row_length,
    score_items,
    split_causal_lm,
)
from llmgym.llm.tokenization import TextEncoder, model_window
from llmgym.llm.tree_attention import check_packed_attention
from llmgym.llm.trunk_cache import TrunkCache
from llmgym.llm.updater import Updater
from llmgym.llm.validation import (
    as_model_config,
    check_candidates,
    check_contexts,
    check_decoder_prefixes,
    check_minibatch_size,
    check_normalize,
    check_token_ids,
)
from llmgym.llm.vllm_engine import VLLMEngine

__all__ = ["LocalLLM", "SCORE_KEY"]


class LocalLLM:
    """A model, its tokenizer, module functions and updater, run in this process.

    The model stays in eval mode (no dropout); gradients flow when ``require_grad=True``.

    Args:
        config: Model settings (LoRA, minibatch size, context overflow, seed), a model name, or
            ``None`` for the default model.
        module_functions: Heads by name (the name ``"score"`` is reserved).
        updater: An :class:`Updater` instance or class (instantiated without arguments).
        model: A prebuilt transformers causal or seq2seq LM (``None``: loaded from ``config``);
            wrapped with LoRA when ``config.lora`` is set and it is not a PEFT model yet.
        tokenizer: The prebuilt model's fast tokenizer.
        collectives: How ``sync_gradients`` and ``all_reduce_mean`` reach the other LLM servers
            (a Ray server passes its process group's); ``None``: this LLM is alone.

    Raises:
        ConfigError: On a reserved or non-module function, or ``load_in_4bit`` without CUDA.
    """

    def __init__(
        self,
        config: ModelConfig | str | None = None,
        module_functions: Mapping[str, ModuleFunction] | None = None,
        updater: Updater | type[Updater] | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        collectives: Collectives | None = None,
    ) -> None:
        config = as_model_config(config)
        check_quantization(config.load_in_4bit)
        if (model is None) != (tokenizer is None):
            raise InputError(
                "model and tokenizer must be given together (both prebuilt) or not at all (loaded from config)."
            )
        if model is None:
            from llmgym.llm.models import load_model

            model, tokenizer = load_model(config)
        #: The base model's fingerprint as loaded (``None`` for a fresh random init), recorded by :meth:`save`
        #: and compared by :meth:`load`.
        self.base_fingerprint = base_fingerprint(model, config.name) if config.pretrained else None
        #: The dtype the frozen weights compute in; forward passes autocast to it when it is a half dtype.
        self.compute_dtype = _weights_dtype(model)
        #: The frozen initial weights, the KL reference of full fine-tuning (``model.reference_copy``); ``None``
        #: with LoRA (the reference is the model with its adapter disabled) or when not asked for.
        self.reference_model: Any = None
        if config.reference_copy and config.lora is None and not is_peft_model(model):
            self.reference_model = copy.deepcopy(model).requires_grad_(False).eval()
        if config.lora is not None and not is_peft_model(model):
            model = apply_lora(model, config.lora, quantized=config.load_in_4bit)
        # fp32 master weights for what trains (precision.py). LoRA adapters and heads are fp32 already and
        # cast their inputs themselves; weights cast here (full fine-tuning in half precision) sit in layers
        # that also get half inputs, so those forward passes run under autocast.
        self._autocast = keep_trainable_fp32(model) > 0
        if config.gradient_checkpointing:
            enable_gradient_checkpointing(model)
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.is_seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
        check_packed_attention(model)
        self.device = input_device(model)
        #: Where the last hidden states land (the last GPU of a sharded model): the heads live there.
        self.head_device = _output_device(model, self.device)
        self.window = model_window(model.config)
        limit = config.max_context_tokens or self.window
        self.encoder = TextEncoder(tokenizer, self.is_seq2seq, limit, config.context_overflow, self.window)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id = int(pad)
        self.module_functions = torch.nn.ModuleDict()
        hidden_size = int(model.config.get_text_config().hidden_size)
        for key, module in (module_functions or {}).items():
            if key == SCORE_KEY or not isinstance(module, ModuleFunction):
                raise ConfigError(
                    f"module_functions[{key!r}]={type(module).__name__} is not allowed: keys must differ from "
                    f"{SCORE_KEY!r} (built in) and values must be llmgym.ModuleFunction instances."
                )
            module.bind(model.config, hidden_size, config.seed, key)
            self.module_functions[key] = module.to(self.head_device)
        self.collectives: Collectives = collectives if collectives is not None else SingleProcess()
        self.trunk_cache = TrunkCache(trunk_cache_bytes(config.trunk_cache_mb, self.device))
        #: NLPO's mask policy: a snapshot of the trainable weights (empty until refresh_mask_policy).
        self.mask_policy = MaskPolicy()
        #: Counts the changes of the trained weights (updates, loads): ``generation_engine=vllm`` pushes them when it lags.
        self.weights_version = 0
        self._closed = False
        self.updater: Updater | None = None
        self._prepare_training(updater)
        #: Who samples :meth:`generate`'s continuations (``model.generation_engine``), chosen here once.
        self.engine: GenerationEngine = _make_engine(self)

    # ------------------------------------------------------------------ helpers
    def _prepare_training(self, updater: Updater | type[Updater] | None) -> None:
        """Set :attr:`updater` (an instance, or one of the class) and bind it: it builds its optimizer now."""
        self.updater = updater() if isinstance(updater, type) else updater
        if self.updater is not None:
            self.updater.bind(self)

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """Autocast to :attr:`compute_dtype` where fp32 trainable weights meet half ones (full fine-tuning in half precision)."""
        return compute_autocast(self.device, self.compute_dtype if self._autocast else torch.float32)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError("This LLM was closed; build a new llmgym.LLM to keep using the model.")

    def _minibatch_size(self, minibatch_size: int | None) -> int:
        return check_minibatch_size(
            minibatch_size if minibatch_size is not None else self.config.forward_batch_size
        )

    def _check_keys(self, keys: Sequence[str], has_candidates: bool) -> list[str]:
        if isinstance(keys, str):
            raise InputError(
                f"keys must be a list of module names, got the string {keys!r}; write [{keys!r}]."
            )
        known = [SCORE_KEY, *self.module_functions]
        for key in keys:
            if key not in known:
                raise InputError(
                    f"keys contains {key!r}, which is not a module function; known keys: {known}."
                )
        if SCORE_KEY in keys and not has_candidates:
            raise InputError(
                f"key {SCORE_KEY!r} needs candidates; pass candidates=[[...], ...] or drop the key."
            )
        return list(keys)

    def _run(
        self,
        items: Sequence[ItemSpec],
        keys: Sequence[str],
        *,
        token_mode: bool,
        require_grad: bool,
        normalize: str,
        minibatch_size: int,
        kwargs: Mapping[str, Any],
        extra_key: str | None = None,
        sampling: Sampling | None = None,
        keep: Sequence[torch.Tensor] | None = None,
        seen_tokens: Sequence[torch.Tensor] | None = None,
    ) -> HeadOutputs:
        results: HeadOutputs = [{} for _ in items]
        lengths = [row_length(item, self.config.row_tokens) for item in items]
        sizes = [len(item.candidate_ids) for item in items]
        plans = [
            [part[i] for i in plan]
            for part in self._trunk_partition(items)
            for plan in plan_minibatches(
                [sizes[i] for i in part],
                [lengths[i] for i in part],
                minibatch_size,
                self.config.forward_batch_tokens,
            )
        ]
        grad_mode = torch.enable_grad() if require_grad else torch.no_grad()
        with grad_mode, self.autocast():
            for plan in plans:
                chosen = [items[i] for i in plan]
                outputs, input_ids, position_ids = forward_items(
                    self.model,
                    chosen,
                    self.pad_token_id,
                    is_seq2seq=self.is_seq2seq,
                    token_mode=token_mode,
                    trunk_cache=self.trunk_cache,
                    row_tokens=self.config.row_tokens,
                    sampling=sampling,
                    keep=None if keep is None else _concat_masks([keep[i] for i in plan]),
                    seen=None if seen_tokens is None else _concat_masks([seen_tokens[i] for i in plan]),
                )
                counts = [len(item.candidate_ids) for item in chosen]
                states = (
                    [sum(len(ids) - s for ids, s in zip(i.candidate_ids, i.candidate_starts)) for i in chosen]
                    if token_mode
                    else [1] * len(chosen)
                )
                minibatch = Minibatch(
                    plan, [item.context_ids for item in chosen], counts, states, input_ids, position_ids
                )
                # Without gradients each output crosses to the host once per pass, not once per item.
                out = (lambda t: t) if require_grad else (lambda t: t.detach().cpu())
                per_key: dict[str, list[Any]] = {}
                if extra_key is not None:
                    per_key[extra_key] = list(out(outputs.token_logprobs).split(states))
                if SCORE_KEY in keys:
                    scores = reduce_token_scores(outputs.token_logprobs, outputs.token_counts, normalize)
                    per_key[SCORE_KEY] = list(out(scores).split(counts))
                for key in keys:
                    if key != SCORE_KEY:
                        module = self.module_functions[key]
                        seen = outputs.to(module_device(module) or outputs.context_hidden.device)
                        value = module(seen, minibatch, minibatch.tokenized_contexts, **kwargs)
                        value = out(value) if isinstance(value, torch.Tensor) else value
                        per_key[key] = self._split_module_output(key, value, states, token_mode)
                for position, index in enumerate(plan):
                    for key, values in per_key.items():
                        value = values[position]
                        results[index][key] = (
                            value
                            if require_grad or not isinstance(value, torch.Tensor)
                            else value.detach().cpu()
                        )
        return results

    def special_ids(self) -> list[int]:
        """Token ids the NLPO mask always keeps (the tokenizer's special tokens, EOS among them, as RL4LMs)."""
        return [int(i) for i in getattr(self.tokenizer, "all_special_ids", [])]

    def _trunk_partition(self, items: Sequence[ItemSpec]) -> list[list[int]]:
        """Item indices in groups of passes: items the frozen-trunk cache holds apart from the others.

        A pass runs from the cache only when it holds every item of the pass, so keeping the
        cached items together lets each of them skip the frozen blocks.
        """
        if self.is_seq2seq or self.trunk_cache.max_bytes <= 0:
            return [list(range(len(items)))]
        held = [self.trunk_cache.holds(item) for item in items]
        parts = [[i for i, h in enumerate(held) if h], [i for i, h in enumerate(held) if not h]]
        return [part for part in parts if part]

    @staticmethod
    def _split_module_output(key: str, value: Any, states: list[int], token_mode: bool) -> list[Any]:
        if isinstance(value, torch.Tensor):
            if value.shape[0] != sum(states):
                raise BackendError(
                    f"module function {key!r} returned a tensor with first dimension {value.shape[0]}, expected "
                    f"{sum(states)} (one row per state); return [S, ...] or a list with one entry per item."
                )
            parts = list(value.split(states))
            return parts if token_mode else [p[0] for p in parts]
        if isinstance(value, list) and len(value) == len(states):
            return value
        raise BackendError(
            f"module function {key!r} returned {type(value).__name__}; expected a tensor [S, ...] or a list of "
            f"{len(states)} entries (one per item)."
        )

    # ------------------------------------------------------------------ public API
    def score(
        self,
        contexts: Contexts,
        candidates: CandidateSets,
        *,
        normalize: str = "sum",
        add_eos: bool = False,
        minibatch_size: int | None = None,
    ) -> list[torch.Tensor]:
        """Score log p(candidate | context) of every candidate, without gradients.

        Args:
            contexts: ``B`` context strings.
            candidates: For each context, ``k_i`` non-empty candidate strings.
            normalize: ``"sum"`` over candidate tokens or ``"mean"`` per token.
            add_eos: Score candidate + EOS (the completed action).
            minibatch_size: Max context-candidate sequences per forward (default: config).

        Returns:
            Per context a float32 CPU tensor ``[k_i]``.
        """
        self._check_open()
        contexts = check_contexts(contexts)
        groups = check_candidates(candidates, len(contexts))
        normalize = check_normalize(normalize)
        items = self.encoder.encode_items(self.encoder.fit_contexts(contexts), groups, add_eos)
        with self.autocast():
            return score_items(
                self.model,
                items,
                self.pad_token_id,
                is_seq2seq=self.is_seq2seq,
                normalize=normalize,
                minibatch_size=self._minibatch_size(minibatch_size),
                row_tokens=self.config.row_tokens,
                max_tokens=self.config.forward_batch_tokens,
            )

    def forward(
        self,
        keys: Sequence[str],
        contexts: Contexts,
        candidates: CandidateSets | None = None,
        *,
        require_grad: bool = False,
        normalize: str = "sum",
        add_eos: bool = False,
        minibatch_size: int | None = None,
        reference: bool = False,
        **kwargs: Any,
    ) -> HeadOutputs:
        """Run module functions (and the built-in ``"score"``) in one forward pass per minibatch.

        Args:
            keys: Module names to compute; ``"score"`` gives candidate log-probs ``[k_i]``.
            contexts: ``B`` context strings.
            candidates: For each context, candidate strings (needed by ``"score"``).
            require_grad: Keep the autograd graph (outputs stay on the model's device).
            normalize: ``"sum"`` or ``"mean"`` for ``"score"``.
            add_eos: Score candidate + EOS.
            minibatch_size: Max context-candidate sequences per forward (default: config).
            reference: Run the reference model (:meth:`reference`) instead, without gradients.
            **kwargs: Passed to every module function.

        Returns:
            One dict per context with one entry per key (e.g. a 0-d value for ``ValueHead``).

        Raises:
            InputError: ``reference`` with ``require_grad``.
        """
        self._check_open()
        contexts = check_contexts(contexts)
        groups = check_candidates(candidates, len(contexts)) if candidates is not None else None
        keys = self._check_keys(keys, groups is not None)
        items = self.encoder.encode_items(self.encoder.fit_contexts(contexts), groups, add_eos)
        with self._maybe_reference(reference, require_grad):
            return self._run(
                items,
                keys,
                token_mode=False,
                require_grad=require_grad,
                normalize=check_normalize(normalize),
                minibatch_size=self._minibatch_size(minibatch_size),
                kwargs=kwargs,
            )

    def token_logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        keys: Sequence[str] = (),
        require_grad: bool = True,
        minibatch_size: int | None = None,
        sampling: Sampling | None = None,
        decoder_prefixes: Sequence[Sequence[int]] | None = None,
        reference: bool = False,
        **kwargs: Any,
    ) -> HeadOutputs:
        """Per-token log-probs of given completions (token-level RL), plus module outputs per token.

        Args:
            prompt_ids: Per sample, prompt token ids (e.g. ``Generation.prompt_ids``).
            completion_ids: Per sample, completion token ids (e.g. ``Generation.token_ids``).
            keys: Module functions to evaluate at each completion token's state (the position that
                predicts it), e.g. ``["value"]`` gives ``[T_i]`` values.
            require_grad: Keep the autograd graph.
            minibatch_size: Max samples per forward (default: config).
            sampling: The distribution the completions were sampled from (temperature, top-k,
                top-p, NLPO's mask): log-probs under it, as ``Generation.logprobs``; ``None``: the
                model's own, as ``Generation.raw_logprobs``. With ``mask_top_p < 1`` every token
                is first restricted to the mask policy's top-p set at its position.
            decoder_prefixes: Seq2seq models only: per sample, decoder ids fed before its completion
                and not scored (``generate``'s ``decoder_prefixes``); ``None``: none.
            reference: Score under the reference model (:meth:`reference`) instead, without
                gradients (the KL penalty's reference pass).
            **kwargs: Passed to every module function.

        Returns:
            Per sample a dict with ``"logprobs"`` ``[T_i]`` and one entry per key.

        Raises:
            InputError: On malformed ids, a sample longer than the model window, a ``sampling``
                that is not a :class:`~llmgym.llm.sampling.Sampling`, decoder prefixes for a
                causal LM or of another count, or ``reference`` with ``require_grad``.
        """
        self._check_open()
        if sampling is not None and not isinstance(sampling, Sampling):
            raise InputError(
                f"sampling={type(sampling).__name__} is not a Sampling; pass "
                "llmgym.llm.sampling.Sampling(temperature=..., top_k=..., top_p=...) or None."
            )
        prompts, completions = check_token_ids(prompt_ids, completion_ids)
        keys = self._check_keys(keys, has_candidates=False)
        if SCORE_KEY in keys:
            raise InputError(
                f"keys may not contain {SCORE_KEY!r} in token_logprobs: 'logprobs' is always returned."
            )
        prefixes = check_decoder_prefixes(decoder_prefixes, len(prompts), self.model.config)
        items: list[ItemSpec] = []
        for index, (prompt, completion, prefix) in enumerate(zip(prompts, completions, prefixes)):
            joint = prefix + completion if self.is_seq2seq else prompt + completion
            if self.window is not None and len(joint) > self.window:
                raise InputError(
                    f"sample {index} has {len(joint)} tokens, more than the model window of {self.window}; "
                    "shorten the prompt or the completion."
                )
            items.append(ItemSpec(prompt, [joint], [len(prefix) if self.is_seq2seq else len(prompt)]))
        keep = None
        if sampling is not None and sampling.is_masked:
            size = self._minibatch_size(minibatch_size)
            decoded = [item.candidate_ids[0] if self.is_seq2seq else c for item, c in zip(items, completions)]
            firsts = [len(p) for p in prefixes]
            with self.autocast():
                keep = [
                    mask
                    for start in range(0, len(prompts), size)
                    for mask in self.mask_policy.keep_masks(
                        self.model,
                        prompts[start : start + size],
                        decoded[start : start + size],
                        sampling.mask_top_p,
                        self.pad_token_id,
                        self.special_ids(),
                        firsts[start : start + size],
                        sampling.mask_min_tokens,
                    )
                ]
        seen = None
        if sampling is not None and sampling.depends_on_history:
            if self.is_seq2seq and sampling.repetition_penalty != 1.0:
                raise InputError(
                    "repetition_penalty is re-scored for causal LMs only; seq2seq models are not supported (set "
                    "agent.repetition_penalty=1)."
                )
            # a seq2seq completion's tokens follow its decoder prefix: min_new_tokens counts them, as generate does
            seen, keep = self._history_masks(prompts, completions, sampling, keep)
        with self._maybe_reference(reference, require_grad):
            return self._run(
                items,
                keys,
                token_mode=True,
                require_grad=require_grad,
                normalize="sum",
                minibatch_size=self._minibatch_size(minibatch_size),
                kwargs=kwargs,
                extra_key="logprobs",
                sampling=sampling,
                keep=keep,
                seen_tokens=seen,
            )

    def _history_masks(
        self,
        prompts: list[list[int]],
        completions: list[list[int]],
        sampling: Sampling,
        keep: list[torch.Tensor] | None,
    ) -> tuple[list[torch.Tensor] | None, list[torch.Tensor] | None]:
        """Per sample ``[T_i, V]`` masks of the repetition penalty and ``min_new_tokens`` (:func:`history_masks`).

        Returns:
            ``(seen, keep)``: ``seen`` for the penalty (``None`` without one) and ``keep`` (the NLPO
            masks ``keep``, if any, without EOS before ``min_new_tokens``).
        """
        vocab = int(self.model.get_output_embeddings().weight.shape[0])
        eos = eos_token_ids(self.model, {})
        seen: list[torch.Tensor] = []
        allowed: list[torch.Tensor] = []
        for prompt, completion in zip(prompts, completions):
            penalised, kept = history_masks(prompt, completion, vocab, sampling, eos, self.head_device)
            if penalised is not None:
                seen.append(penalised)
            if kept is not None:
                allowed.append(kept)
        if allowed and keep is not None:
            allowed = [k.to(a.device) & a for k, a in zip(keep, allowed)]
        return seen or None, allowed or keep

    def generate(self, contexts: Contexts, **generation_kwargs: Any) -> list[list[Generation]]:
        """Sample continuations of all contexts in one batched call (see :func:`~llmgym.llm.generation.generate`).

        ``mask_top_p=p < 1`` (NLPO, from :meth:`~llmgym.llm.sampling.Sampling.generation_kwargs`)
        restricts every token to the mask policy's top-p set (:meth:`refresh_mask_policy`), with at
        least its ``mask_min_tokens`` most likely tokens.
        ``decoder_prefixes`` (seq2seq models): per context, decoder ids to continue after.

        Raises:
            InputError: ``mask_top_p`` outside ``(0, 1]``, or decoder prefixes for a causal LM.
        """
        self._check_open()
        contexts = check_contexts(contexts)
        mask = TokenMask(
            generation_kwargs.pop("mask_top_p", 1.0), generation_kwargs.pop("mask_min_tokens", 1)
        )
        if not contexts:
            return []
        self.engine.sync_weights(self.weights_version)
        return self.engine.generate(contexts, generation_kwargs, mask)

    def refresh_mask_policy(self) -> None:
        """Snapshot the current trainable weights as NLPO's mask policy (:class:`~llmgym.llm.masking.MaskPolicy`)."""
        self._check_open()
        self.mask_policy.refresh(self.model)

    def update(
        self,
        contexts: Contexts,
        candidates: CandidateSets | None = None,
        _current_batch_ids: Sequence[int] | None = None,
        **kwargs: Any,
    ) -> HeadOutputs:
        """Run the updater on this process's batch.

        Args:
            contexts: Contexts of the batch (this server's share in the distributed backend).
            candidates: Their candidates, or ``None``.
            _current_batch_ids: Index of each context in the client's full batch (set by the
                distributed backend; ``range(len(contexts))`` in-process).
            **kwargs: Passed to ``Updater.perform_update``.

        Returns:
            A one-element list (one result per LLM server).

        Raises:
            ConfigError: When the LLM was built without an updater.
        """
        self._check_open()
        if self.updater is None:
            raise ConfigError(
                "LLM.update needs an updater; build the LLM with updater=MyUpdater (an llmgym.Updater)."
            )
        contexts = check_contexts(contexts)
        groups = check_candidates(candidates, len(contexts)) if candidates is not None else None
        batch_ids = list(_current_batch_ids) if _current_batch_ids is not None else list(range(len(contexts)))
        self.engine.release()
        result = self.updater.perform_update(contexts, groups, batch_ids, **kwargs)
        self.weights_version += 1
        return [result]

    def _maybe_reference(self, reference: bool, require_grad: bool) -> AbstractContextManager[None]:
        """:meth:`reference` when asked (refused with gradients: the reference is frozen), else nothing."""
        if not reference:
            return contextlib.nullcontext()
        if require_grad:
            raise InputError(
                "reference=True scores the frozen reference model; pass require_grad=False with it."
            )
        return self.reference()

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        """Within this block the model is the KL reference: its LoRA adapter disabled, or the frozen initial copy.

        Raises:
            ConfigError: When the model has neither an adapter nor a reference copy.
        """
        self._check_open()
        if is_peft_model(self.model):
            with self.model.disable_adapter():
                yield
            return
        if self.reference_model is None:
            raise ConfigError(
                "The KL to the reference (algorithm.kl.coef > 0) needs a reference model: this model trains in full and "
                "keeps no copy of its initial weights. Fix: set model.reference_copy=true (one more copy of the weights "
                "on the same device) or train LoRA adapters (model.lora, the reference is the adapter disabled)."
            )
        trained, self.model = self.model, self.reference_model
        try:
            yield
        finally:
            self.model = trained

    @property
    def module_function_keys(self) -> list[str]:
        """Names of the module functions (heads), e.g. ``["value"]``."""
        return list(self.module_functions.keys())

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """Parameters that require gradients: adapters (or the full model) and module functions."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        return params + [p for p in self.module_functions.parameters() if p.requires_grad]

    def sync_gradients(self, num_samples: int) -> None:
        """Average the trainable parameters' gradients across LLM servers, weighted by ``num_samples``.

        The Updater calls it after ``backward()`` and before its optimizer step; in-process it only
        checks ``num_samples``.
        """
        self.collectives.sync_gradients(self.trainable_parameters(), num_samples)

    def all_reduce_mean(self, values: torch.Tensor, num_samples: int) -> torch.Tensor:
        """The mean of ``values`` over the LLM servers, weighted by their ``num_samples``.

        Each server passes the mean of a quantity over its own samples (a gradient vector, a loss);
        every server gets the mean over all samples. In-process: ``values`` itself (zeros for 0
        samples); on a server, its group's mean (:mod:`llmgym.llm.collectives`).

        Args:
            values: This server's mean, any shape (the same on every server).
            num_samples: Samples behind it (0: this server contributes nothing).
        """
        return self.collectives.all_reduce_mean(values, num_samples)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Atomically save trainable weights, module functions, updater state and mask policy to a folder.

        The base model's fingerprint (:attr:`base_fingerprint`) is recorded with them.

        The frozen-trunk cache is emptied too, as :meth:`load` empties it: a run resumed from
        the checkpoint then computes exactly what the run that wrote it computes next.
        """
        self._check_open()
        state = self.updater.state_dict() if self.updater is not None else None
        save_llm_state(
            path,
            self.model,
            dict(self.module_functions.items()),
            state,
            self.mask_policy.state_dict(),
            self.base_fingerprint,
        )
        self.clear_trunk_cache()

    def clear_trunk_cache(self) -> None:
        """Empty the frozen-trunk cache (``model.trunk_cache_mb``); the next passes run the whole model."""
        self._check_open()
        self.trunk_cache.clear()

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load what :meth:`save` wrote (same model, adapter setup and module names).

        Raises:
            CheckpointError: When the folder is incomplete or corrupted, or was trained from another base
                model than the one loaded (its recorded fingerprint differs from :attr:`base_fingerprint`).
        """
        self._check_open()
        optimizer = self.updater.optimizer if self.updater is not None else None
        state = load_llm_state(
            path, self.model, dict(self.module_functions.items()), self.base_fingerprint, optimizer
        )
        self.mask_policy.load_state_dict(load_mask_policy(path), self.model)
        self.trunk_cache.clear()
        self.weights_version += 1
        if state is not None and self.updater is not None:
            self.updater.load_state_dict(state)

    def close(self) -> None:
        """Release the model; later calls raise ``BackendError``."""
        if self._closed:
            return
        self._closed = True
        self.trunk_cache.clear()
        self.engine.close()
        self.model = None
        self.module_functions = torch.nn.ModuleDict()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _make_engine(llm: LocalLLM) -> GenerationEngine:
    """The engine ``model.generation_engine`` names: llmgym's own, or vLLM's (built now, from the model as loaded)."""
    if llm.config.generation_engine == "vllm":
        return VLLMEngine(llm)
    return BuiltinEngine(llm)


def _weights_dtype(model: Any) -> torch.dtype:
    """Dtype of the model's input embeddings (the dtype it was loaded in)."""
    weight = getattr(model.get_input_embeddings(), "weight", None)
    return weight.dtype if isinstance(weight, torch.Tensor) and weight.is_floating_point() else torch.float32


def _output_device(model: Any, default: torch.device) -> torch.device:
    """Device of the LM head (causal) or of the decoder's last block (seq2seq): where hidden states end."""
    if bool(getattr(model.config, "is_encoder_decoder", False)):
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    else:
        _, head = split_causal_lm(model)
    return (module_device(head) if isinstance(head, torch.nn.Module) else None) or default


def _concat_masks(masks: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """``[N, V]``: the per-item ``[T_i, V]`` NLPO masks of a pass, end to end; ``None`` when no item has a token."""
    filled = [m for m in masks if m.numel()]
    return torch.cat(filled) if filled else None
