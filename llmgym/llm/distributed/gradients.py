"""Keeping the servers' trainable weights identical: start broadcast, weighted all-reduces.

Both run in the gloo group of the LLM servers (the client is not a member) with the group's
timeout, on flat float32 CPU buffers (one collective per call whatever the number of tensors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["GradientSync", "WeightedMean", "broadcast_parameters", "fingerprint"]


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    import torch

    if not tensors:
        return torch.zeros(0, dtype=torch.float32)
    return torch.cat([t.detach().reshape(-1).to("cpu", torch.float32) for t in tensors])


def broadcast_parameters(parameters: Sequence[torch.Tensor], src: int = 0) -> None:
    """Overwrite every server's parameters with those of server ``src`` (a collective).

    Args:
        parameters: The trainable parameters, in the same order on every server.
        src: Rank of the server whose values win.
    """
    import torch
    import torch.distributed as dist

    from llmgym.llm.collectives import unflatten


    flat = _flat(parameters)
    dist.broadcast(flat, src=src)
    with torch.no_grad():
        for param, value in zip(parameters, unflatten(flat, parameters)):
            param.copy_(value)


class GradientSync:
    """``sync_gradients(num_samples)`` of a server: the sample-weighted mean of the servers' gradients.

    Each server multiplies its gradients by its sample count, the products and the counts are
    summed by one all-reduce, and every server divides by the total. A server with no samples
    contributes zeros with weight 0, so it neither blocks the others nor biases the mean; a
    parameter without a gradient counts as zeros and gets the mean (so every server's optimizer
    sees the same gradients). If no server had samples the gradients are left at zero.

    Args:
        backend: The server's backend (its ``trainable_parameters()`` are synchronised).
        enabled: ``False`` with a single server: the call only validates ``num_samples``.
    """

    def __init__(self, backend: Any, enabled: bool) -> None:
        self._backend = backend
        self._enabled = enabled

    def __call__(self, num_samples: int) -> None:
        """All-reduce the gradients weighted by ``num_samples`` (this server's samples in the step)."""
        import torch

        from llmgym.llm.collectives import unflatten

        _check_num_samples("sync_gradients", num_samples)
        if not self._enabled:
            return
        params = list(self._backend.trainable_parameters())
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        mean = _weighted_all_reduce(_flat(grads), num_samples)
        for param, grad in zip(params, unflatten(mean, params)):
            param.grad = grad


class WeightedMean:
    """``all_reduce_mean(values, num_samples)`` of a server: the sample-weighted mean of a tensor over the servers.

    What :class:`GradientSync` does for the gradients, for any tensor an updater computes from its
    share of the samples (a gradient vector, a Fisher-vector product, a loss and a KL): each server
    passes the mean over its ``num_samples`` samples, every server gets the mean over all samples
    (zeros if no server had any). Every server must call it, in the same order, with a tensor of the
    same shape.

    Args:
        enabled: ``False`` with a single server: the call returns ``values`` (zeros for 0 samples).
    """

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled

    def __call__(self, values: torch.Tensor, num_samples: int) -> torch.Tensor:
        """The mean of ``values`` over all servers' samples, on ``values``' device and dtype."""
        import torch

        _check_num_samples("all_reduce_mean", num_samples)
        if not self._enabled:
            return values if num_samples > 0 else values.new_zeros(values.shape)
        flat = _weighted_all_reduce(values.detach().reshape(-1).to("cpu", torch.float32), num_samples)
        return flat.view(values.shape).to(values.device, values.dtype)


def _check_num_samples(method: str, num_samples: int) -> None:
    from llmgym.errors import InputError

    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 0:
        raise InputError(
            f"{method}(num_samples={num_samples!r}): expected the int >= 0 number of samples "
            "behind this server's values (0 when its share of the batch is empty)."
        )


def _weighted_all_reduce(flat: torch.Tensor, num_samples: int) -> torch.Tensor:
    """``sum_s n_s * flat_s / sum_s n_s`` over the servers (zeros if every ``n_s`` is 0), float32 CPU."""
    import torch
    import torch.distributed as dist

    weighted = torch.cat([flat * float(num_samples), torch.tensor([float(num_samples)])])
    dist.all_reduce(weighted)
    total = float(weighted[-1])
    return weighted[:-1] / total if total > 0 else weighted[:-1].zero_()


def fingerprint(parameters: Sequence[torch.Tensor]) -> tuple[float, float]:
    """Summarise the weights cheaply (sum and sum of squares, float64) to compare servers."""
    import torch

    total, squares = 0.0, 0.0
    with torch.no_grad():
        for p in parameters:
            d = p.detach().double()
            total += float(d.sum())
            squares += float((d * d).sum())
    return total, squares
