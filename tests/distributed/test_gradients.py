"""The sample-weighted all-reduces of the LLM servers, on a real 2-process gloo group."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from llmgym.errors import InputError
from llmgym.llm.distributed.gradients import WeightedMean


def _mean_on_rank(rank: int, store_file: str, shares: list[tuple[list[float], int]], out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=len(shares))
    values, num_samples = shares[rank]
    mean = WeightedMean(enabled=True)(torch.tensor(values, dtype=torch.float64).view(2, 1), num_samples)
    torch.save(mean, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("shares", "want"),
    [
        ([([1.0, 4.0], 3), ([3.0, -2.0], 1)], [1.5, 2.5]),  # (3 * [1, 4] + 1 * [3, -2]) / 4
        ([([1.0, 4.0], 2), ([9.0, 9.0], 0)], [1.0, 4.0]),  # a server without samples has weight 0
        ([([1.0, 4.0], 0), ([9.0, 9.0], 0)], [0.0, 0.0]),  # no samples anywhere: zeros
    ],
)
def test_weighted_mean_over_two_servers(tmp_path, shares, want):
    out = str(tmp_path / "mean")
    mp.spawn(_mean_on_rank, args=(str(tmp_path / "store"), shares, out), nprocs=2, join=True)
    for rank in range(2):
        mean = torch.load(f"{out}.{rank}")
        assert mean.shape == (2, 1) and mean.dtype == torch.float64  # the caller's shape and dtype
        torch.testing.assert_close(mean.view(-1), torch.tensor(want, dtype=torch.float64))


def test_weighted_mean_in_process_and_its_errors():
    values = torch.tensor([1.0, -2.0])
    single = WeightedMean(enabled=False)
    assert torch.equal(single(values, 3), values) and torch.equal(single(values, 0), torch.zeros(2))
    for bad in (-1, 1.5, True):
        with pytest.raises(InputError, match="all_reduce_mean"):
            single(values, bad)
