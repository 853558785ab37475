"""Atomic, verified checkpoints: everything a run needs to resume, never half-written or half-read.

A checkpoint is a folder ``RUN_DIR/checkpoints/step-<env_steps>/`` holding the LLM state
(adapters or weights, module functions, updater/optimizer state: written by ``LLM.save``), the
trainer state (counters, RNG states, env replay state) as JSON + a tensor file loaded with
``weights_only=True``, the resolved config, and, written last, ``manifest.json``: the sha256 of
every other file (a subfolder with its own manifest, such as ``llm/``, is covered by the hash of
that manifest). It is written into a temporary folder next to its final place, every file and
folder fsynced, and renamed; ``RUN_DIR/checkpoints/latest`` (a one-line text file) is replaced
atomically afterwards. A crash at any point thus leaves the previous checkpoint intact and pointed
to; :func:`clean_crash_leftovers` removes the temporary folders such a crash leaves behind.

The most recent checkpoints are kept (``train.keep_checkpoints``, 2 by default), so when ``latest``
fails verification (a missing or corrupted file), :func:`latest_checkpoint` falls back to the newest
older one with a warning.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from llmgym.atomic_io import OLD_DIR, TMP_DIR, fsync_dir, write_atomic_dir, write_text_atomic
from llmgym.config import move_renamed_keys
from llmgym.errors import CheckpointError, ConfigError, DiskFullError, LLMGymError
from llmgym.run_lock import LOCK_FILE, lock_holder

__all__ = [
    "check_new_run_dir",
    "write_manifest",
    "verify_manifest",
    "clean_crash_leftovers",
    "RESUME_SAFE_KEYS",
    "check_resume_config",
    "save_checkpoint",
    "latest_checkpoint",
    "has_checkpoint",
    "read_latest_checkpoint",
    "is_checkpoint_name",
    "load_trainer_state",
    "load_checkpoint_config",
    "capture_rng_state",
    "restore_rng_state",
    "cuda_rng_states",
]

logger = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
LATEST = "latest"
MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.json"
TRAINER_TENSORS = "trainer_tensors.pt"
CONFIG = "config.yaml"
_MANIFEST_FORMAT = 1
_STEP_DIR = re.compile(r"step-\d+")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _covered_files(folder: Path) -> list[Path]:
    """Files a manifest of ``folder`` lists: all below it, a subfolder with a manifest by that manifest."""
    files: list[Path] = []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir():
            files.extend([entry / MANIFEST] if (entry / MANIFEST).is_file() else _covered_files(entry))
        elif entry.name != MANIFEST:
            files.append(entry)
    return files


def write_manifest(folder: str | Path) -> Path:
    """Write ``folder/manifest.json``: the sha256 of every file below ``folder``; call it last.

    A subfolder that holds its own manifest is covered by the hash of that manifest, which
    :func:`verify_manifest` then checks in turn.

    Args:
        folder: A completely written folder.

    Returns:
        The manifest path.
    """
    root = Path(folder)
    files = {path.relative_to(root).as_posix(): _sha256(path) for path in _covered_files(root)}
    manifest = root / MANIFEST
    manifest.write_text(json.dumps({"format": _MANIFEST_FORMAT, "sha256": files}, indent=1), encoding="utf-8")
    return manifest


def _read_manifest(root: Path) -> dict[str, str]:
    path = root / MANIFEST
    if not path.is_file():
        raise CheckpointError(
            f"{path} is missing, so '{root}' is incomplete (an interrupted save) or was written by an older "
            "llmgym; resume from another checkpoint or start a new run."
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(
            f"{path} is unreadable ({exc}); resume from another checkpoint or start a new run."
        ) from exc
    files = manifest.get("sha256") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("format") != _MANIFEST_FORMAT:
        raise CheckpointError(
            f"{path} is not an llmgym manifest; resume from another checkpoint or start a new run."
        )
    return {str(name): str(digest) for name, digest in files.items()}


def verify_manifest(folder: str | Path) -> None:
    """Check that every file listed in ``folder/manifest.json`` exists with its recorded sha256.

    Args:
        folder: A folder written with :func:`write_manifest` last.

    Raises:
        CheckpointError: Naming the first missing or changed file (nested manifests included).
    """
    root = Path(folder)
    for name, digest in _read_manifest(root).items():
        path = root / name
        if not path.is_file():
            raise CheckpointError(
                f"{path} is missing from the checkpoint; restore it or resume from another checkpoint."
            )
        if _sha256(path) != digest:
            raise CheckpointError(
                f"{path} is corrupted (its sha256 differs from {root / MANIFEST}); restore it or resume from "
                "another checkpoint."
            )
        if path.name == MANIFEST:
            verify_manifest(path.parent)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _leftovers(run: Path) -> list[Path]:
    root = run / CHECKPOINTS
    found = [*run.glob(".config.yaml-*"), *run.glob(".metrics.jsonl-*")]
    if root.is_dir():
        found += [
            p
            for p in root.iterdir()
            if TMP_DIR.fullmatch(p.name) or OLD_DIR.fullmatch(p.name) or p.name.startswith(f".{LATEST}-")
        ]
    return sorted(found)


def clean_crash_leftovers(run_dir: str | Path) -> list[str]:
    """Remove what an interrupted save leaves in a run directory; call it before a run or resume starts.

    Removes temporary checkpoint folders (``checkpoints/.step-N-tmp-*``), temporary files of atomic
    writes (``checkpoints/.latest-*``, ``.config.yaml-*``, ``.metrics.jsonl-*``) and replaced folders
    (``checkpoints/.step-N-old-PID``). A replaced folder whose new version never took its place is
    moved back instead, since ``latest`` may name it.

    Args:
        run_dir: The run directory.

    Returns:
        The names of the entries removed or moved back.
    """
    run = Path(run_dir)
    cleaned = []
    for path in _leftovers(run):
        old = OLD_DIR.fullmatch(path.name)
        if old is not None and not (path.parent / old["name"]).exists():
            os.replace(path, path.parent / old["name"])
        else:
            _remove(path)
        cleaned.append(path.name)
    if cleaned:
        fsync_dir(run)
        if (run / CHECKPOINTS).is_dir():
            fsync_dir(run / CHECKPOINTS)
        logger.warning("Cleaned the leftovers of an interrupted save in %s: %s", run, ", ".join(cleaned))
    return cleaned


def capture_rng_state() -> tuple[dict[str, Any], dict[str, Any]]:
    """The Python, NumPy and torch RNG states as ``(json-able dict, tensor dict)``."""
    import numpy as np
    import torch

    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    json_part = {
        "python": [version, list(internal), gauss],
        "numpy": {
            **np_state,
            "state": {"key": np_state["state"]["key"].tolist(), "pos": int(np_state["state"]["pos"])},
        },
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
    np_state["state"] = {
        "key": np.asarray(np_state["state"]["key"], dtype=np.uint32),
        "pos": np_state["state"]["pos"],
    }
    np.random.set_state(np_state)
    torch.set_rng_state(tensors["torch"])
    if torch.cuda.is_available():
        for index, state in cuda_rng_states(tensors, torch.cuda.device_count()):
            torch.cuda.set_rng_state(state, index)


def cuda_rng_states(tensors: dict[str, Any], device_count: int) -> list[tuple[int, Any]]:
    """``(device index, RNG state)`` of every saved ``cuda<N>`` state of a visible device, by index.

    Indices are numbers, not strings (``cuda10`` after ``cuda2``); states of devices this machine
    does not have are left out, as are devices without a saved state (they keep their own).

    Args:
        tensors: The tensor part of :func:`capture_rng_state`.
        device_count: CUDA devices visible here.
    """
    found = [
        (int(key[4:]), state)
        for key, state in tensors.items()
        if key.startswith("cuda") and key[4:].isdigit()
    ]
    return sorted(
        ((index, state) for index, state in found if index < device_count), key=lambda pair: pair[0]
    )


def is_checkpoint_name(name: str) -> bool:
    """Whether ``name`` is the name of a checkpoint folder (``step-<env_steps>``), not a path."""
    return _STEP_DIR.fullmatch(name) is not None


def _step_dirs(root: Path) -> list[Path]:
    """The checkpoint folders of ``root``, oldest first (names sort by step)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if _STEP_DIR.fullmatch(p.name) and p.is_dir())


def save_checkpoint(
    run_dir: str | Path,
    env_steps: int,
    save_llm: Callable[[Path], Any],
    trainer_state: dict[str, Any],
    trainer_tensors: dict[str, Any],
    config_yaml: str,
    keep: int = 2,
) -> Path:
    """Write one checkpoint atomically, with its manifest, and point ``latest`` at it.

    After the switch, checkpoints newer than this one (left by a run resumed from an older
    checkpoint) are deleted, and of the older ones the most recent ``keep - 1`` are kept, so
    :func:`latest_checkpoint` has one to fall back to.

    Args:
        run_dir: The run directory.
        env_steps: Env steps so far (names the folder).
        save_llm: Writes the LLM state into the folder it is given (``LLM.save``).
        trainer_state: JSON-serialisable trainer state (counters, RNG, env replay state).
        trainer_tensors: Tensors of the trainer state (RNG states), saved with ``torch.save``.
        config_yaml: The resolved config as YAML text.
        keep: Number of most recent checkpoints kept (2 or more keeps a fallback; ``train.keep_checkpoints``).

    Returns:
        The checkpoint folder.

    Raises:
        DiskFullError: When the disk (or quota) is full; the previous checkpoint and ``latest`` are
            untouched and the message names them.
    """
    import torch

    root = Path(run_dir) / CHECKPOINTS
    target = root / f"step-{env_steps:010d}"

    def write(tmp: Path) -> None:
        save_llm(tmp / "llm")
        (tmp / TRAINER_STATE).write_text(json.dumps(trainer_state), encoding="utf-8")
        torch.save(trainer_tensors, tmp / TRAINER_TENSORS)
        (tmp / CONFIG).write_text(config_yaml, encoding="utf-8")
        write_manifest(tmp)

    previous = _candidates(root)[0][:1]
    try:
        write_atomic_dir(target, write)
        write_text_atomic(root / LATEST, target.name + "\n")
    except OSError as exc:
        if exc.errno not in _DISK_FULL:
            raise
        raise _disk_full(Path(run_dir), target, previous[0] if previous else None, exc) from exc
    others = [p for p in _step_dirs(root) if p != target]
    older = [p for p in others if p.name < target.name]
    stale = [p for p in others if p.name > target.name] + older[: max(0, len(older) - (keep - 1))]
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    return target


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _disk_full(run: Path, target: Path, previous: Path | None, exc: OSError) -> DiskFullError:
    """The error of a checkpoint that a full disk (or quota) stopped; what was written of it is gone."""
    where = (
        f"the disk is full ({exc.strerror or exc}) under {run}: checkpoint {target.name} could not be written"
    )
    if previous is None:
        return DiskFullError(
            f"{where}, and no checkpoint was written before, so nothing can be resumed. Fix: free space on that disk "
            "(or set train.output_dir to another one) and start the run again."
        )
    return DiskFullError(
        f"{where}; the previous checkpoint {previous} is intact (checkpoints/latest names it). Fix: free space on "
        f"that disk, then resume with train.resume={run}."
    )


def _candidates(root: Path) -> tuple[list[Path], list[str]]:
    """Checkpoint folders to try, best first, and why ``latest`` itself cannot be used (if so)."""
    steps = _step_dirs(root)
    pointer = root / LATEST
    if not pointer.is_file():
        return steps[::-1], [f"{pointer} is missing"]
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        return steps[::-1], [f"{pointer} is unreadable ({exc})"]
    if not _STEP_DIR.fullmatch(name):
        return steps[::-1], [f"{pointer} holds {name[:40]!r}, not a checkpoint name"]
    if not (root / name).is_dir():
        return [p for p in steps[::-1] if p.name < name], [
            f"checkpoint {root / name} named by {pointer} does not exist"
        ]
    return [root / name] + [p for p in steps[::-1] if p.name < name], []


def has_checkpoint(run_dir: str | Path) -> bool:
    """Whether a run folder holds checkpoints (``checkpoints/latest`` or a ``step-N`` folder), complete or not."""
    root = Path(run_dir) / CHECKPOINTS
    return (root / LATEST).is_file() or bool(_step_dirs(root))


def latest_checkpoint(run_dir: str | Path) -> Path:
    """The checkpoint ``latest`` points to, verified against its manifest.

    When that one is missing, incomplete or corrupted, the newest older checkpoint that verifies is
    returned instead, with a warning naming what was wrong.

    Args:
        run_dir: The run directory.

    Returns:
        The checkpoint folder.

    Raises:
        CheckpointError: When the run has no complete checkpoint; the message names each problem.
    """
    root = Path(run_dir) / CHECKPOINTS
    if not (root / LATEST).is_file() and not _step_dirs(root):
        raise CheckpointError(
            f"No checkpoint in '{run_dir}' ({root / LATEST} is missing); pass the run directory written by "
            "llmgym train (it holds checkpoints/latest)."
        )
    candidates, problems = _candidates(root)
    for folder in candidates:
        try:
            verify_manifest(folder)
        except CheckpointError as exc:
            problems.append(str(exc))
            continue
        if problems:
            logger.warning("Using the older checkpoint %s, because: %s", folder, "; ".join(problems))
        return folder
    raise CheckpointError(
        f"No complete checkpoint in '{root}': {'; '.join(problems)}. Restore the named files, or start a new "
        "run (without train.resume)."
    )


_T = TypeVar("_T")
_READ_ATTEMPTS = 4


def _latest_name(root: Path) -> str | None:
    try:
        return (root / LATEST).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_latest_checkpoint(run_dir: str | Path, read: Callable[[Path], _T]) -> tuple[Path, _T]:
    """Read the latest complete checkpoint with ``read``, also while a run is still writing checkpoints.

    A training run deletes older checkpoints as it writes newer ones, so the one chosen may vanish
    while ``read`` loads it. When ``read`` fails and ``checkpoints/latest`` has moved on meanwhile
    (or the folder is gone), the newest complete checkpoint is read instead, a few times at most.

    Args:
        run_dir: The run directory.
        read: Loads what the caller needs from a checkpoint folder (it may raise any
            :class:`~llmgym.errors.LLMGymError` or ``OSError`` when files vanish under it).

    Returns:
        ``(checkpoint folder, what read returned)``.

    Raises:
        CheckpointError: When the run has no complete checkpoint, or its checkpoints were replaced
            at every attempt (the message names the process writing the run, from its lock).
        Exception: What ``read`` raised for a checkpoint that is still in place.
    """
    root = Path(run_dir) / CHECKPOINTS
    for _ in range(_READ_ATTEMPTS):
        folder = latest_checkpoint(run_dir)
        try:
            return folder, read(folder)
        except (LLMGymError, OSError) as exc:
            if folder.is_dir() and _latest_name(root) == folder.name:
                raise
            logger.warning(
                "Checkpoint %s was replaced while being read (%s); reading the newest one.", folder, exc
            )
    holder = lock_holder(run_dir)
    who = f"process {holder}" if holder is not None else "a run"
    raise CheckpointError(
        f"the run {run_dir} is being written by {who}, which replaced its checkpoints {_READ_ATTEMPTS} times while "
        "this command read them. Fix: run the command again when that run ends (or stop it), or copy a checkpoint "
        "out of it first."
    )


def load_trainer_state(checkpoint: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read ``(trainer_state, trainer_tensors)`` of a checkpoint (tensors with ``weights_only=True``).

    Args:
        checkpoint: A checkpoint folder (verified by :func:`latest_checkpoint`).

    Returns:
        The JSON trainer state and its tensors.

    Raises:
        CheckpointError: When a file cannot be read or parsed.
    """
    import pickle

    import torch

    folder = Path(checkpoint)
    try:
        state = json.loads((folder / TRAINER_STATE).read_text(encoding="utf-8"))
        tensors = torch.load(folder / TRAINER_TENSORS, map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
        raise CheckpointError(
            f"Checkpoint '{folder}' could not be read: {exc}; resume from another checkpoint."
        ) from exc
    if not isinstance(state, dict) or not isinstance(tensors, dict):
        raise CheckpointError(
            f"Checkpoint '{folder}' holds no trainer state; resume from another checkpoint."
        )
    return state, tensors


def load_checkpoint_config(checkpoint: str | Path) -> dict[str, Any]:
    """The resolved config a checkpoint was written with, as a nested dict (read with ``yaml.safe_load``).

    Args:
        checkpoint: A checkpoint folder.

    Returns:
        Its ``config.yaml`` as a dict, keys renamed since it was written under their new names
        (:data:`llmgym.config.RENAMED_KEYS`).

    Raises:
        CheckpointError: When the file cannot be read or holds no mapping.
    """
    import yaml

    path = Path(checkpoint) / CONFIG
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CheckpointError(f"{path} is unreadable ({exc}); resume from another checkpoint.") from exc
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path} holds no config mapping; resume from another checkpoint.")
    move_renamed_keys(saved, str(path))  # a run saved before a key was renamed resumes
    return saved


# Settings a resumed run may change: they decide how long the run goes on and what is logged,
# evaluated or written, not the data collected or the updates made from it.
RESUME_SAFE_KEYS = (
    "train.total_env_steps",
    "train.output_dir",
    "train.run_name",
    "train.resume",
    "train.eval_every",
    "train.eval_episodes",
    "train.eval_num_envs",
    "train.eval_before",
    "train.eval_sample",
    "train.eval_split_decoding",
    "algorithm.nlpo.evaluate_masked",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.checkpoint_signals",
    "logging",
    "distributed.ray_address",
    "distributed.timeout_s",
    "distributed.call_timeout_s",
)
_ABSENT = "<absent>"


def _config_diff(old: Any, new: Any, key: str = "") -> list[tuple[str, Any, Any]]:
    """``(dotted key, old, new)`` of every leaf where two nested dicts differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [*old, *(k for k in new if k not in old)]
        return [d for k in keys for d in _config_diff(old.get(k, _ABSENT), new.get(k, _ABSENT), f"{key}{k}.")]
    return [] if old == new else [(key.rstrip("."), old, new)]


def _is_safe(key: str) -> bool:
    return any(key == safe or key.startswith(f"{safe}.") for safe in RESUME_SAFE_KEYS)


def check_resume_config(saved: dict[str, Any], current: dict[str, Any], checkpoint: str | Path) -> list[str]:
    """Refuse a resume whose config changes what the run computes; report the harmless changes.

    Only the keys in :data:`RESUME_SAFE_KEYS` may change: ``train.total_env_steps`` (to extend a
    run), the evaluation and checkpoint schedule, NLPO's evaluation mask, output names, ``logging``
    and the rendezvous address, port and timeout. Every other key (``model`` with ``lora``, ``dtype`` and ``device``,
    ``env`` with its ``id``, ``num_envs`` and ``kwargs``, ``agent``, ``algorithm``,
    ``train.seed``, the number of LLM servers...) changes what the resumed run collects or how
    it updates, so it would no longer continue the run exactly and is refused. (With
    ``model.trunk_cache_mb``, saving empties the frozen-trunk cache and evaluations fill it, so a
    different checkpoint or evaluation schedule can still change the rounding of later passes.)

    Args:
        saved: The checkpoint's config, as a nested dict (its ``config.yaml``).
        current: The new run's config, as a nested dict of the same YAML types.
        checkpoint: The checkpoint folder (named in messages).

    Returns:
        ``"key: old -> new"`` for each harmless change other than ``train.resume`` (also logged,
        in one line).

    Raises:
        ConfigError: Naming each refused key with its old and new value, and the fix.
    """
    changes = _config_diff(saved, current)
    refused = [f"{k}: {old!r} -> {new!r}" for k, old, new in changes if not _is_safe(k)]
    if refused:
        raise ConfigError(
            f"Cannot resume from {checkpoint}: the config changes settings the run depends on ("
            + "; ".join(refused)
            + "). Revert them to resume this run exactly, or start a new run with them (drop train.resume and "
            "give a new train.run_name)."
        )
    accepted = [f"{k}: {old!r} -> {new!r}" for k, old, new in changes if k != "train.resume"]
    if accepted:
        logger.warning("Resuming from %s with changed settings: %s", checkpoint, "; ".join(accepted))
    return accepted


def check_new_run_dir(run_dir: str | os.PathLike[str]) -> None:
    """Refuse to start a new run (no ``train.resume``) in a folder that already holds something.

    Args:
        run_dir: The run folder (locked by this process: its lock file does not count).

    Raises:
        ConfigError: Naming the folder, what it holds, and the fixes that work: resuming only when
            it holds a checkpoint.
    """
    folder = Path(run_dir)
    held = sorted(p.name for p in folder.iterdir() if p.name != LOCK_FILE)
    if not held:
        return
    shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
    if not any((folder / name).is_file() for name in ("config.yaml", "metrics.jsonl")):
        raise ConfigError(
            f"run folder {folder} already holds files that are not an llmgym run ({shown}); a new run never "
            f"writes into it. Fix: give another train.run_name, or move those files out of the folder."
        )
    if not (folder / CHECKPOINTS / LATEST).is_file():
        raise ConfigError(
            f"run folder {folder} holds files of a run that stopped before its first checkpoint ({shown}), so it "
            f"cannot be resumed, and a new run never writes into it. Fix: give another train.run_name, or remove "
            f"the folder (rm -r {folder}) and start again."
        )
    raise ConfigError(
        f"run folder {folder} already holds a run ({shown}); a new run never writes into it. Fix: resume it "
        f"with train.resume={folder}, give another train.run_name, or remove the folder."
    )
