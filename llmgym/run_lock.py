"""Who writes a run folder: an advisory lock held while ``llmgym train`` writes it, and fresh run names.

A run folder holds ``.llmgym.lock``: while a run writes the folder, its process holds an exclusive
``flock`` on that file and the file holds its pid. A second run on the same folder fails at once
(:class:`~llmgym.errors.RunLockedError` naming that pid); a lock file left by a process that died
(the kernel released its ``flock``, the pid stays written) is taken over with a warning. Readers
(``llmgym eval``/``export``) never take the lock: :func:`lock_holder` tells them whether a live
run is writing the folder. A new run (without ``train.resume``) never writes into a folder that
already holds a run (:func:`llmgym.checkpoint.check_new_run_dir`), and default names get a ``-2``, ``-3``...
suffix when two runs start in the same second (:func:`new_run_dir`).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import weakref
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType

from llmgym.errors import ConfigError, RunLockedError

__all__ = ["LOCK_FILE", "RunLock", "lock_holder", "new_run_dir", "default_run_stem"]

logger = logging.getLogger(__name__)

#: The lock file in a run folder.
LOCK_FILE = ".llmgym.lock"
_MAX_SUFFIX = 10_000


#: Locks held by this process. A forked child (an env worker) drops its copies of their descriptors,
#: so one that outlives the run (orphaned by a SIGKILL) does not keep the run folder locked.
_HELD: weakref.WeakSet[RunLock] = weakref.WeakSet()


def _drop_in_child() -> None:
    for lock in list(_HELD):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            os.close(fd)  # the parent's descriptor, and so its lock, stays
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_in_child)


def _read_pid(fd: int) -> int | None:
    data = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    return int(data) if data.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


class RunLock(AbstractContextManager["RunLock"]):
    """The exclusive advisory lock of a run folder, held by the process writing it.

    Build it with :meth:`acquire`; :meth:`release` (or leaving a ``with`` block) frees it. The
    kernel frees it too when the process dies, however it dies.

    Args:
        run_dir: The run folder.
        fd: An open descriptor of its lock file on which this process holds ``flock(LOCK_EX)``.
    """

    def __init__(self, run_dir: Path, fd: int) -> None:
        self.run_dir = run_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, run_dir: str | os.PathLike[str]) -> RunLock:
        """Lock ``run_dir`` (an existing folder) for this process, without waiting.

        Args:
            run_dir: The run folder.

        Returns:
            The held lock.

        Raises:
            RunLockedError: If another live process holds the lock; the message names its pid.
        """
        folder = Path(run_dir)
        path = folder / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            who = f"process {holder}" if holder is not None else "another process"
            if holder is not None and not _alive(holder):
                who += " (no longer running: a process it started still holds the lock)"
            raise RunLockedError(
                f"run folder {folder} is being written by {who} (it holds {path}). Fix: wait for that run to end "
                f"or stop it (kill {holder or 'PID'}), or give this run another train.run_name."
            ) from exc
        previous = _read_pid(fd)
        if previous is not None and previous != os.getpid():
            logger.warning(
                "Took over the lock of run folder %s left by process %d, which is no longer running.",
                folder,
                previous,
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        lock = cls(folder, fd)
        _HELD.add(lock)
        return lock

    def release(self) -> None:
        """Free the lock (idempotent); the emptied lock file stays, so no waiting process loses its place."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        _HELD.discard(self)
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def lock_holder(run_dir: str | os.PathLike[str]) -> int | None:
    """The pid of the live process writing ``run_dir`` (as its lock file says), or ``None``.

    Takes no lock, so a reader never stands in a starting run's way.

    Args:
        run_dir: A run folder.
    """
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        pid = _read_pid(fd)
    finally:
        os.close(fd)
    return pid if pid is not None and pid != os.getpid() and _alive(pid) else None


def default_run_stem(env_id: str, stamp: str) -> str:
    """``NAME-STAMP`` of a run of ``env_id`` (``mymodule:my/Env-v0`` gives ``Env-v0-STAMP``)."""
    return f"{env_id.rpartition(':')[2].split('/')[-1]}-{stamp}"


def new_run_dir(parent: str | os.PathLike[str], stem: str) -> Path:
    """Create and return a new folder ``parent/stem``, or ``stem-2``, ``stem-3``... when it exists.

    The folder is created with one ``mkdir``, so two processes never get the same one.

    Args:
        parent: Where runs are written (``train.output_dir``).
        stem: The default run name.

    Raises:
        ConfigError: If ``parent`` holds thousands of folders of that name.
    """
    root = Path(parent)
    root.mkdir(parents=True, exist_ok=True)
    for index in range(1, _MAX_SUFFIX):
        path = root / (stem if index == 1 else f"{stem}-{index}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise ConfigError(
        f"{root} holds {_MAX_SUFFIX} runs named {stem}-*; give train.run_name or another train.output_dir."
    )
