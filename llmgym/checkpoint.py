"""Atomic checkpoints: everything a run needs to resume, never half-written.

A checkpoint is a folder ``RUN_DIR/checkpoints/step-<env_steps>/`` holding the LLM state
(adapters or weights, module functions, updater/optimizer state: written by ``LLM.save``), the
trainer state (counters, RNG states, env replay state) as JSON + a tensor file loaded with
``weights_only=True``, and the resolved config. It is written into a temporary folder next to its
final place and renamed, and ``RUN_DIR/checkpoints/latest`` (a one-line text file) is replaced
atomically afterwards, so a crash at any point leaves the previous checkpoint intact and pointed to.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmgym.errors import CheckpointError

__all__ = [
    "write_atomic_dir",
    "write_text_atomic",
    "save_checkpoint",
    "latest_checkpoint",
    "load_trainer_state",
    "capture_rng_state",
    "restore_rng_state",
]

CHECKPOINTS = "checkpoints"
LATEST = "latest"
TRAINER_STATE = "trainer_state.json"
TRAINER_TENSORS = "trainer_tensors.pt"


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write a text file through a temporary file and ``os.replace``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, target)
    return target


def write_atomic_dir(target: str | os.PathLike[str], write: Callable[[Path], None]) -> Path:
    """Build a folder with ``write(tmp_dir)`` and move it into place in one rename.

    An existing ``target`` is replaced only after the new folder is complete.

    Args:
        target: Final folder path.
        write: Fills the temporary folder it is given.

    Returns:
        ``target``.
    """
    final = Path(target)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-tmp-"))
    try:
        write(tmp)
        if final.exists():
            old = final.with_name(f".{final.name}-old-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def capture_rng_state() -> tuple[dict[str, Any], dict[str, Any]]:
    """The Python, NumPy and torch RNG states as ``(json-able dict, tensor dict)``."""
    import numpy as np
    import torch

    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    json_part = {
        "python": [version, list(internal), gauss],
        "numpy": {**np_state, "state": {"key": np_state["state"]["key"].tolist(), "pos": int(np_state["state"]["pos"])}},
    }
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{i}"] = state
    return json_part, tensors


def restore_rng_state(json_part: dict[str, Any], tensors: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    import numpy as np
    import torch

    version, internal, gauss = json_part["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = dict(json_part["numpy"])
    np_state["state"] = {"key": np.asarray(np_state["state"]["key"], dtype=np.uint32), "pos": np_state["state"]["pos"]}
    np.random.set_state(np_state)
    torch.set_rng_state(tensors["torch"])
    if torch.cuda.is_available():
        states = [tensors[k] for k in sorted(tensors) if k.startswith("cuda")]
        if states:
            torch.cuda.set_rng_state_all(states)


def save_checkpoint(
    run_dir: str | Path,
    env_steps: int,
    save_llm: Callable[[Path], Any],
    trainer_state: dict[str, Any],
    trainer_tensors: dict[str, Any],
    config_yaml: str,
    keep: int = 2,
) -> Path:
    """Write one checkpoint atomically and point ``latest`` at it.

    Args:
        run_dir: The run directory.
        env_steps: Env steps so far (names the folder).
        save_llm: Writes the LLM state into the folder it is given (``LLM.save``).
        trainer_state: JSON-serialisable trainer state (counters, RNG, env replay state).
        trainer_tensors: Tensors of the trainer state (RNG states), saved with ``torch.save``.
        config_yaml: The resolved config as YAML text.
        keep: Number of most recent checkpoints kept (older ones are deleted after the switch).

    Returns:
        The checkpoint folder.
    """
    import torch

    root = Path(run_dir) / CHECKPOINTS
    target = root / f"step-{env_steps:010d}"

    def write(tmp: Path) -> None:
        save_llm(tmp / "llm")
        (tmp / TRAINER_STATE).write_text(json.dumps(trainer_state), encoding="utf-8")
        torch.save(trainer_tensors, tmp / TRAINER_TENSORS)
        (tmp / "config.yaml").write_text(config_yaml, encoding="utf-8")

    write_atomic_dir(target, write)
    write_text_atomic(root / LATEST, target.name + "\n")
    old = sorted(p for p in root.glob("step-*") if p.is_dir() and p != target)
    for stale in old[: max(0, len(old) - (keep - 1))]:
        shutil.rmtree(stale, ignore_errors=True)
    return target


def latest_checkpoint(run_dir: str | Path) -> Path:
    """The checkpoint ``latest`` points to.

    Raises:
        CheckpointError: When the run has no complete checkpoint.
    """
    root = Path(run_dir) / CHECKPOINTS
    pointer = root / LATEST
    if not pointer.is_file():
        raise CheckpointError(
            f"No checkpoint in '{run_dir}' ({pointer} is missing); pass the run directory written by "
            "llmgym train (it holds checkpoints/latest)."
        )
    folder = root / pointer.read_text(encoding="utf-8").strip()
    if not (folder / TRAINER_STATE).is_file():
        raise CheckpointError(f"Checkpoint '{folder}' named by {pointer} is incomplete or was deleted.")
    return folder


def load_trainer_state(checkpoint: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read ``(trainer_state, trainer_tensors)`` of a checkpoint (tensors with ``weights_only=True``)."""
    import torch

    folder = Path(checkpoint)
    try:
        state = json.loads((folder / TRAINER_STATE).read_text(encoding="utf-8"))
        tensors = torch.load(folder / TRAINER_TENSORS, weights_only=True)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"Checkpoint '{folder}' could not be read: {exc}") from exc
    return state, tensors
