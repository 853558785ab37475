"""The runs a report shows: run directories, sweep folders, and the folders ``llmgym eval`` saves.

A run directory holds ``config.yaml``, ``metrics.jsonl`` (train and eval records) and, when
episodes were recorded, ``episodes.jsonl``. A sweep folder holds ``sweep.json``, which names its
runs. ``llmgym eval`` saves its evaluation as a run directory of its own (one eval record).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from llmgym.atomic_io import write_atomic_dir
from llmgym.errors import InputError
from llmgym.report.records import EPISODES_NAME, EpisodeRecord, read_episode_records

__all__ = ["RunData", "SweepRun", "load_runs", "read_metrics", "read_run", "save_evaluation"]

SWEEP_SUMMARY = "sweep.json"


@dataclass
class RunData:
    """Everything the report shows of one run.

    Attributes:
        name: Short name (the run directory's name).
        path: The run directory.
        config_yaml: Its resolved config, as written.
        config: The same, parsed.
        records: Its ``metrics.jsonl`` records (train and eval), in order.
        episodes: Its recorded episodes, in order.
    """

    name: str
    path: Path
    config_yaml: str
    config: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    episodes: list[EpisodeRecord] = field(default_factory=list)

    @property
    def env_id(self) -> str:
        """The run's ``env.id``."""
        return str(self.config.get("env", {}).get("id", "?"))

    @property
    def agent_type(self) -> str:
        """The run's ``agent.type`` (``scoring``, ``generative`` or ``token``)."""
        return str(self.config.get("agent", {}).get("type", "?"))

    @property
    def evaluations(self) -> list[dict[str, Any]]:
        """The ``kind="eval"`` records."""
        return [r for r in self.records if r.get("kind") == "eval"]


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a ``metrics.jsonl`` file, in order."""
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@dataclass(frozen=True)
class SweepRun:
    """One training run of a sweep and its evaluations (``None`` where the run has none).

    Attributes:
        seed: ``train.seed`` of the run.
        threads: ``OMP_NUM_THREADS`` the run was given; ``None`` when it inherited the environment's.
        run_dir: The run directory.
        success_before: Greedy success rate of the evaluation before training.
        success_after: Greedy success rate of the last evaluation.
        return_before: Mean episode return of the evaluation before training.
        return_after: Mean episode return of the last evaluation.
        train_time_s: Seconds from the start of training to the last logged record (the final evaluation).
        error: Why the run failed; ``None`` when it succeeded.
    """

    seed: int
    threads: Optional[int]
    run_dir: str
    success_before: Optional[float] = None
    success_after: Optional[float] = None
    return_before: Optional[float] = None
    return_after: Optional[float] = None
    train_time_s: Optional[float] = None
    error: Optional[str] = None


def read_run(run_dir: str | Path, seed: int, threads: Optional[int]) -> SweepRun:
    """A run's evaluations and training time, read from its ``metrics.jsonl``.

    The evaluation labelled ``before`` gives the before columns, the last other evaluation the
    after columns (the trainer's final evaluation), the last record's ``time_s`` the training time.

    Args:
        run_dir: The run directory written by ``llmgym train``.
        seed: Its ``train.seed``.
        threads: The ``OMP_NUM_THREADS`` it ran with.

    Returns:
        The run; with ``error`` set when it has no ``metrics.jsonl`` or no evaluation after training.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return SweepRun(seed, threads, str(run_dir), error=f"no {path}")
    records = read_metrics(path)
    evals = [r for r in records if r.get("kind") == "eval"]
    before = next((r for r in evals if r.get("label") == "before"), None)
    after = next((r for r in reversed(evals) if r.get("label") != "before"), None)
    if after is None:
        return SweepRun(seed, threads, str(run_dir), error=f"no evaluation after training in {path}")
    return SweepRun(
        seed=seed,
        threads=threads,
        run_dir=str(run_dir),
        success_before=before["success_rate"] if before else None,
        success_after=after["success_rate"],
        return_before=before["episode_return"] if before else None,
        return_after=after["episode_return"],
        train_time_s=records[-1]["time_s"],
    )


def _is_run(path: Path) -> bool:
    return (path / "config.yaml").is_file() or (path / "metrics.jsonl").is_file()


def _load_run(path: Path) -> RunData:
    if not _is_run(path):
        raise InputError(
            f"{path} is neither a run directory (no config.yaml or metrics.jsonl) nor a sweep folder (no "
            f"{SWEEP_SUMMARY}); give folders that llmgym train, llmgym sweep or llmgym eval wrote."
        )
    config_file = path / "config.yaml"
    text = (
        config_file.read_text(encoding="utf-8")
        if config_file.is_file()
        else "# no config.yaml in this run directory\n"
    )
    metrics = path / "metrics.jsonl"
    return RunData(
        name=path.name,
        path=path,
        config_yaml=text,
        config=yaml.safe_load(text) or {},
        records=read_metrics(metrics) if metrics.is_file() else [],
        episodes=read_episode_records(path / EPISODES_NAME),
    )


def _sweep_run_dirs(folder: Path) -> list[Path]:
    """The run directories a ``sweep.json`` names (found next to it when the sweep folder moved)."""
    summary = json.loads((folder / SWEEP_SUMMARY).read_text(encoding="utf-8"))
    dirs = []
    for run in summary.get("runs", []):
        run_dir = Path(str(run["run_dir"]))
        moved = folder / run_dir.name
        dirs.append(run_dir if _is_run(run_dir) or not moved.is_dir() else moved)
    return dirs


def load_runs(paths: Sequence[str | Path]) -> list[RunData]:
    """The runs of run directories and sweep folders, in the order given (a sweep's in its order).

    Raises:
        InputError: No path, a path that is neither a run directory nor a sweep folder, or no run found.
    """
    if not paths:
        raise InputError("llmgym report needs at least one run directory or sweep folder.")
    runs: list[RunData] = []
    for given in paths:
        path = Path(given)
        if (path / SWEEP_SUMMARY).is_file():
            runs.extend(_load_run(run_dir) for run_dir in _sweep_run_dirs(path) if _is_run(run_dir))
        else:
            runs.append(_load_run(path))
    if not runs:
        raise InputError(
            f"no run directory found in {', '.join(str(p) for p in paths)}; did every run of the sweep fail?"
        )
    return runs


def save_evaluation(
    folder: str | Path,
    config_yaml: str,
    env_steps: int,
    result: Mapping[str, Any],
    records: Sequence[EpisodeRecord],
    label: str = "eval",
) -> Path:
    """Save one evaluation as a run directory of its own (atomically: built aside, then renamed).

    Args:
        folder: The folder (replaced when it exists).
        config_yaml: The resolved config evaluated.
        env_steps: Env steps of the checkpoint evaluated (0 zero-shot).
        result: What :func:`llmgym.evaluation.evaluate` returned.
        records: The recorded episodes.
        label: The eval record's label.

    Returns:
        ``folder``.
    """
    record: dict[str, Optional[Any]] = {
        "kind": "eval",
        "env_steps": int(env_steps),
        "time_s": 0.0,
        **result,
        "label": label,
    }

    def write(tmp: Path) -> None:
        (tmp / "config.yaml").write_text(config_yaml, encoding="utf-8")
        (tmp / "metrics.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
        if records:
            (tmp / EPISODES_NAME).write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")

    return write_atomic_dir(folder, write)
