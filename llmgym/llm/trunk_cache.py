"""Frozen-trunk activation cache: forward passes skip the blocks that training cannot change.

With LoRA on the top blocks only (``model.lora.layers``), every block below the lowest trainable
one computes exactly the same activations for an item (a context and its candidates) whenever it
is seen: when a rollout is collected, in every epoch of the update on it, and in later rollouts
that meet the same observation again (a step that changes nothing in the environment gives the
same prompt). :class:`TrunkCache` keeps, for each item, the hidden states entering the lowest
trainable block at each of the item's tokens (``[N_item, H]``, in the item's own order:
:attr:`PackedRow.item_nodes`). A forward pass whose items are all cached runs only the trainable
top blocks, from the cached states scattered into the pass's rows; any other pass runs the whole
model and stores its items' states. The backend groups cached and uncached items into separate
passes, so every cached item is reused.

Why reuse is exact: a token's hidden state depends only on the tokens of its own sequences (the
prefix-sharing mask hides everything else, including padding and the other items of its row, and
position ids are explicit), and the blocks below the boundary have no trainable parameter and no
dropout (the model stays in eval mode), so their output at a token is a function of the item and
of the frozen weights alone. The cache notes the version counter of every frozen weight and is
emptied when one changes (an in-place edit, ``load_state_dict``), or when the boundary moves.
The states are equal to a fresh computation up to the rounding of a differently packed pass;
:meth:`LocalLLM.save` and ``load`` empty the cache, so a run resumed from a checkpoint
computes exactly what the run that wrote it computed next.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from llmgym.llm.layout import ItemSpec, PackedRow

__all__ = ["TrunkCache", "decoder_blocks", "frozen_depth", "frozen_versions", "row_key"]

RowKey = tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]


def row_key(item: ItemSpec) -> RowKey:
    """Hashable identity of an item (its context and candidate token ids)."""
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


def frozen_versions(
    backbone: torch.nn.Module, blocks: torch.nn.ModuleList, depth: int
) -> tuple[tuple[int, int], ...]:
    """Identity and version counter of every tensor the cached states depend on.

    Args:
        backbone: The model without its LM head.
        blocks: Its transformer blocks, bottom first.
        depth: Number of frozen bottom blocks (:func:`frozen_depth`).

    Returns:
        ``(id, version)`` of each parameter and buffer of the backbone outside ``blocks[depth:]``;
        an in-place change of any of them (``copy_``, ``mul_``, ``load_state_dict``) changes it.
    """
    above = {id(t) for block in blocks[depth:] for t in (*block.parameters(), *block.buffers())}
    tensors = (*backbone.parameters(), *backbone.buffers())
    return tuple((id(t), t._version) for t in tensors if id(t) not in above)


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


def _replace_hidden(
    args: tuple[Any, ...], kwargs: dict[str, Any], hidden: torch.Tensor
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}


def _input_hidden(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


class TrunkCache:
    """LRU store of per-item hidden states at the input of the lowest trainable block.

    Args:
        max_bytes: Memory budget of the stored states; least recently used items are dropped
            first. 0 disables the cache.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._rows: OrderedDict[RowKey, torch.Tensor] = OrderedDict()
        self._bytes = 0
        self._depth = -1
        self._versions: tuple[tuple[int, int], ...] = ()
        self._as_tuple = False
        self.hits = 0  # items of passes that ran from the cache
        self.misses = 0  # items of passes that ran the whole model

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored states."""
        return self._bytes

    def clear(self) -> None:
        """Drop every stored item (after the frozen weights change, e.g. on ``load``)."""
        self._rows.clear()
        self._bytes = 0

    def holds(self, item: ItemSpec) -> bool:
        """Whether the states of ``item`` are stored (a pass of such items can run from the cache)."""
        return row_key(item) in self._rows

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
        self,
        backbone: torch.nn.Module,
        items: Sequence[ItemSpec],
        groups: Sequence[Sequence[int]],
        rows: Sequence[PackedRow],
        pads: Sequence[int],
    ) -> Iterator[None]:
        """Wrap one backbone forward over packed rows: run from cached states, or record them.

        When every item is cached, only the trainable blocks run; otherwise the whole model runs
        and every item's states are stored.

        Args:
            backbone: The model without its LM head.
            items: The items of the forward pass.
            groups: For each row, the indices in ``items`` of the items it holds.
            rows: The packed rows (item ``s`` of row ``r`` is ``items[groups[r][s]]``).
            pads: Left padding of each row.
        """
        blocks = decoder_blocks(backbone) if self.max_bytes > 0 else None
        depth = frozen_depth(backbone, blocks) if blocks is not None else 0
        if blocks is None or depth == 0:
            yield
            return
        versions = frozen_versions(backbone, blocks, depth)
        if depth != self._depth or versions != self._versions:
            self.clear()
            self._depth, self._versions = depth, versions
        keys = [row_key(item) for item in items]
        cached = [self._rows.get(key) for key in keys]
        spots = [
            (r, pads[r], row.item_nodes[slot], groups[r][slot])
            for r, row in enumerate(rows)
            for slot in range(len(groups[r]))
        ]
        present = [states for states in cached if states is not None]
        if len(present) == len(cached):
            self.hits += len(keys)
            for key in keys:
                self._rows.move_to_end(key)
            width = len(rows[0].input_ids) + pads[0]
            hidden = present[0].new_zeros((len(rows), width, present[0].shape[-1]))
            for r, pad, nodes, index in spots:
                hidden[r, torch.tensor(nodes, dtype=torch.long, device=hidden.device) + pad] = present[index]
            with self._run_from(blocks, depth, hidden):
                yield
            return
        self.misses += len(keys)
        seen: list[torch.Tensor] = []
        with self._record(blocks, depth, seen):
            yield
        if seen:
            for r, pad, nodes, index in spots:
                self._store(
                    keys[index],
                    seen[0][r, torch.tensor(nodes, dtype=torch.long, device=seen[0].device) + pad].clone(),
                )

    @contextlib.contextmanager
    def _run_from(self, blocks: torch.nn.ModuleList, depth: int, hidden: torch.Tensor) -> Iterator[None]:
        def feed(
            _module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[tuple[Any, ...], dict[str, Any]]:
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
    def _record(self, blocks: torch.nn.ModuleList, depth: int, seen: list[torch.Tensor]) -> Iterator[None]:
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
