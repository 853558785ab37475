"""Every child process dies with its parent, however the parent dies (issue 35, item 4)."""

from __future__ import annotations

import shutil
import signal
import threading

import pytest

from llmgym.envs import make_vec
from tests.reliability._process_tools import python, read_pids, reaped, running, wait_gone

_VECTOR_SCRIPT = """
import os, sys, threading, time
from llmgym.envs import make_vec
built = []
build = lambda: built.append(make_vec("llmgym/EchoWord-v0", 2, "async", seed=0, num_workers=2, context=sys.argv[1]))
if sys.argv[2] == "thread":  # the kernel's parent-death signal would follow the thread: the watch does it
    thread = threading.Thread(target=build)
    thread.start()
    thread.join()
else:
    build()
envs = built[0]
envs.reset()
print("PIDS", *[p.pid for p in envs._backend.processes], flush=True)
time.sleep(120)
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("context", "sig", "where"),
    [
        ("fork", signal.SIGKILL, "main"),
        ("fork", signal.SIGTERM, "main"),
        ("fork", signal.SIGKILL, "thread"),
        ("forkserver", signal.SIGKILL, "main"),
        ("spawn", signal.SIGKILL, "main"),
    ],
)
def test_async_env_workers_die_with_their_parent(context, sig, where):
    proc = python(_VECTOR_SCRIPT, context, where)
    workers: list[int] = []
    with reaped(proc, workers):
        workers += read_pids(proc)
        assert running(workers) == workers  # they run while their parent does
        proc.send_signal(sig)
        proc.wait(timeout=30)
        assert not wait_gone(workers, 20), f"env workers {workers} outlived their parent killed with {sig!r}"


def test_workers_of_a_vector_env_built_in_a_thread_outlive_the_thread():
    """The kernel's parent-death signal follows the thread that forked: it must not end the workers."""
    built = []
    thread = threading.Thread(target=lambda: built.append(make_vec("llmgym/EchoWord-v0", 2, "async", seed=0)))
    thread.start()
    thread.join(timeout=60)
    with built[0] as envs:
        envs.reset()
        _, rewards, *_ = envs.step([0, 0])
        assert rewards.shape == (2,)


@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("java") is None, reason="ScienceWorld needs Java 11+ (no `java` on PATH)")
def test_scienceworld_worker_and_its_jvm_die_with_their_parent():
    pytest.importorskip("scienceworld")
    script = """
import time, psutil
from llmgym.envs import make_vec
envs = make_vec("llmgym/ScienceWorld-Boil-v0", 1, "async", seed=0, num_workers=1, context="fork")
envs.reset()
worker = envs._backend.processes[0].pid
print("PIDS", worker, *[c.pid for c in psutil.Process(worker).children(recursive=True)], flush=True)
time.sleep(120)
"""
    proc = python(script)
    pids: list[int] = []
    with reaped(proc, pids):
        pids += read_pids(proc)
        assert len(pids) >= 2, "expected the worker and its JVM"
        proc.kill()
        proc.wait(timeout=30)
        assert not wait_gone(pids, 30), f"the worker and JVM {pids} outlived their parent"
