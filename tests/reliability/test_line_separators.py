"""Issue 44, item 6: U+0085, U+2028 and U+2029 in recorded text: the run finishes, resumes and reports.

``episodes.jsonl`` keeps texts as they are (``ensure_ascii=False``), and ``str.splitlines`` takes
these characters for line ends: every JSON Lines file is read back split on ``"\\n"`` only.
"""

import json

import pytest

from llmgym.cli import main
from llmgym.metrics import trim_metrics
from llmgym.report.records import read_episode_records

SEPARATORS = "\u0085\u2028\u2029"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")


def test_a_run_whose_prompts_hold_line_separators_finishes_resumes_and_reports(
    tiny_model_dir, tmp_path, capsys
):
    pool = tmp_path / "pool.jsonl"
    prompts = [f"Say{SEPARATORS[i % 3]}it{SEPARATORS}now {i}:" for i in range(4)]
    pool.write_text(
        "".join(json.dumps({"prompt": p}, ensure_ascii=False) + "\n" for p in prompts), encoding="utf-8"
    )
    run = tmp_path / "run"
    args = [
        "train",
        "textgen_ppo",
        f"model.name={tiny_model_dir}",
        "model.dtype=float32",
        f"train.output_dir={tmp_path}",
        "train.run_name=run",
        f"env.kwargs.datapool={pool}",
        "env.num_envs=2",
        "algorithm.minibatch_size=2",
        "agent.max_new_tokens=3",
        "agent.max_prompt_tokens=64",
        "train.eval_episodes=2",
        "train.eval_sample=false",
        "train.checkpoint_every=2",
        "logging.progress=false",
        "logging.plot=false",
    ]
    assert main([*args, "train.total_env_steps=4"]) == 0, capsys.readouterr().err[-3000:]
    records = read_episode_records(run / "episodes.jsonl")
    observations = [step.observation for record in records for step in record.steps]
    assert any(all(c in text for c in SEPARATORS) for text in observations)
    assert main([*args, f"train.resume={run}", "train.total_env_steps=8"]) == 0, capsys.readouterr().err[
        -3000:
    ]
    assert max(r.env_steps for r in read_episode_records(run / "episodes.jsonl")) == 8
    capsys.readouterr()
    assert main(["report", str(run)]) == 0, capsys.readouterr().err[-3000:]
    assert (run / "report.html").is_file()


def test_trim_metrics_keeps_a_record_holding_a_line_separator(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [
        json.dumps({"kind": "eval", "env_steps": 0, "label": f"a{SEPARATORS}b"}, ensure_ascii=False),
        json.dumps({"kind": "train", "env_steps": 8}),
    ]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    assert trim_metrics(path, 4) == 1
    assert path.read_text(encoding="utf-8") == lines[0] + "\n"
