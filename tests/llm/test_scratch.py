"""ScratchFolder: the temporary model copies vLLM loads leave nothing behind, however their process ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmgym.llm.scratch import ScratchFolder

ROOT = Path(__file__).resolve().parents[2]

#: Makes a scratch folder with a file in it and an adopted file outside, prints both, then waits to be killed.
_OWNER = """
import os, sys, tempfile, time
from llmgym.llm.scratch import ScratchFolder
scratch = ScratchFolder("llmgym-test-")
(scratch.path / "weights").write_bytes(b"x" * 1024)
fd, adopted = tempfile.mkstemp(prefix="llmgym-test-adopted-")
os.close(fd)
scratch.adopt(adopted)
if sys.argv[1] == "fork" and os.fork() == 0:  # a forked child that outlives its parent
    time.sleep(600)
    os._exit(0)
print(scratch.path, adopted, flush=True)
time.sleep(600)
"""


def _gone(paths: list[Path]) -> bool:
    for _ in range(300):  # the reaper removes them as soon as it sees the pipe close
        if not any(p.exists() for p in paths):
            return True
        time.sleep(0.1)
    return False


def test_remove_takes_the_folder_and_the_adopted_files(tmp_path):
    scratch = ScratchFolder("llmgym-test-")
    (scratch.path / "model").mkdir()
    adopted = tmp_path / "vllm_dist_x"
    adopted.write_text("")
    scratch.adopt(adopted)
    assert (
        scratch.path.name.startswith(f"llmgym-test-{os.getpid()}-")
        and scratch.path.stat().st_mode & 0o077 == 0
    )
    scratch.remove()
    scratch.remove()
    assert not scratch.path.exists() and not adopted.exists()


@pytest.mark.parametrize(
    ("how", "sig"),
    [("alone", signal.SIGKILL), ("alone", signal.SIGTERM), ("fork", signal.SIGKILL)],
    ids=["SIGKILL", "SIGTERM", "SIGKILL-with-a-forked-child-alive"],
)
def test_the_folder_goes_when_its_owner_is_killed(how, sig):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _OWNER, how],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        paths = [Path(p) for p in proc.stdout.readline().split()]
        assert len(paths) == 2 and (paths[0] / "weights").is_file() and paths[1].is_file()
        os.kill(proc.pid, sig)
        proc.wait()
        assert _gone(paths), paths
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the forked child too
        proc.wait()
