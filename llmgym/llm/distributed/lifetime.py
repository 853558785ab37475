"""No process of a job outlives its parent: the launcher's children and a spawning client's servers.

On Linux each child asks the kernel to send it ``SIGTERM`` when its parent dies
(``prctl(PR_SET_PDEATHSIG)``), even when the parent is killed with ``SIGKILL`` and cannot clean up;
a child whose parent already died before it asked exits at once. Elsewhere the children still
leave when their control connection drops.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["exit_with_parent"]

_PR_SET_PDEATHSIG = 1


def exit_with_parent(parent_pid: int) -> None:
    """Make this process receive ``SIGTERM`` when ``parent_pid`` (its parent) exits.

    Safe as a ``subprocess.Popen(preexec_fn=...)`` of a single-threaded parent, or at the start
    of a child.

    Args:
        parent_pid: The pid of the parent this process must not outlive.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(128 + signal.SIGTERM)
