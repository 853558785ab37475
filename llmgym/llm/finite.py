"""Whether weights are finite: one device-side reduction, read back once (a single host sync).

Training stops on the first non-finite loss or weight, before a checkpoint or an export holds it
(:class:`~llmgym.errors.NonFiniteError`): a NaN spreads to every weight within a step or two, and a
model written with it is silently useless.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["all_finite", "nonfinite_names"]


def all_finite(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """A 0-d bool tensor, ``True`` when every floating-point value of ``tensors`` is finite (no host sync).

    Args:
        tensors: Any tensors (non-floating ones are finite by definition); on one or several devices.

    Returns:
        The flag, on the first floating tensor's device (CPU when there is none).
    """
    flags = [torch.isfinite(t.detach()).all() for t in tensors if t.is_floating_point()]
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
    flags = torch.stack([torch.isfinite(t.detach()).all().to(device) for _, t in items]).tolist()
    return [name for (name, _), ok in zip(items, flags) if not ok]
