"""Sharded LLM checkpoints (``distributed.sharding=fsdp``) with ``torch.distributed.checkpoint`` (DCP).

Layout of a folder written by sharded servers::

    meta.json              {"format": 1, "weights": "sharded", "sharding": "fsdp", "servers": N,
                            "modules": [...], "base_model": {...}}
    sharded/               DCP: the trainable weights ("model.<name>"), the heads ("heads.<name>.<param>")
                           and the optimizer state, each server writing its own shards (+ DCP's .metadata)
    updater.pt             the updater's state besides its optimizer (the fp16 loss scale...), if any
    mask_policy.safetensors  NLPO's mask policy, whole, when one was taken
    manifest.json          sha256 of every other file, written last

Server 0 writes the folder under a temporary name (``atomic_io``), tells the others where, all
servers write their shards into it (a collective), then server 0 writes the rest and renames it
into place. DCP records each tensor's global shape and every shard's offsets, so a folder loads
into any number of sharded servers (DCP reshards), into replicated servers and into one
in-process LLM (``llmgym export``), whole tensors being assembled from the shards.

DCP's index (``sharded/.metadata``) is a pickle; it is read back with an unpickler that builds
only DCP's own metadata classes, torch sizes, dtypes and layouts, and paths, so a crafted
checkpoint cannot run code (as ``torch.load(weights_only=True)`` guards the other files). The
folder's name reaches the other servers as a tensor of bytes, never as a pickle.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from llmgym.errors import CheckpointError

__all__ = ["SHARDED_DIR", "load_sharded_state", "save_sharded_state"]

#: The DCP folder inside a sharded LLM checkpoint.
SHARDED_DIR = "sharded"
_FORMAT = 1
_MASK_FILE = "mask_policy.safetensors"


def _dcp_state(
    model: Any, modules: Mapping[str, torch.nn.Module], optimizer: torch.optim.Optimizer | None
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The state DCP saves or loads in place: trainable weights, heads and (if given) the optimizer's state.

    Keys are the parameters' names under ``model.`` and ``heads.`` (FSDP keeps the unsharded
    names), so shards and whole tensors of the same model line up.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    container = torch.nn.ModuleDict({"model": model, "heads": torch.nn.ModuleDict(dict(modules))})
    options = StateDictOptions(ignore_frozen_params=True)
    weights, optim = get_state_dict(container, [optimizer] if optimizer is not None else [], options=options)
    state: dict[str, Any] = {"model": weights}
    if optimizer is not None:
        state["optimizer"] = optim
    return container, state


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def save_sharded_state(
    path: str | os.PathLike[str],
    model: Any,
    modules: Mapping[str, torch.nn.Module],
    optimizer: torch.optim.Optimizer | None,
    updater_state: dict[str, Any] | None,
    meta: dict[str, Any],
    mask_policy: Mapping[str, torch.Tensor] | None = None,
) -> None:
    """Write a sharded checkpoint to ``path``; a collective: every server calls it with its own shards.

    Args:
        path: Destination folder (the same on every server: a file system they all share).
        model: The FSDP-sharded model.
        modules: The heads by name.
        optimizer: The optimizer over the sharded parameters, or ``None``.
        updater_state: The updater's other state (its optimizer left out), or ``None``.
        meta: ``meta.json``'s fields besides the format and weights kind (written by server 0).
        mask_policy: NLPO's whole mask policy, or ``None``.
    """
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from llmgym.atomic_io import write_atomic_dir
    from llmgym.checkpoint import write_manifest

    _, state = _dcp_state(model, modules, optimizer)
    if dist.get_rank() != 0:
        dcp.save(state, checkpoint_id=Path(_broadcast_text(None)) / SHARDED_DIR)
        return

    def write(tmp: Path) -> None:
        _broadcast_text(str(tmp))
        dcp.save(state, checkpoint_id=tmp / SHARDED_DIR)
        if updater_state:
            torch.save(updater_state, tmp / "updater.pt")
        if mask_policy is not None:
            from safetensors.torch import save_file

            save_file(
                {k: v.detach().contiguous().cpu() for k, v in mask_policy.items()}, str(tmp / _MASK_FILE)
            )
        (tmp / "meta.json").write_text(
            json.dumps({"format": _FORMAT, "weights": "sharded", **meta}, indent=1)
        )
        write_manifest(tmp)

    write_atomic_dir(path, write)


def load_sharded_state(
    folder: Path,
    meta: dict[str, Any],
    model: Any,
    modules: Mapping[str, torch.nn.Module],
    optimizer: torch.optim.Optimizer | None,
) -> dict[str, Any] | None:
    """Load a sharded checkpoint (its manifest already verified) into ``model``, ``modules`` and ``optimizer``.

    ``model`` may be sharded over any number of servers (every server calls this, a collective)
    or whole in one process: DCP assembles each tensor from the shards it overlaps.

    Args:
        folder: The checkpoint folder.
        meta: Its ``meta.json``.
        model: The model to load the trainable weights into.
        modules: The heads by name (the names saved).
        optimizer: The optimizer to restore, or ``None`` (export, evaluation).

    Returns:
        The updater's other state (``updater.pt``), or ``None``.

    Raises:
        CheckpointError: When the heads differ from the saved ones, or the folder does not load.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    if sorted(modules) != meta.get("modules"):
        raise CheckpointError(
            f"checkpoint {str(folder)!r} has module functions {meta.get('modules')} but this LLM has {sorted(modules)}; "
            "build the LLM with the same module_functions keys."
        )
    container, state = _dcp_state(model, modules, optimizer)
    try:
        dcp.load(state, storage_reader=_checked_reader(folder / SHARDED_DIR), no_dist=not _distributed())
        set_state_dict(
            container,
            [optimizer] if optimizer is not None else [],
            model_state_dict=state["model"],
            optim_state_dict=state.get("optimizer", {}),
            # the frozen weights are not in the checkpoint; DCP has already failed on a missing trainable one
            options=StateDictOptions(ignore_frozen_params=True, strict=False),
        )
    except (RuntimeError, ValueError, KeyError, OSError, pickle.UnpicklingError, CheckpointException) as exc:
        causes = (
            [pair[0] for pair in exc.failures.values()] if isinstance(exc, CheckpointException) else [exc]
        )
        cause = "; ".join(f"{type(c).__name__}: {(str(c).splitlines() or [''])[0][:300]}" for c in causes)
        raise CheckpointError(
            f"sharded checkpoint {str(folder)!r} (written by {meta.get('servers')} servers) could not be loaded "
            f"into this LLM ({cause}); load it into an LLM built with the same model and model.lora settings as "
            "the one that saved it."
        ) from exc
    updater_path = folder / "updater.pt"
    return torch.load(updater_path, map_location="cpu", weights_only=True) if updater_path.is_file() else None


def _broadcast_text(text: str | None) -> str:
    """Server 0's ``text`` on every server (a collective), sent as a length and a tensor of UTF-8 bytes."""
    import torch.distributed as dist

    device = _group_device()
    data = torch.tensor(list(text.encode()) if text is not None else [], dtype=torch.uint8, device=device)
    size = torch.tensor([data.numel()], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)
    if text is None:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(data, src=0)
    return bytes(data.cpu().tolist()).decode()


def _group_device() -> torch.device:
    """Where the default group's collectives run: the current GPU under NCCL, else the CPU."""
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


#: What DCP's ``.metadata`` pickle may build: DCP's metadata classes and a few plain torch and path types.
_SAFE_GLOBALS = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's index and nothing else (no function or class that could run code)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module == "torch.distributed.checkpoint.metadata":
            from torch.distributed.checkpoint import metadata

            found = getattr(metadata, name, None)
            if isinstance(found, type):
                return found
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(
            f"the checkpoint's index asks for {module}.{name}, which a DCP index never holds; refusing to load it"
        )


def _checked_reader(path: Path) -> Any:
    """DCP's file reader for ``path``, whose index is read with :class:`_MetadataUnpickler`."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    class CheckedReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
            with open(path / ".metadata", "rb") as stream:
                metadata = _MetadataUnpickler(stream).load()
            if not isinstance(metadata, Metadata):
                raise pickle.UnpicklingError(f"{path / '.metadata'} holds no DCP index")
            storage = metadata.storage_meta or StorageMeta()
            storage.load_id = self.load_id
            metadata.storage_meta = storage
            return metadata

    return CheckedReader(path)
