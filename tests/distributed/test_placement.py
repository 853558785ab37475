import pytest

from llmgym.errors import ConfigError
from llmgym.llm.distributed.balance import (
    character_lengths,
    context_costs,
    gather_in_order,
    split_balanced,
    token_lengths,
)
from llmgym.llm.distributed.placement import (
    Placement,
    assign_gpus,
    first_server_rank,
    servers_per_node,
    visible_gpus,
)


@pytest.mark.parametrize(
    ("servers", "mp", "gpus", "expected"),
    [
        (1, 1, [], [()]),
        (3, 1, [], [(), (), ()]),
        (1, 1, [0], [(0,)]),
        (2, 1, [0, 1, 2, 3], [(0,), (1,)]),
        (2, 2, [0, 1, 2, 3], [(0, 1), (2, 3)]),
        (1, 4, [0, 1, 2, 3], [(0, 1, 2, 3)]),
        (3, 2, [4, 5, 6, 7, 0, 1], [(4, 5), (6, 7), (0, 1)]),
        (1, 2, [3, 1, 2], [(3, 1)]),
    ],
)
def test_assign_gpus(servers, mp, gpus, expected):
    assert assign_gpus(servers, mp, gpus) == expected


@pytest.mark.parametrize(
    ("servers", "mp", "gpus", "match"),
    [
        (3, 1, [0, 1], r"3 LLM server\(s\) x distributed.model_parallelism_size=1 need 3 GPUs .* only 2"),
        (2, 2, [0, 1, 2], "need 4 GPUs"),
        (1, 2, [], "no GPU is visible"),
        (0, 1, [0], "num_servers=0"),
        (1, 0, [0], "model_parallelism_size=0"),
        (2, 1, [0, 0], "duplicates"),
    ],
)
def test_assign_gpus_errors(servers, mp, gpus, match):
    with pytest.raises(ConfigError, match=match):
        assign_gpus(servers, mp, gpus)


def test_placement_device():
    assert Placement(0).device == "cpu" and not Placement(0).model_parallel
    assert Placement(1, (2,)).device == "cuda:0" and not Placement(1, (2,)).model_parallel
    assert Placement(1, (2, 3)).model_parallel


@pytest.mark.parametrize(
    ("n", "nodes", "expected"), [(1, 1, [1]), (4, 1, [4]), (2, 2, [1, 1]), (5, 2, [3, 2]), (7, 3, [3, 2, 2])]
)
def test_servers_per_node(n, nodes, expected):
    assert servers_per_node(n, nodes) == expected
    assert [first_server_rank(n, nodes, r) for r in range(nodes)] == [sum(expected[:r]) for r in range(nodes)]


def test_servers_per_node_errors():
    with pytest.raises(ConfigError, match="llm_processes=1 is smaller than distributed.nnodes=2"):
        servers_per_node(1, 2)
    with pytest.raises(ConfigError, match="llm_processes=0"):
        servers_per_node(0, 1)
    with pytest.raises(ConfigError, match="node_rank=2"):
        first_server_rank(2, 2, 2)


def test_visible_gpus():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == [2, 3]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert visible_gpus({}, device_count=3) == [0, 1, 2]
    with pytest.raises(ConfigError, match="GPU-"):
        visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-abc"})


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
    costs = context_costs(["go to the key", "x"], [["turn left", "drop"], ["turn left"]], token_lengths(tokenizer))
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


def test_server_env():
    from llmgym.llm.distributed.placement import cpu_threads_per_server, server_env

    assert cpu_threads_per_server(2, 8) == 4 and cpu_threads_per_server(3, 2) == 1
    env = server_env((2, 3), 2, {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "X": "1"})
    assert env == {"CUDA_VISIBLE_DEVICES": "2,3", "X": "1"}
    assert "OMP_NUM_THREADS" in server_env((), 2, {})
    assert server_env((), 2, {"OMP_NUM_THREADS": "7"})["OMP_NUM_THREADS"] == "7"
