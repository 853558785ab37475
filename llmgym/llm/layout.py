"""Pure token-level layout of scoring batches: candidate spans, shared prefixes, packed rows.

Nothing here runs a model. A context with ``k`` candidates becomes one *packed row*: the tokens
all candidates share (their longest common token prefix) once, followed by each candidate's
remaining tokens as a *segment*. A prefix-sharing attention mask lets every segment see the
shared prefix and itself only, and explicit position ids restart each segment where it leaves the
prefix, so every token gets exactly the hidden state it would get in a plain forward pass of its
own sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "ItemSpec",
    "PackedRow",
    "PackedBatch",
    "candidate_start",
    "common_prefix_length",
    "pack_item",
    "collate_rows",
    "prefix_sharing_mask",
    "plan_minibatches",
]


@dataclass(frozen=True)
class ItemSpec:
    """One context and its candidates, as token ids.

    Attributes:
        context_ids: Tokenization of the context alone (what heads on the context see).
        candidate_ids: For each candidate, the joint tokenization of context + candidate.
        candidate_starts: For each candidate, the index in its joint ids of the first candidate
            token (the first token whose character span ends past the end of the context).
    """

    context_ids: list[int]
    candidate_ids: list[list[int]]
    candidate_starts: list[int]


def candidate_start(offsets: Sequence[tuple[int, int]], context_chars: int) -> int:
    """Index of the first token that belongs to the candidate.

    A token belongs to the candidate when its character span ends past the end of the context,
    so a token straddling the boundary (``" go"`` after ``"Action:"``) is a candidate token.

    Args:
        offsets: ``(start, end)`` character offsets of the joint tokenization, one per token.
        context_chars: Number of characters of the context in the joint text.

    Returns:
        The index of the first candidate token, ``len(offsets)`` when there is none.
    """
    for index, (_, end) in enumerate(offsets):
        if end > context_chars:
            return index
    return len(offsets)


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of token sequences (0 for no sequence)."""
    if not sequences:
        return 0
    first = sequences[0]
    length = min(len(s) for s in sequences)
    for index in range(length):
        token = first[index]
        if any(s[index] != token for s in sequences[1:]):
            return index
    return length


@dataclass(frozen=True)
class PackedRow:
    """One item laid out as a shared prefix followed by segments.

    Sequence 0 is the context alone; sequence ``j + 1`` is candidate ``j`` joined to the context.

    Attributes:
        input_ids: Token ids of the row (prefix, then each sequence's own tail).
        position_ids: Position of each token within its own sequence.
        segment_ids: 0 for prefix tokens, ``s + 1`` for tokens of sequence ``s``'s tail.
        visible_prefix: For each token, how many prefix tokens it may attend to.
        attach: For each sequence, how many prefix tokens it shares.
        offsets: For each sequence, the row index where its tail starts.
    """

    input_ids: list[int]
    position_ids: list[int]
    segment_ids: list[int]
    visible_prefix: list[int]
    attach: list[int]
    offsets: list[int]

    def locate(self, sequence: int, index: int) -> int:
        """Row index holding token ``index`` of sequence ``sequence`` (0: the context alone)."""
        if index < self.attach[sequence]:
            return index
        return self.offsets[sequence] + index - self.attach[sequence]


def pack_item(item: ItemSpec) -> PackedRow:
    """Lay one item out as a prefix-shared row.

    The prefix is the longest common token prefix of the candidates' joint tokenizations (the
    context alone when there are no candidates); each sequence adds its tokens past the part
    it shares with the prefix.

    Args:
        item: The context and candidate token ids.

    Returns:
        The packed row.
    """
    sequences = [item.context_ids, *item.candidate_ids]
    reference = item.candidate_ids if item.candidate_ids else [item.context_ids]
    prefix = list(reference[0][: common_prefix_length(reference)])
    input_ids = list(prefix)
    position_ids = list(range(len(prefix)))
    segment_ids = [0] * len(prefix)
    visible = [p + 1 for p in position_ids]
    attach: list[int] = []
    offsets: list[int] = []
    for number, sequence in enumerate(sequences):
        shared = common_prefix_length([prefix, sequence])
        tail = sequence[shared:]
        attach.append(shared)
        offsets.append(len(input_ids))
        input_ids.extend(tail)
        position_ids.extend(range(shared, shared + len(tail)))
        segment_ids.extend([number + 1] * len(tail))
        visible.extend([shared] * len(tail))
    return PackedRow(input_ids, position_ids, segment_ids, visible, attach, offsets)


@dataclass(frozen=True)
class PackedBatch:
    """Left-padded packed rows as tensors.

    Attributes:
        input_ids: ``[R, L]`` token ids (pad id on the left).
        position_ids: ``[R, L]`` explicit positions (0 on padding).
        segment_ids: ``[R, L]`` segment of each token, -1 on padding.
        visible_prefix: ``[R, L]`` number of prefix tokens each token may attend to.
        pad: ``[R]`` number of left-padding tokens of each row.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    visible_prefix: torch.Tensor
    pad: list[int]


def collate_rows(rows: Sequence[PackedRow], pad_token_id: int, device: torch.device) -> PackedBatch:
    """Left-pad packed rows to a common length.

    Args:
        rows: The rows of one forward pass.
        pad_token_id: Id written on padding positions (never attended to).
        device: Device of the returned tensors.

    Returns:
        The padded batch; add ``pad[r]`` to a row index from :meth:`PackedRow.locate`.
    """
    length = max(len(r.input_ids) for r in rows)
    pads = [length - len(r.input_ids) for r in rows]

    def padded(values: list[list[int]], fill: int) -> torch.Tensor:
        data = [[fill] * p + v for p, v in zip(pads, values)]
        return torch.tensor(data, dtype=torch.long, device=device)

    return PackedBatch(
        input_ids=padded([r.input_ids for r in rows], pad_token_id),
        position_ids=padded([r.position_ids for r in rows], 0),
        segment_ids=padded([r.segment_ids for r in rows], -1),
        visible_prefix=padded([r.visible_prefix for r in rows], 0),
        pad=pads,
    )


def prefix_sharing_mask(batch: PackedBatch, dtype: torch.dtype) -> torch.Tensor:
    """Additive 4D attention mask of packed rows.

    A prefix token attends to earlier prefix tokens; a segment token attends to the prefix tokens
    its sequence shares and to earlier tokens of its own segment; a padding token attends only to
    itself (so no row of the softmax is empty) and nobody attends to it.

    Args:
        batch: Collated rows.
        dtype: Floating dtype of the model's activations.

    Returns:
        ``[R, 1, L, L]`` mask holding 0 where attention is allowed and the dtype's minimum elsewhere.
    """
    seg = batch.segment_ids
    length = seg.shape[1]
    index = torch.arange(length, device=seg.device)
    seg_q, seg_k = seg[:, :, None], seg[:, None, :]
    in_prefix = (seg_k == 0) & (batch.position_ids[:, None, :] < batch.visible_prefix[:, :, None])
    causal = index[None, :, None] >= index[None, None, :]
    same_segment = (seg_q == seg_k) & (seg_q > 0) & causal
    diagonal = (index[:, None] == index[None, :])[None]
    allowed = in_prefix | same_segment | diagonal
    mask = torch.zeros(allowed.shape, dtype=dtype, device=seg.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


def plan_minibatches(sizes: Sequence[int], lengths: Sequence[int], minibatch_size: int) -> list[list[int]]:
    """Group items into forward passes of at most ``minibatch_size`` sequences.

    Items are sorted by decreasing row length (so rows of similar length share a pass and little
    padding is computed) and never split: an item larger than ``minibatch_size`` gets a pass of
    its own.

    Args:
        sizes: Number of sequences of each item (its candidates, at least 1).
        lengths: Packed row length of each item.
        minibatch_size: Maximum number of sequences per pass.

    Returns:
        Item indices of each pass.
    """
    order = sorted(range(len(sizes)), key=lambda i: (-lengths[i], i))
    plans: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index in order:
        size = max(1, sizes[index])
        if current and used + size > minibatch_size:
            plans.append(current)
            current, used = [], 0
        current.append(index)
        used += size
    if current:
        plans.append(current)
    return plans
