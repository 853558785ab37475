"""Splitting a batch over the LLM servers (by tokens, or in contiguous chunks) and gathering the answers in order."""

import numpy as np
import pytest

from llmgym.llm.distributed.balance import (
    character_lengths,
    context_costs,
    gather_in_order,
    split_balanced,
    split_contiguous,
    token_lengths,
)
from llmgym.llm.distributed.placement import Placement


def test_placement_device():
    assert Placement(0).device == "cpu" and not Placement(0).model_parallel
    assert Placement(1, (0,)).device == "cuda:0" and not Placement(1, (0,)).model_parallel
    assert Placement(1, (0, 1)).model_parallel


@pytest.mark.parametrize(("count", "servers"), [(4, 2), (5, 2), (7, 3), (1, 3), (0, 2)])
def test_split_contiguous_is_numpys_array_split(count, servers):
    assert split_contiguous(count, servers) == [
        chunk.tolist() for chunk in np.array_split(np.arange(count), servers)
    ]


def test_split_balanced_and_gather():
    costs = [10, 1, 1, 1, 9, 2]
    shares = split_balanced(costs, 2)
    assert sorted(i for s in shares for i in s) == list(range(6))
    loads = [sum(costs[i] for i in s) for s in shares]
    assert max(loads) - min(loads) <= 2
    assert all(s == sorted(s) for s in shares)
    assert split_balanced([5], 3) == [[0], [], []]
    assert split_balanced([], 2) == [[], []]
    values = gather_in_order(shares, [[f"v{i}" for i in s] for s in shares], 6)
    assert values == [f"v{i}" for i in range(6)]


class WordTokenizer:
    """One token per space-separated word; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        assert not add_special_tokens
        self.calls.append(text)
        return {"input_ids": list(range(len(text.split())))}


def test_context_costs_count_the_context_once_and_each_candidate():
    # The backend packs a context with its candidates into one row: the context is computed once.
    assert context_costs(["abc"], [["x", "yy"]]) == [3 + 1 + 2 + 1]
    assert context_costs(["abc", ""]) == [4, 1]
    assert context_costs([[5, 6, 7]], [["x"]]) == [3 + 1 + 1]  # token ids: one unit per id
    assert context_costs([], []) == []


def test_context_costs_in_tokens():
    tokenizer = WordTokenizer()
    costs = context_costs(
        ["go to the key", "x"], [["turn left", "drop"], ["turn left"]], token_lengths(tokenizer)
    )
    assert costs == [4 + 2 + 1 + 1, 1 + 2 + 1]
    assert sorted(tokenizer.calls) == sorted(["go to the key", "x", "turn left", "drop"])  # each text once


def test_split_by_tokens_balances_what_characters_do_not():
    # Long words: 120 characters but 10 tokens; short words: 40 characters but 20 tokens.
    contexts = ["abcdefghijk " * 10, "a b " * 10, "a b " * 10, "a b " * 10]
    candidates = [["x"]] * 4
    tokens = context_costs(contexts, candidates, token_lengths(WordTokenizer()))
    assert tokens == [12, 22, 22, 22]
    by_chars = split_balanced(context_costs(contexts, candidates, character_lengths), 2)
    by_tokens = split_balanced(tokens, 2)
    assert by_chars == [[0], [1, 2, 3]]  # 122 vs 3 x 42 characters, but 12 vs 66 tokens
    assert sorted(sum(tokens[i] for i in share) for share in by_tokens) == [34, 44]  # the best split
