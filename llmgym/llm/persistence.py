"""Atomic save / load of what an LLM trains: adapters or full weights, heads, updater state.

Layout of a saved folder::

    meta.json              {"format": 1, "weights": "adapter" | "full" | "none", "modules": [...],
                            "base_model": {"name", "architecture", "weights"} (the base's fingerprint)}
    weights.safetensors    LoRA adapter weights, or the model's trainable parameters
    modules.safetensors    module function weights, keys "<name>.<param>"
    updater.pt             updater state (optimizer...), read with torch.load(weights_only=True) onto the CPU
    mask_policy.safetensors  NLPO's mask-policy snapshot of the trainable weights, when one was taken
    manifest.json          sha256 of every other file, written last and verified on load

The folder is written under a temporary name next to the target, fsynced and renamed into place.
Loading checks the manifest first, so a missing or corrupted file (``updater.pt`` included: a
silently reset optimizer would make a resumed run diverge) is a :class:`CheckpointError` naming it.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from llmgym.atomic_io import write_atomic_dir
from llmgym.checkpoint import verify_manifest, write_manifest
from llmgym.errors import CheckpointError
from llmgym.llm.adapters import is_peft_model
from llmgym.llm.fingerprint import BaseFingerprint

__all__ = ["save_llm_state", "load_llm_state", "load_mask_policy", "has_mask_policy", "read_meta"]

_FORMAT = 1
_MASK_FILE = "mask_policy.safetensors"


def _trainable_weights(model: Any) -> tuple[str, dict[str, torch.Tensor]]:
    if is_peft_model(model):
        from peft import get_peft_model_state_dict

        return "adapter", dict(get_peft_model_state_dict(model))
    weights = {n: p for n, p in model.named_parameters() if p.requires_grad}
    return ("full" if weights else "none"), weights


def _save_tensors(tensors: Mapping[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous().cpu().clone() for k, v in tensors.items()}, str(path))


def save_llm_state(
    path: str | os.PathLike[str],
    model: Any,
    modules: Mapping[str, torch.nn.Module],
    updater_state: dict[str, Any] | None,
    mask_policy: Mapping[str, torch.Tensor] | None = None,
    base: BaseFingerprint | None = None,
) -> Path:
    """Write trainable weights, module functions, updater state and mask policy to ``path`` atomically.

    Args:
        path: Destination folder (replaced if it exists).
        model: The (possibly PEFT-wrapped) model.
        modules: Module functions by name.
        updater_state: The updater's ``state_dict()``, or ``None``.
        mask_policy: NLPO's mask-policy snapshot (:class:`~llmgym.llm.masking.MaskPolicy`), or ``None``.
        base: The fingerprint of the base model the training started from, or ``None`` (not recorded).

    Returns:
        The folder path.
    """

    def write(tmp: Path) -> None:
        kind, weights = _trainable_weights(model)
        if weights:
            _save_tensors(weights, tmp / "weights.safetensors")
        module_tensors = {f"{name}.{k}": v for name, m in modules.items() for k, v in m.state_dict().items()}
        _save_tensors(module_tensors, tmp / "modules.safetensors")
        if updater_state is not None:
            torch.save(updater_state, tmp / "updater.pt")
        if mask_policy is not None:
            _save_tensors(mask_policy, tmp / _MASK_FILE)
        meta: dict[str, Any] = {"format": _FORMAT, "weights": kind, "modules": sorted(modules)}
        if base is not None:
            meta["base_model"] = base.to_json()
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        write_manifest(tmp)

    target = write_atomic_dir(path, write)
    return target


_READ_ERRORS = (OSError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError)


def read_meta(folder: Path) -> dict[str, Any]:
    """A checkpoint folder's ``meta.json``, after verifying its manifest.

    Raises:
        CheckpointError: When the folder is missing, holds no LLM checkpoint, or fails verification.
    """
    meta_path = folder / "meta.json"
    if not folder.is_dir():
        raise CheckpointError(
            f"path={str(folder)!r} does not exist, so there is no meta.json to read (a training run deletes its older "
            "checkpoints); pass a folder written by LLM.save."
        )
    if not meta_path.is_file():
        raise CheckpointError(
            f"path={str(folder)!r} holds no LLM checkpoint (meta.json missing); pass a folder written by LLM.save."
        )
    verify_manifest(folder)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except _READ_ERRORS as exc:
        raise CheckpointError(
            f"{meta_path} is unreadable ({exc}); pass a folder written by LLM.save."
        ) from exc
    if not isinstance(meta, dict):
        raise CheckpointError(
            f"{meta_path} holds no LLM checkpoint metadata; pass a folder written by LLM.save."
        )
    return meta


def _check_base(folder: Path, meta: dict[str, Any], base: BaseFingerprint | None) -> None:
    saved = BaseFingerprint.from_json(meta.get("base_model"))
    if saved is None or base is None or saved.matches(base):
        return
    raise CheckpointError(
        f"checkpoint {str(folder)!r} was trained from the base model {saved.describe()}, but the base model loaded now "
        f"is {base.describe()}: its weights or architecture changed since (another revision, or the folder rewritten). "
        "Fix: load the base it was trained from (model.name, model.revision), or start a new run from this one."
    )


def _check_meta(
    folder: Path, meta: dict[str, Any], kind: str, modules: Mapping[str, torch.nn.Module]
) -> None:
    if meta.get("format") != _FORMAT or meta.get("weights") != kind:
        raise CheckpointError(
            f"checkpoint {str(folder)!r} holds {meta.get('weights')!r} weights but this LLM trains {kind!r} weights; "
            "load it into an LLM built with the same model.lora setting."
        )
    if sorted(modules) != meta.get("modules"):
        raise CheckpointError(
            f"checkpoint {str(folder)!r} has module functions {meta.get('modules')} but this LLM has {sorted(modules)}; "
            "build the LLM with the same module_functions keys."
        )


def _load_weights(folder: Path, model: Any, kind: str) -> None:
    from safetensors.torch import load_file

    weights = load_file(str(folder / "weights.safetensors"))
    if kind == "adapter":
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, weights)
        unexpected = list(getattr(result, "unexpected_keys", []))
    else:
        result = model.load_state_dict(weights, strict=False)
        unexpected = list(result.unexpected_keys)
    if unexpected:
        raise CheckpointError(f"checkpoint {str(folder)!r} has weights this model lacks: {unexpected[:5]}.")


def _load_modules(folder: Path, modules: Mapping[str, torch.nn.Module]) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(folder / "modules.safetensors"))
    for name, module in modules.items():
        prefix = f"{name}."
        module.load_state_dict({k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)})


def load_llm_state(
    path: str | os.PathLike[str],
    model: Any,
    modules: Mapping[str, torch.nn.Module],
    base: BaseFingerprint | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> dict[str, Any] | None:
    """Load what :func:`save_llm_state` (or sharded servers, :mod:`~llmgym.llm.sharded_state`) wrote.

    The folder's manifest is verified first: every file it lists must be there, unchanged. A
    sharded checkpoint's shards are assembled into ``model``'s whole weights, and into
    ``optimizer`` when one is given (its state lives with the shards, not in ``updater.pt``).

    Args:
        path: Folder written by :func:`save_llm_state`.
        model: The model to load trainable weights into (same adapter setup as when saved).
        modules: Module functions by name (same names as when saved).
        base: The fingerprint of ``model``'s base as loaded; compared with the one the folder
            records (``None``, or a folder without one: not compared).
        optimizer: The updater's optimizer, restored from a sharded checkpoint (``None``: not restored).

    Returns:
        The saved updater state (tensors on the CPU, wherever they were saved), or ``None`` if none was saved.

    Raises:
        CheckpointError: When the folder is missing, incomplete, corrupted or does not match the model
            (another base model's weights included, naming both fingerprints).
    """
    from safetensors import SafetensorError

    folder = Path(path)
    meta = read_meta(folder)
    _check_base(folder, meta, base)
    if meta.get("weights") == "sharded":
        from llmgym.llm.sharded_state import load_sharded_state

        return load_sharded_state(folder, meta, model, modules, optimizer)
    kind, _ = _trainable_weights(model)
    _check_meta(folder, meta, kind, modules)
    updater_path = folder / "updater.pt"
    try:
        if kind != "none":
            _load_weights(folder, model, kind)
        _load_modules(folder, modules)
        # map_location: a state saved on a GPU loads where there is none (eval, export on CPU); the
        # optimizer's load_state_dict moves each tensor to its parameter's device.
        return (
            torch.load(updater_path, map_location="cpu", weights_only=True)
            if updater_path.is_file()
            else None
        )
    except CheckpointError:
        raise
    except (*_READ_ERRORS, SafetensorError) as exc:
        raise CheckpointError(
            f"checkpoint {str(folder)!r} could not be loaded into this LLM ({str(exc).splitlines()[0][:300]}); load it "
            "into an LLM built with the same model and model.lora settings as the one that saved it."
        ) from exc


def has_mask_policy(path: str | os.PathLike[str]) -> bool:
    """Whether the LLM state in ``path`` saved a mask-policy snapshot (NLPO had taken one)."""
    return (Path(path) / _MASK_FILE).is_file()


def load_mask_policy(path: str | os.PathLike[str]) -> dict[str, torch.Tensor] | None:
    """The mask-policy snapshot saved with the LLM state in ``path`` (CPU tensors), or ``None`` if none was.

    Raises:
        CheckpointError: When the folder's manifest does not verify or the file is unreadable.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(path)
    read_meta(folder)
    mask_path = folder / _MASK_FILE
    if not mask_path.is_file():
        return None
    try:
        return dict(load_file(str(mask_path)))
    except (*_READ_ERRORS, SafetensorError) as exc:
        raise CheckpointError(f"{mask_path} could not be read ({str(exc).splitlines()[0][:300]}).") from exc
