"""A sweep stops its runs however it is stopped; Ctrl-C summarises the runs so far (issue 35, item 4)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.reliability._process_tools import python, reaped, wait_gone

# `llmgym sweep --seeds 0-2` whose `llmgym train` is a stand-in that prints its pid and trains forever.
# SIGINT is put back to Python's handler first: a shell that starts a job in the background (as a CI
# runner may) leaves SIGINT ignored, and Python then installs no KeyboardInterrupt handler; a user's
# Ctrl-C in a terminal meets a process whose SIGINT is at its default.
_SWEEP_SCRIPT = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from llmgym import cli, sweep
child = "import os, time; print('PIDS', os.getpid(), flush=True); time.sleep(300)"
sweep._train_command = lambda config_path, overrides, seed, run_dir: [sys.executable, "-c", child]
sys.exit(cli.main(["sweep", "--seeds", "0-2", "env.id=llmgym/EchoWord-v0",
                   f"train.output_dir={sys.argv[1]}", "train.run_name=s"]))
"""


def _start(tmp_path: Path):
    proc = python(_SWEEP_SCRIPT, str(tmp_path))
    return proc


def _first_run_pid(tmp_path: Path, proc) -> int:
    """The pid the first run printed to its log."""
    log = tmp_path / "s" / "logs" / "seed-0.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        text = log.read_text() if log.exists() else ""
        if text.startswith("PIDS "):
            return int(text.split()[1])
        time.sleep(0.1)
    raise AssertionError(f"the first run did not start (sweep status {proc.poll()})")


@pytest.mark.timeout(120)
def test_ctrl_c_stops_the_sweep_at_once_and_writes_the_runs_so_far(tmp_path):
    proc = _start(tmp_path)
    pids: list[int] = []
    with reaped(proc, pids):
        pids.append(_first_run_pid(tmp_path, proc))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        assert not wait_gone(pids, 10), "the running seed outlived the interrupted sweep"
        summary = json.loads((tmp_path / "s" / "sweep.json").read_text())
        assert summary["interrupted"] is True
        assert [run["seed"] for run in summary["runs"]] == [0]
        assert "interrupted" in summary["runs"][0]["error"]
        assert summary["not_run"] == [1, 2]
        assert not (tmp_path / "s" / "logs" / "seed-1.log").exists()  # no further seed started


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_sweep_stops_its_running_train(tmp_path, sig):
    proc = _start(tmp_path)
    pids: list[int] = []
    with reaped(proc, pids):
        pids.append(_first_run_pid(tmp_path, proc))
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == -sig
        assert not wait_gone(pids, 10), f"the running seed outlived the sweep killed with {sig!r}"
        if sig == signal.SIGTERM:  # it had the time to say so
            summary = json.loads((tmp_path / "s" / "sweep.json").read_text())
            assert summary["interrupted"] is True and "SIGTERM" in summary["runs"][0]["error"]
