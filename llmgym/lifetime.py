"""No child process outlives its parent: launcher children, LLM servers, env workers, sweep runs.

On Linux a child asks the kernel to send it a signal when its parent dies
(``prctl(PR_SET_PDEATHSIG)``), even when the parent is killed with ``SIGKILL`` and cannot clean up;
a child whose parent already died before it asked exits at once. The kernel sends that signal when
the *thread* that started the child exits, so :func:`exit_with_parent` is only for children started
from a thread that lives as long as its process (the main thread); :func:`watch_parent` polls
instead and works from any thread, on any POSIX system.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

__all__ = ["exit_with_parent", "watch_parent"]

_PR_SET_PDEATHSIG = 1


def exit_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """Make this process receive ``sig`` when ``parent_pid`` (its parent) exits (Linux only).

    Safe as a ``subprocess.Popen(preexec_fn=...)`` of a single-threaded parent, or at the start
    of a child.

    Args:
        parent_pid: The pid of the parent this process must not outlive.
        sig: The signal sent on the parent's death: ``SIGTERM`` lets a Python child's default
            handler end it, ``SIGKILL`` ends any child at once.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(128 + int(sig))


def watch_parent(parent_pid: int, interval_s: float = 0.5) -> threading.Thread:
    """Start a daemon thread that ends this process once ``parent_pid`` is no longer its parent.

    A process whose parent dies is handed to another one (init or a subreaper), so a changed
    ``os.getppid()`` means the parent died, however it died.

    Args:
        parent_pid: The pid of the parent this process must not outlive.
        interval_s: Seconds between two checks.

    Returns:
        The started thread.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os._exit(128 + signal.SIGKILL)

    thread = threading.Thread(target=watch, name="llmgym-parent-watch", daemon=True)
    thread.start()
    return thread
