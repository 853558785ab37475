"""Helpers of the process tests: start a Python script, read pids it prints, kill everything it left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]


def python(script: str, *args: str, **kwargs) -> subprocess.Popen:
    """Start ``python -c script`` with this checkout first on ``PYTHONPATH``, stdout piped."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True, env=env, **kwargs
    )


def read_pids(proc: subprocess.Popen, tag: str = "PIDS") -> list[int]:
    """Read stdout lines until ``TAG pid pid...`` and return the pids."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(tag + " "):
            return [int(p) for p in line.split()[1:]]
    raise AssertionError(f"the script exited (status {proc.wait()}) before printing {tag}")


def wait_gone(pids: Iterable[int], timeout_s: float) -> list[int]:
    """Wait until none of ``pids`` runs (zombies count as gone); return those still running."""
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _running(pid)]
        if alive:
            time.sleep(0.1)
    return alive


def running(pids: Iterable[int]) -> list[int]:
    """The pids of ``pids`` that run (not zombies)."""
    return [pid for pid in pids if _running(pid)]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextmanager
def reaped(proc: subprocess.Popen, extra: list[int]) -> Iterator[None]:
    """Whatever happens, kill ``proc``, its descendants and the pids in ``extra`` at the end."""
    try:
        yield
    finally:
        pids = list(extra)
        try:
            pids += [child.pid for child in psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
        for pid in [proc.pid, *pids]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
