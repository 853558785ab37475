"""log p(candidate | context) and hidden states, with each context computed once.

Causal models: each context and its candidates form one packed row (shared prefix once, then the
candidates' own tokens) run in a single forward pass with a prefix-sharing 4D attention mask and
explicit position ids (see :mod:`llmgym.llm.layout`). The backbone runs without its LM head; the
head is applied only to the (deduplicated) positions that predict candidate tokens.

Seq2seq models: the encoder runs once per context; the decoder scores all candidates of all
contexts in one batch against the (index-selected) encoder states.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from llmgym.llm.adapters import base_model
from llmgym.llm.layout import (
    ItemSpec,
    PackedRow,
    collate_rows,
    item_length,
    pack_item,
    pack_items,
    plan_minibatches,
    plan_rows,
)
from llmgym.llm.precision import activation_dtype
from llmgym.llm.sampling import Sampling, sampled_logprobs
from llmgym.llm.tokenization import TextEncoder, model_window
from llmgym.llm.tree_attention import packed_row_attention, use_tree_attention
from llmgym.llm.trunk_cache import TrunkCache
from llmgym.llm.validation import check_candidates, check_contexts, check_minibatch_size, check_normalize

__all__ = [
    "ForwardOutputs",
    "Minibatch",
    "input_device",
    "module_device",
    "gather_logprobs",
    "reduce_token_scores",
    "split_causal_lm",
    "forward_items",
    "score_items",
    "score",
]


@dataclass
class Minibatch:
    """What one forward pass computed, as module functions see it.

    Attributes:
        item_indices: Index of each item (context or sample) in the caller's lists.
        tokenized_contexts: Token ids of each context (with special tokens).
        candidate_counts: Number of candidates of each item.
        state_counts: Number of rows of ``ForwardOutputs.context_hidden`` of each item (1 per
            context in ``forward``; one per completion token in ``token_logprobs``).
        input_ids: ``[R, L]`` packed input ids (causal) or encoder ids (seq2seq).
        position_ids: ``[R, L]`` explicit positions (causal) or ``None``.
    """

    item_indices: list[int]
    tokenized_contexts: list[list[int]]
    candidate_counts: list[int]
    state_counts: list[int]
    input_ids: torch.Tensor
    position_ids: torch.Tensor | None


@dataclass
class ForwardOutputs:
    """Hidden states and log-probs of one forward pass.

    Attributes:
        hidden_states: ``[R, L, H]`` last-layer hidden states of the packed rows (causal) or of the
            encoder (seq2seq).
        context_hidden: ``[S, H]`` one row per state: the last token of each context (seq2seq: the
            decoder's state at its start token, which predicts the first decoder token), or (token
            mode) the position that predicts each completion token.
        candidate_hidden: ``[C, H]`` hidden state at the last token of each candidate, all
            candidates of the minibatch in order.
        token_logprobs: ``[N]`` log-prob of every scored candidate token, candidates in order.
        token_counts: Number of scored tokens of each candidate (sums to ``N``).
    """

    hidden_states: torch.Tensor
    context_hidden: torch.Tensor
    candidate_hidden: torch.Tensor
    token_logprobs: torch.Tensor
    token_counts: list[int]

    def to(self, device: torch.device) -> ForwardOutputs:
        """These outputs on ``device`` (``self`` when they are there already), e.g. a head's device."""
        if self.context_hidden.device == device and self.token_logprobs.device == device:
            return self
        return ForwardOutputs(
            self.hidden_states.to(device, non_blocking=True),
            self.context_hidden.to(device, non_blocking=True),
            self.candidate_hidden.to(device, non_blocking=True),
            self.token_logprobs.to(device, non_blocking=True),
            self.token_counts,
        )


def input_device(model: Any) -> torch.device:
    """Device of the model's input embeddings: where its input ids go (the first GPU of a sharded model)."""
    embeddings = base_model(model).get_input_embeddings()
    weight = getattr(embeddings, "weight", None)
    return weight.device if isinstance(weight, torch.Tensor) else next(model.parameters()).device


def module_device(module: torch.nn.Module) -> torch.device | None:
    """Device of a module's first parameter or buffer, or ``None`` when it has neither."""
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return None


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-softmax of logits (in fp32) gathered at target ids.

    Args:
        logits: ``[N, V]`` unnormalised scores.
        targets: ``[N]`` token ids.

    Returns:
        ``[N]`` float32 log-probs.
    """
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[:, None]).squeeze(-1)


def reduce_token_scores(
    token_logprobs: torch.Tensor, token_counts: Sequence[int], normalize: str
) -> torch.Tensor:
    """Sum (or average) per-token log-probs into one score per candidate.

    Args:
        token_logprobs: ``[N]`` log-probs of all candidate tokens, candidates in order.
        token_counts: Tokens of each candidate (``C`` entries summing to ``N``, each > 0).
        normalize: ``"sum"`` or ``"mean"``.

    Returns:
        ``[C]`` scores.
    """
    token_counts = list(token_counts)
    counts = torch.tensor(token_counts, dtype=torch.long).to(token_logprobs.device, non_blocking=True)
    # output_size known on the host: no GPU sync to size the result
    owner = torch.repeat_interleave(
        torch.arange(len(counts), device=counts.device), counts, output_size=sum(token_counts)
    )
    totals = torch.zeros(len(counts), dtype=token_logprobs.dtype, device=token_logprobs.device)
    totals = totals.index_add(0, owner, token_logprobs)
    return totals / counts.to(totals.dtype) if normalize == "mean" else totals


#: Rows up to this length attend through a dense prefix-sharing mask; longer ones (a large
#: ``row_tokens``, or one long context) through block-sparse tree attention where the model allows
#: it (:mod:`llmgym.llm.tree_attention`), whose cost grows linearly with the row.
DENSE_MASK_MAX_TOKENS = 1024


def split_causal_lm(model: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Return the backbone (no LM head) and the LM head of a causal LM, PEFT-wrapped or not."""
    base = base_model(model)
    return getattr(base, base.base_model_prefix), base.get_output_embeddings()


def layout_rows(items: Sequence[ItemSpec], row_tokens: int) -> tuple[list[list[int]], list[PackedRow]]:
    """Rows of one forward pass: the item indices each holds, and the packed rows.

    Args:
        items: The items of the pass.
        row_tokens: 0 for one item per row (:func:`pack_item`); otherwise token-trie rows of about
            this many tokens (:func:`plan_rows`, :func:`pack_items`).
    """
    if row_tokens <= 0:
        return [[i] for i in range(len(items))], [pack_item(item) for item in items]
    groups = plan_rows(items, [item_length(item) for item in items], row_tokens)
    return groups, [pack_items([items[i] for i in group]) for group in groups]


def row_length(item: ItemSpec, row_tokens: int) -> int:
    """Tokens of an item laid out alone in the layout ``row_tokens`` selects (see :func:`layout_rows`)."""
    return item_length(item) if row_tokens > 0 else len(pack_item(item).input_ids)


def _forward_causal(
    model: Any,
    items: Sequence[ItemSpec],
    pad_token_id: int,
    token_mode: bool,
    trunk_cache: TrunkCache | None,
    row_tokens: int,
    sampling: Sampling | None,
    keep: torch.Tensor | None,
    seen: torch.Tensor | None = None,
) -> tuple[ForwardOutputs, torch.Tensor, torch.Tensor]:
    backbone, head = split_causal_lm(model)
    groups, rows = layout_rows(items, row_tokens)
    batch = collate_rows(rows, pad_token_id, input_device(model))
    tree = use_tree_attention(model, batch.input_ids.shape[1], DENSE_MASK_MAX_TOKENS)
    trunk = (
        trunk_cache.around(backbone, items, groups, rows, batch.pad)
        if trunk_cache is not None
        else contextlib.nullcontext()
    )
    with (
        trunk,
        packed_row_attention(
            model, batch, activation_dtype(batch.input_ids.device, next(head.parameters()).dtype), tree
        ) as mask,
    ):
        hidden = backbone(
            input_ids=batch.input_ids, attention_mask=mask, position_ids=batch.position_ids, use_cache=False
        ).last_hidden_state
    # A sharded model (Accelerate) leaves the last hidden state on its last GPU: every index below is
    # built where the tensor it selects from lives, and the head's input moves to the head.
    device = hidden.device
    length = hidden.shape[1]
    flat = hidden.reshape(-1, hidden.shape[-1])
    where = {index: (r, slot) for r, group in enumerate(groups) for slot, index in enumerate(group)}
    predict: list[int] = []
    targets: list[int] = []
    counts: list[int] = []
    last: list[int] = []
    states: list[int] = []
    for number, item in enumerate(items):
        r, slot = where[number]
        row = rows[r]
        base = r * length + batch.pad[r]
        for j, (ids, start) in enumerate(zip(item.candidate_ids, item.candidate_starts)):
            positions = [base + row.locate(slot, j + 1, i - 1) for i in range(start, len(ids))]
            predict.extend(positions)
            targets.extend(ids[start:])
            counts.append(len(ids) - start)
            last.append(base + row.locate(slot, j + 1, len(ids) - 1))
            if token_mode:
                states.extend(positions)
        if not token_mode:
            states.append(base + row.locate(slot, 0, len(item.context_ids) - 1))
    # Deduplicated on the host (the positions are Python ints): torch.unique would sync with the GPU.
    distinct = sorted(set(predict))
    rank = {position: i for i, position in enumerate(distinct)}
    unique = torch.tensor(distinct, dtype=torch.long).to(device, non_blocking=True)
    head_device = module_device(head) or device
    logits = head(flat[unique].to(head_device, non_blocking=True))
    inverse = torch.tensor([rank[p] for p in predict], dtype=torch.long).to(logits.device, non_blocking=True)
    target = torch.tensor(targets, dtype=torch.long).to(logits.device, non_blocking=True)
    if sampling is None and keep is None:
        logprobs = torch.log_softmax(logits.float(), dim=-1)[inverse, target]
    else:
        keep = None if keep is None else keep.to(logits.device, non_blocking=True)
        seen = None if seen is None else seen.to(logits.device, non_blocking=True)
        logprobs = sampled_logprobs(logits[inverse], target, sampling, keep, seen)
    outputs = ForwardOutputs(
        hidden_states=hidden,
        context_hidden=flat[torch.tensor(states, dtype=torch.long).to(device, non_blocking=True)],
        candidate_hidden=flat[torch.tensor(last, dtype=torch.long).to(device, non_blocking=True)],
        token_logprobs=logprobs,
        token_counts=counts,
    )
    return outputs, batch.input_ids, batch.position_ids


def _forward_seq2seq(
    model: Any,
    items: Sequence[ItemSpec],
    pad_token_id: int,
    token_mode: bool,
    sampling: Sampling | None,
    keep: torch.Tensor | None,
) -> tuple[ForwardOutputs, torch.Tensor, None]:
    """The encoder once per context, the decoder over every candidate's decoder ids in one batch.

    A candidate's ids are its decoder tokens; those before its ``candidate_starts`` entry are a
    decoder prefix (the tokens a token-level agent generated earlier in the episode): fed, not
    scored. A context's state (``token_mode=False``) is the decoder's at the start token, the state
    that predicts the first decoder token, so a value head sees there what it sees before a
    completion's first token in ``token_mode``.
    """
    from transformers.modeling_outputs import BaseModelOutput

    device = input_device(model)
    width = max(len(item.context_ids) for item in items)
    enc_ids = torch.tensor(
        [[pad_token_id] * (width - len(it.context_ids)) + it.context_ids for it in items],
        dtype=torch.long,
        device=device,
    )
    enc_mask = torch.tensor(
        [[0] * (width - len(it.context_ids)) + [1] * len(it.context_ids) for it in items],
        dtype=torch.long,
        device=device,
    )
    encoded = model.get_encoder()(input_ids=enc_ids, attention_mask=enc_mask).last_hidden_state
    # Every item gets a decoder row: its candidates, or the start token alone for its context state.
    owners = [r for r, item in enumerate(items) for _ in (item.candidate_ids or [[]])]
    sequences = [ids for item in items for ids in (item.candidate_ids or [[]])]
    starts = [s for item in items for s in (item.candidate_starts or [0])]
    first_row = [0]
    for item in items[:-1]:
        first_row.append(first_row[-1] + max(len(item.candidate_ids), 1))
    start_id = model.config.decoder_start_token_id
    dec_len = max(len(s) for s in sequences) + 1
    dec_ids = torch.tensor(
        [[start_id, *s] + [pad_token_id] * (dec_len - 1 - len(s)) for s in sequences], device=device
    )
    dec_mask = torch.tensor(
        [[1] * (len(s) + 1) + [0] * (dec_len - 1 - len(s)) for s in sequences], device=device
    )
    select = torch.tensor(owners, dtype=torch.long).to(encoded.device, non_blocking=True)
    out = model(
        encoder_outputs=BaseModelOutput(last_hidden_state=encoded.index_select(0, select)),
        attention_mask=enc_mask.index_select(0, select.to(device, non_blocking=True)),
        decoder_input_ids=dec_ids,
        decoder_attention_mask=dec_mask,
        output_hidden_states=True,
        use_cache=False,
    )
    decoder_hidden = out.decoder_hidden_states[-1]
    hidden_device = decoder_hidden.device
    real = [
        (c, s, start) for c, (s, start) in enumerate(zip(sequences, starts)) if items[owners[c]].candidate_ids
    ]
    rows = torch.tensor([c for c, s, start in real for _ in range(start, len(s))], dtype=torch.long)
    cols = torch.tensor([j for _, s, start in real for j in range(start, len(s))], dtype=torch.long)
    on_logits = out.logits.device
    target = torch.tensor([t for _, s, start in real for t in s[start:]], dtype=torch.long).to(
        on_logits, non_blocking=True
    )
    logprobs = sampled_logprobs(
        out.logits[rows.to(on_logits, non_blocking=True), cols.to(on_logits, non_blocking=True)],
        target,
        sampling,
        None if keep is None else keep.to(on_logits, non_blocking=True),
    )
    lengths = torch.tensor([len(s) for _, s, _ in real], dtype=torch.long).to(
        hidden_device, non_blocking=True
    )
    candidate_rows = torch.tensor([c for c, _, _ in real], dtype=torch.long).to(
        hidden_device, non_blocking=True
    )
    last = decoder_hidden[candidate_rows, lengths]
    if token_mode:
        context_hidden = decoder_hidden[
            rows.to(hidden_device, non_blocking=True), cols.to(hidden_device, non_blocking=True)
        ]
    else:
        context_hidden = decoder_hidden[
            torch.tensor(first_row, dtype=torch.long).to(hidden_device, non_blocking=True), 0
        ]
    outputs = ForwardOutputs(
        encoded, context_hidden, last, logprobs, [len(s) - start for _, s, start in real]
    )
    return outputs, enc_ids, None


def forward_items(
    model: Any,
    items: Sequence[ItemSpec],
    pad_token_id: int,
    *,
    is_seq2seq: bool,
    token_mode: bool = False,
    trunk_cache: TrunkCache | None = None,
    row_tokens: int = 0,
    sampling: Sampling | None = None,
    keep: torch.Tensor | None = None,
    seen: torch.Tensor | None = None,
) -> tuple[ForwardOutputs, torch.Tensor, torch.Tensor | None]:
    """Run one forward pass over items (under the caller's grad mode).

    Args:
        model: A transformers causal or seq2seq LM (optionally PEFT-wrapped).
        items: The contexts and candidates, as token ids.
        pad_token_id: Id used on padding positions.
        is_seq2seq: Whether the model is an encoder-decoder.
        token_mode: States are the positions predicting each candidate token instead of the last
            context token (used by ``token_logprobs``).
        trunk_cache: Frozen-trunk activation cache of causal models (``None``: no cache); the pass
            runs from it when it holds every item, and records the items otherwise.
        row_tokens: Causal models: 0 lays each item out in a row of its own; a positive value
            packs items into token-trie rows of about that many tokens (see :func:`layout_rows`).
        sampling: Score candidate tokens under this sampling distribution
            (:func:`~llmgym.llm.sampling.sampled_logprobs`); ``None``: the model's own.
        keep: ``[N, V]`` bool NLPO mask of the ``N`` candidate tokens, in item, candidate and token
            order (:meth:`~llmgym.llm.masking.MaskPolicy.keep_masks`); for causal models also EOS
            forbidden before ``sampling.min_new_tokens`` (:func:`~llmgym.llm.sampling.history_masks`).
        seen: Causal models only: ``[N, V]`` bool tokens seen before each candidate token, for
            ``sampling.repetition_penalty`` (:func:`~llmgym.llm.sampling.history_masks`).

    Returns:
        ``(outputs, input_ids [R, L], position_ids [R, L] or None)``.
    """
    if is_seq2seq:
        return _forward_seq2seq(model, items, pad_token_id, token_mode, sampling, keep)
    return _forward_causal(
        model, items, pad_token_id, token_mode, trunk_cache, row_tokens, sampling, keep, seen
    )


def score_items(
    model: Any,
    items: Sequence[ItemSpec],
    pad_token_id: int,
    *,
    is_seq2seq: bool,
    normalize: str = "sum",
    minibatch_size: int = 64,
    row_tokens: int = 0,
    max_tokens: int = 0,
) -> list[torch.Tensor]:
    """Score tokenized items in minibatches, without gradients.

    Args:
        model: A transformers causal or seq2seq LM.
        items: The contexts and candidates, as token ids.
        pad_token_id: Id used on padding positions.
        is_seq2seq: Whether the model is an encoder-decoder.
        normalize: ``"sum"`` or ``"mean"`` over candidate tokens.
        minibatch_size: Maximum number of context-candidate sequences per forward pass.
        row_tokens: Row layout of causal models (see :func:`layout_rows`).
        max_tokens: Maximum tokens per forward pass (:func:`~llmgym.llm.layout.plan_minibatches`); 0: no bound.

    Returns:
        Per item, a float32 CPU tensor ``[k]`` of candidate log-probs.
    """
    results: list[torch.Tensor] = [torch.zeros(0) for _ in items]
    lengths = [row_length(item, row_tokens) for item in items]
    plans = plan_minibatches([len(item.candidate_ids) for item in items], lengths, minibatch_size, max_tokens)
    with torch.inference_mode():
        for plan in plans:
            chosen = [items[i] for i in plan if items[i].candidate_ids]
            if not chosen:
                continue
            outputs, _, _ = forward_items(
                model, chosen, pad_token_id, is_seq2seq=is_seq2seq, row_tokens=row_tokens
            )
            scores = reduce_token_scores(outputs.token_logprobs, outputs.token_counts, normalize).cpu()
            for index, part in zip(
                [i for i in plan if items[i].candidate_ids],
                scores.split([len(c.candidate_ids) for c in chosen]),
            ):
                results[index] = part.clone()
    return results


def score(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[str],
    candidates: Sequence[Sequence[str]],
    *,
    normalize: str = "sum",
    add_eos: bool = False,
    minibatch_size: int = 64,
    max_context_tokens: int | None = None,
    context_overflow: str = "truncate_left",
    row_tokens: int = 0,
) -> list[torch.Tensor]:
    """Score log p(candidate | context) for every candidate of every context.

    Args:
        model: A transformers causal or seq2seq LM.
        tokenizer: Its fast tokenizer.
        contexts: ``B`` context strings.
        candidates: For each context, ``k_i >= 0`` non-empty candidate strings.
        normalize: ``"sum"`` (log-prob of the whole candidate) or ``"mean"`` (per token).
        add_eos: Score candidate + EOS (the completed action) instead of the candidate as a prefix.
        minibatch_size: Maximum number of context-candidate sequences per forward pass.
        max_context_tokens: Longest context in tokens; defaults to the model window.
        context_overflow: ``"truncate_left"`` (warn) or ``"error"`` for longer contexts.
        row_tokens: Row layout of causal models (see :func:`layout_rows`).

    Returns:
        Per context, a float32 CPU tensor ``[k_i]``.

    Raises:
        InputError: On malformed inputs or contexts too long with ``context_overflow="error"``.
    """
    contexts = check_contexts(contexts)
    groups = check_candidates(candidates, len(contexts))
    normalize = check_normalize(normalize)
    minibatch_size = check_minibatch_size(minibatch_size)
    is_seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
    window = model_window(model.config)
    encoder = TextEncoder(tokenizer, is_seq2seq, max_context_tokens or window, context_overflow, window)
    items = encoder.encode_items(encoder.fit_contexts(contexts), groups, add_eos)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return score_items(
        model,
        items,
        pad,
        is_seq2seq=is_seq2seq,
        normalize=normalize,
        minibatch_size=minibatch_size,
        row_tokens=row_tokens,
    )
