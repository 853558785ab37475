"""Run and sweep folders written by hand (no training): what a report and a sweep summary read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG = "env:\n  id: llmgym/Countdown-v0\nagent:\n  type: scoring\ntrain:\n  seed: 0\n"


def metrics_lines() -> list[str]:
    """A train record, an evaluation before training and one after, as ``RunLogger`` writes them."""
    records: list[dict[str, Any]] = [
        {
            "kind": "eval",
            "env_steps": 0,
            "time_s": 0.1,
            "label": "before",
            "success_rate": 0.25,
            "episode_return": 0.5,
            "episode_length": 3.0,
            "episodes": 4.0,
        },
        {
            "kind": "train",
            "env_steps": 8,
            "time_s": 0.5,
            "success_rate": 0.5,
            "episode_return": 1.0,
            "episode_length": 3.0,
            "episodes": 2.0,
        },
        {
            "kind": "eval",
            "env_steps": 16,
            "time_s": 1.0,
            "label": "after",
            "success_rate": 0.75,
            "episode_return": 1.5,
            "episode_length": 2.0,
            "episodes": 4.0,
        },
    ]
    return [json.dumps(record) for record in records]


def episode(**changes: Any) -> dict[str, Any]:
    """An episode record of one scoring step and one generative step."""
    record: dict[str, Any] = {
        "env_steps": 16,
        "label": "after",
        "evaluation": 1,
        "episode": 0,
        "seed": 3,
        "policy": "greedy",
        "episode_return": 1.0,
        "success": True,
        "length": 2,
        "steps": [
            {
                "observation": "You see a door.",
                "action": "open",
                "reward": 0.0,
                "value": 0.1,
                "log_prob": -0.2,
                "advantage": 0.3,
                "candidates": ["open", "wait"],
                "probs": [0.8, 0.2],
                "chosen": 0,
            },
            {
                "observation": "The door is open.",
                "action": "go",
                "reward": 1.0,
                "value": 0.5,
                "log_prob": -0.1,
                "text": "go",
                "tokens": ["g", "o"],
                "token_log_probs": [-0.1, -0.2],
                "parse_failed": True,
            },
        ],
    }
    record.update(changes)
    return record


def write_run(
    folder: Path,
    metrics: list[str] | None = None,
    episodes: list[str] | None = None,
    config: str = CONFIG,
    end: str = "\n",
) -> Path:
    """A run folder: ``config.yaml``, ``metrics.jsonl`` (lines joined by newlines, then ``end``), ``episodes.jsonl``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(config, encoding="utf-8")
    (folder / "metrics.jsonl").write_text(
        "\n".join(metrics_lines() if metrics is None else metrics) + end, encoding="utf-8"
    )
    if episodes is not None:
        (folder / "episodes.jsonl").write_text("".join(line + "\n" for line in episodes), encoding="utf-8")
    return folder


def write_sweep(folder: Path, runs: list[Path]) -> Path:
    """A sweep folder whose ``sweep.json`` names ``runs`` (seeds 0, 1...)."""
    folder.mkdir(parents=True, exist_ok=True)
    summary = {
        "config": "quickstart",
        "runs": [{"seed": i, "threads": None, "run_dir": str(run)} for i, run in enumerate(runs)],
    }
    (folder / "sweep.json").write_text(json.dumps(summary), encoding="utf-8")
    return folder
