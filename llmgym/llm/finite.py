"""Whether weights are finite: one device-side reduction, read back once (a single host sync).

Training stops on the first non-finite loss or weight, before a checkpoint or an export holds it
(:class:`~llmgym.errors.NonFiniteError`): a NaN spreads to every weight within a step or two, and a
model written with it is silently useless.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["all_finite", "nonfinite_names"]


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The values this process holds: a sharded (FSDP2) ``DTensor``'s local shard, else the tensor itself.

    A ``DTensor`` would run ``isfinite(...).all()`` as a distributed op (and refuses the reduction); each
    server checks its own shard, and the client combines the servers' flags.
    """
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def all_finite(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """A 0-d bool tensor, ``True`` when every floating-point value of ``tensors`` is finite (no host sync).

    Args:
        tensors: Any tensors (non-floating ones are finite by definition); on one or several devices; of a
            sharded ``DTensor``, this process's shard is checked.

    Returns:
        The flag, on the first floating tensor's device (CPU when there is none).
    """
    flags = [torch.isfinite(_local(t).detach()).all() for t in tensors if t.is_floating_point()]
    if not flags:
        return torch.tensor(True)
    device = flags[0].device
    return torch.stack([f.to(device) for f in flags]).all()


def nonfinite_names(named: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """The names of the tensors holding a NaN or an infinity (one host sync for all of them).

    Args:
        named: ``(name, tensor)`` pairs, e.g. ``model.named_parameters()`` or a state dict's items.

    Returns:
        The names, in order; empty when every value is finite.
    """
    items = [(name, t) for name, t in named if t.is_floating_point()]
    if not items:
        return []
    device = items[0][1].device
    flags = torch.stack([torch.isfinite(_local(t).detach()).all().to(device) for _, t in items]).tolist()
    return [name for (name, _), ok in zip(items, flags) if not ok]
