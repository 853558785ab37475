"""Batched sampling that keeps the sampled token ids and their log-probs (no re-tokenization).

Prompts of an RL batch usually start with the same tokens (system prompt, action list, chat
template) and differ in length. For causal models every prompt but its last token is prefilled in
packed prefix-sharing rows (:mod:`llmgym.llm.layout`: a token prefix shared by several prompts is
computed once, and no padding is computed); where the model allows block-sparse tree attention
(:mod:`llmgym.llm.tree_attention`), a row holds a whole batch's token trie. The KV states are
then gathered into the left-padded cache ``generate`` expects, and decoding starts from each
prompt's last token. Each sequence gets exactly the positions and attention of its own unpadded
prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.cache_utils import DynamicLayer

from llmgym.errors import InputError
from llmgym.llm.adapters import cache_kwarg
from llmgym.llm.layout import ItemSpec, collate_rows, pack_items, plan_rows
from llmgym.llm.masking import MaskLogitsProcessor
from llmgym.llm.precision import activation_dtype
from llmgym.llm.request_limits import available_bytes, check_generation_memory, generation_bytes
from llmgym.llm.sampling import RepetitionPenaltyProcessor
from llmgym.llm.scoring import input_device, split_causal_lm
from llmgym.llm.tokenization import TextEncoder, decoder_limit
from llmgym.llm.tree_attention import packed_row_attention, reads_dense_mask, supports_tree_attention
from llmgym.llm.validation import check_decoder_prefixes, check_generation_kwargs

__all__ = [
    "Generation",
    "check_prompts",
    "eos_token_ids",
    "gather_cache_rows",
    "generated_length",
    "generate",
    "new_token_budget",
    "packed_prompt_cache",
    "PreallocatedLayer",
]

#: Target length of a prefill row under a dense prefix-sharing mask, whose attention costs the
#: square of it: short prompts share a row up to it (see ``plan_rows``).
PREFILL_ROW_TOKENS = 512

#: Target length of a prefill row under tree attention, whose cost grows linearly with it: a
#: batch of a few dozen prompts is one token trie.
TREE_PREFILL_ROW_TOKENS = 8192

_OWNED_KWARGS = (
    "return_dict_in_generate",
    "output_scores",
    "output_logits",
    "input_ids",
    "attention_mask",
    "cache",
    "past_key_values",
    "decoder_input_ids",
)


@dataclass
class Generation:
    """One sampled continuation of a context.

    Attributes:
        text: Decoded continuation (special tokens skipped; a stop string is kept).
        token_ids: Sampled token ids, up to and including EOS or the token completing a stop string.
        logprobs: ``[T]`` log-probs of ``token_ids`` under the processed sampling distribution
            (temperature, top-k/top-p... applied), float32.
        raw_logprobs: ``[T]`` log-probs of ``token_ids`` under the unprocessed model, float32.
        prompt_ids: Token ids of the prompt the continuation was sampled from (no padding).
        engine_logprobs: ``[T]`` the log-probs the sampling engine itself reported
            (``model.generation_engine: vllm``; ``logprobs`` are llmgym's recomputation), float32;
            ``None`` for the built-in engine, whose ``logprobs`` are its own.
    """

    text: str
    token_ids: list[int]
    logprobs: torch.Tensor
    raw_logprobs: torch.Tensor
    prompt_ids: list[int]
    engine_logprobs: torch.Tensor | None = None


def eos_token_ids(model: Any, kwargs: dict[str, Any]) -> set[int]:
    """The ids that end a generation: ``kwargs["eos_token_id"]``, else the model's generation config's."""
    eos = kwargs.get("eos_token_id", model.generation_config.eos_token_id)
    if eos is None:
        return set()
    return {int(e) for e in eos} if isinstance(eos, (list, tuple)) else {int(eos)}


def generated_length(
    tokens: Sequence[int], eos_ids: set[int], pad_id: int | None, stop_strings: Sequence[str], decode: Any
) -> int:
    """Count the tokens a sequence really generated before it stopped.

    The sequence ends at its first EOS (kept), or at the first token after which the decoded
    text contains a stop string when every later token is padding; otherwise it is kept whole.

    Args:
        tokens: Generated ids of one sequence (padded after it finished).
        eos_ids: End-of-sequence ids.
        pad_id: Padding id written after a sequence finished.
        stop_strings: Stop strings passed to ``generate``.
        decode: ``list[int] -> str``.

    Returns:
        The length to keep.
    """
    for index, token in enumerate(tokens):
        if token in eos_ids:
            return index + 1
    if stop_strings and pad_id is not None:
        for index in range(len(tokens)):
            if all(t == pad_id for t in tokens[index + 1 :]) and any(
                s in decode(tokens[: index + 1]) for s in stop_strings
            ):
                return index + 1
    return len(tokens)


class PreallocatedLayer(DynamicLayer):  # type: ignore[misc]
    """A dynamic cache layer whose states live in a buffer with room for the tokens to come.

    ``DynamicLayer`` concatenates every decoding step's key and value states onto the cache,
    copying the whole cache each step: with 32 rows that copy was 40% of the decoding time. Here
    each step writes its states into spare positions of a buffer, and ``keys`` / ``values`` are
    views of its filled part. When something outside replaces those tensors
    (``batch_repeat_interleave``, ``batch_select_indices``, offloading) the layer adopts the new
    tensors into a fresh buffer; ``crop`` keeps working on the views.

    Args:
        keys: ``[B, heads, L, d]`` key states already computed.
        values: ``[B, heads, L, d]`` value states.
        spare: Positions to reserve beyond ``L`` (the buffer doubles when they run out).
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, spare: int) -> None:
        super().__init__()
        self.lazy_initialization(keys, values)
        self._adopt(keys, values, keys.shape[-2] + max(1, spare))

    def _adopt(self, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> None:
        length = keys.shape[-2]
        self._buffers: list[torch.Tensor] = []
        for states in (keys, values):
            buffer = states.new_empty(*states.shape[:2], capacity, states.shape[-1])
            buffer[:, :, :length] = states
            self._buffers.append(buffer)
        self.keys, self.values = (b[:, :, :length] for b in self._buffers)

    def _owns_states(self) -> bool:
        return all(
            states is not None
            and states.data_ptr() == buffer.data_ptr()
            and states.shape[0] == buffer.shape[0]
            for states, buffer in zip((self.keys, self.values), self._buffers)
        )

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new ``[B, heads, n, d]`` states after the cached ones; return views of all of them."""
        if not self.is_initialized or self.keys is None or self.values is None:
            return super().update(key_states, value_states, *args, **kwargs)
        length, new = self.keys.shape[-2], key_states.shape[-2]
        if not self._owns_states() or length + new > self._buffers[0].shape[2]:
            self._adopt(self.keys, self.values, 2 * (length + new))
        for buffer, states in zip(self._buffers, (key_states, value_states)):
            buffer[:, :, length : length + new] = states
        self.keys, self.values = (b[:, :, : length + new] for b in self._buffers)
        return self.keys, self.values


def packed_prompt_cache(
    model: Any, prompts: Sequence[Sequence[int]], pad_token_id: int, spare: int = 64
) -> Any | None:
    """KV cache of every prompt but its last token, computed in packed prefix-sharing rows.

    The prompts (less their last token) are laid out as token tries (:func:`pack_items`), so a
    prefix several prompts share is computed once and no padding is computed; the backbone runs
    without its LM head. Rows are long token tries with block-sparse tree attention where the
    model supports it (:func:`supports_tree_attention`), else rows of about
    ``PREFILL_ROW_TOKENS`` with a dense prefix-sharing mask. The key and value states are then
    gathered, per prompt, into a cache left-padded to the longest prompt less one token, the
    layout of ``generate``'s own prefill.
    Its layers are :class:`PreallocatedLayer` objects with ``spare`` free positions, so decoding
    writes each step in place.

    Args:
        model: A transformers causal LM (optionally PEFT-wrapped).
        prompts: Token ids of each prompt.
        pad_token_id: Id used on padding positions.
        spare: Positions reserved per row for decoding (``max_new_tokens + 1`` avoids any copy).

    Returns:
        A ``DynamicCache`` with ``len(prompts)`` rows of ``max(len(p)) - 1`` positions, or ``None``
        when there is nothing to prefill, the model's cache is not a plain dynamic cache (sliding
        windows, linear attention...), or its attention (FlashAttention) reads no custom mask and
        tree attention cannot replace it: there ``generate`` prefills as usual.
    """
    heads = [list(p[:-1]) for p in prompts]
    width = max(len(h) for h in heads)
    if width == 0:
        return None
    items = [ItemSpec(h, [], []) for h in heads]
    tree = supports_tree_attention(model)
    if not tree and not reads_dense_mask(model):
        return None  # FlashAttention without tree attention: generate's own padded prefill
    groups = plan_rows(
        items, [len(h) for h in heads], TREE_PREFILL_ROW_TOKENS if tree else PREFILL_ROW_TOKENS
    )
    rows = [pack_items([items[i] for i in group]) for group in groups]
    batch = collate_rows(rows, pad_token_id, input_device(model))
    backbone, head = split_causal_lm(model)
    with packed_row_attention(
        model, batch, activation_dtype(batch.input_ids.device, next(head.parameters()).dtype), tree
    ) as mask:
        out = backbone(
            input_ids=batch.input_ids, attention_mask=mask, position_ids=batch.position_ids, use_cache=True
        )
    cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    length = batch.input_ids.shape[1]
    source = [[0] * width for _ in heads]
    for r, group in enumerate(groups):
        for slot, index in enumerate(group):
            start = width - len(heads[index])
            for j in range(len(heads[index])):
                source[index][start + j] = r * length + batch.pad[r] + rows[r].locate(slot, 0, j)
    gather_cache_rows(layers, torch.tensor(source, dtype=torch.long), spare)
    return cache


def gather_cache_rows(layers: list[Any], gather: torch.Tensor, spare: int) -> None:
    """Replace each packed-row cache layer by a :class:`PreallocatedLayer` of the positions ``gather [B, W]``.

    The index is copied once to each device the layers live on (a sharded model's layers span
    several GPUs), never from the host per layer.

    Args:
        layers: The cache's ``DynamicLayer`` objects (``[R, heads, L, d]`` states), replaced in place.
        gather: ``[B, W]`` flat row position of every cache slot (on any device).
        spare: Positions reserved per row for decoding.
    """
    on_device: dict[torch.device, torch.Tensor] = {}
    for index, layer in enumerate(layers):
        device = layer.keys.device
        if device not in on_device:
            on_device[device] = gather.to(device, non_blocking=True)
        where = on_device[device]
        layers[index] = PreallocatedLayer(
            _gather_positions(layer.keys, where), _gather_positions(layer.values, where), spare
        )


def _gather_positions(states: torch.Tensor, gather: torch.Tensor) -> torch.Tensor:
    """Row states ``[R, heads, L, d]`` -> ``[B, heads, W, d]`` at the flat row positions ``gather [B, W]``."""
    flat = states.transpose(1, 2).reshape(-1, states.shape[1], states.shape[3])
    return flat[gather].transpose(1, 2)


def _step_logprobs(step_scores: Sequence[torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Log-probs ``[N, T]`` of ``tokens [N, T]`` under per-step scores (``T`` tensors ``[N, V]``)."""
    columns = [
        torch.log_softmax(s.float(), -1).gather(-1, tokens[:, t, None])[:, 0]
        for t, s in enumerate(step_scores)
    ]
    return torch.stack(columns, 1) if columns else tokens.new_zeros(tokens.shape, dtype=torch.float32)


def new_token_budget(model: Any, kwargs: dict[str, Any], longest: int, seq2seq: bool) -> int:
    """Most tokens a sequence may generate: ``max_new_tokens``, else what ``max_length`` leaves, else the model's, else 64.

    ``max_length`` (the transformers and Lamorel spelling) counts the whole sequence: the longest
    (left-padded) prompt and the new tokens for a causal LM, the decoder start token and the new
    tokens for a seq2seq LM.

    Raises:
        InputError: When ``max_length`` leaves no room for a new token.
    """
    if kwargs.get("max_new_tokens") is not None:
        return int(kwargs["max_new_tokens"])
    max_length = kwargs.get("max_length")
    if max_length is None:
        return int(model.generation_config.max_new_tokens or 64)
    taken = 1 if seq2seq else longest
    if max_length <= taken:
        what = "the decoder start token" if seq2seq else f"the longest context's {longest} tokens"
        raise InputError(
            f"max_length={max_length} leaves no room for a new token after {what}. Fix: pass max_new_tokens "
            "(new tokens only) instead of max_length."
        )
    return int(max_length) - taken


def check_prompts(
    prompts: Sequence[Sequence[int]],
    new_tokens: int,
    window: int | None,
    decoder_limit: tuple[int, str] | None,
) -> None:
    """Refuse empty prompts and prompts whose continuation would run past the model window.

    Checked before anything is allocated: the cache reserves ``new_tokens`` positions per row.

    Args:
        prompts: The prompts' token ids.
        new_tokens: Most new tokens per sequence.
        window: The causal model's window (``None``: none known).
        decoder_limit: For a seq2seq model, the most decoder positions and where that limit comes
            from (:func:`~llmgym.llm.tokenization.decoder_limit`); ``None`` for a causal model.

    Raises:
        InputError: Naming the context, its length, ``max_new_tokens`` and the window.
    """
    for index, prompt in enumerate(prompts):
        if not prompt:
            raise InputError(
                f"contexts[{index}] encodes to no tokens (the tokenizer adds no BOS), so there is nothing to "
                "continue. Fix: pass a non-empty context."
            )
    if decoder_limit is not None:
        limit, source = decoder_limit
        if new_tokens > limit:
            raise InputError(
                f"max_new_tokens={new_tokens} (or the max_length giving it) is more than the {limit} decoder "
                f"positions allowed by {source}. Fix: set max_new_tokens <= {limit}."
            )
        return
    if window is None:
        return
    index = max(range(len(prompts)), key=lambda i: len(prompts[i]))
    length = len(prompts[index])
    if length + new_tokens <= window:
        return
    problem = (
        f"contexts[{index}] has {length} tokens and max_new_tokens={new_tokens} would take it to "
        f"{length + new_tokens}, past the model's context window of {window} tokens."
    )
    if new_tokens >= window:
        raise InputError(
            f"{problem} Fix: set max_new_tokens to at most {window - length} (window less the prompt)."
        )
    raise InputError(
        f"{problem} Fix: lower max_new_tokens to at most {max(0, window - length)}, or set model.max_context_tokens "
        f"to at most {window - new_tokens} so that contexts are truncated to leave room."
    )


#: Given the prompt ids of the rows of one ``model.generate`` call, NLPO's mask function of that call.
MaskFactory = Callable[[Sequence[Sequence[int]]], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]


def _prefix_groups(prefixes: Sequence[Sequence[int]]) -> list[list[int]]:
    """Context indices grouped by decoder-prefix length: each group is one ``model.generate`` call, without decoder padding."""
    groups: dict[int, list[int]] = {}
    for index, prefix in enumerate(prefixes):
        groups.setdefault(len(prefix), []).append(index)
    return list(groups.values())


def generate(
    model: Any,
    tokenizer: Any,
    encoder: TextEncoder,
    contexts: Sequence[str],
    *,
    packed_prefill: bool = True,
    logits_mask: MaskFactory | None = None,
    decoder_prefixes: Sequence[Sequence[int]] | None = None,
    **generation_kwargs: Any,
) -> list[list[Generation]]:
    """Sample continuations of all contexts in one batched ``model.generate`` call (one per decoder-prefix length).

    Args:
        model: A transformers causal or seq2seq LM.
        tokenizer: Its tokenizer.
        encoder: Tokenization settings of the model (special tokens, overflow policy).
        contexts: ``B`` prompt strings (already validated).
        packed_prefill: Prefill causal models' prompts in packed prefix-sharing rows
            (:func:`packed_prompt_cache`); ``False`` leaves the padded prefill to ``generate``.
        logits_mask: NLPO's mask (:class:`~llmgym.llm.masking.MaskLogitsProcessor`): given the
            prompt ids of the rows of one ``model.generate`` call (one per row), the function that,
            given the ``input_ids [R, T]`` so far (left-padded prompt then the generated ids for a
            causal LM; the decoder's ids for a seq2seq LM) and each row's left padding ``[R]``,
            returns the ``[R, V]`` bool tokens that may come next; applied before temperature,
            top-k and top-p, and included in ``Generation.logprobs``. ``None``: no mask.
        decoder_prefixes: Seq2seq models only: per context, decoder token ids to continue after
            (a token-level agent's tokens so far in the episode); the generations hold only the
            new tokens. ``None``: every decoder starts empty.
        **generation_kwargs: Any ``transformers`` generation argument (``max_new_tokens``,
            ``max_length``, turned into the ``max_new_tokens`` it leaves, ``do_sample``, ``temperature``, ``top_p``, ``num_return_sequences``, ``stop_strings``...).

    Returns:
        Per context, ``num_return_sequences`` :class:`Generation` objects.

    Raises:
        InputError: For beam search (its scores are not per-token log-probs), for arguments
            this function sets itself, for sampling arguments out of range
            (:func:`~llmgym.llm.validation.check_generation_kwargs`), for a context that encodes to
            no tokens, or when prompt plus ``max_new_tokens`` (or ``max_length``) would exceed the
            model window (for a seq2seq model: the decoder limit of
            :func:`~llmgym.llm.tokenization.decoder_limit`), or when the request's estimated memory
            (:func:`~llmgym.llm.request_limits.generation_bytes`: contexts x ``num_return_sequences``
            rows of step scores and KV cache) exceeds the memory free on the model's device.
    """
    owned = [k for k in _OWNED_KWARGS if k in generation_kwargs]
    if owned:
        raise InputError(f"generate() sets {owned} itself; remove them from the call.")
    if generation_kwargs.get("num_beams", 1) != 1:
        raise InputError(
            f"num_beams={generation_kwargs['num_beams']} is not supported: beam scores are not per-token "
            "log-probs of sampled ids; use num_beams=1 (sampling or greedy)."
        )
    check_generation_kwargs(generation_kwargs)
    seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
    device = input_device(model)
    prompts = encoder.encode_contexts(encoder.fit_contexts(contexts))
    new_tokens = new_token_budget(
        model, generation_kwargs, max((len(p) for p in prompts), default=0), seq2seq
    )
    check_prompts(
        prompts, new_tokens, encoder.window, decoder_limit(model.config, tokenizer) if seq2seq else None
    )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    kwargs = dict(generation_kwargs)
    if kwargs.pop("max_length", None) is not None:
        kwargs["max_new_tokens"] = new_tokens
    kwargs.setdefault("pad_token_id", pad_id)
    if kwargs.get("stop_strings"):
        kwargs.setdefault("tokenizer", tokenizer)
    repeats = int(kwargs.get("num_return_sequences") or 1)
    check_generation_memory(
        generation_bytes(
            model.config,
            len(prompts) * repeats,
            max((len(p) for p in prompts), default=0),
            new_tokens,
            torch.finfo(model.dtype).bits // 8 if model.dtype.is_floating_point else 4,
        ),
        available_bytes(device),
        len(prompts) * repeats,
        new_tokens,
        repeats,
        str(device),
    )
    prefixes = check_decoder_prefixes(decoder_prefixes, len(prompts), model.config)
    if seq2seq:
        limit, source = decoder_limit(model.config, tokenizer)
        longest_prefix = max((len(p) for p in prefixes), default=0)
        if longest_prefix + new_tokens > limit:
            raise InputError(
                f"a decoder prefix of {longest_prefix} tokens and max_new_tokens={new_tokens} exceed the {limit} decoder "
                f"positions allowed by {source}. Fix: end episodes sooner (env max_tokens) or lower max_new_tokens."
            )
    penalty = kwargs.pop("repetition_penalty", None)
    penalty = None if penalty is None or float(penalty) == 1.0 else float(penalty)
    rows_of: list[int] = [0] * len(prompts)
    token_rows: list[list[int]] = []
    processed_rows: list[torch.Tensor] = []
    raw_rows: list[torch.Tensor] = []
    for group in _prefix_groups(prefixes):
        chosen = [prompts[i] for i in group]
        longest = max(len(p) for p in chosen)
        pads = [longest - len(p) for p in chosen]
        call = dict(kwargs)
        input_ids = torch.tensor(
            [[pad_id] * pad + p for p, pad in zip(chosen, pads)], dtype=torch.long, device=device
        )
        attention_mask = torch.tensor(
            [[0] * pad + [1] * len(p) for p, pad in zip(chosen, pads)], dtype=torch.long, device=device
        )
        if seq2seq and prefixes[group[0]]:
            start = int(model.config.decoder_start_token_id)
            call["decoder_input_ids"] = torch.tensor(
                [[start, *prefixes[i]] for i in group], dtype=torch.long, device=device
            )
        row_pads = [0 if seq2seq else pad for pad in pads for _ in range(repeats)]
        processors: list[LogitsProcessor] = []
        if logits_mask is not None:
            row_prompts = [p for p in chosen for _ in range(repeats)]
            processors.append(MaskLogitsProcessor(logits_mask(row_prompts), row_pads))
        if penalty is not None:
            # llmgym's penalty skips each row's left padding, so a row's distribution is its own (sampling.py)
            processors.append(RepetitionPenaltyProcessor(penalty, row_pads))
        if processors:
            call["logits_processor"] = LogitsProcessorList([*processors, *kwargs.get("logits_processor", [])])
        with torch.inference_mode():
            cache = None
            if packed_prefill and not seq2seq:
                cache = packed_prompt_cache(model, chosen, pad_id, spare=new_tokens + 1)
            if cache is not None:
                if repeats > 1:
                    cache.batch_repeat_interleave(repeats)
                call[cache_kwarg(model)] = cache
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                return_dict_in_generate=True,
                output_scores=True,
                output_logits=True,
                **call,
            )
        steps = len(out.scores)
        tokens = out.sequences[:, out.sequences.shape[1] - steps :]
        for position, index in enumerate(group):
            rows_of[index] = len(token_rows) + position * repeats
        token_rows.extend(tokens.cpu().tolist())
        processed_rows.extend(
            _step_logprobs(out.scores, tokens).cpu().unbind(0)
        )  # one copy each, not one per row
        raw_rows.extend(_step_logprobs(out.logits, tokens).cpu().unbind(0))
    stops = kwargs.get("stop_strings") or []
    stops = [stops] if isinstance(stops, str) else list(stops)
    eos = eos_token_ids(model, kwargs)
    results: list[list[Generation]] = []
    for b, prompt in enumerate(prompts):
        group_out: list[Generation] = []
        for s in range(repeats):
            row = rows_of[b] + s
            ids = token_rows[row]
            keep = generated_length(ids, eos, kwargs["pad_token_id"], stops, tokenizer.decode)
            group_out.append(
                Generation(
                    text=tokenizer.decode(ids[:keep], skip_special_tokens=True),
                    token_ids=ids[:keep],
                    logprobs=processed_rows[row][:keep].clone(),
                    raw_logprobs=raw_rows[row][:keep].clone(),
                    prompt_ids=list(prompt),
                )
            )
        results.append(group_out)
    return results
