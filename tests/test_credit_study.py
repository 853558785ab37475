"""benchmarks/credit_study.py: the plan of cells, and a real study on the tiny model stopped and resumed."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmgym.errors import ConfigError
from llmgym.report.runs import read_metrics

ROOT = Path(__file__).resolve().parents[1]


def _study():
    spec = importlib.util.spec_from_file_location("credit_study", ROOT / "benchmarks" / "credit_study.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["credit_study"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_algorithm_gets_the_same_task_config_and_the_critic_free_ones_play_whole_episodes(tmp_path):
    study = _study()
    plan = study.cells(tmp_path, ["babyai"], ["ppo", "grpo", "rebn"], [1e-4, 5e-4], [0, 1])
    assert len(plan) == 12
    assert plan[0].run_dir == tmp_path / "babyai" / "ppo" / "lr-0.0001" / "seed-0"
    commands = {(c.algorithm, c.learning_rate, c.seed): c.command(64, 4, ["model.name=x"]) for c in plan}
    ppo, grpo, rebn = (commands[(a, 5e-4, 1)] for a in ("ppo", "grpo", "rebn"))
    assert ppo[4] == grpo[4] == "quickstart"
    assert "algorithm.rollout_steps=16" in grpo and "algorithm.group.size=4" in grpo
    assert "algorithm.rollout_steps=16" in rebn and not any("rollout_steps" in a for a in ppo)
    for algorithm, command in zip(("ppo", "grpo", "rebn"), (ppo, grpo, rebn)):
        assert {"train.total_env_steps=64", "train.eval_every=16", "algorithm.learning_rate=0.0005"} <= set(
            command
        )
        assert command[-4:] == [
            "train.seed=1",
            f"train.output_dir={tmp_path / 'babyai' / algorithm / 'lr-0.0005'}",
            "train.run_name=seed-1",
            "train.resume=auto",
        ]
        assert command.index("model.name=x") > command.index("algorithm.learning_rate=0.0005")
    with pytest.raises(ConfigError, match="the study runs ppo, grpo, rloo, rebn"):
        study.cells(tmp_path, ["babyai"], ["a2c"], [5e-4], [0])
    with pytest.raises(ConfigError, match="--tasks names"):
        study.cells(tmp_path, ["atari"], ["ppo"], [5e-4], [0])


def test_a_study_folder_refuses_another_plan(tmp_path):
    study = _study()
    (tmp_path / "study.json").write_text(json.dumps({"tasks": ["nim"]}))
    with pytest.raises(ConfigError, match="records another study"):
        study.run_study(tmp_path, ["babyai"], ["ppo"], [5e-4], [0], 8, 2, [])


TINY = [
    "train.eval_episodes=2",
    "train.eval_num_envs=2",
    "env.num_envs=4",
    "env.max_episode_steps=4",
    "logging.plot=false",
]


def _run_study(tiny_model_dir, out):
    return [
        sys.executable,
        str(ROOT / "benchmarks" / "credit_study.py"),
        "run",
        "--out",
        str(out),
        "--tasks",
        "babyai",
        "--algorithms",
        "ppo,rebn",
        "--seeds",
        "0",
        "--steps",
        "64",
        "--evals",
        "2",
        f"model.name={tiny_model_dir}",
        *TINY,
    ]


def test_the_study_stops_on_sigterm_and_resumes_where_it_stopped(tiny_model_dir, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    out = tmp_path / "study"
    command = _run_study(tiny_model_dir, out)
    first = out / "babyai" / "ppo" / "lr-0.0005" / "seed-0"
    proc = subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 240
    # PPO's first rollout is 4 envs x 8 steps = 32 env steps, checkpointed (checkpoint_every = 64 / 2):
    # stop the study then, half-way through its first cell.
    while not (first / "checkpoints" / "step-0000000032").is_dir():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=240)[0]
    assert proc.returncode == 143, output[-3000:]
    assert "the running cell checkpointed" in output
    assert not (out / "babyai" / "rebn" / "lr-0.0005" / "seed-0").exists()  # never started

    resumed = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "[1/2] babyai/ppo/lr-0.0005/seed-0: resuming" in resumed.stdout
    train = [r["env_steps"] for r in read_metrics(first / "metrics.jsonl") if r["kind"] == "train"]
    assert train[-1] == 64 and train == sorted(set(train))  # no update replayed or lost
    log = [json.loads(line) for line in (out / "study.jsonl").read_text().splitlines()]
    assert [e["cell"] for e in log].count("babyai/ppo/lr-0.0005/seed-0") == 2 and len(log) == 3

    again = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.count("finished, skipped") == 2, again.stdout

    table = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "credit_study.py"), "table", "--out", str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert table.returncode == 0, table.stderr[-3000:]
    rows = [line for line in table.stdout.splitlines() if line.startswith("| babyai")]
    assert len(rows) == 2 and all("| 1/1 |" in row and "(of 1)" in row for row in rows)
    assert (out / "curves-babyai.svg").read_text().startswith("<svg")
