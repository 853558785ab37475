"""The run report end to end: tiny runs trained by the CLI, their report loaded in headless Chromium."""

import html
import json
import re
from pathlib import Path

import pytest

from llmgym.cli import main
from llmgym.report.records import read_episode_records
from llmgym.stats import bootstrap_ci, iqm
from tests.report.browser import assert_not_blank, attributes, chromium, dump_dom, screenshot

TINY = [
    "train.total_env_steps=16",
    "env.num_envs=2",
    "algorithm.rollout_steps=4",
    "algorithm.epochs=1",
    "algorithm.minibatch_size=4",
    "train.eval_episodes=2",
    "train.eval_num_envs=2",
    "logging.progress=false",
    "agent.max_prompt_tokens=256",
    "agent.max_new_tokens=4",
    "model.forward_batch_size=8",
    "env.max_episode_steps=4",
    "model.dtype=float32",
    "train.eval_every=8",
]
SECTIONS = ("curves", "evaluations", "replays", "config")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")


def train(config, tiny_model_dir, output_dir, capsys, *overrides):
    args = [
        "train",
        config,
        f"model.name={tiny_model_dir}",
        f"train.output_dir={output_dir}",
        "train.run_name=run",
        *TINY,
        *overrides,
    ]
    assert main(args) == 0, capsys.readouterr().err[-3000:]
    out = capsys.readouterr().out.strip().splitlines()
    run_dir = Path(output_dir) / "run"
    assert out[-1] == f"report: {run_dir / 'report.html'}", "llmgym train ends by printing the report's path"
    return run_dir


def assert_self_contained(text):
    """No resource is fetched: no src/href to another file or host, no CSS import or url()."""
    assert not re.search(r'\b(src|href)="(?!#)', text), re.search(r'\b(src|href)="(?!#)[^"]*"', text)
    assert "@import" not in text and "url(" not in text
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) <= {"http://www.w3.org/2000/svg"}


def replay_fragment(record, step):
    kind = ["greedy", "sampled", "training"].index(record.policy)
    return f"r=0&e={record.evaluation}&k={kind}&p={record.episode}&s={step}"


def test_scoring_run_report_replays_the_recorded_probabilities(tiny_model_dir, tmp_path, capsys):
    run_dir = train("quickstart", tiny_model_dir, tmp_path, capsys)
    report = run_dir / "report.html"
    text = report.read_text()
    assert_self_contained(text)
    everything = read_episode_records(run_dir / "episodes.jsonl")
    records = [r for r in everything if r.policy == "greedy"]
    evaluations = sorted({r.evaluation for r in records})
    assert evaluations == [0, 1, 2] and [r.label for r in records[::2]] == ["before", "periodic", "after"]
    assert all(
        len([r for r in records if r.evaluation == e]) == 2 for e in evaluations
    )  # eval_episodes=2, default 3
    training = [r for r in everything if r.policy == "training"]
    assert training and all(r.label == "train" and r.seed == -1 and r.episode == 0 for r in training)
    assert len({r.evaluation for r in training}) == len(training)  # at most one per evaluation: sparse

    chromium()
    record = next(r for r in records if r.evaluation == 2 and r.episode == 1)
    step = min(1, len(record.steps) - 1)
    dom = dump_dom(report, replay_fragment(record, step))
    for section in (*SECTIONS, "actions"):
        assert f'<section id="{section}">' in dom
    assert dom.count('<svg class="chart"') == 3  # success, return, action distribution
    assert 'data-replay-ready="1"' in dom, "the replay script ran"
    expected = record.steps[step]
    shown = [float(p) for p in attributes(dom, "cand", "data-prob")]
    assert shown == expected.probs and len(shown) == 6  # BabyAI's six actions, most probable first
    names = re.findall(r'<td class="cand-name" title="([^"]*)"', dom)
    assert names == [html.escape(c) for c in expected.candidates]
    assert attributes(dom, "cand chosen", "data-prob") == [str(expected.probs[expected.chosen])]
    assert f'<span id="rp-position">step {step + 1} / {len(record.steps)}' in dom
    assert html.escape(expected.observation) in dom
    assert_not_blank(screenshot(report, tmp_path / "report_scoring.png", replay_fragment(record, step)))

    # a training episode: the behaviour policy's probabilities at each step, under its own entry
    trained = training[0]
    dom = dump_dom(report, replay_fragment(trained, 0))
    assert [float(p) for p in attributes(dom, "cand", "data-prob")] == trained.steps[0].probs
    assert f"training after #{trained.evaluation}" in dom and "(env 0)" in dom

    # llmgym eval saves its episodes and report next to the run
    assert main(["eval", str(run_dir), "--episodes", "2"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == f"report: {run_dir / 'eval' / 'report.html'}"
    [first, _] = read_episode_records(run_dir / "eval" / "episodes.jsonl")
    assert first.label == "eval" and first.env_steps == 16
    dom = dump_dom(run_dir / "eval" / "report.html", replay_fragment(first, 0))
    assert [float(p) for p in attributes(dom, "cand", "data-prob")] == first.steps[0].probs


def test_generative_run_report_shows_the_text_token_log_probs_and_fallback(tiny_model_dir, tmp_path, capsys):
    run_dir = train("blackjack_generative", tiny_model_dir, tmp_path, capsys, "logging.record_episodes=1")
    report = run_dir / "report.html"
    assert_self_contained(report.read_text())
    records = [r for r in read_episode_records(run_dir / "episodes.jsonl") if r.policy == "greedy"]
    assert [r.episode for r in records] == [0, 0, 0]  # record_episodes=1 per evaluation
    record = records[-1]
    step = record.steps[0]
    assert step.text is not None and step.tokens and step.candidates is None

    dom = dump_dom(report, replay_fragment(record, 0))
    for section in SECTIONS:
        assert f'<section id="{section}">' in dom
    assert '<section id="actions">' not in dom  # no candidates: no action distribution
    shown = [float(v) for v in re.findall(r'<span class="tok" data-logprob="([^"]*)"', dom)]
    assert shown == step.token_log_probs
    tokens = re.findall(r'<span class="tok"[^>]*><span class="t">([^<]*)</span><sub>', dom)
    assert tokens == [html.escape(t) for t in step.tokens]
    assert ("parse failed: fallback action" in dom) == step.parse_failed
    assert f'<b class="action">{html.escape(step.action)}</b>' in dom
    assert_not_blank(screenshot(report, tmp_path / "report_generative.png", replay_fragment(record, 0)))


def test_three_seed_sweep_report_compares_the_runs_with_the_iqm(tiny_model_dir, tmp_path, capsys):
    args = [
        "sweep",
        "--seeds",
        "0-2",
        "--jobs",
        "2",
        f"model.name={tiny_model_dir}",
        f"train.output_dir={tmp_path}",
        "train.run_name=sw",
        "env.id=llmgym/EchoWord-v0",
        *TINY,
        "logging.plot=false",
    ]
    assert main(args) == 0, capsys.readouterr()
    sweep_dir = tmp_path / "sw"
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == f"report: {sweep_dir / 'report.html'}"
    summary = json.loads((sweep_dir / "sweep.json").read_text())
    finals = [run["success_after"] for run in summary["runs"]]
    report = sweep_dir / "report.html"
    assert_self_contained(report.read_text())

    dom = dump_dom(report, "r=2&e=0&p=1&s=0")
    assert '<section id="compare">' in dom and '<section id="replays">' in dom
    low, high = bootstrap_ci(finals)
    assert (
        f"over 3 runs: <b>{iqm(finals):.3f}</b>, 95% percentile bootstrap CI [{low:.3f}, {high:.3f}]" in dom
    )
    assert dom.count("<tr><td>seed-") == 3
    assert re.findall(r'<option value="(\d)"( selected="")?>seed-\d</option>', dom) == [
        ("0", ""),
        ("1", ""),
        ("2", ' selected=""'),
    ]
    record = next(
        r
        for r in read_episode_records(sweep_dir / "seed-2" / "episodes.jsonl")
        if r.evaluation == 0 and r.episode == 1
    )
    assert [float(p) for p in attributes(dom, "cand", "data-prob")] == record.steps[0].probs
    assert_not_blank(screenshot(report, tmp_path / "report_sweep.png", "r=2&e=0&p=1&s=0"))

    # llmgym report: runs given one by one, and a clear error for a folder that is no run
    assert (
        main(
            [
                "report",
                str(sweep_dir / "seed-0"),
                str(sweep_dir / "seed-1"),
                "--out",
                str(tmp_path / "two.html"),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip() == f"report: {tmp_path / 'two.html'}"
    assert "over 2 runs" in (tmp_path / "two.html").read_text()
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert (
        "is neither a run directory (no config.yaml or metrics.jsonl) nor a sweep folder"
        in capsys.readouterr().err
    )
