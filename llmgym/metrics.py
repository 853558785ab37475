"""Run logging: JSONL, progress bar, wandb / TensorBoard, learning-curve PNG.

JSONL is always written; wandb and TensorBoard only when configured; the learning-curve PNG at
the end of training.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgym.config import LoggingConfig
from llmgym.errors import require
from llmgym.jsonl import json_lines, keep_records

if TYPE_CHECKING:
    from llmgym.report.records import EpisodeRecord

logger = logging.getLogger(__name__)

__all__ = ["RunLogger", "trim_metrics", "plot_learning_curve"]


#: Names that moved out of this module, and their new modules: they still import from here for one
#: release, with a DeprecationWarning.
_MOVED = {"EpisodeStats": "llmgym.algorithms.episode_stats", "read_metrics": "llmgym.report.runs"}


def __getattr__(name: str) -> Any:
    """A name of :data:`_MOVED`, from its new module, with a DeprecationWarning naming it."""
    if name in _MOVED:
        import importlib
        import warnings

        warnings.warn(
            f"llmgym.metrics.{name} moved to {_MOVED[name]}; import it from there.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _scalar(value: Any) -> float | int | str | bool | None:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    value = float(value)
    return value if math.isfinite(value) else None


class RunLogger:
    """Writes metrics of one run to ``metrics.jsonl`` and, when configured, wandb and TensorBoard.

    Args:
        run_dir: The run directory (created).
        config: The ``logging`` section.
        run_config: The whole resolved config as a dict, recorded by wandb.
        total_env_steps: Length of the progress bar.
        initial_env_steps: Where the bar starts (non-zero when resuming).
    """

    def __init__(
        self,
        run_dir: str | Path,
        config: LoggingConfig,
        run_config: Mapping[str, Any] | None = None,
        total_env_steps: int | None = None,
        initial_env_steps: int = 0,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._file = self.path.open("a", encoding="utf-8")
        self._start = time.monotonic()
        self._wandb: Any = None
        self._tensorboard: Any = None
        self._bar: Any = None
        if config.wandb.mode != "disabled":
            import wandb

            self._wandb = wandb.init(
                mode=config.wandb.mode,  # type: ignore[arg-type]  # validated by WandbConfig
                project=config.wandb.project,
                entity=config.wandb.entity,
                dir=str(self.run_dir),
                config=dict(run_config or {}),
                name=self.run_dir.name,
            )
        if config.tensorboard:
            require("tensorboard", "tensorboard", "logging.tensorboard")
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
        if config.progress and total_env_steps is not None:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total_env_steps, initial=initial_env_steps, unit="step", dynamic_ncols=True
            )

    def log(self, env_steps: int, metrics: Mapping[str, Any], kind: str = "train") -> None:
        """Append one record.

        Args:
            env_steps: Env steps taken so far (x axis).
            metrics: Scalar metrics; tensors and numpy scalars are converted, non-finite become null.
            kind: ``"train"`` or ``"eval"`` (eval records are plotted as points).
        """
        record = {
            "kind": kind,
            "env_steps": int(env_steps),
            "time_s": round(time.monotonic() - self._start, 3),
        }
        record.update({key: _scalar(value) for key, value in metrics.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        numeric = {
            f"{kind}/{k}": v for k, v in record.items() if isinstance(v, (int, float)) and k != "env_steps"
        }
        if self._wandb is not None:
            self._wandb.log(numeric, step=int(env_steps))
        if self._tensorboard is not None:
            for key, value in numeric.items():
                self._tensorboard.add_scalar(key, value, int(env_steps))

    def log_episodes(self, env_steps: int, records: Sequence[EpisodeRecord]) -> None:
        """Send recorded evaluation episodes to wandb (a table, one row per step) and TensorBoard (text).

        ``episodes.jsonl`` already holds them; nothing is written when neither sink is configured.

        Args:
            env_steps: Env steps of the evaluation (x axis).
            records: Its recorded episodes.
        """
        if not records:
            return
        from llmgym.report.records import episode_markdown, episode_rows

        if self._wandb is not None:
            import wandb

            columns, rows = episode_rows(records)
            table = wandb.Table(columns=list[Any](columns), data=rows)
            self._wandb.log({"eval/episodes": table}, step=int(env_steps))
        if self._tensorboard is not None:
            for record in records:
                self._tensorboard.add_text(
                    f"eval/episode_{record.episode}", episode_markdown(record), int(env_steps)
                )

    def sync(self) -> None:
        """Flush ``metrics.jsonl`` to disk (before a checkpoint, so the records it covers survive it)."""
        self._file.flush()
        os.fsync(self._file.fileno())

    def progress(self, env_steps: int, postfix: Mapping[str, Any]) -> None:
        """Move the progress bar to ``env_steps`` and show ``postfix`` (episodes, success rate...)."""
        if self._bar is None:
            return
        self._bar.update(max(0, env_steps - self._bar.n))
        self._bar.set_postfix(
            {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in postfix.items()}, refresh=False
        )

    def close(self) -> None:
        """Flush and close every sink."""
        if self._bar is not None:
            self._bar.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()
        self._file.close()


def _kept(line: str, max_env_steps: int) -> bool:
    try:
        return int(json.loads(line)["env_steps"]) <= max_env_steps
    except (ValueError, TypeError, KeyError):
        return False  # a line torn by a crash


def trim_metrics(path: str | Path, max_env_steps: int) -> int:
    """Drop the records of a ``metrics.jsonl`` logged after a checkpoint, atomically.

    A run resumed from the checkpoint at ``max_env_steps`` logs those steps again, so records with
    a larger ``env_steps`` (and lines torn by the crash) would otherwise appear twice. The file is
    rewritten through a fsynced temporary file and a rename.

    Args:
        path: The ``metrics.jsonl`` file (nothing happens if it does not exist).
        max_env_steps: Env steps of the checkpoint resumed from.

    Returns:
        The number of lines dropped.
    """
    target = Path(path)
    if not target.is_file():
        return 0
    lines = json_lines(target.read_text(encoding="utf-8"))
    dropped = keep_records(target, lines, lambda line: _kept(line, max_env_steps), str)
    if dropped:
        logger.warning(
            "Dropped %d records of %s logged after env step %d (the checkpoint resumed from).",
            dropped,
            target,
            max_env_steps,
        )
    return dropped


def plot_learning_curve(metrics_path: str | Path, png_path: str | Path, title: str = "") -> Path:
    """Plot return and success rate against env steps, with evaluation points, to a PNG.

    Args:
        metrics_path: A ``metrics.jsonl`` written by :class:`RunLogger`.
        png_path: Where to write the image.
        title: Figure title (e.g. the env id).

    Returns:
        The PNG path.
    """
    from llmgym.report.figures import save_curve_figure
    from llmgym.report.runs import read_metrics

    records = read_metrics(metrics_path)

    def draw(ax: Any, key: str, label: str) -> str:
        for kind, field, style, name in (
            ("train", key, "-", "train (rolling mean)"),
            ("eval", key, "o--", "eval (greedy)"),
            ("eval", f"sampled_{key}", "s:", "eval (sampled)"),
        ):
            points = [
                (r["env_steps"], r[field])
                for r in records
                if r.get("kind") == kind and r.get(field) is not None
            ]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, style, label=name)
        return label

    return save_curve_figure(draw, png_path, title)
