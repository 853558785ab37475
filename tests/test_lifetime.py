"""Reaper: a process's clean-up runs once it ends without dismissing its reaper, however it ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmgym.lifetime import Reaper

ROOT = Path(__file__).resolve().parents[1]

#: Writes the reaper's arguments and messages to the file it is given.
_RECORD = """
def reap(args, messages):
    with open(args[0], "w") as fh:
        fh.write(" ".join(args[1:] + messages))
"""

#: Starts a reaper that records into argv[2], tells it two lines, then (argv[1]) dismisses it and exits, or
#: waits to be killed, a forked child alive ("fork") or not.
_OWNER = f"""
import os, sys, time
from llmgym.lifetime import Reaper
reaper = Reaper({_RECORD!r}, [sys.argv[2], "arg"])
reaper.tell("first")
reaper.tell("second")
if sys.argv[1] == "dismiss":
    reaper.dismiss()
    sys.exit(0)
if sys.argv[1] == "fork" and os.fork() == 0:  # a forked child that outlives its parent
    time.sleep(600)
    os._exit(0)
print(reaper.pid, flush=True)
time.sleep(600)
"""


def _owner(how: str, record: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _OWNER, how, str(record)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )


def _written(record: Path) -> str | None:
    for _ in range(300):  # the reaper writes as soon as it sees the pipe close
        if record.exists() and record.read_text():
            return record.read_text()
        time.sleep(0.1)
    return None


@pytest.mark.parametrize(
    ("how", "sig"),
    [("alone", signal.SIGKILL), ("alone", signal.SIGTERM), ("fork", signal.SIGKILL)],
    ids=["SIGKILL", "SIGTERM", "SIGKILL-with-a-forked-child-alive"],
)
def test_the_cleanup_runs_when_the_owner_dies(tmp_path, how, sig):
    record = tmp_path / "record"
    proc = _owner(how, record)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip().isdigit()
        os.kill(proc.pid, sig)
        proc.wait()
        assert _written(record) == "arg first second"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the forked child too
        proc.wait()


def test_a_dismissed_reaper_exits_without_its_cleanup(tmp_path):
    record = tmp_path / "record"
    proc = _owner("dismiss", record)
    assert proc.wait(timeout=60) == 0
    assert not record.exists()


def test_dismiss_ends_the_reaper_and_is_safe_twice(tmp_path):
    record = tmp_path / "record"
    reaper = Reaper(_RECORD, [str(record)])
    pid = reaper.pid
    assert pid is not None
    reaper.dismiss()
    reaper.dismiss()
    assert reaper.pid is None and not record.exists()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already waited for: it exited
