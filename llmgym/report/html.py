"""``llmgym report``: one self-contained HTML file of one or several runs.

The file needs no network: its CSS and JavaScript are inlined (``llmgym/report/assets``), its
charts are inline SVG, and the episodes replayed are embedded as JSON. It shows the config, the
learning curves (training and every evaluation, the zero-shot result as a dashed line), the
evaluation table, the action distribution over training (scoring agents), per-evaluation episode
replays (step through an episode: the observation, probability bars per candidate or the generated
text with its per-token log-probs and parse result), and for several runs the curves side by side
with the IQM of the final success and its bootstrap interval.

A replay state can be opened directly: ``report.html#r=RUN&e=EVALUATION&p=EPISODE&s=STEP`` (indices).
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any, Optional

from llmgym.atomic_io import write_text_atomic
from llmgym.errors import InputError
from llmgym.report.runs import (
    RUN_FILES,
    RUN_FOLDERS,
    SWEEP_SUMMARY,
    RunData,
    holds_records,
    load_runs,
    read_run,
)
from llmgym.report.svg import PALETTE, Band, Series, line_chart, stacked_bars

__all__ = ["REPORT_NAME", "build_html", "write_report", "default_report_path", "is_report", "report_target"]

REPORT_NAME = "report.html"
#: Actions shown by name in the action-distribution chart; the others are summed as "other".
MAX_ACTIONS_SHOWN = 7
#: Bytes of episode JSON embedded for the replays at most: past it, evaluations are thinned evenly
#: (the first and last of each run kept), so a long run's report stays small and quick to open.
MAX_EMBEDDED_BYTES = 6_000_000
#: The generator tag of every report (what :func:`is_report` looks for, with the older footer).
GENERATOR = '<meta name="generator" content="llmgym report">'
_OLDER_FOOTER = " by llmgym report</p>"
#: Characters of a file read to tell whether it is a report (its head: inline CSS, then the header).
_HEAD_CHARS = 65_536
#: Evaluations are joined by a line only when there are more than this many: a line between two
#: (before and after) would read as steady progress between them, which nothing measured.
LINE_FROM_POINTS = 2


def _asset(name: str) -> str:
    return (resources.files("llmgym.report") / "assets" / name).read_text(encoding="utf-8")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else "–"
    return escape(str(value))


def _points(records: list[dict[str, Any]], key: str) -> tuple[list[float], list[Optional[float]]]:
    chosen = [(float(r["env_steps"]), r.get(key)) for r in records if r.get(key) is not None]
    return [x for x, _ in chosen], [y for _, y in chosen]


#: The curves drawn per run: metric key, axis label, fixed y range.
CURVES: tuple[tuple[str, str, Optional[tuple[float, float]]], ...] = (
    ("success_rate", "success rate", (-0.02, 1.02)),
    ("episode_return", "return", None),
)


def _curves(
    run: RunData,
    color_offset: int = 0,
    metrics: Sequence[str] = ("success_rate", "episode_return"),
    width: int = 480,
) -> list[str]:
    """One chart per metric: the training rolling mean, every evaluation, the zero-shot line."""
    train = [r for r in run.records if r.get("kind") == "train"]
    evals = run.evaluations
    before = next((e for e in evals if e.get("label") == "before"), None)
    charts = []
    for key, label, y_range in (c for c in CURVES if c[0] in metrics):
        series = []
        # the training curve is a line; greedy evaluations are dots, joined (dashed) once there are many
        for name, records, field, color in (
            ("train (rolling mean)", train, key, 0),
            ("eval (greedy)", evals, key, 3),
            ("eval (sampled)", evals, f"sampled_{key}", 2),
        ):
            xs, ys = _points(records, field)
            if xs:
                greedy = name == "eval (greedy)"
                series.append(
                    Series(
                        name,
                        xs,
                        ys,
                        color=PALETTE[(color_offset + color) % len(PALETTE)],
                        markers=records is evals,
                        line=records is train or (greedy and len(xs) > LINE_FROM_POINTS),
                        dashed=greedy,
                    )
                )
        hlines = (
            [("zero-shot", float(before[key]), "#777777")]
            if before is not None and before.get(key) is not None
            else []
        )
        charts.append(
            line_chart(
                series,
                title=f"{run.name}: {label}",
                y_label=label,
                y_range=y_range,
                hlines=hlines,
                width=width,
            )
        )
    return charts


def _eval_table(run: RunData) -> str:
    evals = run.evaluations
    if not evals:
        return '<p class="muted">No evaluation was logged.</p>'
    sampled = any("sampled_success_rate" in e for e in evals)
    head = ["env steps", "label", "success", "return", "length", "episodes"]
    head += ["sampled success", "sampled return"] if sampled else []
    rows = []
    for e in evals:
        cells = [
            _fmt(int(e["env_steps"])),
            _fmt(e.get("label")),
            _fmt(e.get("success_rate")),
            _fmt(e.get("episode_return")),
            _fmt(e.get("episode_length"), 1),
            _fmt(int(e["episodes"]) if e.get("episodes") is not None else None),
        ]
        cells += (
            [_fmt(e.get("sampled_success_rate")), _fmt(e.get("sampled_episode_return"))] if sampled else []
        )
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{h}</th>" for h in head)
    return f'<div class="scroll"><table class="evals"><thead><tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def _action_distribution(run: RunData) -> Optional[str]:
    """Mean probability of each action over the recorded greedy-evaluation steps of each evaluation (scoring agents)."""
    per_eval: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[int, int] = defaultdict(int)
    labels: dict[int, str] = {}
    for record in run.episodes:
        if record.policy != "greedy":  # the same states each evaluation: comparable columns
            continue
        for step in record.steps:
            if step.candidates is None or step.probs is None:
                continue
            counts[record.evaluation] += 1
            labels[record.evaluation] = f"{record.env_steps}"
            for candidate, prob in zip(step.candidates, step.probs):
                per_eval[record.evaluation][candidate] += prob or 0.0
    if not counts:
        return None
    totals: dict[str, float] = defaultdict(float)
    for shares in per_eval.values():
        for action, mass in shares.items():
            totals[action] += mass
    shown = sorted(totals, key=lambda a: -totals[a])[:MAX_ACTIONS_SHOWN]
    columns = []
    for index in sorted(counts):
        shares = {a: per_eval[index].get(a, 0.0) / counts[index] for a in shown}
        rest = sum(per_eval[index].values()) / counts[index] - sum(shares.values())
        if len(totals) > len(shown) and rest > 1e-6:
            shares["other"] = rest
        columns.append((labels[index], shares))
    return stacked_bars(columns, title=f"{run.name}: mean action probability per evaluation (x: env steps)")


def _comparison(runs: Sequence[RunData]) -> str:
    """Side-by-side curves of several runs, their final success with the IQM and its interval."""
    from llmgym.stats import bootstrap_ci, iqm

    parts = []
    series, finals = [], []
    for i, run in enumerate(runs):
        xs, ys = _points(run.evaluations, "success_rate")
        if xs:
            series.append(
                Series(
                    run.name,
                    xs,
                    ys,
                    color=PALETTE[i % len(PALETTE)],
                    markers=True,
                    line=len(xs) > LINE_FROM_POINTS,
                )
            )
    rows = []
    for run in runs:
        seed = int(run.config.get("train", {}).get("seed", 0))
        summary = read_run(run.path, seed, None)
        if summary.success_after is not None:
            finals.append(summary.success_after)
        rows.append(
            f"<tr><td>{escape(run.name)}</td><td>{seed}</td><td>{_fmt(summary.success_before)}</td><td>{_fmt(summary.success_after)}</td>"
            f"<td>{_fmt(summary.return_before)}</td><td>{_fmt(summary.return_after)}</td>"
            f"<td>{escape(summary.error or 'ok')}</td></tr>"
        )
    bands = []
    iqm_line = '<p class="muted">No run has an evaluation after training: no IQM.</p>'
    if finals:
        low, high = bootstrap_ci(finals)
        center = iqm(finals)
        bands.append(
            Band(
                f"IQM of final success {center:.3f} [{low:.3f}, {high:.3f}]",
                low,
                high,
                center,
                color="#444444",
            )
        )
        iqm_line = (
            f'<p class="iqm">IQM of the final greedy success over {len(finals)} runs: <b>{center:.3f}</b>, '
            f"95% percentile bootstrap CI [{low:.3f}, {high:.3f}] (2000 resamples).</p>"
        )
    parts.append(iqm_line)
    parts.append(
        '<table class="evals runs"><thead><tr><th>run</th><th>seed</th><th>success before</th><th>success after</th>'
        f"<th>return before</th><th>return after</th><th>status</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    parts.append(
        line_chart(
            series,
            title="greedy evaluation success of every run",
            y_label="success rate",
            y_range=(-0.02, 1.02),
            bands=bands,
            width=720,
            height=320,
        )
    )
    for key, _, _ in CURVES:  # side by side: one row per metric, one chart per run
        row = [chart for i, run in enumerate(runs) for chart in _curves(run, i, (key,), width=360)]
        parts.append('<div class="charts">' + "".join(row) + "</div>")
    return "".join(parts)


def _thinned(lines: list[list[tuple[int, str]]], budget: int) -> list[list[tuple[int, str]]]:
    """Every ``k``-th evaluation of each run (its first and last kept), the smallest ``k`` within ``budget``.

    Args:
        lines: Per run, ``(evaluation index, episode JSON)`` pairs in order.
        budget: Bytes allowed.
    """
    stride = 1
    while True:
        kept = []
        for run_lines in lines:
            order = list(dict.fromkeys(e for e, _ in run_lines))
            chosen = set(order[::stride]) | set(order[-1:])
            kept.append([(e, line) for e, line in run_lines if e in chosen])
        size = sum(len(line) + 1 for run_lines in kept for _, line in run_lines)
        if size <= budget or all(len({e for e, _ in k}) <= 2 for k in kept):
            return kept
        stride += 1


def _replay_data(runs: Sequence[RunData]) -> tuple[str, int, int]:
    """The recorded episodes as embedded JSON (``<`` escaped, so no text closes the script element).

    Returns:
        ``(json, evaluations embedded, evaluations recorded)`` (fewer embedded past ``MAX_EMBEDDED_BYTES``).
    """
    lines = [[(record.evaluation, record.to_json()) for record in run.episodes] for run in runs]
    kept = _thinned(lines, MAX_EMBEDDED_BYTES)
    blocks = []
    for run, run_lines in zip(runs, kept):
        episodes = ",".join(line for _, line in run_lines)
        blocks.append(
            f'{{"name":{json.dumps(run.name)},"agent":{json.dumps(run.agent_type)},"episodes":[{episodes}]}}'
        )
    count = sum(len({e for e, _ in run_lines}) for run_lines in kept)
    total = sum(len({e for e, _ in run_lines}) for run_lines in lines)
    return ("[" + ",".join(blocks) + "]").replace("<", "\\u003c"), count, total


def _section(title: str, body: str, anchor: str) -> str:
    return f'<section id="{anchor}"><h2>{escape(title)}</h2>{body}</section>'


def build_html(runs: Sequence[RunData], title: Optional[str] = None) -> str:
    """The report of ``runs`` as one HTML document (no external resource).

    Args:
        runs: The runs (one, or several: a sweep or runs to compare).
        title: The page title; default names the env and the runs.
    """
    envs = ", ".join(dict.fromkeys(run.env_id for run in runs))
    title = title or f"llmgym report: {envs} ({', '.join(run.name for run in runs)})"
    sections = []
    if len(runs) > 1:
        sections.append(_section("Runs compared", _comparison(runs), "compare"))
    else:
        sections.append(
            _section(
                "Learning curves", '<div class="charts">' + "".join(_curves(runs[0])) + "</div>", "curves"
            )
        )
    sections.append(
        _section(
            "Evaluations",
            "".join(
                (f"<h3>{escape(run.name)}</h3>" if len(runs) > 1 else "") + _eval_table(run) for run in runs
            ),
            "evaluations",
        )
    )
    distributions = [chart for chart in (_action_distribution(run) for run in runs) if chart]
    if distributions:
        sections.append(
            _section(
                "Action distribution over training",
                '<div class="charts">' + "".join(distributions) + "</div>",
                "actions",
            )
        )
    replay = (
        '<div id="replay"><div class="controls">'
        '<label>run <select id="rp-run"></select></label> '
        '<label>evaluation <select id="rp-eval"></select></label> '
        '<label>episode <select id="rp-episode"></select></label> '
        '<button id="rp-prev" type="button">&#9664; step</button>'
        '<input id="rp-step" type="range" min="0" max="0" value="0">'
        '<button id="rp-next" type="button">step &#9654;</button> <span id="rp-position"></span>'
        '</div><div id="rp-episode-info"></div><div id="rp-view"></div><div id="rp-timeline"></div></div>'
    )
    data, embedded, recorded = _replay_data(runs)
    if embedded < recorded:
        replay = (
            f'<p class="muted">{embedded} of the {recorded} evaluations recorded are replayed here (evenly spaced, '
            f"to keep this file under {MAX_EMBEDDED_BYTES / 1e6:g} MB); every one is in episodes.jsonl.</p>{replay}"
        )
    if not any(run.episodes for run in runs):
        replay = (
            '<p class="muted">No episode was recorded (logging.record_episodes=0, or no evaluation ran).</p>'
        )
    sections.append(_section("Episode replays", replay, "replays"))
    sections.append(
        _section(
            "Config",
            "".join(
                f"<details{' open' if len(runs) == 1 else ''}><summary>{escape(run.name)} ({escape(str(run.path))})</summary>"
                f"<pre>{escape(run.config_yaml)}</pre></details>"
                for run in runs
            ),
            "config",
        )
    )
    nav = "".join(
        f'<a href="#{anchor}">{name}</a>'
        for anchor, name in (
            ("compare" if len(runs) > 1 else "curves", "curves"),
            ("evaluations", "evaluations"),
            ("actions", "actions"),
            ("replays", "replays"),
            ("config", "config"),
        )
        if anchor != "actions" or distributions
    )
    unfinished = "".join(
        f'<p class="unfinished"><b>Unfinished run</b>: {escape(run.name)}: {escape(why)} (interrupted, failed or '
        "still running; resume it with train.resume to finish).</p>"
        for run in runs
        if (why := run.unfinished()) is not None
    )
    generated = time.strftime("%Y-%m-%d %H:%M:%S")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'{GENERATOR}<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_asset('report.css')}</style></head><body>"
        f'<header><h1>{escape(title)}</h1>{unfinished}<nav>{nav}</nav><p class="muted">generated {generated} by llmgym report</p></header>'
        f"<main>{''.join(sections)}</main>"
        f'<script id="llmgym-data" type="application/json">{data}</script>'
        f"<script>{_asset('report.js')}</script></body></html>"
    )


def default_report_path(paths: Sequence[str | Path]) -> Path:
    """Where ``llmgym report`` writes by default.

    ``report.html`` in the run or sweep folder given, or in the working directory for several.
    """
    return Path(paths[0]) / REPORT_NAME if len(paths) == 1 else Path(REPORT_NAME)


def is_report(path: str | Path) -> bool:
    """Whether ``path`` is an HTML file that ``llmgym report`` wrote (by its generator tag).

    Args:
        path: Any file.
    """
    try:
        with Path(path).open(encoding="utf-8", errors="replace") as fh:
            head = fh.read(_HEAD_CHARS)
    except OSError:
        return False
    return head.startswith("<!DOCTYPE html>") and (GENERATOR in head or _OLDER_FOOTER in head)


def report_target(out: str | Path) -> Path:
    """The file a report given ``--out out`` is written to, checked so that it replaces nothing of the user's.

    A folder means ``report.html`` inside it. The file must be absent or a previous report, and
    neither a file a run or sweep folder records (``metrics.jsonl``, ``config.yaml``...) nor inside
    one of a run's own folders (``checkpoints/``...).

    Args:
        out: The ``--out`` path.

    Returns:
        The report file.

    Raises:
        InputError: When writing there would replace or add to what is not a report.
    """
    target = Path(out)
    if target.is_dir() and not target.is_symlink():
        target = target / REPORT_NAME
    fix = f"give --out a new file name ending in .html, or a folder to write {REPORT_NAME} in"
    folder = target.parent
    if target.name in RUN_FILES and holds_records(folder):
        raise InputError(
            f"--out {out} is the run file {target.name} of {folder}, which a report never replaces; {fix}."
        )
    inside = next((p for p in target.parents if p.name in RUN_FOLDERS and holds_records(p.parent)), None)
    if inside is not None:
        raise InputError(f"--out {out} lies inside {inside}, a folder the run writes; {fix}.")
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise InputError(f"--out {out} is a link or not a regular file; {fix}.")
    if target.exists() and not is_report(target):
        raise InputError(
            f"--out {out} exists and is not a report that llmgym report wrote, so it is not replaced; {fix}."
        )
    return target


def write_report(paths: Sequence[str | Path], out: Optional[str | Path] = None) -> Path:
    """Write the report of run directories and sweep folders to one HTML file (atomically).

    Args:
        paths: Run directories (``llmgym train``, ``llmgym eval``) and sweep folders (``llmgym sweep``).
        out: The file, or a folder to write ``report.html`` in (:func:`report_target`); default
            :func:`default_report_path`.

    Returns:
        The file written.

    Raises:
        InputError: No path, one that is neither a run directory nor a sweep folder, or a target
            that is not a new file or a previous report (:func:`report_target`).
        RunFileError: A run file that cannot be read (the message names the file and the line).
    """
    runs = load_runs(paths)
    target = report_target(out if out is not None else default_report_path(paths))
    title = None
    if len(paths) == 1 and (Path(paths[0]) / SWEEP_SUMMARY).is_file():
        title = f"llmgym sweep {Path(paths[0]).name}: {', '.join(dict.fromkeys(run.env_id for run in runs))}"
    return write_text_atomic(target, build_html(runs, title))
