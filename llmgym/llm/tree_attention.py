"""Block-sparse attention over packed token trees (prefix-sharing rows of any length).

A packed row (:mod:`llmgym.llm.layout`) is a tree of tokens: each token attends to itself and
its ancestors. A dense prefix-sharing mask makes attention cost ``L^2`` per row, almost all of it
masked out, which is why rows were kept near 512 tokens and lost sharing across rows. Here the
queries of a row are cut into blocks of ``block`` consecutive tokens; a block attends over the
union of its tokens' ancestors, gathered into ``K`` key slots (about the tree depth plus the
block), so attention costs ``L * K`` and a row can hold a whole batch's token trie.

The computation is installed in the model for one forward pass at a time
(:func:`tree_attention_pass`): the model's attention implementation is switched to the
registered ``"llmgym_tree"`` function, which reads the pass's :class:`TreeAttentionPlan`.
Outside such a pass it is plain SDPA attention. :func:`packed_row_attention` chooses between
this and the dense mask for one forward pass over packed rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from llmgym.errors import BackendError, ConfigError, InputError
from llmgym.llm.adapters import base_model
from llmgym.llm.layout import PackedBatch, prefix_sharing_mask

__all__ = [
    "TREE_ATTENTION",
    "TreeAttentionPlan",
    "DENSE_MASK_IMPLEMENTATIONS",
    "ancestor_table",
    "check_packed_attention",
    "reads_dense_mask",
    "token_depths",
    "use_tree_attention",
    "packed_row_attention",
    "plan_tree_attention",
    "supports_tree_attention",
    "tree_attention",
    "tree_attention_pass",
]

#: Name under which the attention function is registered with transformers.
TREE_ATTENTION = "llmgym_tree"

#: Queries per block: small blocks gather fewer keys, large ones make fewer, larger products.
DEFAULT_BLOCK = 64

_ACTIVE_PLAN: ContextVar[TreeAttentionPlan | None] = ContextVar("llmgym_tree_plan", default=None)


@dataclass(frozen=True)
class TreeAttentionPlan:
    """Which keys each query block of a batch of packed rows attends over.

    Attributes:
        key_index: ``[R, n, K]`` row position of every key slot of every block (``n`` blocks of
            ``block`` queries per row; slots past a block's keys repeat a position and are masked).
        allowed: ``[R * n, 1, block, K]`` whether each query of a block may attend to each slot.
        block: Queries per block.
        length: Row length ``L`` (the last block is cut to it).
    """

    key_index: torch.Tensor
    allowed: torch.Tensor
    block: int
    length: int


def ancestor_table(parents: torch.Tensor) -> torch.Tensor:
    """Every token's ancestors by generation.

    Args:
        parents: ``[R, L]`` row index of each token's parent; a token without a parent (a first
            token, a padding token) is its own parent.

    Returns:
        ``[R, L, D]`` long tensor: ``[..., t]`` is the ancestor ``t`` generations up (``t = 0``:
        the token itself), repeating the root once it is reached; ``D`` is the deepest depth + 1.
    """
    rows, length = parents.shape
    current = torch.arange(length, device=parents.device).expand(rows, length)
    depth = token_depths(parents)
    columns = [current]
    for _ in range(int(depth.max()) if depth.numel() else 0):  # the one host sync of the table
        current = parents.gather(1, current)
        columns.append(current)
    return torch.stack(columns, -1)


def token_depths(parents: torch.Tensor) -> torch.Tensor:
    """``[R, L]`` number of ancestors of every token, by pointer jumping (``log2 L`` gathers, no host sync).

    Args:
        parents: ``[R, L]`` parent index of each token (see :func:`ancestor_table`).
    """
    rows, length = parents.shape
    index = torch.arange(length, device=parents.device).expand(rows, length)
    depth = (parents != index).long()
    jump = parents
    for _ in range(max(length - 1, 0).bit_length()):
        depth = depth + depth.gather(1, jump)
        jump = jump.gather(1, jump)
    return depth


def plan_tree_attention(parents: torch.Tensor, block: int = DEFAULT_BLOCK) -> TreeAttentionPlan:
    """Plan block-sparse attention for packed rows: each query block's keys and mask.

    A query block's key slots are the union of its tokens' ancestors and themselves, in row
    order; query ``q`` may attend to slot key ``k`` when ``k`` is ``q`` or one of its ancestors.
    This is exactly the prefix-sharing mask (:func:`llmgym.llm.layout.prefix_sharing_mask`)
    restricted to the keys a block can see.

    Args:
        parents: ``[R, L]`` parent index of each token (see :func:`ancestor_table`).
        block: Queries per block (positive).

    Returns:
        The plan.

    Raises:
        InputError: If ``block`` is not positive.
    """
    if block < 1:
        raise InputError(
            f"block={block}: tree attention needs a positive number of queries per block, e.g. 64."
        )
    rows, length = parents.shape
    device = parents.device
    ancestors = ancestor_table(parents)  # [R, L, D]
    depth = token_depths(parents)  # [R, L]
    blocks = -(-length // block)
    # queries past the row's end (the last block's remainder) stand in for its last token
    query = torch.arange(blocks * block, device=device).clamp(max=length - 1)
    query_ancestors = ancestors[:, query].reshape(rows, blocks, block, -1)  # [R, n, block, D]
    needed = torch.zeros(rows, blocks, length, dtype=torch.bool, device=device)
    needed.scatter_(2, query_ancestors.reshape(rows, blocks, -1), True)
    slots = int(needed.sum(-1).max())
    key_index = torch.sort(needed.to(torch.uint8), dim=-1, descending=True, stable=True).indices[..., :slots]
    slot_used = needed.gather(2, key_index)  # [R, n, K]
    query_depth = depth[:, query].reshape(rows, blocks, block, 1)
    key_depth = depth.gather(1, key_index.reshape(rows, -1)).reshape(rows, blocks, 1, slots)
    up = query_depth - key_depth  # generations from a query up to a slot's depth
    above = query_ancestors.gather(3, up.clamp(min=0).expand(-1, -1, -1, slots).contiguous())
    allowed = (up >= 0) & (above == key_index[:, :, None, :]) & slot_used[:, :, None, :]
    return TreeAttentionPlan(key_index, allowed.reshape(rows * blocks, 1, block, slots), block, length)


def tree_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    plan: TreeAttentionPlan,
    scaling: float | None = None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """Attention of packed rows computed block by block over each block's gathered keys.

    Args:
        query: ``[R, H, L, d]`` query states.
        key: ``[R, Hk, L, d]`` key states (``H`` a multiple of ``Hk``: grouped-query attention).
        value: ``[R, Hk, L, d]`` value states.
        plan: The rows' plan (:func:`plan_tree_attention`).
        scaling: Softmax scale (default ``d ** -0.5``).
        dropout: Attention dropout probability.

    Returns:
        ``[R, L, H, d]`` attention output, the layout transformers' attention functions return.
    """
    rows, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    blocks, slots = plan.key_index.shape[1], plan.key_index.shape[2]
    padded = blocks * plan.block
    queries = F.pad(query, (0, 0, 0, padded - length)) if padded != length else query
    queries = queries.transpose(1, 2).reshape(rows * blocks, plan.block, heads, dim).transpose(1, 2)
    flat = (plan.key_index + torch.arange(rows, device=key.device)[:, None, None] * length).reshape(-1)

    def gathered(states: torch.Tensor) -> torch.Tensor:
        """``[R, Hk, L, d]`` -> ``[R * n, Hk, K, d]``: each block's key slots."""
        picked = states.transpose(1, 2).reshape(rows * length, kv_heads, dim).index_select(0, flat)
        return picked.reshape(rows * blocks, slots, kv_heads, dim).transpose(1, 2)

    def expanded(states: torch.Tensor) -> torch.Tensor:
        """Grouped-query K/V repeated to the query heads: the fused kernels take a mask only without ``enable_gqa``."""
        return states if heads == kv_heads else states.repeat_interleave(heads // kv_heads, dim=1)

    out = F.scaled_dot_product_attention(
        queries,
        expanded(gathered(key)),
        expanded(gathered(value)),
        attn_mask=plan.allowed,
        dropout_p=dropout,
        scale=scaling,
    )
    return out.transpose(1, 2).reshape(rows, padded, heads, dim)[:, :length]


def _tree_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention function for transformers: the active plan's tree attention, else plain SDPA."""
    plan = _ACTIVE_PLAN.get()
    if plan is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if query.shape[2] != plan.length or key.shape[2] != plan.length:
        raise BackendError(
            f"tree attention planned rows of {plan.length} tokens but {type(module).__name__} got "
            f"{query.shape[2]} queries and {key.shape[2]} keys; run only the planned rows inside tree_attention_pass()."
        )
    unsupported = [
        name
        for name in ("softcap", "position_bias", "sliding_window", "s_aux")
        if kwargs.get(name) is not None
    ]
    if unsupported:
        raise BackendError(
            f"tree attention cannot apply {unsupported} of {type(module).__name__}; "
            "supports_tree_attention() should have excluded this model."
        )
    return tree_attention(query, key, value, plan, scaling=scaling, dropout=dropout), None


AttentionInterface.register(TREE_ATTENTION, _tree_attention_forward)


def supports_tree_attention(model: Any) -> bool:
    """Whether :func:`tree_attention_pass` can run ``model``'s packed rows.

    It can for causal transformers models that dispatch attention through transformers'
    attention interface (whatever implementation they were loaded with: the pass swaps it for
    its own), and use no sliding window, logit soft-capping or attention sinks.
    """
    base = base_model(model)
    config = base.config
    if getattr(config, "is_encoder_decoder", False) or not getattr(
        base, "_supports_attention_backend", False
    ):
        return False
    windowed = getattr(config, "sliding_window", None) is not None and getattr(
        config, "use_sliding_window", True
    )
    layer_types = getattr(config, "layer_types", None) or []
    return not (
        windowed
        or any(kind != "full_attention" for kind in layer_types)
        or getattr(config, "attn_logit_softcapping", None) is not None
    )


@contextlib.contextmanager
def tree_attention_pass(model: Any, plan: TreeAttentionPlan) -> Iterator[None]:
    """Run ``model``'s forward passes inside the block with ``plan``'s tree attention.

    Pass ``attention_mask=None`` to the model inside: the plan replaces the mask.

    Args:
        model: A model :func:`supports_tree_attention` accepts (optionally PEFT-wrapped).
        plan: The plan of the rows the forward pass runs.
    """
    config = base_model(model).config
    previous = config._attn_implementation
    token = _ACTIVE_PLAN.set(plan)
    config._attn_implementation = TREE_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = previous
        _ACTIVE_PLAN.reset(token)


#: Attention implementations that read a dense 4-D mask (FlashAttention does not).
DENSE_MASK_IMPLEMENTATIONS = ("sdpa", "eager")


def reads_dense_mask(model: Any) -> bool:
    """Whether ``model``'s attention implementation applies a dense ``[R, 1, L, L]`` mask (SDPA, eager)."""
    return base_model(model).config._attn_implementation in DENSE_MASK_IMPLEMENTATIONS


def check_packed_attention(model: Any) -> None:
    """Refuse a causal model whose packed rows could get neither a dense mask nor tree attention.

    Raises:
        ConfigError: The model runs an attention implementation that cannot read a custom mask
            (``flash_attention_2``...) and tree attention cannot replace it (sliding windows,
            soft-capping, attention sinks, no attention interface).
    """
    config = base_model(model).config
    if (
        getattr(config, "is_encoder_decoder", False)
        or reads_dense_mask(model)
        or supports_tree_attention(model)
    ):
        return
    raise ConfigError(
        f"model.attn_implementation={config._attn_implementation!r} cannot read the prefix-sharing mask of packed "
        f"rows, and {type(base_model(model)).__name__} cannot run llmgym's tree attention instead; set "
        "model.attn_implementation=sdpa (or eager)."
    )


def use_tree_attention(model: Any, length: int, dense_max_tokens: int) -> bool:
    """Whether packed rows of ``length`` tokens attend through tree attention rather than a dense mask.

    Long rows do where the model allows it; so do rows of any length of a model whose attention
    cannot read a dense mask (FlashAttention), which never receives one.

    Raises:
        ConfigError: From :func:`check_packed_attention`.
    """
    check_packed_attention(model)
    if not reads_dense_mask(model):
        return True
    return length > dense_max_tokens and supports_tree_attention(model)


@contextlib.contextmanager
def packed_row_attention(
    model: Any, batch: PackedBatch, dtype: torch.dtype, tree: bool
) -> Iterator[torch.Tensor | None]:
    """Attention of one forward pass over packed rows: yield the ``attention_mask`` to pass the model.

    Args:
        model: The causal model the pass runs.
        batch: The collated rows.
        dtype: Floating dtype of the model's activations (for the dense mask).
        tree: Use block-sparse tree attention (the model must pass :func:`supports_tree_attention`);
            ``False``: a dense prefix-sharing mask.

    Yields:
        The ``[R, 1, L, L]`` prefix-sharing mask, or ``None`` inside a tree-attention pass.
    """
    if not tree:
        yield prefix_sharing_mask(batch, dtype)
        return
    with tree_attention_pass(model, plan_tree_attention(batch.parents)):
        yield None
