"""Issue 35, item 2: a run folder has one writer, and a new run never writes into an old one."""

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmgym.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMOKE = [
    "env.id=llmgym/EchoWord-v0",
    "train.total_env_steps=4",
    "env.num_envs=2",
    "algorithm.rollout_steps=2",
    "algorithm.epochs=1",
    "algorithm.minibatch_size=4",
    "train.eval_episodes=0",
    "train.eval_before=false",
    "train.checkpoint_every=null",
    "logging.progress=false",
    "logging.plot=false",
    "agent.max_prompt_tokens=256",
]
HOLD = (
    "import sys, time\nfrom llmgym.run_lock import RunLock\nlock = RunLock.acquire(sys.argv[1])\n"
    "print('held', flush=True)\ntime.sleep(120)\n"
)


def _train(tiny_model_dir, output_dir, *extra):
    return main(["train", f"model.name={tiny_model_dir}", f"train.output_dir={output_dir}", *SMOKE, *extra])


def test_a_run_folder_locked_by_a_live_run_is_refused_at_once_and_a_dead_ones_lock_taken_over(
    tiny_model_dir, tmp_path, capsys, caplog
):
    run_dir = tmp_path / "same"
    run_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _train(tiny_model_dir, tmp_path, "train.run_name=same") == 2
        err = capsys.readouterr().err
        assert err.startswith(
            f"llmgym train: error: run folder {run_dir} is being written by process {holder.pid}"
        )
        assert "train.run_name" in err and "Traceback" not in err
        assert sorted(p.name for p in run_dir.iterdir()) == [
            ".llmgym.lock"
        ]  # nothing written by the refused run
    finally:
        holder.kill()
        holder.wait()
    with caplog.at_level(logging.WARNING, logger="llmgym.run_lock"):
        assert _train(tiny_model_dir, tmp_path, "train.run_name=same") == 0
    assert f"left by process {holder.pid}, which is no longer running" in caplog.text
    assert (run_dir / "checkpoints" / "latest").is_file()
    assert (run_dir / ".llmgym.lock").read_text() == ""  # released at the end


def test_a_new_run_never_writes_into_a_finished_runs_folder(tiny_model_dir, tmp_path, capsys):
    assert _train(tiny_model_dir, tmp_path, "train.run_name=done") == 0
    run_dir = tmp_path / "done"
    before = {
        p.relative_to(run_dir): p.stat().st_mtime_ns
        for p in run_dir.rglob("*")
        if p.is_file() and p.name != ".llmgym.lock"
    }
    capsys.readouterr()
    assert _train(tiny_model_dir, tmp_path, "train.run_name=done", "train.total_env_steps=2") == 2
    err = capsys.readouterr().err
    assert f"run folder {run_dir} already holds a run" in err and f"train.resume={run_dir}" in err
    after = {
        p.relative_to(run_dir): p.stat().st_mtime_ns
        for p in run_dir.rglob("*")
        if p.is_file() and p.name != ".llmgym.lock"
    }
    assert after == before  # metrics, config and checkpoints untouched


def test_default_run_names_started_in_the_same_second_get_distinct_folders(
    tiny_model_dir, tmp_path, monkeypatch
):
    monkeypatch.setattr(time, "strftime", lambda fmt, *args: "20260101-000000")
    assert _train(tiny_model_dir, tmp_path) == 0
    assert _train(tiny_model_dir, tmp_path) == 0
    runs = sorted(p.name for p in tmp_path.iterdir())
    assert runs == ["EchoWord-v0-20260101-000000", "EchoWord-v0-20260101-000000-2"]
    for name in runs:
        assert (tmp_path / name / "checkpoints" / "latest").is_file()


def test_lock_holder_names_a_live_writer_only(tmp_path):
    from llmgym.errors import RunLockedError
    from llmgym.run_lock import RunLock, lock_holder

    assert lock_holder(tmp_path) is None
    with RunLock.acquire(tmp_path):
        assert lock_holder(tmp_path) is None  # this process: not another writer
        with pytest.raises(RunLockedError, match=f"process {os.getpid()}"):
            RunLock.acquire(tmp_path)
    (tmp_path / ".llmgym.lock").write_text("999999999\n")  # a pid that cannot exist
    assert lock_holder(tmp_path) is None


def test_default_sweep_names_started_in_the_same_second_get_distinct_folders(tmp_path, monkeypatch):
    from llmgym.config import load_config
    from llmgym.sweep import _sweep_dir

    monkeypatch.setattr(time, "strftime", lambda fmt, *args: "20260101-000000")
    config = load_config(None, [f"train.output_dir={tmp_path}", "env.id=llmgym/EchoWord-v0"])
    first, second = _sweep_dir(config), _sweep_dir(config)
    assert (first.name, second.name) == (
        "sweep-EchoWord-v0-20260101-000000",
        "sweep-EchoWord-v0-20260101-000000-2",
    )


# The worker prints its own pid: os.fork() returns in the child only after llmgym's at-fork hook has
# closed its copy of the lock's descriptor. (When the parent printed it, a parent killed before the
# child was first scheduled left the lock held: a race of this test, met once under load.)
FORK_AND_HOLD = (
    "import os, sys, time\nfrom llmgym.run_lock import RunLock\nlock = RunLock.acquire(sys.argv[1])\npid = os.fork()\n"
    "if pid == 0:\n    print(os.getpid(), flush=True)\n    time.sleep(60)\n    os._exit(0)\ntime.sleep(120)\n"
)


def test_a_forked_worker_that_outlives_the_run_does_not_keep_its_folder_locked(tmp_path, caplog):
    """Env workers are forked: one orphaned by a killed run must not hold the run's lock."""
    import signal

    from llmgym.run_lock import RunLock

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        [sys.executable, "-c", FORK_AND_HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env
    )
    worker = int(run.stdout.readline())
    try:
        run.kill()
        run.wait()
        with caplog.at_level(logging.WARNING, logger="llmgym.run_lock"), RunLock.acquire(tmp_path):
            pass
        assert f"left by process {run.pid}, which is no longer running" in caplog.text
    finally:
        os.kill(worker, signal.SIGKILL)
