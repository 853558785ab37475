"""The report's HTML without a browser: the embedding budget of long runs, the charts."""

import json
import re

from llmgym.report import html as report_html
from llmgym.report.records import EpisodeRecord, StepRecord
from llmgym.report.runs import RunData
from llmgym.report.svg import MAX_LINE_POINTS, Series, line_chart


def run_with_evaluations(count):
    step = StepRecord("obs " * 50, "go", 0.0, 0.1, -0.2, 0.0, ["go", "stop"], [0.8, 0.2], 0)
    episodes = [
        EpisodeRecord(i * 10, "periodic", i, 0, 0, "greedy", 0.0, False, 1, [step]) for i in range(count)
    ]
    records = [
        {"kind": "eval", "env_steps": i * 10, "success_rate": 0.5, "episode_return": 0.0, "label": "periodic"}
        for i in range(count)
    ]
    return RunData(
        "run",
        report_html.Path("run"),
        "env:\n  id: x\n",
        {"env": {"id": "x"}, "agent": {"type": "scoring"}},
        records,
        episodes,
    )


def embedded_evaluations(page):
    data = json.loads(
        re.search(r'<script id="llmgym-data" type="application/json">(.*?)</script>', page, re.S).group(1)
    )
    return [ep["evaluation"] for ep in data[0]["episodes"]]


def test_long_runs_embed_evenly_spaced_evaluations_within_the_budget(monkeypatch):
    run = run_with_evaluations(20)
    size = len(run.episodes[0].to_json()) + 1
    assert embedded_evaluations(report_html.build_html([run])) == list(range(20))
    monkeypatch.setattr(report_html, "MAX_EMBEDDED_BYTES", 7 * size)
    page = report_html.build_html([run])
    kept = embedded_evaluations(page)
    assert kept == [0, 4, 8, 12, 16, 19] and len(kept) * size <= 7 * size  # stride 4 and the last
    assert "6 of the 20 evaluations recorded are replayed here" in page
    # the action distribution still uses every evaluation
    assert page.count("<title>") >= 20 * 2


def test_line_chart_thins_long_lines_and_keeps_the_last_point():
    xs = list(range(10 * MAX_LINE_POINTS))
    svg = line_chart([Series("train", xs, [float(x) for x in xs])], title="t")
    path = re.search(r'<path d="([^"]*)"', svg).group(1)
    assert path.count("L") == MAX_LINE_POINTS - 1 and svg.startswith("<svg") and svg.endswith("</svg>")
