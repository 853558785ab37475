"""The session fixture of tests/conftest.py fails a session that leaves a process running."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.reliability._process_tools import REPO, wait_gone

_LEAKY_TEST = """
import subprocess, sys

def test_leaves_a_process_behind():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(__file__ + ".pid", "w") as fh:
        fh.write(str(proc.pid))
"""


@pytest.mark.timeout(120)
def test_a_session_that_leaves_a_process_fails_and_the_process_is_killed(tmp_path):
    test_file = tmp_path / "test_leaky.py"
    test_file.write_text(_LEAKY_TEST)
    # its leftover sleeps for two minutes: a second of grace is as good as the usual ten to find it
    env = {**os.environ, "PYTHONPATH": str(REPO), "LLMGYM_TEST_EXIT_GRACE_S": "1"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.conftest",
            "-n",
            "0",
            "--rootdir",
            str(tmp_path),
            str(test_file),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    pid = int((tmp_path / "test_leaky.py.pid").read_text())
    assert not wait_gone([pid], 5), "the fixture did not kill the leftover"
    assert run.returncode != 0
    assert "the tests left processes running" in run.stdout and f"pid {pid}" in run.stdout
