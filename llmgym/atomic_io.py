"""Crash-safe writes: a file or a whole folder appears complete at its final path, or not at all.

Everything is written under a temporary name next to its target, fsynced, and moved into place
with one ``os.replace``; the folder holding it is fsynced afterwards. A crash leaves either the
old content or the new one, plus temporary entries named as :data:`TMP_DIR` and :data:`OLD_DIR`
describe (:func:`llmgym.checkpoint.clean_crash_leftovers` removes them from a run directory).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["OLD_DIR", "TMP_DIR", "fsync_dir", "fsync_tree", "write_atomic_dir", "write_text_atomic"]

#: A folder :func:`write_atomic_dir` is still writing (``.<name>-tmp-<random>``).
TMP_DIR = re.compile(r"\.(?P<name>.+)-tmp-[^/]+")
#: A folder :func:`write_atomic_dir` replaced and had not yet removed (``.<name>-old-<pid>``).
OLD_DIR = re.compile(r"\.(?P<name>.+)-old-\d+")


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (names, renames) to disk."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: str | Path) -> None:
    """Flush every file below ``folder`` and every folder (itself included) to disk.

    Args:
        folder: The folder to flush.
    """
    for root, _, files in os.walk(folder):
        for name in files:
            fd = os.open(Path(root) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(root))


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write a text file through a fsynced temporary file and ``os.replace``, then fsync its folder.

    Args:
        path: The file to write (replaced if it exists).
        text: Its content.

    Returns:
        ``path``.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
    return target


def write_atomic_dir(target: str | os.PathLike[str], write: Callable[[Path], None]) -> Path:
    """Build a folder with ``write(tmp_dir)``, fsync it, and move it into place in one rename.

    An existing ``target`` is replaced only after the new folder is complete; a crash between the
    two renames of a replacement leaves the old folder as ``.<name>-old-<pid>``, which
    :func:`llmgym.checkpoint.clean_crash_leftovers` moves back.

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
        fsync_tree(tmp)
        if final.exists():
            old = final.with_name(f".{final.name}-old-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final
