"""A private temporary folder (and files adopted with it) removed on every exit of the process that made it, SIGKILL included.

vLLM loads the model llmgym trains from a folder, so every engine writes a full copy of the
weights to a temporary folder (16 GB for an 8B model in bf16). :meth:`ScratchFolder.remove` removes
it on a normal close; for every other way out (an exception nobody catches, SIGTERM, SIGKILL, the
OOM killer) a :class:`~llmgym.lifetime.Reaper` started with the folder removes it, and the files
:meth:`ScratchFolder.adopt` named to it, once the owner's process has ended.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from llmgym.lifetime import Reaper

__all__ = ["ScratchFolder"]

#: The reaper's clean-up: the folder (its argument), then the files adopted later (its messages).
_REMOVE = """
import contextlib, os, shutil
def reap(args, messages):
    shutil.rmtree(args[0], ignore_errors=True)
    for path in messages:
        with contextlib.suppress(OSError):
            os.remove(path)
"""


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
            self._reaper = Reaper(_REMOVE, [str(self.path)])
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def adopt(self, path: str | os.PathLike[str]) -> None:
        """Remove the file ``path`` (made elsewhere, outside the folder) with the folder.

        Args:
            path: A file (not a folder) to remove with this one.
        """
        self._adopted.append(os.fspath(path))
        self._reaper.tell(os.fspath(path))

    def remove(self) -> None:
        """Remove the folder and the adopted files now and let the reaper go; safe to call twice."""
        shutil.rmtree(self.path, ignore_errors=True)
        for path in self._adopted:
            with contextlib.suppress(OSError):
                os.remove(path)
        self._reaper.dismiss()
