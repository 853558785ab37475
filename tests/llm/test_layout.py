"""Pure helpers of the scoring layout: spans, shared prefixes, packed rows, masks, planning."""

from __future__ import annotations

import torch

from llmgym.llm.layout import (
    ItemSpec,
    candidate_start,
    collate_rows,
    common_prefix_length,
    pack_item,
    plan_minibatches,
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


def test_pack_item_shares_prefix_and_locates_every_token():
    item = ItemSpec(context_ids=[1, 2, 3], candidate_ids=[[1, 2, 7, 8], [1, 2, 9]], candidate_starts=[2, 2])
    row = pack_item(item)
    assert row.input_ids == [1, 2, 3, 7, 8, 9]
    assert row.position_ids == [0, 1, 2, 2, 3, 2]
    sequences = [item.context_ids, *item.candidate_ids]
    for s, seq in enumerate(sequences):
        for i, token in enumerate(seq):
            at = row.locate(s, i)
            assert row.input_ids[at] == token
            assert row.position_ids[at] == i


def test_prefix_sharing_mask_matches_per_sequence_causality():
    item = ItemSpec(context_ids=[1, 2], candidate_ids=[[1, 2, 7, 8], [1, 2, 9]], candidate_starts=[2, 2])
    rows = [pack_item(item), pack_item(ItemSpec([4], [], []))]
    batch = collate_rows(rows, pad_token_id=0, device=torch.device("cpu"))
    mask = prefix_sharing_mask(batch, torch.float32)[:, 0] == 0
    row = rows[0]
    for s, seq in enumerate([item.context_ids, *item.candidate_ids]):
        for i in range(len(seq)):
            q = batch.pad[0] + row.locate(s, i)
            visible = {batch.pad[0] + row.locate(s, j) for j in range(i + 1)}
            assert set(torch.nonzero(mask[0, q]).flatten().tolist()) == visible
    # padding of the second row attends only to itself and nobody attends to it
    pad = batch.pad[1]
    assert pad > 0
    assert mask[1, :pad, :pad].equal(torch.eye(pad, dtype=torch.bool))
    assert not mask[1, pad:, :pad].any()


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
