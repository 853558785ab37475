import math

import pytest
import torch

from llmgym.config import LoggingConfig
from llmgym.metrics import RunLogger, plot_learning_curve, trim_metrics
from llmgym.report.runs import read_metrics


def test_jsonl_records_and_plot(tmp_path):
    logger = RunLogger(tmp_path, LoggingConfig(progress=False))
    logger.log(0, {"success_rate": 0.1, "episode_return": 0.2}, kind="eval")
    logger.log(64, {"success_rate": torch.tensor(0.5), "episode_return": 0.4, "loss": math.nan})
    logger.log(128, {"success_rate": 0.75, "episode_return": 0.6})
    logger.close()
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["env_steps"] for r in records] == [0, 64, 128]
    assert records[1]["success_rate"] == 0.5 and records[1]["loss"] is None
    png = plot_learning_curve(tmp_path / "metrics.jsonl", tmp_path / "curve.png", title="t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trim_drops_records_after_the_checkpoint_and_torn_lines(tmp_path):
    logger = RunLogger(tmp_path, LoggingConfig(progress=False))
    for step in (0, 8, 16, 24):
        logger.log(step, {"loss": 1.0})
    logger.close()
    path = tmp_path / "metrics.jsonl"
    with path.open("a") as fh:
        fh.write('{"kind": "train", "env_st')  # killed mid-line
    assert trim_metrics(path, 16) == 2
    assert [r["env_steps"] for r in read_metrics(path)] == [0, 8, 16]
    assert trim_metrics(path, 16) == 0 and trim_metrics(tmp_path / "none.jsonl", 0) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


@pytest.mark.parametrize(
    ("name", "home"), [("EpisodeStats", "algorithms.episode_stats"), ("read_metrics", "report.runs")]
)
def test_moved_names_still_import_from_here_with_a_deprecation_warning(name, home):
    import importlib

    import llmgym.metrics

    with pytest.warns(DeprecationWarning, match=f"llmgym.metrics.{name} moved to llmgym.{home}"):
        old = getattr(llmgym.metrics, name)
    assert old is getattr(importlib.import_module(f"llmgym.{home}"), name)
    with pytest.raises(AttributeError):
        llmgym.metrics.NoSuchName  # noqa: B018


def test_llmgym_itself_imports_the_moved_names_from_their_new_homes():
    import ast
    from pathlib import Path

    import llmgym.metrics

    package = Path(llmgym.metrics.__file__).parent
    hits = [
        f"{path.relative_to(package)}: {alias.name}"
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "llmgym.metrics"
        for alias in node.names
        if alias.name in llmgym.metrics._MOVED
    ]
    assert not hits, hits
