"""Numeric precision on GPUs: the ``auto`` dtype, TF32, fp32 trainable weights under autocast, fp16 loss scaling.

Policy:

* ``model.dtype: auto`` loads bfloat16 weights on a CUDA GPU that supports them, else float32.
* On CUDA, float32 matrix products may use TF32 (``torch.set_float32_matmul_precision("high")``).
* Parameters that train stay in float32 (LoRA adapters, heads, or the whole model in full
  fine-tuning): AdamW's small updates would be lost in bf16 weights. The frozen weights keep the
  half dtype, and forward passes of such a mixed model run under ``torch.autocast`` in that dtype,
  so the matrix products still run in half precision.
* fp16 gradients are scaled (:class:`LossScaling`, ``torch.amp.GradScaler``) and a step whose
  gradients hold an inf or NaN is skipped; bf16 and fp32 need no scaling.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

__all__ = [
    "HALF_DTYPES",
    "LossScaling",
    "clip_grad_norm",
    "activation_dtype",
    "auto_dtype",
    "compute_autocast",
    "enable_tf32",
    "keep_trainable_fp32",
]

HALF_DTYPES = (torch.float16, torch.bfloat16)


def auto_dtype(device: torch.device) -> torch.dtype:
    """``model.dtype: auto``: bfloat16 on a CUDA device that supports it, else float32."""
    if device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def enable_tf32(device: torch.device) -> None:
    """Let float32 matrix products and convolutions use TF32 on a CUDA device (Ampere and later)."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True


def keep_trainable_fp32(model: torch.nn.Module) -> int:
    """Cast every trainable half-precision parameter of ``model`` to float32 (the fp32 master weights).

    Returns:
        How many parameters were cast.
    """
    cast = 0
    for param in model.parameters():
        if param.requires_grad and param.dtype in HALF_DTYPES:
            param.data = param.data.float()
            cast += 1
    return cast


@contextlib.contextmanager
def compute_autocast(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """Run the block under ``torch.autocast`` in ``dtype`` when it is a half dtype, else unchanged.

    Args:
        device: The model's (first) device; its type picks the autocast backend.
        dtype: The dtype the frozen weights were loaded in (the compute dtype).
    """
    if dtype not in HALF_DTYPES:
        yield
        return
    with torch.autocast(device.type, dtype=dtype):
        yield


def activation_dtype(device: torch.device, fallback: torch.dtype) -> torch.dtype:
    """Dtype of the activations a forward pass computes: autocast's when it is on, else ``fallback``."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return fallback


class LossScaling:
    """fp16 loss scaling around backward and the optimizer step (a no-op for other dtypes).

    Args:
        dtype: The compute dtype; only ``float16`` scales.
        device: Device of the parameters (its type picks the GradScaler backend).
    """

    def __init__(self, dtype: torch.dtype, device: torch.device) -> None:
        self.scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, on the scaled loss under fp16."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(
        self,
        optimizer: torch.optim.Optimizer,
        parameters: Sequence[torch.nn.Parameter],
        max_norm: float | None,
    ) -> torch.Tensor | None:
        """Unscale, clip to ``max_norm`` (``None``: no clipping) and step; a step with inf/NaN gradients is skipped.

        Returns:
            The gradient norm before clipping (a device tensor, no host sync), or ``None`` without clipping.
        """
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
        norm = clip_grad_norm(parameters, max_norm) if max_norm is not None else None
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()
        return norm

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state (empty when not scaling), saved with the optimizer for exact resume."""
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)


def clip_grad_norm(parameters: Sequence[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` over parameters that may mix FSDP shards (``DTensor``) and whole tensors.

    The norm is over the whole gradients: the shards' part is summed over the servers (a
    collective when there are shards); both kinds are then scaled by the same coefficient.

    Returns:
        The total gradient norm before clipping (a 0-d tensor).
    """
    from torch.distributed.tensor import DTensor

    params = [p for p in parameters if p.grad is not None]
    sharded = [p for p in params if isinstance(p.grad, DTensor)]
    if not sharded:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    whole = [p for p in params if not isinstance(p.grad, DTensor)]
    norm: torch.Tensor = torch.nn.utils.get_total_norm(_grads(sharded)).full_tensor()  # type: ignore[attr-defined]
    if whole:
        rest = torch.nn.utils.get_total_norm(_grads(whole)).to(norm.device)
        norm = torch.linalg.vector_norm(torch.stack([norm, rest]))
    for group in (sharded, whole):
        if group:
            torch.nn.utils.clip_grads_with_norm_(group, max_norm, norm)
    return norm


def _grads(parameters: Sequence[torch.nn.Parameter]) -> list[torch.Tensor]:
    return [p.grad for p in parameters if p.grad is not None]
