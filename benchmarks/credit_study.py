"""The credit study (issue 43): per-turn credit against group baselines, at equal env steps.

Every cell (task x algorithm x learning rate x seed) is one ``llmgym train`` run in its own folder,
``OUT/TASK/ALGORITHM/lr-LR/seed-S``, run one at a time. The study resumes where it stopped: a cell
whose run has its final evaluation is skipped, an interrupted one goes on from its latest checkpoint
(``train.resume=auto``), and Ctrl-C or ``SIGTERM`` checkpoints the running cell before the study
exits. Each cell's invocations (seconds, exit status) are appended to ``OUT/study.jsonl``.

Within a task every algorithm gets the same shipped config (model, prompt, LoRA, env, discount,
epochs, minibatches, env-step budget, evaluations) and the same learning-rate grid; only
``algorithm.name`` changes, with what the algorithm needs to run: the critic-free ones play whole
episodes per round (``algorithm.rollout_steps`` = the task's episode cap), GRPO and RLOO in groups of
:data:`GROUP_SIZE` from one reset seed.

Algorithms: ``ppo`` (per-turn GAE with a value head, llmgym's default), ``grpo`` and ``rloo``
(trajectory return against the group), ``rebn`` (per-turn Monte-Carlo returns normalised over the
batch, GEM's ReBN). Token-level PPO inside a generated turn (verl's default credit) is not in
llmgym for multi-turn envs: ``agent.type=token`` makes every token an env step (TextGen's token
mode), so it is not part of this study.

Run the cells, then the table (markdown on stdout, ``curves-TASK.svg`` next to the runs)::

    python benchmarks/credit_study.py run --out runs/credit --seeds 0-4
    python benchmarks/credit_study.py table --out runs/credit > credit_table.md

``run`` takes ``--tasks``, ``--algorithms``, ``--learning-rates`` (the grid every algorithm gets),
``--steps`` and ``--evals`` (evaluations per run: the table reads budgets at the evaluations) to size
the study, and trailing ``section.key=value`` overrides applied to every cell (e.g. a tiny model).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from llmgym.errors import ConfigError, RunFileError
from llmgym.lifetime import exit_with_parent
from llmgym.report.runs import read_metrics
from llmgym.report.svg import PALETTE, Series, line_chart
from llmgym.stats import bootstrap_ci, iqm, parse_seeds

#: Episodes per group of GRPO and RLOO (every task's ``env.num_envs`` is a multiple of it).
GROUP_SIZE = 4
#: Seconds a stopped cell gets to write its checkpoint and exit after ``SIGTERM``.
STOP_GRACE_S = 120.0
STUDY_LOG = "study.jsonl"
#: The algorithms the study compares, in the table's order.
ALGORITHMS = ("ppo", "grpo", "rloo", "rebn")


@dataclass(frozen=True)
class Task:
    """One task of the study: a shipped config and what every algorithm runs it with.

    Attributes:
        name: Folder and table name.
        config: The shipped config (``llmgym train CONFIG``).
        overrides: Overrides of that config, the same for every algorithm.
        episode_steps: The longest episode (``env.max_episode_steps``): a round of the critic-free
            algorithms plays up to this many steps.
        steps: Env-step budget of a run.
        metric: The evaluation's metric the table reads (``success_rate`` or ``episode_return``).
    """

    name: str
    config: str
    overrides: tuple[str, ...]
    episode_steps: int
    steps: int
    metric: str = "success_rate"


TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task("babyai", "quickstart", (), 16, 6144),
        Task("textworld", "textworld_ppo", (), 50, 2048),
        Task(
            "nim",
            "textworld_ppo",
            ("env.id=llmgym/TextArena-Nim-v0", "env.max_episode_steps=16", "train.eval_episodes=100"),
            16,
            2048,
        ),
        Task(
            "frozenlake",
            "blackjack_generative",
            (
                "env.id=llmgym/FrozenLake-Text-v0",
                "env.kwargs.is_slippery=false",
                "agent.system_prompt=You walk on a frozen lake to the goal G without stepping into a hole H. "
                "Reply with one word among left, down, right and up.",
                "env.num_envs=8",
                "env.max_episode_steps=16",
                "algorithm.minibatch_size=32",
            ),
            16,
            2048,
        ),
        Task("textgen", "textgen_ppo", (), 1, 1024, metric="episode_return"),
    )
}


def algorithm_overrides(algorithm: str, task: Task) -> list[str]:
    """What ``algorithm`` changes in ``task``'s config: its name, and whole-episode rounds if critic-free.

    Raises:
        ConfigError: An algorithm the study does not run.
    """
    if algorithm == "ppo":
        return ["algorithm.name=ppo"]
    rounds = [f"algorithm.name={algorithm}", f"algorithm.rollout_steps={task.episode_steps}"]
    if algorithm in ("grpo", "rloo"):
        return [*rounds, f"algorithm.group.size={GROUP_SIZE}"]
    if algorithm == "rebn":
        return rounds
    raise ConfigError(f"--algorithms names {algorithm!r}; the study runs {', '.join(ALGORITHMS)}.")


@dataclass(frozen=True)
class Cell:
    """One run of the study.

    Attributes:
        task: The task.
        algorithm: ``algorithm.name``.
        learning_rate: ``algorithm.learning_rate``.
        seed: ``train.seed``.
        run_dir: Its run folder.
    """

    task: Task
    algorithm: str
    learning_rate: float
    seed: int
    run_dir: Path

    def command(self, steps: int, evals: int, overrides: Sequence[str]) -> list[str]:
        """The ``llmgym train`` command of the cell (its folder, seed and resume last, so they win)."""
        return [
            sys.executable,
            "-m",
            "llmgym.cli",
            "train",
            self.task.config,
            *self.task.overrides,
            *algorithm_overrides(self.algorithm, self.task),
            f"algorithm.learning_rate={self.learning_rate:g}",
            f"train.total_env_steps={steps}",
            f"train.eval_every={max(1, steps // evals)}",
            f"train.checkpoint_every={max(1, steps // evals)}",
            "logging.progress=false",
            *overrides,
            f"train.seed={self.seed}",
            f"train.output_dir={self.run_dir.parent}",
            f"train.run_name={self.run_dir.name}",
            "train.resume=auto",
        ]


def cells(
    out: Path,
    tasks: Sequence[str],
    algorithms: Sequence[str],
    learning_rates: Sequence[float],
    seeds: Sequence[int],
) -> list[Cell]:
    """Every cell, seed-major within a task and algorithm (a partial study has whole seeds first).

    Raises:
        ConfigError: An unknown task or algorithm.
    """
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ConfigError(f"--tasks names {unknown}; the study's tasks are {', '.join(TASKS)}.")
    for algorithm in algorithms:
        algorithm_overrides(algorithm, TASKS[tasks[0]] if tasks else next(iter(TASKS.values())))
    return [
        Cell(TASKS[t], a, lr, s, out / t / a / f"lr-{lr:g}" / f"seed-{s}")
        for t in tasks
        for s in seeds
        for a in algorithms
        for lr in learning_rates
    ]


def is_finished(run_dir: Path) -> bool:
    """Whether the run has its final evaluation (``label: after``) in ``metrics.jsonl``."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return False
    try:
        records = read_metrics(path)
    except RunFileError:
        return False
    return any(r.get("kind") == "eval" and r.get("label") == "after" for r in records)


class _Stopped(BaseException):
    """``SIGTERM`` to the study: stop the running cell (it checkpoints), then exit."""


def _raise_stopped(signum: int, frame: Any) -> None:
    raise _Stopped


def run_cell(cell: Cell, command: list[str], log: Path) -> int:
    """Run one cell's ``llmgym train`` to its end, its output appended to ``log``.

    Ctrl-C or ``SIGTERM`` sends ``SIGTERM`` to the run (which checkpoints and stops) and waits for it
    up to :data:`STOP_GRACE_S` before re-raising.

    Returns:
        The run's exit status.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(command)}\n")
        fh.flush()
        process = subprocess.Popen(
            command,
            stdout=fh,
            stderr=subprocess.STDOUT,
            preexec_fn=functools.partial(exit_with_parent, os.getpid()),
        )
        try:
            return process.wait()
        except (KeyboardInterrupt, _Stopped):
            process.terminate()
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            raise


def run_study(
    out: Path,
    tasks: Sequence[str],
    algorithms: Sequence[str],
    learning_rates: Sequence[float],
    seeds: Sequence[int],
    steps: Optional[int],
    evals: int,
    overrides: Sequence[str],
) -> int:
    """Run every unfinished cell in turn; returns the number of cells that failed."""
    plan = cells(out, tasks, algorithms, learning_rates, seeds)
    study = {
        "tasks": list(tasks),
        "algorithms": list(algorithms),
        "learning_rates": list(learning_rates),
        "seeds": list(seeds),
        "steps": steps,
        "evals": evals,
        "overrides": list(overrides),
    }
    path = out / "study.json"
    if path.is_file() and json.loads(path.read_text(encoding="utf-8")) != study:
        raise ConfigError(
            f"{path} records another study ({path.read_text(encoding='utf-8').strip()}); resume it with the same "
            "arguments, or give another --out."
        )
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(study, indent=2) + "\n", encoding="utf-8")
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    failed = 0
    try:
        for index, cell in enumerate(plan, 1):
            name = cell.run_dir.relative_to(out)
            if is_finished(cell.run_dir):
                print(f"[{index}/{len(plan)}] {name}: finished, skipped", flush=True)
                continue
            resumed = (cell.run_dir / "checkpoints").is_dir()
            print(f"[{index}/{len(plan)}] {name}: {'resuming' if resumed else 'starting'}", flush=True)
            command = cell.command(steps or cell.task.steps, evals, overrides)
            start = time.monotonic()
            status: Optional[int] = None
            try:
                status = run_cell(cell, command, out / "logs" / f"{str(name).replace('/', '_')}.log")
            finally:
                entry = {
                    "cell": str(name),
                    "resumed": resumed,
                    "seconds": round(time.monotonic() - start, 2),
                    "returncode": status,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                }
                with (out / STUDY_LOG).open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry) + "\n")
            if status != 0:
                failed += 1
                print(
                    f"[{index}/{len(plan)}] {name}: failed (exit {status}, log in {out / 'logs'})", flush=True
                )
    finally:
        signal.signal(signal.SIGTERM, previous)
    return failed


# ---------------------------------------------------------------------- the table


@dataclass
class RunCurve:
    """One finished run as the table reads it.

    Attributes:
        evals: ``(env steps, metric)`` of every evaluation after training started, in order.
        train_seconds: Seconds spent collecting and updating (``collect_s + update_s`` summed).
        wall_seconds: Seconds of its ``llmgym train`` processes, start-up and evaluations included
            (``study.jsonl``).
        env_steps: Env steps trained.
    """

    evals: list[tuple[float, float]]
    train_seconds: float
    wall_seconds: float
    env_steps: float

    def at(self, budget: float) -> Optional[float]:
        """The metric of the first evaluation at or past ``budget`` env steps (``None``: none)."""
        return next((value for steps, value in self.evals if steps >= budget), None)


def wall_seconds(out: Path) -> dict[str, float]:
    """Seconds of every cell's ``llmgym train`` processes, summed over its invocations, by cell name."""
    path = out / STUDY_LOG
    seconds: dict[str, float] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            seconds[entry["cell"]] = seconds.get(entry["cell"], 0.0) + float(entry["seconds"])
    return seconds


def read_curve(run_dir: Path, metric: str, wall: float = 0.0) -> Optional[RunCurve]:
    """A finished run's evaluations and training time (``wall``: its processes' seconds); ``None`` if unfinished."""
    if not is_finished(run_dir):
        return None
    records = read_metrics(run_dir / "metrics.jsonl")
    evals = [
        (float(r["env_steps"]), float(r[metric]))
        for r in records
        if r.get("kind") == "eval" and r.get("label") != "before" and metric in r
    ]
    train = [r for r in records if r.get("kind") == "train"]
    seconds = sum(float(r.get("collect_s", 0.0)) + float(r.get("update_s", 0.0)) for r in train)
    return RunCurve(evals, seconds, wall, float(train[-1]["env_steps"]) if train else 0.0)


@dataclass
class Row:
    """One algorithm on one task: its best learning rate's runs.

    Attributes:
        algorithm: ``algorithm.name``.
        settings: Learning rates tried (the same grid for every algorithm).
        learning_rate: The one shown (highest IQM at the full budget).
        runs: Its finished runs.
        planned: Seeds planned per setting.
    """

    algorithm: str
    settings: int
    learning_rate: Optional[float]
    runs: list[RunCurve]
    planned: int


def _iqm_ci(values: Sequence[float]) -> str:
    if not values:
        return "-"
    low, high = bootstrap_ci(values)
    return f"{iqm(values):.2f} [{low:.2f}, {high:.2f}]"


def task_rows(out: Path, task: Task, study: dict[str, Any]) -> list[Row]:
    """Every algorithm's row on ``task``, its learning rate picked by the IQM at the full budget."""
    steps = study["steps"] or task.steps
    wall = wall_seconds(out)
    rows = []
    for algorithm in study["algorithms"]:
        best: tuple[float, Optional[float], list[RunCurve]] = (-math.inf, None, [])
        for lr in study["learning_rates"]:
            folder = out / task.name / algorithm / f"lr-{lr:g}"
            runs = [
                c
                for s in study["seeds"]
                if (
                    c := read_curve(
                        folder / f"seed-{s}",
                        task.metric,
                        wall.get(f"{task.name}/{algorithm}/lr-{lr:g}/seed-{s}", 0.0),
                    )
                )
            ]
            finals = [v for c in runs if (v := c.at(steps)) is not None]
            score = iqm(finals) if finals else -math.inf
            if best[1] is None or score > best[0]:
                best = (score, lr, runs)
        rows.append(Row(algorithm, len(study["learning_rates"]), best[1], best[2], len(study["seeds"])))
    return rows


def curves_svg(task: Task, rows: Sequence[Row], steps: int, evals: int) -> str:
    """Sample efficiency on ``task``: the IQM over seeds of the metric at each evaluation budget."""
    budgets = [steps * k / evals for k in range(1, evals + 1)]
    series = []
    for i, row in enumerate(rows):
        ys: list[Optional[float]] = []
        for budget in budgets:
            values = [v for c in row.runs if (v := c.at(budget)) is not None]
            ys.append(iqm(values) if values else None)
        series.append(Series(row.algorithm, budgets, ys, color=PALETTE[i % len(PALETTE)], markers=True))
    label = "success (IQM over seeds)" if task.metric == "success_rate" else "return (IQM over seeds)"
    return line_chart(series, title=f"{task.name}: {label} vs env steps", y_label=label)


def table(out: Path) -> str:
    """The study's markdown table (IQM [95% bootstrap CI] at half and full budget) and its curves.

    Writes ``curves-TASK.svg`` in ``out`` for every task and links them.

    Raises:
        ConfigError: ``out`` holds no ``study.json``.
    """
    try:
        study = json.loads((out / "study.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{out} holds no readable study.json ({exc}); run the study first.") from exc
    lines = [
        "| task | algorithm | lr (of settings) | runs | IQM at half budget | IQM at full budget "
        "| train s / 1k env steps | wall s / 1k env steps |",
        "|---|---|---|---|---|---|---|---|",
    ]
    figures = []
    for name in study["tasks"]:
        task = TASKS[name]
        steps = study["steps"] or task.steps
        rows = task_rows(out, task, study)
        for row in rows:
            half = [v for c in row.runs if (v := c.at(steps / 2)) is not None]
            full = [v for c in row.runs if (v := c.at(steps)) is not None]
            trained = sum(c.env_steps for c in row.runs)
            speed = f"{1000 * sum(c.train_seconds for c in row.runs) / trained:.1f}" if trained else "-"
            wall = f"{1000 * sum(c.wall_seconds for c in row.runs) / trained:.1f}" if trained else "-"
            lr = f"{row.learning_rate:g} (of {row.settings})" if row.learning_rate is not None else "-"
            lines.append(
                f"| {name} ({task.metric}, {steps} steps) | {row.algorithm} | {lr} | {len(row.runs)}/{row.planned} "
                f"| {_iqm_ci(half)} | {_iqm_ci(full)} | {speed} | {wall} |"
            )
        svg = out / f"curves-{name}.svg"
        svg.write_text(curves_svg(task, rows, steps, study["evals"]), encoding="utf-8")
        figures.append(f"![{name}]({svg.name})")
    notes = (
        "\nIQM over seeds with its 95% percentile bootstrap interval (llmgym.stats), of the greedy evaluation "
        "first at or past each budget (the critic-free algorithms play whole rounds, so they may pass it by "
        "up to one round). Train time is collection plus updates; wall time is the "
        "runs' processes, start-up and evaluations included.\n"
    )
    return "\n".join(lines) + "\n" + notes + "\n" + "\n".join(figures) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``run`` the cells or print the ``table``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run every unfinished cell, one at a time (resumable)")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--tasks", default=",".join(TASKS))
    run.add_argument("--algorithms", default=",".join(ALGORITHMS))
    run.add_argument(
        "--learning-rates", default="5e-4", help="the grid every algorithm gets, comma-separated"
    )
    run.add_argument("--seeds", default="0-4")
    run.add_argument("--steps", type=int, default=None, help="env steps per run (default: each task's)")
    run.add_argument("--evals", type=int, default=4, help="evaluations per run (and checkpoints)")
    run.add_argument("overrides", nargs="*", help="section.key=value, applied to every cell")
    tab = sub.add_parser("table", help="print the markdown table, write curves-TASK.svg")
    tab.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "table":
            print(table(args.out), end="")
            return 0
        if args.evals < 2:
            raise ConfigError(f"--evals {args.evals} must be >= 2: the table reads half and full budgets.")
        failed = run_study(
            args.out,
            [t for t in args.tasks.split(",") if t],
            [a for a in args.algorithms.split(",") if a],
            [float(x) for x in args.learning_rates.split(",") if x],
            parse_seeds(args.seeds),
            args.steps,
            args.evals,
            args.overrides,
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except _Stopped:
        print("study stopped (SIGTERM): the running cell checkpointed; run again to resume.", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("study interrupted: the running cell checkpointed; run again to resume.", file=sys.stderr)
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
