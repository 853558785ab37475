"""A run stopped by a signal keeps its progress (issue 47).

Real ``llmgym train`` subprocesses on a tiny model get real signals at deterministic points: the
child pauses inside the phase (an env step of a rollout, an update, an evaluation), prints
``PAUSED``, and goes on once the test has sent its signal and a line on its stdin. SIGTERM and
SIGINT (sent to the process group, as a terminal's Ctrl-C is) leave a checkpoint; the same command
with ``train.resume``, ``train.resume=auto`` or ``--resume`` then ends with the metrics and the
weights of the uninterrupted run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from llmgym import cli
from llmgym.checkpoint import latest_checkpoint, load_trainer_state
from llmgym.report.runs import read_metrics
from tests.algorithms.helpers import FAST
from tests.reliability._process_tools import REPO, reaped

# The child: SIGINT back to Python's handler (a background shell starts jobs with it ignored), then
# `llmgym train` with the PHASE's HIT-th call paused until a line arrives on stdin.
_CHILD = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from llmgym import cli
from llmgym.run import trainer
from llmgym.algorithms.on_policy import OnPolicyAlgorithm
from llmgym.envs.vector import TextVectorEnv

phase, hit = sys.argv[1], int(sys.argv[2])
calls = [0]

def paused(method):
    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == hit:
            print("PAUSED", phase, flush=True)
            sys.stdin.readline()
        return method(*args, **kwargs)
    return wrapper

if phase == "collection":
    TextVectorEnv.step = paused(TextVectorEnv.step)
elif phase == "update":
    OnPolicyAlgorithm.update = paused(OnPolicyAlgorithm.update)
elif phase == "evaluation":
    trainer.evaluate = paused(trainer.evaluate)
sys.exit(cli.main(["train", *sys.argv[3:]]))
"""

# 3 updates of 8 env steps (2 envs x 4 steps), an evaluation after each; no periodic checkpoint.
RUN = [
    *FAST,
    "env.id=llmgym/Countdown-v0",
    "env.kwargs.length=2",
    "env.num_envs=2",
    "algorithm.rollout_steps=4",
    "algorithm.minibatch_size=4",
    "model.lora.r=4",
    "train.total_env_steps=24",
    "train.eval_every=8",
    "train.eval_episodes=2",
    "train.checkpoint_every=null",
    "logging.record_episodes=1",
]
_TIMING = {"time_s", "collect_s", "update_s", "steps_per_s"}


def _args(model_dir: Path, out: Path, name: str, *extra: str) -> list[str]:
    return [*RUN, f"model.name={model_dir}", f"train.output_dir={out}", f"train.run_name={name}", *extra]


def _metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in _TIMING} for r in read_metrics(run / "metrics.jsonl")]


def _weights(run: Path) -> dict:
    folder = latest_checkpoint(run) / "llm"
    return {p.name: load_file(p) for p in sorted(folder.rglob("*.safetensors"))}


def _assert_same_run(run: Path, reference: Path) -> None:
    assert _metrics(run) == _metrics(reference)
    got, expected = _weights(run), _weights(reference)
    assert got.keys() == expected.keys() and got
    for name in expected:
        assert got[name].keys() == expected[name].keys()
        for key, tensor in expected[name].items():
            assert got[name][key].equal(tensor), f"{name}:{key}"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("runs")
    assert cli.main(["train", *_args(tiny_model_dir, out, "straight")]) == 0
    return out / "straight"


def _stop(tmp_path: Path, model_dir: Path, phase: str, hit: int, sig: int, *extra: str) -> tuple[int, str]:
    """Run the child until its pause, send ``sig`` (SIGINT to its process group), let it go on; its status and output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, phase, str(hit), *_args(model_dir, tmp_path, "r", *extra)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    with reaped(proc, []):
        assert proc.stdout is not None and proc.stdin is not None
        lines = _read_until(proc, "PAUSED")
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C
        else:
            proc.send_signal(sig)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        lines += proc.stdout.read().splitlines(keepends=True)
        status = proc.wait(timeout=120)
    return status, "".join(lines)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize(
    ("phase", "hit", "steps"),
    [("collection", 6, 8), ("update", 1, 8), ("evaluation", 2, 16)],
    ids=["collection", "update", "evaluation"],
)
def test_a_signal_leaves_a_checkpoint_that_resumes_to_the_uninterrupted_run(
    tmp_path, tiny_model_dir, uninterrupted, phase, hit, steps, sig
):
    status, output = _stop(tmp_path, tiny_model_dir, phase, hit, sig)
    assert status == 128 + sig, output
    run = tmp_path / "r"
    name = signal.Signals(sig).name
    assert f"stopped by {name} at {steps} env steps" in output and f"train.resume={run}" in output, output
    checkpoint = latest_checkpoint(run)
    assert checkpoint.name == f"step-{steps:010d}"
    # A rollout or evaluation in progress was abandoned: the checkpoint is the state at its start.
    state, _ = load_trainer_state(checkpoint)
    assert state["algorithm"]["env_steps"] == steps
    evaluated = [e["env_steps"] for e in state["evaluations"]]
    assert evaluated == ([8.0] if phase == "collection" else [8.0, 16.0][: steps // 8 - 1])
    assert (run / "report.html").is_file()  # the report of the run so far
    resume = f"train.resume={run}" if sig == signal.SIGTERM else "train.resume=auto"
    assert cli.main(["train", *_args(tiny_model_dir, tmp_path, "r", resume)]) == 0
    _assert_same_run(run, uninterrupted)


@pytest.mark.timeout(300)
def test_sigterm_after_the_first_update_resumes_with_the_resume_flag(tmp_path, tiny_model_dir, uninterrupted):
    status, output = _stop(tmp_path, tiny_model_dir, "update", 1, signal.SIGTERM)
    assert status == 143, output
    assert "finishing the update in progress" in output
    assert cli.main(["train", *_args(tiny_model_dir, tmp_path, "r"), "--resume"]) == 0
    _assert_same_run(tmp_path / "r", uninterrupted)


@pytest.mark.timeout(300)
def test_sigusr1_writes_a_checkpoint_after_the_step_and_training_goes_on(
    tmp_path, tiny_model_dir, uninterrupted
):
    status, output = _stop(tmp_path, tiny_model_dir, "update", 1, signal.SIGUSR1)
    assert status == 0, output
    assert "SIGUSR1: writing a checkpoint after the step in progress; training goes on" in output
    run = tmp_path / "r"
    kept = sorted(p.name for p in (run / "checkpoints").glob("step-*"))
    assert kept == ["step-0000000008", "step-0000000024"]  # the signal's and the final one
    state, _ = load_trainer_state(run / "checkpoints" / "step-0000000008")
    assert [e["env_steps"] for e in state["evaluations"]] == [8.0]  # written after the step's evaluation
    _assert_same_run(run, uninterrupted)


@pytest.mark.timeout(300)
def test_a_second_ctrl_c_stops_at_once_without_a_checkpoint(tmp_path, tiny_model_dir):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, "update", "1", *_args(tiny_model_dir, tmp_path, "r")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    with reaped(proc, []):
        assert proc.stdout is not None
        lines = _read_until(proc, "PAUSED")
        os.killpg(proc.pid, signal.SIGINT)  # the update is paused: the first Ctrl-C waits for its end
        lines += _read_until(proc, "llmgym: SIGINT: finishing the update in progress")
        os.killpg(proc.pid, signal.SIGINT)
        lines += proc.stdout.read().splitlines(keepends=True)
        assert proc.wait(timeout=120) == 130, "".join(lines)
    assert "SIGINT again: stopping at once" in "".join(lines)
    assert not (tmp_path / "r" / "checkpoints").exists()


def _read_until(proc: subprocess.Popen, prefix: str) -> list[str]:
    """The child's output lines up to the first that starts with ``prefix``."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(prefix):
            return lines
    raise AssertionError(f"the child ended (status {proc.wait()}) before {prefix!r}:\n{''.join(lines)}")


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_with_two_ray_servers_a_stopped_run_resumes_to_the_uninterrupted_run(tmp_path, tiny_model_dir):
    pytest.importorskip("ray")
    servers = "distributed.llm_processes=2"
    status, output = _stop(tmp_path, tiny_model_dir, "update", 1, signal.SIGTERM, servers)
    assert status == 143, output
    run = tmp_path / "r"
    checkpoint = latest_checkpoint(run)  # verified against its manifest
    assert checkpoint.name == "step-0000000008"
    written = _weights(run)
    before = _metrics(run)
    assert [r["env_steps"] for r in before] == [8]
    assert cli.main(["train", *_args(tiny_model_dir, tmp_path, "r", servers), "--resume"]) == 0
    after = _metrics(run)
    assert after[:1] == before and [(r["kind"], r["env_steps"]) for r in after] == [
        ("train", 8),
        ("eval", 8),  # the evaluation the stop abandoned
        ("train", 16),
        ("eval", 16),
        ("train", 24),
        ("eval", 24),
    ]
    assert written and all(tensors for tensors in written.values())
    assert cli.main(["train", *_args(tiny_model_dir, tmp_path, "straight", servers)]) == 0
    _assert_same_run(run, tmp_path / "straight")
