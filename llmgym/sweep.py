"""Seed sweeps: train one config over several seeds (and thread counts), then aggregate.

``llmgym sweep CONFIG --seeds 0-4 [overrides]`` calls :func:`run_sweep`. Every run is an
``llmgym train`` subprocess with ``train.seed`` set, writing its own run directory under the
sweep directory (``<train.output_dir>/<train.run_name or sweep-ENV-TIME>/seed-S``), so results
stream to disk as usual and a run that fails loses nothing of the others. The sweep reads each
run's evaluations back from its ``metrics.jsonl`` and writes ``sweep.json`` (every run and the
IQM with its bootstrap interval) and ``sweep_curves.png`` (every run's learning curve and their mean).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from llmgym.config import Config
from llmgym.errors import ConfigError
from llmgym.lifetime import exit_with_parent
from llmgym.report.figures import save_curve_figure
from llmgym.report.runs import SweepRun, read_metrics, read_run
from llmgym.run import load_run_config
from llmgym.run.requirements import check_requirements
from llmgym.run_lock import default_run_stem, new_run_dir
from llmgym.stats import bootstrap_ci, iqm

__all__ = [
    "SweepRun",
    "Aggregate",
    "SweepResult",
    "run_sweep",
    "read_run",
    "aggregate",
    "format_table",
    "format_aggregates",
    "plot_sweep_curves",
    "gpu_slots",
    "visible_gpus",
]

SUMMARY_NAME = "sweep.json"
CURVES_NAME = "sweep_curves.png"
METRICS = ("success_after", "return_after")
#: Seconds a stopped run gets to exit after ``SIGTERM`` before ``SIGKILL``.
STOP_GRACE_S = 10.0
#: Seconds between two checks of the running runs.
POLL_S = 0.2
#: Training records whose rolling means cover fewer episodes than this are left out of the curves.
MIN_CURVE_EPISODES = 8


@dataclass(frozen=True)
class Aggregate:
    """The IQM of one metric over the successful runs at one thread count, with its interval.

    Attributes:
        metric: ``success_after`` or ``return_after``.
        threads: The thread count of the runs aggregated (``None``: the environment's).
        runs: Number of runs aggregated.
        iqm: Interquartile mean of the metric over those runs.
        ci_low: Lower end of the percentile bootstrap confidence interval of the IQM.
        ci_high: Upper end of that interval.
    """

    metric: str
    threads: Optional[int]
    runs: int
    iqm: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep.

    Attributes:
        sweep_dir: Folder holding the run directories, ``sweep.json`` and the curves PNG.
        runs: Every run, in launch order (seed-major, then thread count).
        aggregates: The IQM of each metric per thread count, over the successful runs.
        confidence: Coverage of the bootstrap intervals.
        resamples: Bootstrap samples per interval.
        curves_path: The learning-curves PNG; ``None`` when no run logged a training record.
    """

    sweep_dir: str
    runs: list[SweepRun]
    aggregates: list[Aggregate]
    confidence: float
    resamples: int
    curves_path: Optional[str]

    @property
    def summary_path(self) -> Path:
        """Where ``sweep.json`` is written."""
        return Path(self.sweep_dir) / SUMMARY_NAME

    @property
    def failed(self) -> list[SweepRun]:
        """The runs that failed."""
        return [run for run in self.runs if run.error is not None]


def aggregate(runs: Sequence[SweepRun], resamples: int = 2000, confidence: float = 0.95) -> list[Aggregate]:
    """IQM and percentile bootstrap interval of ``success_after`` and ``return_after``, per thread count.

    Failed runs are left out. Each interval's resampling generator is seeded with 0, so the same
    runs always print the same interval.

    Args:
        runs: The runs of a sweep.
        resamples: Bootstrap samples per interval.
        confidence: Coverage of the intervals.

    Returns:
        One :class:`Aggregate` per thread count (in first-seen order) and metric with at least one value.
    """
    groups: dict[Optional[int], list[SweepRun]] = {}
    for run in runs:
        if run.error is None:
            groups.setdefault(run.threads, []).append(run)
    result = []
    for threads, members in groups.items():
        for metric in METRICS:
            values = [v for v in (getattr(run, metric) for run in members) if v is not None]
            if values:
                low, high = bootstrap_ci(values, resamples=resamples, confidence=confidence)
                result.append(Aggregate(metric, threads, len(values), iqm(values), low, high))
    return result


def _cell(value: Optional[float], digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(runs: Sequence[SweepRun]) -> str:
    """The runs as an aligned plain-text table; a ``threads`` column when any run set a thread count."""
    with_threads = any(run.threads is not None for run in runs)
    header = [
        "seed",
        *(["threads"] if with_threads else []),
        "success before",
        "success after",
        "return before",
        "return after",
        "train time (s)",
        "status",
    ]
    rows = [
        [
            str(run.seed),
            *([str(run.threads) if run.threads is not None else "-"] if with_threads else []),
            _cell(run.success_before),
            _cell(run.success_after),
            _cell(run.return_before),
            _cell(run.return_after),
            _cell(run.train_time_s, 1),
            "ok" if run.error is None else f"failed: {run.error}",
        ]
        for run in runs
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(cell.rjust(width) for cell, width in zip(row, widths)), row[-1]]).rstrip()
        for row in [header, *rows]
    )


def format_aggregates(result: SweepResult) -> str:
    """One line per thread count: the IQM and bootstrap interval of final success and return."""
    if not result.aggregates:
        return "IQM: no successful run to aggregate"
    lines = [
        f"IQM over runs, {result.confidence:.0%} percentile bootstrap CI ({result.resamples} resamples):"
    ]
    threads_seen = list(dict.fromkeys(a.threads for a in result.aggregates))
    for threads in threads_seen:
        parts = [
            f"{a.metric.replace('_', ' ')} {a.iqm:.3f} [{a.ci_low:.3f}, {a.ci_high:.3f}] ({a.runs} runs)"
            for a in result.aggregates
            if a.threads == threads
        ]
        prefix = "  " if threads is None else f"  threads {threads}: "
        lines.append(prefix + "; ".join(parts))
    return "\n".join(lines)


def plot_sweep_curves(runs: Sequence[SweepRun], png_path: str | Path, title: str = "") -> Optional[Path]:
    """Plot every successful run's training return and success rate, and their mean, to one PNG.

    The curves are the trainer's rolling means of the ``kind="train"`` records of each run's
    ``metrics.jsonl`` (records over fewer than ``MIN_CURVE_EPISODES`` episodes left out); the mean is taken at
    the env steps logged by every run.

    Args:
        runs: The runs of a sweep (failed ones are left out).
        png_path: Where to write the image.
        title: Figure title (e.g. the env id).

    Returns:
        The PNG path, or ``None`` when no run has a training record.
    """
    curves: list[tuple[str, list[dict[str, Any]]]] = []
    for run in runs:
        path = Path(run.run_dir) / "metrics.jsonl"
        if run.error is None and path.is_file():
            records = [r for r in read_metrics(path) if r.get("kind") == "train"]
            if records:
                label = f"seed {run.seed}" + (f", threads={run.threads}" if run.threads is not None else "")
                curves.append((label, records))
    if not curves:
        return None

    def draw(ax: Any, key: str, name: str) -> str:
        series = [
            (
                label,
                {r["env_steps"]: r[key] for r in records if r.get(key) is not None and _enough_episodes(r)},
            )
            for label, records in curves
        ]
        for label, points in series:
            if points:
                ax.plot(list(points), list(points.values()), "-", alpha=0.5, linewidth=1, label=label)
        shared = sorted(set.intersection(*(set(points) for _, points in series)))
        if shared:
            mean = [sum(points[step] for _, points in series) / len(series) for step in shared]
            ax.plot(shared, mean, "-", color="black", linewidth=2.5, label=f"mean of {len(series)} runs")
        return f"{name} (training, rolling mean)"

    return save_curve_figure(draw, png_path, title, legend_size="small")


def _enough_episodes(record: dict[str, Any]) -> bool:
    """Whether a training record's rolling means cover enough episodes to plot.

    A lone early episode would otherwise draw its 0 or 1 as the curve's first point.
    """
    episodes = record.get("episodes")
    return episodes is None or episodes >= MIN_CURVE_EPISODES


def _available_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(frozen=True)
class _Job:
    seed: int
    threads: Optional[int]
    run_dir: Path
    command: list[str]


def _train_command(
    config_path: Optional[str], overrides: Sequence[str], seed: int, run_dir: Path
) -> list[str]:
    """The ``llmgym train`` command of one run (seed, output folder and run name last, so they win)."""
    return [
        sys.executable,
        "-m",
        "llmgym.cli",
        "train",
        *([config_path] if config_path else []),
        *overrides,
        f"train.seed={seed}",
        f"train.output_dir={run_dir.parent}",
        f"train.run_name={run_dir.name}",
    ]


def _failure_text(log: Path, returncode: int) -> str:
    """The last line of a failed run's output (the error or the exception) and its exit status."""
    lines = [
        line.strip()
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.strip()
    ]
    last = lines[-1] if lines else "no output"
    return f"{last} (exit status {returncode}; log: {log})"


def visible_gpus() -> list[str]:
    """The GPUs runs may use, as ``CUDA_VISIBLE_DEVICES`` entries: that variable's list when set, else ``0..n-1``.

    Counted without initialising CUDA in this process (``torch.cuda.device_count`` asks NVML).
    """
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [
            entry.strip()
            for entry in listed.split(",")
            if entry.strip() and not entry.strip().startswith("-")
        ]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


def gpu_slots(jobs: int, gpus: Sequence[str], device: str) -> list[Optional[str]]:
    """``CUDA_VISIBLE_DEVICES`` of each of the ``jobs`` run slots: the GPUs round-robin.

    A run started in slot ``s`` sees only ``gpus[s % len(gpus)]`` (as its ``cuda:0``), so parallel
    runs spread over the GPUs instead of all landing on the first. Nothing is set (``None``) with
    one job, fewer than 2 GPUs, or a ``model.device`` naming a device (``cpu``, ``cuda:N``), which
    the user chose.

    Args:
        jobs: Runs at a time.
        gpus: The visible GPUs (:func:`visible_gpus`).
        device: The config's ``model.device``.
    """
    if jobs < 2 or len(gpus) < 2 or device not in ("auto", "cuda"):
        return [None] * jobs
    return [gpus[slot % len(gpus)] for slot in range(jobs)]


class _Running:
    """One job's ``llmgym train`` subprocess, its output going to ``log_dir/<run name>.log``.

    The subprocess gets ``SIGTERM`` from the kernel if the sweep dies without stopping it (even
    from ``SIGKILL``), and its env workers then die with it.
    """

    def __init__(self, job: _Job, log_dir: Path, gpu: Optional[str] = None) -> None:
        env = dict(os.environ)
        if job.threads is not None:
            env["OMP_NUM_THREADS"] = str(job.threads)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        self.job, self.gpu = job, gpu
        self.log = log_dir / f"{job.run_dir.name}.log"
        with self.log.open("w", encoding="utf-8") as fh:
            self.process = subprocess.Popen(
                job.command,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=functools.partial(exit_with_parent, os.getpid()),
            )

    def result(self) -> SweepRun:
        """The run, read once the subprocess ended."""
        job, returncode = self.job, self.process.wait()
        if returncode != 0:
            return SweepRun(
                job.seed, job.threads, str(job.run_dir), error=_failure_text(self.log, returncode)
            )
        return read_run(job.run_dir, job.seed, job.threads)

    def stop(self, reason: str) -> SweepRun:
        """End the subprocess (``SIGTERM``, then ``SIGKILL`` after ``STOP_GRACE_S``); the run is failed."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        job = self.job
        return SweepRun(job.seed, job.threads, str(job.run_dir), error=f"{reason} (log: {self.log})")


class _Stopped(BaseException):
    """Raised in the sweep's main thread by ``SIGTERM``: stop the runs, summarise, exit 143."""


def _raise_stopped(signum: int, frame: Any) -> None:
    raise _Stopped


def _run_jobs(
    job_list: Sequence[_Job], log_dir: Path, slots: Sequence[Optional[str]]
) -> tuple[dict[int, SweepRun], BaseException | None]:
    """Run the jobs, one per slot at a time (``len(slots)`` at a time), printing a line as each ends.

    A job started in a slot sees that slot's GPU (``CUDA_VISIBLE_DEVICES``, see :func:`gpu_slots`).

    Ctrl-C (``KeyboardInterrupt``) or ``SIGTERM`` (:class:`_Stopped`, raised by the handler
    :func:`run_sweep` installs) starts no further job and stops the running ones, which become
    failed runs that say so.

    Returns:
        The runs by job index (jobs never started are absent), and the interruption, if any.
    """
    results: dict[int, SweepRun] = {}
    running: dict[int, _Running] = {}
    free = list(slots)
    pending = list(enumerate(job_list))
    try:
        while pending or running:
            while pending and free:
                index, job = pending.pop(0)
                running[index] = _Running(job, log_dir, free.pop(0))
            for index in [i for i, r in running.items() if r.process.poll() is not None]:
                done = running.pop(index)
                free.append(done.gpu)
                results[index] = done.result()
                print(_describe(results[index]), flush=True)
            time.sleep(POLL_S)
    except (KeyboardInterrupt, _Stopped) as exc:
        reason = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else "stopped (SIGTERM)"
        for index, run in running.items():
            results[index] = run.stop(f"{reason} while running")
        return results, exc
    return results, None


def _describe(run: SweepRun) -> str:
    name = f"seed {run.seed}" + (f" (threads={run.threads})" if run.threads is not None else "")
    if run.error is not None:
        return f"{name}: failed: {run.error}"
    return (
        f"{name}: success {_cell(run.success_before)} -> {_cell(run.success_after)}, "
        f"return {_cell(run.return_before)} -> {_cell(run.return_after)}, {_cell(run.train_time_s, 1)} s"
    )


def _sweep_dir(config: Config) -> Path:
    """``train.output_dir/train.run_name`` (absent or empty), else a new ``sweep-ENV-TIME[-N]`` folder."""
    if not config.train.run_name:
        stem = default_run_stem(config.env.id, time.strftime("%Y%m%d-%H%M%S"))
        return new_run_dir(
            config.train.output_dir, f"sweep-{stem}"
        )  # -2, -3... when started in the same second
    sweep_dir = Path(config.train.output_dir) / config.train.run_name
    if sweep_dir.exists() and any(sweep_dir.iterdir()):
        raise ConfigError(
            f"sweep directory {sweep_dir} is not empty; set another train.run_name or remove it."
        )
    return sweep_dir


def run_sweep(
    config_path: Optional[str],
    overrides: Sequence[str],
    seeds: Sequence[int],
    threads: Sequence[int] = (),
    jobs: int = 1,
    resamples: int = 2000,
    confidence: float = 0.95,
) -> SweepResult:
    """Train a config once per seed (and thread count), then write ``sweep.json`` and the curves PNG.

    Each run is an ``llmgym train`` subprocess; ``jobs`` of them run at a time. With ``threads``,
    every seed runs once per thread count with ``OMP_NUM_THREADS`` set to it; without, parallel
    runs get ``OMP_NUM_THREADS = cores // jobs`` and a single job keeps the environment's setting.
    A line is printed as each run ends. Ctrl-C (or ``SIGTERM``) starts no further run, stops the
    running ones and writes ``sweep.json`` with the runs so far (``"interrupted": true``, the seeds
    never started in ``"not_run"``), then raises ``KeyboardInterrupt`` (or ends the process by
    ``SIGTERM``). A run never outlives the sweep, even one killed with ``SIGKILL``.
    Parallel runs on a machine with several GPUs each see one of them, round-robin over the run
    slots (:func:`gpu_slots`).

    Args:
        config_path: YAML config file or the name of a shipped config, or ``None`` for the defaults.
        overrides: Dotted overrides, as for ``llmgym train``.
        seeds: The ``train.seed`` values.
        threads: ``OMP_NUM_THREADS`` values to run each seed at; empty: see above.
        jobs: Runs at a time.
        resamples: Bootstrap samples per confidence interval.
        confidence: Coverage of the intervals.

    Returns:
        The sweep, failed runs included (their ``error`` says why).

    Raises:
        ConfigError: On an invalid config or override, no seeds, ``jobs < 1``, a bad ``resamples`` or
            ``confidence``, ``train.resume`` set, ``train.eval_episodes=0`` (nothing to compare) or a
            sweep directory that is not empty (checked before any run starts), or an unregistered
            ``env.id``.
        MissingDependencyError: If the config needs an optional package that is not installed.
        KeyboardInterrupt: On Ctrl-C, after ``sweep.json`` is written.
    """
    config = load_run_config(config_path, list(overrides))
    check_requirements(config)
    if not seeds:
        raise ConfigError("a sweep needs at least one seed (--seeds).")
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs} must be >= 1.")
    if resamples < 1 or not 0.0 < confidence < 1.0:
        raise ConfigError(f"--resamples {resamples} must be >= 1 and the confidence {confidence} in (0, 1).")
    if config.train.resume is not None:
        raise ConfigError("train.resume cannot be swept: each seed trains its own run from scratch.")
    if config.train.eval_episodes == 0:
        raise ConfigError("train.eval_episodes=0: a sweep compares evaluations; set train.eval_episodes > 0.")
    sweep_dir = _sweep_dir(config)
    log_dir = sweep_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)

    default_threads = max(1, _available_cores() // jobs) if jobs > 1 else None
    plan: list[tuple[int, Optional[int]]] = [(seed, count) for seed in seeds for count in threads] or [
        (seed, default_threads) for seed in seeds
    ]
    job_list = []
    for seed, count in plan:
        run_dir = sweep_dir / (f"seed-{seed}" if not threads else f"seed-{seed}-threads-{count}")
        job_list.append(_Job(seed, count, run_dir, _train_command(config_path, overrides, seed, run_dir)))

    print(f"sweep directory: {sweep_dir} ({len(job_list)} runs, {jobs} at a time)", flush=True)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_stopped) if in_main_thread else None
    try:
        slots = gpu_slots(jobs, visible_gpus() if jobs > 1 else [], config.model.device)
        results, interrupted = _run_jobs(job_list, log_dir, slots)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    runs = [results[i] for i in sorted(results)]
    not_run = [job.seed for i, job in enumerate(job_list) if i not in results]
    header = {
        "config": config_path,
        "overrides": list(overrides),
        "interrupted": interrupted is not None,
        "not_run": not_run,
    }
    result = _write_summary(runs, sweep_dir, config.env.id, header, resamples, confidence)
    if interrupted is not None:
        print(
            f"sweep interrupted: {len(runs)} run(s) summarised in {result.summary_path}",
            file=sys.stderr,
            flush=True,
        )
        if isinstance(interrupted, _Stopped):  # end as SIGTERM's default action would have
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        raise KeyboardInterrupt
    return result


def _write_summary(
    runs: list[SweepRun], folder: Path, title: str, header: dict[str, Any], resamples: int, confidence: float
) -> SweepResult:
    """Aggregate the runs, plot their curves and write ``sweep.json`` (``header`` first) in ``folder``."""
    curves = plot_sweep_curves(runs, folder / CURVES_NAME, title=title)
    result = SweepResult(
        sweep_dir=str(folder),
        runs=runs,
        aggregates=aggregate(runs, resamples=resamples, confidence=confidence),
        confidence=confidence,
        resamples=resamples,
        curves_path=str(curves) if curves else None,
    )
    summary = {**header, **dataclasses.asdict(result)}
    result.summary_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return result


def combine_sweeps(
    sweep_dirs: Sequence[str | Path], out_dir: str | Path, resamples: int = 2000, confidence: float = 0.95
) -> SweepResult:
    """Merge finished sweeps into one table, one aggregate and one curves PNG.

    Useful when runs that cannot share the cores were swept apart (e.g. one-thread runs two at a
    time, then two-thread runs one at a time). Each run is read again from its run directory.

    Args:
        sweep_dirs: Sweep directories, each holding the ``sweep.json`` that ``run_sweep`` wrote.
        out_dir: Where the merged ``sweep.json`` and curves PNG go (created; must not hold a
            ``sweep.json`` already).
        resamples: Bootstrap samples per confidence interval.
        confidence: Coverage of the intervals.

    Returns:
        The merged sweep (runs in the order of ``sweep_dirs``, then each sweep's order).

    Raises:
        ConfigError: On no sweep directory, one without a readable ``sweep.json``, the same run
            directory twice, or an ``out_dir`` that already holds a ``sweep.json``.
    """
    if not sweep_dirs:
        raise ConfigError("--combine needs at least one sweep directory.")
    runs: list[SweepRun] = []
    seen: set[str] = set()
    configs: list[object] = []
    for folder in sweep_dirs:
        path = Path(folder) / SUMMARY_NAME
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
            entries = [
                (str(r["run_dir"]), int(r["seed"]), None if r["threads"] is None else int(r["threads"]))
                for r in summary["runs"]
            ]
            config = summary.get("config")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(
                f"{path} is not a sweep summary ({exc}); give folders that llmgym sweep wrote."
            ) from exc
        configs.append(config)
        for run_dir, seed, threads in entries:
            if run_dir in seen:
                raise ConfigError(f"run {run_dir} appears twice; give each sweep directory once.")
            seen.add(run_dir)
            runs.append(read_run(run_dir, seed, threads))
    out = Path(out_dir)
    if (out / SUMMARY_NAME).exists():
        raise ConfigError(f"{out / SUMMARY_NAME} exists; choose another --out folder.")
    out.mkdir(parents=True, exist_ok=True)
    title = " + ".join(str(c) for c in dict.fromkeys(configs))
    return _write_summary(
        runs, out, title, {"combined_from": [str(d) for d in sweep_dirs]}, resamples, confidence
    )
