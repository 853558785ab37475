"""The runs a report shows: run directories, sweep folders, and the folders ``llmgym eval`` saves.

A run directory holds ``config.yaml``, ``metrics.jsonl`` (train and eval records) and, when
episodes were recorded, ``episodes.jsonl``. A sweep folder holds ``sweep.json``, which names its
runs. ``llmgym eval`` saves its evaluation as a run directory of its own (one eval record).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from llmgym.atomic_io import write_atomic_dir
from llmgym.checkpoint import CHECKPOINTS, is_checkpoint_name
from llmgym.errors import InputError, RunFileError
from llmgym.jsonl import read_jsonl
from llmgym.report.records import EPISODES_NAME, EpisodeRecord, read_episode_records
from llmgym.run_lock import LOCK_FILE

__all__ = [
    "RunData",
    "SweepRun",
    "holds_records",
    "is_run",
    "load_runs",
    "metrics_record",
    "read_metrics",
    "read_run",
    "save_evaluation",
    "NUMERIC_KEYS",
    "RUN_FILES",
    "RUN_FOLDERS",
]

SWEEP_SUMMARY = "sweep.json"
#: Files a run or sweep folder records (a report never replaces them).
RUN_FILES = frozenset(
    {
        "config.yaml",
        "metrics.jsonl",
        EPISODES_NAME,
        "learning_curve.png",
        SWEEP_SUMMARY,
        "sweep_curves.png",
        LOCK_FILE,
    }
)
#: Folders a run or sweep folder writes (a report is never written inside them).
RUN_FOLDERS = frozenset({"checkpoints", "predictions", "tensorboard", "wandb", "logs"})


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

    def unfinished(self) -> Optional[str]:
        """Why this training run did not finish, or ``None`` (finished, or a ``llmgym eval`` folder).

        A run finished once it reached ``train.total_env_steps``: with evaluations
        (``train.eval_episodes > 0``), its last one is at or past that budget (the ``after`` one);
        without, a record or a checkpoint (the final one is saved at the end) is. A run stopped
        earlier (interrupted, crashed, or still running) has neither.
        """
        if self.records and all(r.get("kind") == "eval" and r.get("label") == "eval" for r in self.records):
            return None  # llmgym eval's folder: one evaluation, no training
        train = self.config.get("train") or {}
        total = train.get("total_env_steps")
        if not isinstance(total, int):
            return None  # no resolved config: nothing to compare with
        if train.get("eval_episodes"):
            evaluated = max((int(r["env_steps"]) for r in self.evaluations), default=None)
            if evaluated is not None and evaluated >= total:
                return None
            where = "no evaluation yet" if evaluated is None else f"last evaluation at {evaluated}"
            return f"no evaluation after training: the budget is {total} env steps, {where}"
        steps = [int(r["env_steps"]) for r in self.records if "env_steps" in r]
        folder = self.path / CHECKPOINTS
        if folder.is_dir():
            steps += [int(d.name.split("-")[1]) for d in folder.iterdir() if is_checkpoint_name(d.name)]
        reached = max(steps, default=0)
        return None if reached >= total else f"stopped at {reached} of {total} env steps"


#: Keys of a metrics record that readers (the report, sweeps, the plots) take as numbers.
NUMERIC_KEYS = frozenset(
    {
        "time_s",
        *(f"{p}{k}" for p in ("", "sampled_") for k in ("success_rate", "episode_return", "episode_length")),
    }
    | {"episodes"}
)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def metrics_record(data: dict[str, Any]) -> dict[str, Any]:
    """A ``metrics.jsonl`` record checked as :class:`RunLogger` writes it.

    Args:
        data: One line's JSON object.

    Returns:
        ``data``.

    Raises:
        ValueError: When ``kind`` is not a string, ``env_steps`` not an integer, a value of
            :data:`NUMERIC_KEYS` not a finite number or null, ``label`` not a string, or a value not a scalar.
    """
    if not isinstance(data.get("kind"), str):
        raise ValueError(f"'kind' is {data.get('kind')!r}, expected a string (train or eval)")
    steps = data.get("env_steps")
    if not isinstance(steps, (int, float)) or not _finite(steps) or steps != int(steps):
        raise ValueError(f"'env_steps' is {steps!r}, expected an integer")
    if "label" in data and not isinstance(data["label"], str):
        raise ValueError(f"'label' is {data['label']!r}, expected a string")
    for key, value in data.items():
        if key in NUMERIC_KEYS and value is not None and not _finite(value):
            raise ValueError(f"{key!r} is {value!r}, expected a finite number or null")
        if not isinstance(value, (bool, int, float, str, type(None))):
            raise ValueError(f"{key!r} is a {type(value).__name__}, expected a number, a string or null")
    return data


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a ``metrics.jsonl`` file, in order (a torn last line left out with a warning).

    Raises:
        RunFileError: When the file cannot be read or a line is not a metrics record (file and line named).
    """
    return read_jsonl(path, metrics_record, "a metrics record")


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
        The run; with ``error`` set when it has no readable ``metrics.jsonl`` (the error names the
        file and the line) or no evaluation after training.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return SweepRun(seed, threads, str(run_dir), error=f"no {path}")
    try:
        records = read_metrics(path)
    except RunFileError as exc:
        return SweepRun(seed, threads, str(run_dir), error=str(exc))
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


def is_run(path: Path) -> bool:
    """Whether ``path`` is a run directory (it holds ``config.yaml`` or ``metrics.jsonl``)."""
    return (path / "config.yaml").is_file() or (path / "metrics.jsonl").is_file()


def holds_records(path: Path) -> bool:
    """Whether ``path`` is a run directory or a sweep folder (it holds ``sweep.json``)."""
    return is_run(path) or (path / SWEEP_SUMMARY).is_file()


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFileError(f"{path} cannot be read ({exc}); restore it or remove it.") from exc


def _parse_config(path: Path, text: str) -> dict[str, Any]:
    """A run's ``config.yaml``: a mapping whose ``env``, ``agent`` and ``train`` sections are mappings."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RunFileError(f"{path} is not valid YAML ({exc}); restore the config the run wrote.") from exc
    config = {} if config is None else config
    if not isinstance(config, dict):
        raise RunFileError(f"{path} holds a {type(config).__name__}, not a config mapping; restore it.")
    for section in ("env", "agent", "train"):
        if not isinstance(config.get(section, {}), dict):
            raise RunFileError(
                f"{path}: '{section}' is not a mapping of settings; restore the config the run wrote."
            )
    seed = config.get("train", {}).get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise RunFileError(
            f"{path}: train.seed is {seed!r}, not an integer; restore the config the run wrote."
        )
    return config


def _load_run(path: Path) -> RunData:
    if not is_run(path):
        raise InputError(
            f"{path} is neither a run directory (no config.yaml or metrics.jsonl) nor a sweep folder (no "
            f"{SWEEP_SUMMARY}); give folders that llmgym train, llmgym sweep or llmgym eval wrote."
        )
    config_file = path / "config.yaml"
    text = _read_text(config_file) if config_file.is_file() else "# no config.yaml in this run directory\n"
    metrics = path / "metrics.jsonl"
    return RunData(
        name=path.name,
        path=path,
        config_yaml=text,
        config=_parse_config(config_file, text),
        records=read_metrics(metrics) if metrics.is_file() else [],
        episodes=read_episode_records(path / EPISODES_NAME),
    )


def _sweep_run_dirs(folder: Path) -> list[Path]:
    """The run directories a ``sweep.json`` names (found next to it when the sweep folder moved)."""
    path = folder / SWEEP_SUMMARY
    try:
        named = [Path(str(run["run_dir"])) for run in json.loads(_read_text(path)).get("runs", [])]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RunFileError(
            f"{path} is not a sweep summary ({exc}); restore the sweep.json that llmgym sweep wrote."
        ) from exc
    dirs = []
    for run_dir in named:
        moved = folder / run_dir.name
        dirs.append(run_dir if is_run(run_dir) or not moved.is_dir() else moved)
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
            runs.extend(_load_run(run_dir) for run_dir in _sweep_run_dirs(path) if is_run(run_dir))
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
        result: What :func:`llmgym.run.evaluation.evaluate` returned.
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
