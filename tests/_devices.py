"""CPU stand-ins for GPU placement checks: CUDA-tagged checkpoints and a strict device mode."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.serialization as serialization
from torch.overrides import TorchFunctionMode


@contextlib.contextmanager
def saved_as_cuda() -> Iterator[None]:
    """Inside the block ``torch.save`` tags every CPU storage as ``cuda:0``, as a GPU-trained run writes it.

    Loading such a file on a machine without CUDA fails unless ``map_location`` maps it.
    """

    def tag(obj: Any) -> str | None:
        return "cuda:0" if getattr(obj, "device", None) is not None and obj.device.type == "cpu" else None

    serialization.register_package(0, tag, lambda obj, location: None)
    try:
        yield
    finally:
        serialization._package_registry[:] = [
            entry for entry in serialization._package_registry if entry[1] is not tag
        ]


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


_MOVES = {"to", "cpu", "cuda", "copy_", "__get__", "__set__", "device", "new_tensor"}


class StrictDevices(TorchFunctionMode):
    """Raise when a torch call mixes tensors of different devices (0-d CPU scalars excepted, as on CUDA).

    PyTorch lets a CPU index tensor select from a tensor elsewhere (it copies it over, a host
    sync on a GPU); this mode refuses that too, so a test on CPU and ``meta`` shows that every
    index is built on the device of the tensor it meets.
    """

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") not in _MOVES:
            devices = {
                t.device for t in _tensors((args, kwargs)) if not (t.dim() == 0 and t.device.type == "cpu")
            }
            if len(devices) > 1:
                raise AssertionError(
                    f"{getattr(func, '__name__', func)} mixes devices {sorted(map(str, devices))}"
                )
        return func(*args, **kwargs)
