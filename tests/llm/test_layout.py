"""Pure helpers of the scoring layout: spans, shared prefixes, packed rows, masks, planning."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgym.llm.layout import (
    ItemSpec,
    candidate_start,
    collate_rows,
    common_prefix_length,
    item_length,
    pack_item,
    pack_items,
    plan_minibatches,
    plan_rows,
    prefix_sharing_mask,
)
from llmgym.llm.scoring import gather_logprobs, reduce_token_scores


def test_candidate_start_includes_straddling_token():
    # "Action:" + " go" -> tokens "Action", ":", " go": " go" ends past char 7
    assert candidate_start([(0, 6), (6, 7), (7, 10)], 7) == 2
    # a token "x:" spanning the boundary belongs to the candidate
    assert candidate_start([(0, 6), (6, 8)], 7) == 1
    assert candidate_start([(0, 3)], 3) == 1


def test_common_prefix_length():
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_length([[5, 6]]) == 2
    assert common_prefix_length([[1], [2]]) == 0
    assert common_prefix_length([]) == 0


def test_pack_items_shares_prefix_and_locates_every_token():
    item = ItemSpec(context_ids=[1, 2, 3], candidate_ids=[[1, 2, 7, 8], [1, 2, 9]], candidate_starts=[2, 2])
    row = pack_items([item])
    assert row.input_ids == [1, 2, 3, 7, 8, 9]
    assert row.position_ids == [0, 1, 2, 2, 3, 2]
    assert row.parents == [-1, 0, 1, 1, 3, 1]
    assert item_length(item) == 6
    assert pack_item(item) == row  # one item whose candidate tails share nothing: both layouts agree
    sequences = [item.context_ids, *item.candidate_ids]
    for s, seq in enumerate(sequences):
        for i, token in enumerate(seq):
            at = row.locate(0, s, i)
            assert row.input_ids[at] == token
            assert row.position_ids[at] == i


def test_pack_item_keeps_candidate_tails_apart_in_order():
    item = ItemSpec(
        context_ids=[1, 2], candidate_ids=[[1, 2, 7, 8], [1, 2, 7, 9], [1, 2, 6]], candidate_starts=[2, 2, 2]
    )
    row = pack_item(item)
    assert row.input_ids == [1, 2, 7, 8, 7, 9, 6]  # the common prefix, then each tail: 7 not merged
    assert row.parents == [-1, 0, 1, 2, 1, 4, 1]
    assert row.position_ids == [0, 1, 2, 3, 2, 3, 2]
    assert len(pack_items([item]).input_ids) == 6


def test_pack_items_shares_prefixes_across_items_and_keeps_each_items_order():
    first = ItemSpec(context_ids=[5, 1, 2], candidate_ids=[[5, 1, 2, 3]], candidate_starts=[3])
    second = ItemSpec(
        context_ids=[5, 1, 4], candidate_ids=[[5, 1, 4, 3], [5, 1, 4, 6]], candidate_starts=[3, 3]
    )
    row = pack_items([first, second])
    # 5, 1 shared by both items; then 2 -> 3 and 4 -> {3, 6}
    assert len(row.input_ids) == item_length(first) + item_length(second) - 2 == 7
    for slot, item in enumerate([first, second]):
        alone = pack_items([item])
        # the item's nodes, in row order, are its own row's tokens in order
        assert [row.input_ids[i] for i in row.item_nodes[slot]] == alone.input_ids
        assert [row.position_ids[i] for i in row.item_nodes[slot]] == alone.position_ids
        for s, seq in enumerate([item.context_ids, *item.candidate_ids]):
            assert [row.input_ids[row.locate(slot, s, i)] for i in range(len(seq))] == seq
    swapped = pack_items([second, first])
    assert swapped.input_ids == row.input_ids


def _visible_sets(row, items, pad, mask):
    for slot, item in enumerate(items):
        for s, seq in enumerate([item.context_ids, *item.candidate_ids]):
            for i in range(len(seq)):
                q = pad + row.locate(slot, s, i)
                visible = {pad + row.locate(slot, s, j) for j in range(i + 1)}
                assert set(torch.nonzero(mask[q]).flatten().tolist()) == visible


def test_prefix_sharing_mask_matches_per_sequence_causality():
    item = ItemSpec(context_ids=[1, 2], candidate_ids=[[1, 2, 7, 8], [1, 2, 9]], candidate_starts=[2, 2])
    other = ItemSpec(context_ids=[1, 3], candidate_ids=[[1, 3, 7]], candidate_starts=[2])
    rows = [pack_items([item, other]), pack_items([ItemSpec([4], [], [])])]
    batch = collate_rows(rows, pad_token_id=0, device=torch.device("cpu"))
    mask = prefix_sharing_mask(batch, torch.float32)[:, 0] == 0
    _visible_sets(rows[0], [item, other], batch.pad[0], mask[0])
    # padding of the second row attends only to itself and nobody attends to it
    pad = batch.pad[1]
    assert pad > 0
    assert mask[1, :pad, :pad].equal(torch.eye(pad, dtype=torch.bool))
    assert not mask[1, pad:, :pad].any()


def test_plan_rows_balances_rows_and_shares_prefixes():
    items = [ItemSpec([9, 9, 9, 9, i], [], []) for i in range(6)] + [ItemSpec(list(range(20, 32)), [], [])]
    lengths = [item_length(item) for item in items]
    rows = plan_rows(items, lengths, row_tokens=10)
    assert sorted(i for row in rows for i in row) == list(range(7))
    # 42 tokens over rows of max(10, 12): 4 rows, the longest item alone, the short ones in pairs
    assert rows == [[6], [0, 3], [1, 4], [2, 5]]
    assert [len(pack_items([items[i] for i in row]).input_ids) for row in rows] == [12, 6, 6, 6]
    # a prefix common to all items is counted once per row: 4 + 6 x 1 tokens fill one row of 10
    short, short_lengths = items[:6], lengths[:6]
    assert plan_rows(short, short_lengths, row_tokens=10) == [[0, 1, 2, 3, 4, 5]]
    # target 0: rows as long as the longest item (5), one item each
    assert plan_rows(short, short_lengths, row_tokens=0) == [[0], [1], [2], [3], [4], [5]]
    assert plan_rows([], [], row_tokens=10) == []
    assert plan_rows(short[:1] * 3, short_lengths[:1] * 3, row_tokens=0) == [[0, 1, 2]]  # identical items


def test_plan_minibatches_bounds_sequences_and_covers_all():
    plans = plan_minibatches(sizes=[3, 1, 5, 2, 0], lengths=[10, 40, 20, 30, 5], minibatch_size=4)
    assert sorted(i for p in plans for i in p) == [0, 1, 2, 3, 4]
    sizes = [3, 1, 5, 2, 0]
    for plan in plans:
        assert len(plan) == 1 or sum(max(1, sizes[i]) for i in plan) <= 4
    assert plans[0][0] == 1  # longest row first


def test_gather_and_reduce():
    logits = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
    lp = gather_logprobs(logits, torch.tensor([0, 0, 1]))
    expected = torch.log_softmax(logits, -1)[[0, 1, 2], [0, 0, 1]]
    assert torch.allclose(lp, expected)
    assert torch.allclose(reduce_token_scores(lp, [1, 2], "sum"), torch.stack([lp[0], lp[1] + lp[2]]))
    assert torch.allclose(reduce_token_scores(lp, [1, 2], "mean"), torch.stack([lp[0], (lp[1] + lp[2]) / 2]))


_tokens = st.lists(st.integers(1, 4), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(_tokens, st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3), max_size=3)),
        min_size=1,
        max_size=4,
    )
)
def test_packed_rows_give_every_token_exactly_its_own_sequence(raw):
    items = [ItemSpec(ctx, [ctx + tail for tail in tails], [len(ctx)] * len(tails)) for ctx, tails in raw]
    rows = [pack_items(items), pack_items(items[:1]), pack_item(items[-1])]
    row_items = [items, items[:1], items[-1:]]
    batch = collate_rows(rows, pad_token_id=0, device=torch.device("cpu"))
    mask = prefix_sharing_mask(batch, torch.float32)[:, 0] == 0
    for r, (row, its) in enumerate(zip(rows, row_items)):
        for slot, item in enumerate(its):
            for s, seq in enumerate([item.context_ids, *item.candidate_ids]):
                located = [row.locate(slot, s, i) for i in range(len(seq))]
                assert [row.input_ids[at] for at in located] == seq
                assert [row.position_ids[at] for at in located] == list(range(len(seq)))
        _visible_sets(row, its, batch.pad[r], mask[r])
    # a token is computed once per distinct prefix, whatever the number of items sharing it
    distinct = {
        tuple(seq[: i + 1])
        for item in items
        for seq in (item.context_ids, *item.candidate_ids)
        for i in range(len(seq))
    }
    assert len(rows[0].input_ids) == len(distinct)


def test_plan_minibatches_bounds_tokens_per_pass():
    lengths = [100, 90, 80, 70, 60, 500]
    plans = plan_minibatches(sizes=[1] * 6, lengths=lengths, minibatch_size=64, max_tokens=200)
    assert plans == [
        [5],
        [0, 1],
        [2, 3],
        [4],
    ]  # the 500-token item alone; never more than 200 tokens otherwise
    assert plan_minibatches(sizes=[1] * 6, lengths=lengths, minibatch_size=64) == [[5, 0, 1, 2, 3, 4]]
