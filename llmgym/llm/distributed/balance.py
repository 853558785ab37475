"""Split a batch of contexts across servers, balanced by token count, and put the answers back in order."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from llmgym.errors import BackendError

__all__ = [
    "LengthFn",
    "character_lengths",
    "token_lengths",
    "context_costs",
    "split_balanced",
    "split_contiguous",
    "gather_in_order",
    "share_kwargs",
]

T = TypeVar("T")

#: Measures texts: one length per text, in the same units for all (tokens or characters).
LengthFn = Callable[[Sequence[str]], list[int]]


def character_lengths(texts: Sequence[str]) -> list[int]:
    """Return the number of characters of each text (the fallback when no tokenizer is known)."""
    return [len(text) for text in texts]


def token_lengths(tokenizer: Any) -> LengthFn:
    """Return a :data:`LengthFn` counting tokens as the backend encodes them (no special tokens).

    Each distinct text is encoded once and on its own: batch encoding would start the fast
    tokenizer's thread pool in the RL client, which then warns on every later ``fork``.

    Args:
        tokenizer: A Hugging Face tokenizer (callable returning ``input_ids``).

    Returns:
        The measuring function.
    """

    def measure(texts: Sequence[str]) -> list[int]:
        counts: dict[str, int] = {}
        for text in texts:
            if text not in counts:
                counts[text] = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        return [counts[text] for text in texts]

    return measure


def context_costs(
    contexts: Sequence[Any],
    candidates: Sequence[Sequence[str]] | None = None,
    lengths: LengthFn = character_lengths,
) -> list[int]:
    """Return the cost of each context: its tokens plus those of its candidates, plus one.

    This is the length of the row a backend computes for the context: the context is encoded
    once and its candidates follow it (a packed row with a shared prefix, or one encoder pass and
    short decoder rows), so the context is not counted once per candidate. The ``+ 1`` keeps
    every cost positive. Non-string contexts (token id lists) count one unit per element.

    Args:
        contexts: Context strings (or token id sequences).
        candidates: Candidates per context, scored after it.
        lengths: Measures strings; :func:`token_lengths` for token counts, characters by default.

    Returns:
        One positive cost per context.
    """
    options = [list(candidates[i]) if candidates is not None else [] for i in range(len(contexts))]
    texts = [context for context in contexts if isinstance(context, str)]
    texts += [option for group in options for option in group]
    measured = iter(lengths(texts))
    context_units = [next(measured) if isinstance(context, str) else len(context) for context in contexts]
    return [units + 1 + sum(next(measured) for _ in group) for units, group in zip(context_units, options)]


def split_balanced(costs: Sequence[int], num_shares: int) -> list[list[int]]:
    """Assign item indices to shares so the largest share's total cost is small.

    Longest-processing-time first: items are taken by decreasing cost and each goes to the share
    with the smallest total so far (the lowest share index on ties). Deterministic.

    Args:
        costs: Cost of each item.
        num_shares: Number of shares (servers); may exceed the number of items.

    Returns:
        ``num_shares`` lists of indices, each sorted ascending; some may be empty.
    """
    shares: list[list[int]] = [[] for _ in range(num_shares)]
    heap = [(0, share) for share in range(num_shares)]
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        load, share = heapq.heappop(heap)
        shares[share].append(index)
        heapq.heappush(heap, (load + costs[index], share))
    return [sorted(share) for share in shares]


def split_contiguous(count: int, num_servers: int) -> list[list[int]]:
    """Split ``range(count)`` into ``num_servers`` contiguous chunks whose sizes differ by at most 1.

    The first chunks take the extra items, as ``numpy.array_split`` (and so Lamorel) does.

    Args:
        count: Number of items.
        num_servers: Number of chunks.

    Returns:
        The indices of each chunk (empty chunks last when ``count < num_servers``).
    """
    size, extra = divmod(count, num_servers)
    starts = [rank * size + min(rank, extra) for rank in range(num_servers + 1)]
    return [list(range(starts[rank], starts[rank + 1])) for rank in range(num_servers)]


def gather_in_order(shares: Sequence[Sequence[int]], results: Sequence[Sequence[T]], total: int) -> list[T]:
    """Scatter per-share results back to the original positions.

    Args:
        shares: The index lists returned by :func:`split_balanced`.
        results: For each share, one result per index, in the share's order.
        total: Number of items in the original batch.

    Returns:
        The results in the original order.

    Raises:
        BackendError: When a server returned a different number of results than it got contexts.
    """
    out: list[Any] = [None] * total
    for indices, values in zip(shares, results):
        if len(values) != len(indices):
            raise BackendError(
                f"an LLM server returned {len(values)} results for {len(indices)} contexts; its backend breaks the one-result-per-context contract"
            )
        for index, value in zip(indices, values):
            out[index] = value
    return out


#: Keyword arguments that hold one entry per context or sample: each server gets its share's entries.
PER_ITEM_KWARGS = ("decoder_prefixes",)


def share_kwargs(kwargs: dict[str, Any], indices: Sequence[int]) -> dict[str, Any]:
    """The keyword arguments of one server's share: per-item ones (:data:`PER_ITEM_KWARGS`) cut to ``indices``."""
    return {
        key: [value[i] for i in indices] if key in PER_ITEM_KWARGS and value is not None else value
        for key, value in kwargs.items()
    }
