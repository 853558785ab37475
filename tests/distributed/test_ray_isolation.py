"""llmgym's private Ray instance cannot be captured by another Ray cluster on the machine.

``ray.init()`` without an address joins whatever ``RAY_ADDRESS`` names, or the cluster a ``ray start
--head`` recorded in ``<tmp>/ray/ray_current_cluster`` (a running one, or the file a stale one left),
and then refuses llmgym's ``num_cpus`` ("When connecting to an existing cluster, num_cpus and
num_gpus must not be provided"). Any local user who can write that file could break, or host,
every llmgym Ray job. Each test runs a real 2-server job in a fresh driver process, with its own
``RAY_TMPDIR`` so the machine's real ``/tmp/ray`` (and other users' clusters) are left alone.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(400)]
ROOT = Path(__file__).resolve().parents[2]

JOB = """
from llmgym.config import DistributedConfig, ModelConfig
from llmgym.llm.distributed.backend import make_backend
from llmgym.testing import tiny_causal_lm

model, tokenizer = tiny_causal_lm("llama", seed=0)
llm = make_backend(
    ModelConfig(name="tiny"), model=model, tokenizer=tokenizer,
    distributed=DistributedConfig(llm_processes=2, timeout_s=120.0),
)
print("SCORES", [s.tolist() for s in llm.score(["Action:"], [[" go", " stop"]])], flush=True)
llm.close()
"""


def _env(ray_tmpdir: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "RAY_TMPDIR": str(ray_tmpdir),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **extra,
    }


def _run_job(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", JOB], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_a_leftover_cluster_file_and_ray_address_do_not_capture_the_job(tmp_path):
    cluster_file = tmp_path / "ray" / "ray_current_cluster"
    cluster_file.parent.mkdir()
    cluster_file.write_text("127.0.0.1:1")  # what a stale `ray start --head` leaves behind
    for extra in ({}, {"RAY_ADDRESS": "127.0.0.1:1"}):
        done = _run_job(_env(tmp_path, **extra))
        assert done.returncode == 0, done.stderr[-3000:]
        assert "SCORES" in done.stdout
    assert cluster_file.read_text() == "127.0.0.1:1"  # the other cluster's file is not overwritten
    assert not [
        p for p in (tmp_path / "ray").iterdir() if p.name.startswith("session")
    ]  # nor its folder used


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _processes_under(folder: Path) -> list[psutil.Process]:
    """This user's processes that hold a file under ``folder`` open or carry its mark in their environment."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.uids().real != os.getuid():
                continue
            marked = proc.environ().get("LLMGYM_TEST_RAY_HEAD") == str(folder)
            if marked or any(f.path.startswith(f"{folder}{os.sep}") for f in proc.open_files()):
                found.append(proc)
        except psutil.Error:
            pass
    return found


@pytest.fixture()
def short_tmp():
    """A folder with a short path: Ray's socket paths under it must stay within 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="llmgym-t-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_running_ray_start_head_does_not_capture_the_job(short_tmp):
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent))
    if ray_cli is None:
        pytest.skip("the ray command is not installed next to this Python")
    tmp_path = short_tmp
    head_tmp = tmp_path / "h"
    env = _env(tmp_path, LLMGYM_TEST_RAY_HEAD=str(head_tmp))
    started = subprocess.run(
        [
            ray_cli,
            "start",
            "--head",
            f"--port={_free_port()}",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={head_tmp}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        (cluster_file,) = tmp_path.rglob("ray_current_cluster")
        recorded = cluster_file.read_text().strip()
        assert recorded, "ray start --head records its address where ray.init() looks for it"
        done = _run_job({k: v for k, v in env.items() if k != "LLMGYM_TEST_RAY_HEAD"})
        assert done.returncode == 0, done.stderr[-3000:]
        assert "SCORES" in done.stdout
        assert cluster_file.read_text().strip() == recorded
    finally:  # `ray stop` would stop every Ray instance of this user on the machine: stop this head only
        procs = _processes_under(head_tmp)
        for proc in procs:
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=30)
