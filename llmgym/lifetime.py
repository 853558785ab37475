"""No child process outlives its parent, and nothing a process leaves behind outlives it.

Children (launcher children, LLM servers, env workers, sweep runs): on Linux a child asks the kernel to send it a signal when its parent dies
(``prctl(PR_SET_PDEATHSIG)``), even when the parent is killed with ``SIGKILL`` and cannot clean up;
a child whose parent already died before it asked exits at once. The kernel sends that signal when
the *thread* that started the child exits, so :func:`exit_with_parent` is only for children started
from a thread that lives as long as its process (the main thread); :func:`watch_parent` polls
instead and works from any thread, on any POSIX system.

What a process leaves behind (vLLM's model copies, a private Ray instance's processes): a
:class:`Reaper` is a small process started beside it that waits on a pipe from its owner and runs
a clean-up when the pipe closes without the owner dismissing it first. The kernel closes the pipe
when the owner's process ends, however it ends (``SIGKILL`` and the OOM killer included), and no
other process can hold it open: children forked by the owner close their copy at once
(``os.register_at_fork``). The reaper runs in its own session, so a Ctrl-C or a signal to the
owner's process group does not stop it first.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

__all__ = ["Reaper", "exit_with_parent", "watch_parent"]

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


#: The last line an owner sends a reaper that must not clean up (its owner did).
_DISMISS = "\0llmgym-reaper-dismissed"

#: What every reaper runs around its clean-up: read what the owner says until its end of the pipe closes;
#: unless the last line dismissed it, call ``reap(args, messages)``, which the clean-up's source defines.
_WATCH = """
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
messages = sys.stdin.buffer.read().decode().splitlines()
if messages[-1:] != [{dismiss!r}]:
    reap(sys.argv[1:], messages)
"""

#: Write ends of the reapers' pipes this process holds (closed in forked children).
_OPEN_PIPES: set[int] = set()
_PIPES_LOCK = threading.Lock()


def _close_pipes_in_child() -> None:
    for fd in list(_OPEN_PIPES):
        with contextlib.suppress(OSError):
            os.close(fd)
    _OPEN_PIPES.clear()


os.register_at_fork(after_in_child=_close_pipes_in_child)


class Reaper:
    """A process that cleans up after this one when it ends without :meth:`dismiss`, however it ends.

    Args:
        cleanup: Python source defining ``reap(args: list[str], messages: list[str]) -> None``, run in
            the reaper once this process has ended: ``args`` are ``args`` below, ``messages`` the lines
            :meth:`tell` sent, in order.
        args: Strings the clean-up receives (a folder to remove...).
        site_packages: Whether the clean-up imports installed packages (``psutil``...); without, the
            reaper starts with the standard library alone (``python -S``), faster.
    """

    def __init__(self, cleanup: str, args: Sequence[str], *, site_packages: bool = False) -> None:
        flags = ["-I"] if site_packages else ["-I", "-S"]
        self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, *flags, "-c", cleanup + _WATCH.format(dismiss=_DISMISS), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the terminal's process group reaches the owner, not the reaper
            close_fds=True,
        )
        stdin = self._process.stdin
        self._pipe = -1 if stdin is None else stdin.fileno()
        with _PIPES_LOCK:
            _OPEN_PIPES.add(self._pipe)

    @property
    def pid(self) -> int | None:
        """The reaper's process id (``None`` once dismissed)."""
        return None if self._process is None else self._process.pid

    def tell(self, message: str) -> None:
        """Send the clean-up one more line of ``messages`` (a path to remove...).

        Args:
            message: One line (no newline in it).
        """
        if self._process is not None and self._process.stdin is not None:
            self._process.stdin.write(os.fsencode(message) + b"\n")
            self._process.stdin.flush()

    def dismiss(self, timeout_s: float = 10.0) -> None:
        """The owner cleaned up itself: end the reaper without its clean-up; safe to call twice.

        Args:
            timeout_s: How long to wait for the reaper to exit (it is left to exit alone after that).
        """
        process, self._process = self._process, None
        if process is None:
            return
        with _PIPES_LOCK:
            _OPEN_PIPES.discard(self._pipe)
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.write(_DISMISS.encode() + b"\n")
            with contextlib.suppress(OSError):
                process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout_s)
