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
from llmgym.errors import InputError, RunFileError
from llmgym.metrics import read_metrics
from llmgym.report.records import EPISODES_NAME, EpisodeRecord, read_episode_records
from llmgym.run_lock import LOCK_FILE

__all__ = ["RunData", "holds_records", "is_run", "load_runs", "save_evaluation", "RUN_FILES", "RUN_FOLDERS"]

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
