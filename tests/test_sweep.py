"""llmgym sweep: orchestration with fake runs, and end to end on a tiny offline model."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmgym import cli, sweep
from llmgym.errors import ConfigError
from llmgym.stats import bootstrap_ci, iqm
from llmgym.sweep import SweepRun, format_table, read_run, run_sweep

ROOT = Path(__file__).resolve().parent.parent

# A stand-in for `llmgym train`: writes a metrics.jsonl whose numbers encode the seed and the
# OMP_NUM_THREADS it was given, and fails for seed 1.
FAKE_TRAIN = """
import json, os, sys
from pathlib import Path
run_dir, seed = Path(sys.argv[1]), int(sys.argv[2])
if seed == 1:
    print("some progress")
    sys.exit("ValueError: boom at seed 1")
threads = int(os.environ["OMP_NUM_THREADS"])
run_dir.mkdir(parents=True)
records = [
    {"kind": "eval", "env_steps": 0, "time_s": 0.1, "success_rate": 0.0, "episode_return": -1.0, "label": "before"},
    {"kind": "train", "env_steps": 4, "time_s": 0.5, "success_rate": 0.5, "episode_return": seed},
    {"kind": "train", "env_steps": 8, "time_s": 0.9, "success_rate": 0.25, "episode_return": seed + 1},
    {"kind": "eval", "env_steps": 8, "time_s": 1.5, "success_rate": seed / 10, "episode_return": threads, "label": "after"},
]
(run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in records))
"""

BASE = ["env.id=llmgym/EchoWord-v0"]


@pytest.fixture
def fake_train(monkeypatch):
    monkeypatch.setattr(
        sweep,
        "_train_command",
        lambda config_path, overrides, seed, run_dir: [
            sys.executable,
            "-c",
            FAKE_TRAIN,
            str(run_dir),
            str(seed),
        ],
    )


def test_seeds_times_threads_in_parallel_with_a_failed_seed(tmp_path, fake_train, capsys):
    overrides = [*BASE, f"train.output_dir={tmp_path}", "train.run_name=s"]
    result = run_sweep(None, overrides, seeds=[0, 1, 2], threads=[1, 2], jobs=2)
    assert [(r.seed, r.threads) for r in result.runs] == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2)]
    assert [Path(r.run_dir).name for r in result.runs][:2] == ["seed-0-threads-1", "seed-0-threads-2"]
    ok = [r for r in result.runs if r.error is None]
    assert [r.return_after for r in ok] == [1.0, 2.0, 1.0, 2.0]  # each run got its OMP_NUM_THREADS
    assert [r.success_after for r in ok] == [0.0, 0.0, 0.2, 0.2]
    assert all(r.success_before == 0.0 and r.return_before == -1.0 and r.train_time_s == 1.5 for r in ok)
    assert len(result.failed) == 2
    assert all("ValueError: boom at seed 1 (exit status 1" in r.error for r in result.failed)

    by_key = {(a.threads, a.metric): a for a in result.aggregates}
    assert set(by_key) == {(t, m) for t in (1, 2) for m in ("success_after", "return_after")}
    assert by_key[(1, "success_after")].runs == 2 and by_key[(1, "success_after")].iqm == pytest.approx(0.1)
    assert (by_key[(2, "return_after")].ci_low, by_key[(2, "return_after")].ci_high) == (2.0, 2.0)

    summary = json.loads(result.summary_path.read_text())
    assert [SweepRun(**r) for r in summary["runs"]] == result.runs
    assert summary["resamples"] == 2000 and summary["confidence"] == 0.95
    assert Path(result.curves_path).read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "s" / "logs" / "seed-1-threads-2.log").read_text().startswith("some progress")

    table = format_table(result.runs)
    assert table.splitlines()[0].split()[:2] == ["seed", "threads"]
    assert table.count("failed: ValueError: boom at seed 1") == 2


def test_cli_exit_status_is_1_when_a_seed_failed(tmp_path, fake_train, capsys):
    status = cli.main(["sweep", "--seeds", "0-1", *BASE, f"train.output_dir={tmp_path}", "train.run_name=c"])
    out = capsys.readouterr()
    assert status == 1 and "1 of 2 runs failed" in out.err
    assert "success after 0.000 [0.000, 0.000] (1 runs)" in out.out
    header = next(line for line in out.out.splitlines() if line.startswith("seed  "))
    assert header.split()[:3] == ["seed", "success", "before"]  # one job, no --threads: no threads column


def test_combine_merges_sweeps_run_apart(tmp_path, fake_train, capsys):
    common = [*BASE, f"train.output_dir={tmp_path}"]
    first = run_sweep(None, [*common, "train.run_name=one"], seeds=[0, 2], threads=[1], jobs=2)
    second = run_sweep(None, [*common, "train.run_name=two"], seeds=[0, 2], threads=[2])
    status = cli.main(
        ["sweep", "--combine", first.sweep_dir, second.sweep_dir, "--out", str(tmp_path / "both")]
    )
    out = capsys.readouterr().out
    assert status == 0
    merged = json.loads((tmp_path / "both" / "sweep.json").read_text())
    assert merged["combined_from"] == [first.sweep_dir, second.sweep_dir]
    assert [SweepRun(**r) for r in merged["runs"]] == [*first.runs, *second.runs]
    assert {(a["threads"], a["metric"]): a["runs"] for a in merged["aggregates"]} == {
        (t, m): 2 for t in (1, 2) for m in ("success_after", "return_after")
    }
    assert (tmp_path / "both" / "sweep_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "threads 1: success after 0.100" in out and "threads 2: success after 0.100" in out
    # the same folder twice, a folder without a summary, an existing output and missing --out are refused
    assert (
        cli.main(["sweep", "--combine", first.sweep_dir, first.sweep_dir, "--out", str(tmp_path / "x")]) == 2
    )
    assert "appears twice" in capsys.readouterr().err
    assert cli.main(["sweep", "--combine", str(tmp_path), "--out", str(tmp_path / "y")]) == 2
    assert "is not a sweep summary" in capsys.readouterr().err
    assert cli.main(["sweep", "--combine", first.sweep_dir, "--out", str(tmp_path / "both")]) == 2
    assert "exists" in capsys.readouterr().err
    assert cli.main(["sweep", "--combine", first.sweep_dir]) == 2
    assert "--out" in capsys.readouterr().err
    assert cli.main(["sweep", *BASE]) == 2
    assert "--seeds is required" in capsys.readouterr().err


def test_bad_arguments_are_config_errors(tmp_path, capsys):
    assert cli.main(["sweep", "--seeds", "0-x", *BASE]) == 2
    assert "--seeds '0-x'" in capsys.readouterr().err
    assert cli.main(["sweep", "--seeds", "0", "--threads", "0", *BASE]) == 2
    assert "--threads '0': 0 is below the minimum 1" in capsys.readouterr().err
    out = [f"train.output_dir={tmp_path}"]
    with pytest.raises(ConfigError, match="eval_episodes"):
        run_sweep(None, [*BASE, *out, "train.eval_episodes=0"], [0])
    with pytest.raises(ConfigError, match="resume"):
        run_sweep(None, [*BASE, *out, "train.resume=somewhere"], [0])
    with pytest.raises(ConfigError, match="--jobs 0"):
        run_sweep(None, [*BASE, *out], [0], jobs=0)
    with pytest.raises(ConfigError, match="--resamples 0"):
        run_sweep(None, [*BASE, *out], [0], resamples=0)
    assert not any(tmp_path.iterdir())  # nothing started
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "sweep.json").write_text("{}")
    with pytest.raises(ConfigError, match="not empty"):
        run_sweep(None, [*BASE, *out, "train.run_name=taken"], [0])


def test_sweep_help_explains_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["sweep", "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert all(text in out for text in ("--seeds", "--jobs", "--threads", "interquartile mean", "sweep.json"))


def test_read_run_without_metrics_is_a_failed_run(tmp_path):
    run = read_run(tmp_path / "missing", seed=3, threads=None)
    assert run.error is not None and "metrics.jsonl" in run.error
    assert "threads" not in format_table([run]).splitlines()[0]


SMOKE = [
    "env.id=llmgym/EchoWord-v0",
    "train.total_env_steps=8",
    "env.num_envs=2",
    "algorithm.rollout_steps=2",
    "algorithm.epochs=1",
    "algorithm.minibatch_size=4",
    "train.eval_episodes=3",
    "logging.progress=false",
    "logging.plot=false",
    "agent.max_new_tokens=4",
    "env.max_episode_steps=4",
]


def test_sweep_end_to_end_matches_each_runs_own_evaluations(tiny_model_dir, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmgym.cli",
            "sweep",
            "--seeds",
            "0,1",
            "--jobs",
            "2",
            f"model.name={tiny_model_dir}",
            f"train.output_dir={tmp_path}",
            "train.run_name=e2e",
            *SMOKE,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep_dir = tmp_path / "e2e"
    summary = json.loads((sweep_dir / "sweep.json").read_text())
    assert (sweep_dir / "sweep_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "success before" in proc.stdout and "IQM over runs" in proc.stdout
    finals = {"success_after": [], "return_after": []}
    for seed, run in zip((0, 1), summary["runs"]):
        run_dir = sweep_dir / f"seed-{seed}"
        assert run["seed"] == seed and run["error"] is None and run["run_dir"] == str(run_dir)
        assert yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["seed"] == seed
        # The trainer's own record of its evaluations, in the final checkpoint.
        state = json.loads((run_dir / "checkpoints" / "step-0000000008" / "trainer_state.json").read_text())
        before, after = state["evaluations"][0], state["evaluations"][-1]
        assert before["label"] == "before" and after["label"] == "after"
        assert (run["success_before"], run["success_after"]) == (
            before["success_rate"],
            after["success_rate"],
        )
        assert (run["return_before"], run["return_after"]) == (
            before["episode_return"],
            after["episode_return"],
        )
        assert f"{run['success_after']:.3f}" in proc.stdout
        finals["success_after"].append(after["success_rate"])
        finals["return_after"].append(after["episode_return"])
    for agg in summary["aggregates"]:
        values = finals[agg["metric"]]
        assert agg["iqm"] == pytest.approx(iqm(values))
        assert (agg["ci_low"], agg["ci_high"]) == pytest.approx(bootstrap_ci(values))


def test_gpu_slots_spread_parallel_runs_round_robin_over_the_gpus():
    assert sweep.gpu_slots(4, ["0", "1"], "auto") == ["0", "1", "0", "1"]
    assert sweep.gpu_slots(3, ["2", "5", "7"], "cuda") == ["2", "5", "7"]
    assert sweep.gpu_slots(1, ["0", "1"], "auto") == [None]  # one run: the environment's GPUs
    assert sweep.gpu_slots(2, ["0"], "auto") == [None, None]  # one GPU: nothing to spread
    assert sweep.gpu_slots(2, ["0", "1"], "cuda:1") == [None, None]  # a device the user named
    assert sweep.gpu_slots(2, ["0", "1"], "cpu") == [None, None]


def test_visible_gpus_reads_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, 1")
    assert sweep.visible_gpus() == ["3", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert sweep.visible_gpus() == []


FAKE_GPU_TRAIN = FAKE_TRAIN.replace(
    'threads = int(os.environ["OMP_NUM_THREADS"])',
    'threads = int(os.environ.get("CUDA_VISIBLE_DEVICES", "-1"))',
)


def test_parallel_runs_each_see_one_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    monkeypatch.setattr(
        sweep,
        "_train_command",
        lambda config_path, overrides, seed, run_dir: [
            sys.executable,
            "-c",
            FAKE_GPU_TRAIN,
            str(run_dir),
            str(seed),
        ],
    )
    result = run_sweep(
        None, [*BASE, f"train.output_dir={tmp_path}", "train.run_name=g"], seeds=[0, 2, 3, 4], jobs=2
    )
    gpus = [r.return_after for r in result.runs]
    assert set(gpus) <= {4.0, 6.0} and len(gpus) == 4  # never the whole list, never unset
    assert sorted(gpus).count(4.0) >= 1 and sorted(gpus).count(6.0) >= 1
