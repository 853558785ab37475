"""Frozen-trunk activation cache: the update skips the blocks that training cannot change.

With LoRA on the top blocks only (``model.lora.layers``), every block below the lowest trainable
one computes exactly the same activations when a rollout is collected and in every epoch of the
update on it. :class:`TrunkCache` keeps, for each packed row, the hidden states entering the lowest
trainable block (``[L_row, H]``, the row's real tokens only). Forward passes outside an update run
the whole model and refresh the entries of their rows; forward passes inside an update whose rows
are all cached run only the trainable top blocks, from the cached states.

Why reuse is exact: a row's hidden states at its real tokens do not depend on the other rows of
the batch or on left padding (the prefix-sharing mask hides padding and position ids are explicit),
and the blocks below the boundary have no trainable parameter and no dropout (the model stays in
eval mode), so their output is a function of the row alone.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from llmgym.llm.layout import ItemSpec

__all__ = ["TrunkCache", "decoder_blocks", "frozen_depth", "row_key"]

RowKey = tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]


def row_key(item: ItemSpec) -> RowKey:
    """Hashable identity of an item's packed row (its context and candidate token ids)."""
    return tuple(item.context_ids), tuple(tuple(ids) for ids in item.candidate_ids)


def decoder_blocks(backbone: torch.nn.Module) -> torch.nn.ModuleList | None:
    """The backbone's list of transformer blocks (its longest direct ``ModuleList``), if any."""
    lists = [child for child in backbone.children() if isinstance(child, torch.nn.ModuleList)]
    return max(lists, key=len) if lists else None


def frozen_depth(backbone: torch.nn.Module, blocks: torch.nn.ModuleList) -> int:
    """Number of bottom blocks whose output training cannot change.

    Args:
        backbone: The model without its LM head.
        blocks: Its transformer blocks, bottom first.

    Returns:
        The index of the lowest block with a trainable parameter or an adapter (at most
        ``len(blocks) - 1``), or 0 when a parameter outside the blocks (embeddings, final norm)
        is trainable.
    """
    in_blocks = {id(p) for p in blocks.parameters()}
    if any(p.requires_grad for p in backbone.parameters() if id(p) not in in_blocks):
        return 0
    for index, block in enumerate(blocks):
        if any(p.requires_grad for p in block.parameters()) or _has_adapter(block):
            return index
    return max(len(blocks) - 1, 0)


def _has_adapter(block: torch.nn.Module) -> bool:
    """Whether a block holds PEFT adapter layers (frozen while ``LLM.reference()`` disables them)."""
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return False
    return any(isinstance(module, BaseTunerLayer) for module in block.modules())


class _Passthrough(torch.nn.Module):
    """Stands in for a frozen block whose output is replaced anyway: returns its input."""

    def __init__(self, as_tuple: bool) -> None:
        super().__init__()
        self.as_tuple = as_tuple

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        del args, kwargs
        return (hidden_states,) if self.as_tuple else hidden_states


def _replace_hidden(args: tuple[Any, ...], kwargs: dict[str, Any], hidden: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}


def _input_hidden(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


class TrunkCache:
    """LRU store of per-row hidden states at the input of the lowest trainable block.

    Args:
        max_bytes: Memory budget of the stored states; least recently used rows are dropped
            first. 0 disables the cache.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._rows: OrderedDict[RowKey, torch.Tensor] = OrderedDict()
        self._bytes = 0
        self._depth = -1
        self._as_tuple = False
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored states."""
        return self._bytes

    def clear(self) -> None:
        """Drop every stored row (after the frozen weights change, e.g. on ``load``)."""
        self._rows.clear()
        self._bytes = 0

    def _store(self, key: RowKey, states: torch.Tensor) -> None:
        old = self._rows.pop(key, None)
        if old is not None:
            self._bytes -= old.numel() * old.element_size()
        size = states.numel() * states.element_size()
        if size > self.max_bytes:
            return
        self._rows[key] = states
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, dropped = self._rows.popitem(last=False)
            self._bytes -= dropped.numel() * dropped.element_size()

    @contextlib.contextmanager
    def around(
        self, backbone: torch.nn.Module, items: Sequence[ItemSpec], pads: Sequence[int], *, reuse: bool
    ) -> Iterator[None]:
        """Wrap one backbone forward over packed rows: run from cached states, or record them.

        Args:
            backbone: The model without its LM head.
            items: The items of the forward pass, one packed row each.
            pads: Left padding of each row.
            reuse: Run only the trainable blocks when every row is cached (inside an update);
                otherwise run the whole model and store every row's states.
        """
        blocks = decoder_blocks(backbone) if self.max_bytes > 0 else None
        depth = frozen_depth(backbone, blocks) if blocks is not None else 0
        if blocks is None or depth == 0:
            yield
            return
        if depth != self._depth:
            self.clear()
            self._depth = depth
        keys = [row_key(item) for item in items]
        cached = [self._rows.get(key) for key in keys]
        if reuse and all(states is not None for states in cached):
            self.hits += len(keys)
            for key in keys:
                self._rows.move_to_end(key)
            with self._run_from(blocks, depth, [s for s in cached if s is not None], pads):
                yield
            return
        self.misses += len(keys) if reuse else 0
        with self._record(blocks, depth, keys, pads):
            yield

    @contextlib.contextmanager
    def _run_from(self, blocks: torch.nn.ModuleList, depth: int, states: list[torch.Tensor], pads: Sequence[int]) -> Iterator[None]:
        width = max(len(s) + p for s, p in zip(states, pads))
        first = states[0]
        hidden = first.new_zeros((len(states), width, first.shape[-1]))
        for row, (part, pad) in enumerate(zip(states, pads)):
            hidden[row, pad:] = part

        def feed(_module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
            return _replace_hidden(args, kwargs, hidden)

        frozen = [blocks[i] for i in range(depth)]
        handle = blocks[depth].register_forward_pre_hook(feed, with_kwargs=True)
        try:
            for index in range(depth):
                blocks[index] = _Passthrough(self._as_tuple)
            yield
        finally:
            for index, block in enumerate(frozen):
                blocks[index] = block
            handle.remove()

    @contextlib.contextmanager
    def _record(self, blocks: torch.nn.ModuleList, depth: int, keys: list[RowKey], pads: Sequence[int]) -> Iterator[None]:
        seen: list[torch.Tensor] = []

        def grab(_module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            seen.append(_input_hidden(args, kwargs).detach())

        def note_output(_module: torch.nn.Module, _args: Any, output: Any) -> None:
            self._as_tuple = isinstance(output, tuple)

        handles = [
            blocks[depth].register_forward_pre_hook(grab, with_kwargs=True),
            blocks[depth].register_forward_hook(note_output),
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
        if seen:
            for key, row, pad in zip(keys, seen[0], pads):
                self._store(key, row[pad:].clone())
