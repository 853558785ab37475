"""Split a batch of contexts across servers, balanced by size, and put the answers back in order."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any, TypeVar

from llmgym.errors import BackendError

__all__ = ["context_costs", "split_balanced", "gather_in_order"]

T = TypeVar("T")


def context_costs(contexts: Sequence[Any], candidates: Sequence[Sequence[str]] | None = None) -> list[int]:
    """Return the cost of each context: its characters plus those of its candidates, each scored with it.

    Characters stand in for tokens: the client holds no tokenizer (it loads no model), and for one
    tokenizer the two are proportional to within a few percent on natural text. Non-string
    contexts (token id lists) count one unit per element.

    Args:
        contexts: Context strings (or token id sequences).
        candidates: Candidates per context; each is scored with the context, so it adds the
            context's length again plus its own.

    Returns:
        One positive cost per context.
    """
    costs = []
    for i, context in enumerate(contexts):
        length = len(context) + 1
        options = candidates[i] if candidates is not None else ()
        costs.append(length + sum(length + len(option) for option in options))
    return costs


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
            raise BackendError(f"an LLM server returned {len(values)} results for {len(indices)} contexts; its backend breaks the one-result-per-context contract")
        for index, value in zip(indices, values):
            out[index] = value
    return out
