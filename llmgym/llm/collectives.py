"""How an LLM talks to its peer LLM servers: the sample-weighted all-reduces an Updater calls.

``LocalLLM`` takes a :class:`Collectives` at construction: :class:`SingleProcess` in-process (the
default), :class:`ProcessGroupCollectives` on a server of the Ray backend, where the servers form a
``torch.distributed`` group (NCCL for CUDA tensors, gloo on the CPU). The reductions run on the
tensors' own device and dtype-promoted to float32 in one flat buffer, with no host synchronisation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from llmgym.errors import InputError

__all__ = [
    "Collectives",
    "ProcessGroupCollectives",
    "SingleProcess",
    "check_num_samples",
    "unflatten",
    "weighted_mean",
]


class Collectives(Protocol):
    """The collectives an Updater reaches through ``llm.sync_gradients`` and ``llm.all_reduce_mean``."""

    def sync_gradients(self, parameters: Sequence[torch.nn.Parameter], num_samples: int) -> None:
        """Replace every parameter's gradient by the sample-weighted mean over the servers."""

    def all_reduce_mean(self, values: torch.Tensor, num_samples: int) -> torch.Tensor:
        """The sample-weighted mean of ``values`` over the servers (zeros when no server had samples)."""


def check_num_samples(method: str, num_samples: int) -> None:
    """Reject a sample count that is not an int >= 0.

    Raises:
        InputError: Naming ``method`` and the expected value.
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 0:
        raise InputError(
            f"{method}(num_samples={num_samples!r}): expected the int >= 0 number of samples "
            "behind this server's values (0 when its share of the batch is empty)."
        )


class SingleProcess:
    """The collectives of a lone LLM: nothing to exchange (the arguments are still checked)."""

    def sync_gradients(self, parameters: Sequence[torch.nn.Parameter], num_samples: int) -> None:
        """Nothing to average with one LLM."""
        del parameters
        check_num_samples("sync_gradients", num_samples)

    def all_reduce_mean(self, values: torch.Tensor, num_samples: int) -> torch.Tensor:
        """``values`` itself, or zeros of its shape when ``num_samples`` is 0."""
        check_num_samples("all_reduce_mean", num_samples)
        return values if num_samples > 0 else values.new_zeros(values.shape)


class ProcessGroupCollectives:
    """Sample-weighted all-reduces in the default ``torch.distributed`` group of the LLM servers.

    Each server multiplies its values by its sample count; the products and the counts are summed
    in one all-reduce of a flat float32 buffer on the values' device; every server divides by the
    total. A server with no samples contributes zeros with weight 0, so it neither blocks the
    others nor biases the mean; if no server had samples the result is zeros. The group must be
    initialised (``torch.distributed.init_process_group``) before the first call.
    """

    def sync_gradients(self, parameters: Sequence[torch.nn.Parameter], num_samples: int) -> None:
        """Set every gradient to the mean over the servers; a missing gradient counts as zeros."""
        check_num_samples("sync_gradients", num_samples)
        params = list(parameters)
        if not params:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        mean = weighted_mean(_flat(grads), num_samples)
        for param, grad in zip(params, unflatten(mean, params)):
            param.grad = grad

    def all_reduce_mean(self, values: torch.Tensor, num_samples: int) -> torch.Tensor:
        """The mean of ``values`` over all servers' samples, in ``values``' device, dtype and shape."""
        check_num_samples("all_reduce_mean", num_samples)
        flat = weighted_mean(values.detach().reshape(-1).to(torch.float32), num_samples)
        return flat.view(values.shape).to(values.dtype)

    def broadcast_parameters(self, parameters: Sequence[torch.nn.Parameter], src: int = 0) -> None:
        """Overwrite every server's ``parameters`` with those of server ``src`` (one collective)."""
        import torch.distributed as dist

        params = list(parameters)
        if not params:
            return
        flat = _flat(params)
        dist.broadcast(flat, src=src)
        with torch.no_grad():
            for param, value in zip(params, unflatten(flat, params)):
                param.copy_(value)


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One float32 buffer on the first tensor's device (a model sharded over GPUs gathers to its first)."""
    device = tensors[0].device
    return torch.cat([t.detach().reshape(-1).to(device, torch.float32) for t in tensors])


def unflatten(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Split a flat buffer ``[sum numel]`` into tensors shaped, placed and typed as ``like``."""
    out, offset = [], 0
    for t in like:
        n = t.numel()
        out.append(flat[offset : offset + n].view(t.shape).to(t.device, t.dtype))
        offset += n
    return out


def weighted_mean(flat: torch.Tensor, num_samples: int) -> torch.Tensor:
    """``sum_s n_s * flat_s / sum_s n_s`` over the group, float32 ``[N]`` on ``flat``'s device (no host sync).

    A collective of the servers' default group: each passes its float32 ``[N]`` values and its sample count.
    """
    import torch.distributed as dist

    weight = flat.new_full((1,), float(num_samples))
    weighted = torch.cat([flat * weight, weight])
    dist.all_reduce(weighted)
    # every product is 0 when the total weight is 0, so clamping the divisor gives zeros there
    return weighted[:-1] / weighted[-1:].clamp_min(1.0)
