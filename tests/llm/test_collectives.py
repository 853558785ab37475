"""The collectives passed into LocalLLM: alone (nothing to exchange) and in a real 2-process gloo group."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from llmgym.errors import InputError
from llmgym.llm.collectives import ProcessGroupCollectives, SingleProcess
from llmgym.llm.local import LocalLLM
from llmgym.testing import tiny_causal_lm

# rank 0: 3 samples, gradient [1, 4] and values [[1], [4]]; rank 1: 1 sample, [3, -2]; rank 1 of the
# second case has no samples (weight 0) and a parameter without a gradient (counts as zeros)
CASES = [
    ([([1.0, 4.0], 3), ([3.0, -2.0], 1)], [1.5, 2.5]),
    ([([1.0, 4.0], 2), (None, 0)], [1.0, 4.0]),
    ([([1.0, 4.0], 0), ([9.0, 9.0], 0)], [0.0, 0.0]),
]


def _on_rank(rank: int, store_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2)
    collectives = ProcessGroupCollectives()
    results = []
    for shares, _ in CASES:
        grad, num_samples = shares[rank]
        param = torch.nn.Parameter(torch.full((2,), float(rank)))  # differs until broadcast
        collectives.broadcast_parameters([param])
        param.grad = None if grad is None else torch.tensor(grad)
        collectives.sync_gradients([param], num_samples)
        values = torch.tensor(grad if grad is not None else [9.0, 9.0], dtype=torch.float64).view(2, 1)
        mean = collectives.all_reduce_mean(values, num_samples)
        results.append({"param": param.detach(), "grad": param.grad, "mean": mean})
    torch.save(results, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.timeout(90)
def test_process_group_collectives_are_sample_weighted_means(tmp_path):
    out = str(tmp_path / "result")
    mp.spawn(_on_rank, args=(str(tmp_path / "store"), out), nprocs=2, join=True)
    for rank in range(2):
        for result, (_, want) in zip(torch.load(f"{out}.{rank}"), CASES):
            assert torch.equal(result["param"], torch.zeros(2))  # rank 0's values won the broadcast
            torch.testing.assert_close(result["grad"], torch.tensor(want))
            assert result["mean"].shape == (2, 1) and result["mean"].dtype == torch.float64
            torch.testing.assert_close(result["mean"].view(-1), torch.tensor(want, dtype=torch.float64))


def test_single_process_collectives_and_their_checks():
    single = SingleProcess()
    values = torch.tensor([1.0, -2.0])
    assert torch.equal(single.all_reduce_mean(values, 3), values)
    assert torch.equal(single.all_reduce_mean(values, 0), torch.zeros(2))
    for bad in (-1, 1.5, True):
        with pytest.raises(InputError, match="all_reduce_mean"):
            single.all_reduce_mean(values, bad)
        with pytest.raises(InputError, match="sync_gradients"):
            single.sync_gradients([], bad)


def test_local_llm_calls_the_collectives_it_was_given():
    class Recording(SingleProcess):
        def __init__(self) -> None:
            self.calls: list[tuple[str, int]] = []

        def sync_gradients(self, parameters, num_samples):  # type: ignore[no-untyped-def]
            self.calls.append(("sync_gradients", len(list(parameters))))

        def all_reduce_mean(self, values, num_samples):  # type: ignore[no-untyped-def]
            self.calls.append(("all_reduce_mean", num_samples))
            return values

    model, tokenizer = tiny_causal_lm("llama", seed=0)
    recording = Recording()
    llm = LocalLLM("tiny", model=model, tokenizer=tokenizer, collectives=recording)
    llm.sync_gradients(2)
    llm.all_reduce_mean(torch.ones(1), 5)
    assert recording.calls == [("sync_gradients", len(llm.trainable_parameters())), ("all_reduce_mean", 5)]
    assert isinstance(LocalLLM("tiny", model=model, tokenizer=tokenizer).collectives, SingleProcess)
