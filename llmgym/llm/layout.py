"""Pure token-level layout of scoring batches: candidate spans, shared prefixes, packed rows.

Nothing here runs a model. The sequences of a forward pass (each context alone and joined to
each of its candidates) are laid out in *packed rows*, trees of tokens in which a prefix that
sequences share is computed once: one item per row (:func:`pack_item`: the candidates' common
prefix, then each sequence's tail), or several items per row as a token trie (:func:`pack_items`:
every shared prefix once, e.g. a system prompt that several contexts start with; items grouped
into balanced rows by :func:`plan_rows`, so little padding is computed). A prefix-sharing
attention mask lets every token see exactly the earlier tokens of its own sequences, and explicit
position ids give each token its position in them, so every token gets the hidden state it would
get in a plain forward pass of its own sequence.
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
    "pack_items",
    "item_length",
    "collate_rows",
    "prefix_sharing_mask",
    "plan_rows",
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
    """One or more items laid out as a tree of tokens.

    Every sequence of every item (sequence 0: the context alone; sequence ``j + 1``: candidate
    ``j`` joined to the context) is a root-to-node path, so a token prefix shared by sequences is
    computed once, and a token attends to exactly its ancestors and itself: the earlier tokens of
    its own sequences.

    Attributes:
        input_ids: Token id of each node.
        position_ids: Depth of each node: its position in every sequence through it.
        parents: Row index of each node's parent (-1 for a first token).
        paths: For each item of the row, for each of its sequences, the row index of each token.
        item_nodes: For each item, the sorted row indices of all its nodes. Their order depends on
            the item alone, not on the other items of the row.
    """

    input_ids: list[int]
    position_ids: list[int]
    parents: list[int]
    paths: list[list[list[int]]]
    item_nodes: list[list[int]]

    def locate(self, item: int, sequence: int, index: int) -> int:
        """Row index holding token ``index`` of sequence ``sequence`` (0: the context alone) of ``item``."""
        return self.paths[item][sequence][index]


def pack_item(item: ItemSpec) -> PackedRow:
    """Lay one item out as a row: its candidates' common prefix once, then each sequence's tail.

    The prefix is the longest common token prefix of the candidates' joint tokenizations (the
    context alone when there are no candidates); each sequence adds its tokens past the part it
    shares with the prefix, in order. Tails are not merged with each other.

    Args:
        item: The context and candidate token ids.

    Returns:
        The packed row (one item).
    """
    sequences = [item.context_ids, *item.candidate_ids]
    reference = item.candidate_ids if item.candidate_ids else [item.context_ids]
    prefix = list(reference[0][: common_prefix_length(reference)])
    input_ids = list(prefix)
    position_ids = list(range(len(prefix)))
    parents = list(range(-1, len(prefix) - 1))
    paths: list[list[int]] = []
    for sequence in sequences:
        shared = common_prefix_length([prefix, sequence])
        tail = sequence[shared:]
        start = len(input_ids)
        input_ids.extend(tail)
        position_ids.extend(range(shared, shared + len(tail)))
        parents.extend([shared - 1] + list(range(start, start + len(tail) - 1)) if tail else [])
        paths.append(list(range(shared)) + list(range(start, start + len(tail))))
    return PackedRow(input_ids, position_ids, parents, [paths], [list(range(len(input_ids)))])


def pack_items(items: Sequence[ItemSpec]) -> PackedRow:
    """Lay items out as one row holding their token trie, depth first (children by token id).

    Every prefix shared by sequences, of one item or of several, is computed once.

    Args:
        items: The items of the row, as token ids.

    Returns:
        The packed row; item ``i`` of the row is ``items[i]``.
    """
    tokens: list[int] = [-1]  # node 0 is the virtual root
    parents: list[int] = [-1]
    children: list[dict[int, int]] = [{}]
    node_paths: list[list[list[int]]] = []
    for item in items:
        item_paths: list[list[int]] = []
        for sequence in (item.context_ids, *item.candidate_ids):
            node, path = 0, []
            for token in sequence:
                child = children[node].get(token)
                if child is None:
                    child = len(tokens)
                    tokens.append(token)
                    parents.append(node)
                    children.append({})
                    children[node][token] = child
                node = child
                path.append(node)
            item_paths.append(path)
        node_paths.append(item_paths)
    where = [-1] * len(tokens)
    input_ids: list[int] = []
    position_ids: list[int] = []
    row_parents: list[int] = []
    stack = [(child, 0) for _, child in sorted(children[0].items(), reverse=True)]
    while stack:
        node, depth = stack.pop()
        where[node] = len(input_ids)
        input_ids.append(tokens[node])
        position_ids.append(depth)
        row_parents.append(where[parents[node]])
        stack.extend((child, depth + 1) for _, child in sorted(children[node].items(), reverse=True))
    paths = [[[where[n] for n in path] for path in item_paths] for item_paths in node_paths]
    item_nodes = [sorted({i for path in item_paths for i in path}) for item_paths in paths]
    return PackedRow(input_ids, position_ids, row_parents, paths, item_nodes)


def item_length(item: ItemSpec) -> int:
    """Number of tokens of an item laid out alone (its distinct sequence prefixes)."""
    return len(pack_items([item]).input_ids)


@dataclass(frozen=True)
class PackedBatch:
    """Left-padded packed rows as tensors.

    Attributes:
        input_ids: ``[R, L]`` token ids (pad id on the left).
        position_ids: ``[R, L]`` explicit positions (0 on padding).
        parents: ``[R, L]`` index of each token's parent; a first token or a padding token is its
            own parent.
        pad: ``[R]`` number of left-padding tokens of each row.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    parents: torch.Tensor
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

    parents = [
        list(range(p)) + [p + (parent if parent >= 0 else i) for i, parent in enumerate(r.parents)]
        for p, r in zip(pads, rows)
    ]
    return PackedBatch(
        input_ids=padded([r.input_ids for r in rows], pad_token_id),
        position_ids=padded([r.position_ids for r in rows], 0),
        parents=torch.tensor(parents, dtype=torch.long, device=device),
        pad=pads,
    )


def prefix_sharing_mask(batch: PackedBatch, dtype: torch.dtype) -> torch.Tensor:
    """Additive 4D attention mask of packed rows.

    Query ``q`` may attend to key ``k`` when ``k`` is ``q`` or one of its ancestors: an earlier
    token of every sequence through ``q``. A padding token is its own parent, so it attends only
    to itself (no row of the softmax is empty) and nobody attends to it.

    Args:
        batch: Collated rows.
        dtype: Floating dtype of the model's activations.

    Returns:
        ``[R, 1, L, L]`` mask holding 0 where attention is allowed and the dtype's minimum elsewhere.
    """
    rows, length = batch.parents.shape
    index = torch.arange(length, device=batch.parents.device)
    allowed = (index[:, None] == index[None, :]).expand(rows, length, length).clone()
    jump = batch.parents  # after step k: each token's ancestor 2**k generations up (roots stay put)
    for _ in range((length - 1).bit_length()):  # pointer doubling: 2**steps - 1 >= the deepest depth
        allowed |= allowed.gather(1, jump[..., None].expand(rows, length, length))
        jump = jump.gather(1, jump)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


def plan_rows(items: Sequence[ItemSpec], lengths: Sequence[int], row_tokens: int) -> list[list[int]]:
    """Group the items of one forward pass into balanced rows of about ``row_tokens`` tokens.

    The pass gets as many rows as its tokens fill at ``max(row_tokens, longest item)`` tokens each
    (a prefix common to all contexts counted once per row); items, longest first, each join the
    row that is shortest after adding them, counting the context prefix they share with that
    row's first item once. Balanced rows leave little padding, and the row length bounds the
    quadratic cost of attention over a row.

    Args:
        items: The items of the pass.
        lengths: Each item's length laid out alone (:func:`item_length`).
        row_tokens: Target row length in tokens (0: the longest item's).

    Returns:
        Item indices (into ``items``) of each non-empty row.
    """
    if not items:
        return []
    capacity = max([row_tokens, *lengths])
    shared = common_prefix_length([item.context_ids for item in items])
    count = max(1, -(-sum(length - shared for length in lengths) // max(capacity - shared, 1)))
    order = sorted(range(len(items)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count

    def cost(row: list[int], index: int) -> int:
        """Tokens ``index`` adds to ``row``: its length less the context prefix it shares with the row's first item."""
        return lengths[index] - (
            common_prefix_length([items[row[0]].context_ids, items[index].context_ids]) if row else 0
        )

    for index in order:
        costs = [cost(row, index) for row in rows]
        number = min(range(count), key=lambda n: (loads[n] + costs[n], n))
        loads[number] += costs[number]
        rows[number].append(index)
    return [row for row in rows if row]


def plan_minibatches(
    sizes: Sequence[int], lengths: Sequence[int], minibatch_size: int, max_tokens: int = 0
) -> list[list[int]]:
    """Group items into forward passes of at most ``minibatch_size`` sequences and ``max_tokens`` tokens.

    Items are sorted by decreasing row length (so rows of similar length share a pass and little
    padding is computed) and never split: an item larger than ``minibatch_size`` or ``max_tokens``
    gets a pass of its own.

    Args:
        sizes: Number of sequences of each item (its candidates, at least 1).
        lengths: Packed row length of each item.
        minibatch_size: Maximum number of sequences per pass.
        max_tokens: Maximum sum of ``lengths`` per pass (a bound on its activations' memory,
            whatever the sequences' lengths); 0: no bound.

    Returns:
        Item indices of each pass.
    """
    order = sorted(range(len(sizes)), key=lambda i: (-lengths[i], i))
    plans: list[list[int]] = []
    current: list[int] = []
    used = tokens = 0
    for index in order:
        size = max(1, sizes[index])
        over_tokens = max_tokens > 0 and tokens + lengths[index] > max_tokens
        if current and (used + size > minibatch_size or over_tokens):
            plans.append(current)
            current, used, tokens = [], 0, 0
        current.append(index)
        used += size
        tokens += lengths[index]
    if current:
        plans.append(current)
    return plans
