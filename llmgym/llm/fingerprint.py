"""A cheap fingerprint of a base model, so a checkpoint is never loaded onto other weights than it was trained from.

``LLM.save`` records it in the checkpoint (``meta.json``) and ``LLM.load`` compares it: a base
model folder or hub revision whose weights changed since (same name, same architecture) is then a
:class:`~llmgym.errors.CheckpointError` naming both, where it would otherwise resume, evaluate or
export silently wrong weights.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import torch

from llmgym.llm.adapters import base_model

__all__ = ["BaseFingerprint", "base_fingerprint"]

# Config keys that say how the model was loaded, not what it is.
_LOAD_KEYS = ("transformers_version", "torch_dtype", "dtype", "use_cache", "quantization_config")
_TENSORS = 8  # tensors sampled, evenly spaced in name order (the first and the last included)
_VALUES = 256  # values sampled per tensor, evenly strided
_DIGITS = 16


@dataclass(frozen=True)
class BaseFingerprint:
    """What identifies a base model's weights.

    Attributes:
        name: ``model.name`` it was loaded by (named in messages, not compared: a folder may move).
        architecture: Hex digest of its transformers config, less the keys about loading (dtype...).
        weights: Hex digest of strided samples of a few of its tensors, with their names and shapes.
    """

    name: str
    architecture: str
    weights: str

    def matches(self, other: BaseFingerprint) -> bool:
        """Whether both describe the same architecture and weights (whatever the names)."""
        return (self.architecture, self.weights) == (other.architecture, other.weights)

    def describe(self) -> str:
        """``NAME (architecture A, weights W)``, for messages."""
        return f"{self.name} (architecture {self.architecture}, weights {self.weights})"

    def to_json(self) -> dict[str, str]:
        """The fingerprint as a JSON object."""
        return {"name": self.name, "architecture": self.architecture, "weights": self.weights}

    @classmethod
    def from_json(cls, data: object) -> BaseFingerprint | None:
        """The fingerprint stored by :meth:`to_json`, or ``None`` when ``data`` is none (an older checkpoint)."""
        if not isinstance(data, dict) or not all(
            isinstance(data.get(k), str) for k in ("name", "architecture", "weights")
        ):
            return None
        return cls(str(data["name"]), str(data["architecture"]), str(data["weights"]))


def _base_parameters(model: Any) -> dict[str, torch.Tensor]:
    """The base model's parameters by their names without PEFT's wrapping (``q_proj.base_layer`` -> ``q_proj``)."""
    params = {}
    for name, param in base_model(model).named_parameters():
        if "lora_" in name or "modules_to_save" in name or param.is_meta:
            continue
        params[name.replace(".base_layer", "").replace(".original_module", "")] = param
    return params


def _sample(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().reshape(-1)
    picked = flat[:: max(1, flat.numel() // _VALUES)][:_VALUES]
    if picked.is_floating_point():
        picked = picked.to(torch.float32)
    return picked.cpu().contiguous().numpy().tobytes()


def base_fingerprint(model: Any, name: str) -> BaseFingerprint:
    """Fingerprint a freshly loaded base model (before any update: full fine-tuning changes its weights).

    Reads its config and ``8 x 256`` values, so it costs microseconds on any model size.

    Args:
        model: A transformers model, possibly PEFT-wrapped (the base weights are read).
        name: The name it was loaded by (``model.name``).

    Returns:
        The fingerprint.
    """
    config = base_model(model).config.to_dict()
    kept = {k: v for k, v in config.items() if not k.startswith("_") and k not in _LOAD_KEYS}
    architecture = hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[
        :_DIGITS
    ]
    params = _base_parameters(model)
    names = sorted(params)
    count = min(_TENSORS, len(names))
    chosen = sorted({round(i * (len(names) - 1) / max(1, count - 1)) for i in range(count)})
    digest = hashlib.sha256()
    for index in chosen:
        tensor = params[names[index]]
        digest.update(f"{names[index]}:{tuple(tensor.shape)};".encode())
        digest.update(_sample(tensor))
    return BaseFingerprint(name, architecture, digest.hexdigest()[:_DIGITS])
