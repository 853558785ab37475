"""A private temporary folder (and files adopted with it) removed on every exit of the process that made it, SIGKILL included.

vLLM loads the model llmgym trains from a folder, so every engine writes a full copy of the
weights to a temporary folder (16 GB for an 8B model in bf16). :meth:`ScratchFolder.remove` removes
it on a normal close; for every other way out (an exception nobody catches, SIGTERM, SIGKILL, the
OOM killer) a small reaper process, started with the folder, waits on a pipe from its owner and
removes the folder (and the files :meth:`ScratchFolder.adopt` named to it through the pipe) when
the pipe closes: the kernel closes it when the owner's process ends,
however it ends. The reaper runs in its own session, so a Ctrl-C or a signal to the owner's
process group does not stop it first. Children forked by the owner close their copy of the pipe
at once (``os.register_at_fork``), so a forked worker that lives on does not keep the folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

__all__ = ["ScratchFolder"]

#: The reaper: read the paths adopted later until the owner's end of the pipe closes (EOF), then remove
#: the folder and them.
_REAPER = (
    "import contextlib, os, shutil, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "adopted = sys.stdin.buffer.read().decode().splitlines()\n"
    "shutil.rmtree(sys.argv[1], ignore_errors=True)\n"
    "for path in adopted:\n"
    "    with contextlib.suppress(OSError):\n"
    "        os.remove(path)\n"
)

#: Write ends of the reapers' pipes this process holds (closed in forked children).
_OPEN_PIPES: set[int] = set()
_LOCK = threading.Lock()


def _close_in_child() -> None:
    for fd in list(_OPEN_PIPES):
        try:
            os.close(fd)
        except OSError:
            pass
    _OPEN_PIPES.clear()


os.register_at_fork(after_in_child=_close_in_child)


class ScratchFolder:
    """A folder under the temporary directory (mode 0700), removed by :meth:`remove` or when this process ends.

    Args:
        prefix: Start of the folder's name (the owner's pid follows it).

    Attributes:
        path: The folder.
    """

    def __init__(self, prefix: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
        self._adopted: list[str] = []
        try:
            self._reaper: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _REAPER, str(self.path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        stdin = self._reaper.stdin
        self._pipe = None if stdin is None else stdin.fileno()
        if self._pipe is not None:
            with _LOCK:
                _OPEN_PIPES.add(self._pipe)

    def adopt(self, path: str | os.PathLike[str]) -> None:
        """Remove the file ``path`` (made elsewhere, outside the folder) with the folder.

        Args:
            path: A file (not a folder) to remove with this one.
        """
        self._adopted.append(os.fspath(path))
        reaper = self._reaper
        if reaper is not None and reaper.stdin is not None:
            reaper.stdin.write(os.fsencode(path) + b"\n")
            reaper.stdin.flush()

    def remove(self) -> None:
        """Remove the folder and the adopted files now and let the reaper go; safe to call twice."""
        shutil.rmtree(self.path, ignore_errors=True)
        for path in self._adopted:
            with contextlib.suppress(OSError):
                os.remove(path)
        reaper, self._reaper = self._reaper, None
        if reaper is None:
            return
        with _LOCK:
            _OPEN_PIPES.discard(self._pipe if self._pipe is not None else -1)
        if reaper.stdin is not None:
            reaper.stdin.close()
        reaper.wait()
