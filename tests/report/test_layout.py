"""What the report's charts and header say: no text clipped, evaluations as points, unfinished runs marked.

The clipping tests measure the laid-out text in headless Chromium (its fonts, not an estimate).
"""

import json
import re
from pathlib import Path

import pytest
import yaml

from llmgym.report import html as report_html
from llmgym.report.html import write_report
from llmgym.report.runs import load_runs
from llmgym.report.svg import Band, Series, line_chart, stacked_bars
from tests.report.browser import chromium, dump_dom

# Appended to a page: the text elements of every chart whose box passes its SVG's edges, as JSON.
MEASURE = """<script>
(() => {
  const clipped = [];
  let texts = 0;
  document.querySelectorAll("svg.chart").forEach((svg, chart) => {
    const box = svg.getBoundingClientRect();
    svg.querySelectorAll("text").forEach((text) => {
      texts += 1;
      const r = text.getBoundingClientRect();
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5) {
        clipped.push({chart, text: text.textContent, right: r.right - box.left, width: box.width,
                      bottom: r.bottom - box.top, height: box.height});
      }
    });
  });
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({texts, clipped});
  document.body.appendChild(out);
})();
</script>"""

LONG_RUN = "quickstart-gotoredball-lora-r16-seed-0-threads-2-a-long-name"


def measured(page: str, tmp_path: Path) -> dict:
    """The text elements of the page's charts laid out by Chromium, and those that pass an edge."""
    chromium()
    path = tmp_path / "page.html"
    path.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    dom = dump_dom(path)
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, "the measuring script did not run"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def write_run(folder: Path, name: str, evals: list[tuple[int, str]], total: int = 64, eval_episodes: int = 2):
    """A run directory as llmgym train writes it: config.yaml and metrics.jsonl (train and eval records)."""
    run = folder / name
    run.mkdir(parents=True)
    config = {
        "env": {"id": "llmgym/BabyAI-Text-GoToRedBall-v0"},
        "agent": {"type": "scoring"},
        "train": {"total_env_steps": total, "eval_episodes": eval_episodes, "seed": 0},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    records = [
        {
            "kind": "train",
            "env_steps": steps,
            "time_s": steps / 10,
            "success_rate": steps / 128,
            "episode_return": steps / 256,
        }
        for steps in range(16, total + 1, 16)
    ]
    records += [
        {
            "kind": "eval",
            "env_steps": steps,
            "time_s": steps / 10,
            "label": label,
            "success_rate": 0.25,
            "episode_return": 0.1,
            "episodes": 2,
        }
        for steps, label in evals
    ]
    records.sort(key=lambda r: r["env_steps"])
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return run


def test_chart_titles_and_legends_stay_inside_the_svg(tmp_path):
    series = [
        Series("train (rolling mean)", [0, 1, 2], [0.1, 0.2, 0.3]),
        Series("eval (greedy)", [0, 1, 2], [0.0, 0.5, 0.9], markers=True, dashed=True),
        Series("eval (sampled)", [0, 2], [0.1, 0.8], markers=True, line=False),
        Series(f"{LONG_RUN}-and-then-some-more-characters-without-any-space", [0, 2], [0.2, 0.4]),
    ]
    charts = [
        line_chart(series, title=f"{LONG_RUN}: success rate", width=360),
        line_chart(series, title=f"{LONG_RUN} {LONG_RUN}: episode return", width=480),
        line_chart(
            series[:1],
            title="greedy evaluation success of every run",
            bands=[Band("IQM of final success 0.958 [0.881, 1.000]", 0.88, 1.0, 0.95)],
            hlines=[("zero-shot", 0.0, "#777777")],
            width=720,
        ),
        stacked_bars(
            [(str(step), {f"go to the {c} thing": 0.1 for c in "abcdefg"}) for step in range(0, 80, 16)],
            title=f"{LONG_RUN}: mean action probability per evaluation (x: env steps)",
        ),
    ]
    style = report_html._asset("report.css")
    page = f"<!DOCTYPE html><html><head><style>{style}</style></head><body>{''.join(charts)}</body></html>"
    result = measured(page, tmp_path)
    assert result["texts"] > 40 and result["clipped"] == [], result["clipped"]


def test_a_report_of_runs_with_long_names_clips_no_chart_text(tmp_path):
    runs = [
        write_run(tmp_path, f"{LONG_RUN}-{i}", [(0, "before"), (32, "periodic"), (64, "after")])
        for i in range(2)
    ]
    for paths in ([runs[0]], runs):
        result = measured(write_report(paths, tmp_path / "report.html").read_text(), tmp_path)
        assert result["texts"] > 20 and result["clipped"] == [], result["clipped"]


def eval_paths(svg: str) -> list[str]:
    return re.findall(r"<path [^>]*><title>eval \(greedy\)</title>", svg)


@pytest.mark.parametrize(("evals", "joined"), [(2, False), (3, True)])
def test_evaluations_are_points_joined_by_a_line_only_past_two(tmp_path, evals, joined):
    steps = [(0, "before"), (32, "periodic"), (64, "after")]
    run = write_run(tmp_path, "run", steps if evals == 3 else [steps[0], steps[2]])
    page = report_html.build_html(load_runs([run]))
    assert page.count("<circle") >= 2 * evals  # the success and return charts: a point per evaluation
    assert bool(eval_paths(page)) == joined


def test_an_unfinished_run_is_marked_at_the_top_and_a_finished_one_is_not(tmp_path):
    stopped = write_run(tmp_path, "stopped", [(0, "before"), (32, "periodic")])
    page = report_html.build_html(load_runs([stopped]))
    header = page[page.index("<header>") : page.index("</header>")]
    assert "Unfinished run" in header and "budget is 64 env steps, last evaluation at 32" in header
    done = write_run(tmp_path, "done", [(0, "before"), (64, "after")])
    assert "Unfinished run" not in report_html.build_html(load_runs([done]))
    both = report_html.build_html(load_runs([done, stopped]))
    assert both.count('class="unfinished"') == 1 and "stopped: no evaluation after training" in both


def test_without_evaluations_the_final_checkpoint_or_record_tells_a_finished_run(tmp_path):
    run = write_run(tmp_path, "run", [], total=80, eval_episodes=0)  # train records up to 80
    assert load_runs([run])[0].unfinished() is None
    short = write_run(tmp_path, "short", [], total=100, eval_episodes=0)  # records up to 96
    assert load_runs([short])[0].unfinished() == "stopped at 96 of 100 env steps"
    (short / "checkpoints" / "step-0000000104").mkdir(parents=True)  # the final checkpoint
    assert load_runs([short])[0].unfinished() is None


def test_llmgym_eval_folders_are_not_training_runs(tmp_path):
    run = write_run(tmp_path, "eval", [(64, "eval")], total=1000)
    (run / "metrics.jsonl").write_text(
        json.dumps({"kind": "eval", "env_steps": 64, "label": "eval", "success_rate": 1.0}) + "\n"
    )
    assert load_runs([run])[0].unfinished() is None
