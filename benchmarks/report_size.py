"""Run report size and load time for a long run: 100k env steps, 50 evaluations.

Synthesizes the files such a run leaves (the quickstart config, a ``metrics.jsonl`` with one
training record per update and the evaluations, an ``episodes.jsonl`` with
``logging.record_episodes`` episodes per evaluation), writes its report with ``llmgym report``'s
code, and loads it in headless Chromium. Two cases:

* ``typical``: the quickstart's shape (BabyAI-Text, 16-step episodes, 6 candidates with probabilities);
* ``worst``: every cap of the episode records hit (generative agent, ``MAX_STEPS`` steps per
  episode, ``MAX_TEXT_CHARS``-long observations and texts, ``MAX_TOKENS`` tokens per step), so
  each evaluation stores what ``MAX_EVALUATION_BYTES`` lets through.

It prints, per case, the sizes of ``episodes.jsonl`` and ``report.html``, the time to write the
report, and the browser's load time: the page's own ``data-ready-ms`` (navigation start to the
first replay step drawn, median of ``--repeats`` loads) and the wall time of a headless
``--dump-dom`` load, next to that of a one-evaluation report loaded the same way in the same run
(the browser's start-up cost, which a user's open browser does not pay).

Run: ``python benchmarks/report_size.py [--steps 100000] [--evaluations 50] [--episodes 3] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from llmgym.config import config_to_dict, load_config
from llmgym.report import records as rec
from llmgym.report.html import write_report
from llmgym.report.records import EpisodeRecord, StepRecord

ACTIONS = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]
UPDATE_STEPS = 128  # quickstart: 16 envs x 8 rollout steps


def _scoring_step(rng: random.Random, progress: float) -> StepRecord:
    weights = [rng.random() + (4 * progress if a == "go forward" else 0) for a in ACTIONS]
    total = sum(weights)
    order = sorted(range(len(ACTIONS)), key=lambda i: -weights[i])
    probs = [round(weights[i] / total, 4) for i in order]
    return StepRecord(
        observation="Goal of the agent: go to the red ball\nYou see a wall 3 steps forward, You see a red ball 2 steps left",
        action=ACTIONS[order[0]],
        reward=round(rng.uniform(-0.1, 0.1), 4),
        value=round(rng.uniform(-1, 1), 4),
        log_prob=-0.5,
        advantage=round(rng.uniform(-1, 1), 4),
        candidates=[ACTIONS[i] for i in order],
        probs=probs,
        chosen=0,
    )


def _worst_step(rng: random.Random, progress: float) -> StepRecord:
    words = "you see a wall a red ball a key a door to the left right".split()
    text = " ".join(rng.choice(words) for _ in range(rec.MAX_TEXT_CHARS))[: rec.MAX_TEXT_CHARS]
    return StepRecord(
        observation=text,
        action="go forward",
        reward=0.0,
        value=0.1,
        log_prob=-3.2,
        advantage=0.05,
        text=text,
        tokens=[rng.choice(words) for _ in range(rec.MAX_TOKENS)],
        token_log_probs=[round(-rng.random() * 4, 4) for _ in range(rec.MAX_TOKENS)],
        parse_failed=rng.random() < 0.2,
    )


def synthesize(folder: Path, steps: int, evaluations: int, episodes: int, worst: bool) -> Path:
    """Write the files of a long run into ``folder``."""
    rng = random.Random(0)
    folder.mkdir(parents=True)
    config = config_to_dict(load_config("quickstart", [f"train.total_env_steps={steps}"]))
    if worst:
        config["agent"]["type"] = "generative"
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    every = steps // evaluations
    eval_steps = [0, *range(every, steps + 1, every)][: evaluations + 1]
    lines = []
    for update in range(1, steps // UPDATE_STEPS + 1):
        x = update * UPDATE_STEPS
        lines.append(
            {
                "kind": "train",
                "env_steps": x,
                "time_s": x / 20,
                "success_rate": min(1, x / steps + rng.random() * 0.1),
                "episode_return": x / steps,
                "episodes": 100.0,
                "policy_loss": rng.random(),
                "value_loss": rng.random(),
            }
        )
    for i, x in enumerate(eval_steps):
        lines.append(
            {
                "kind": "eval",
                "env_steps": x,
                "time_s": x / 20,
                "success_rate": min(1, x / steps),
                "episode_return": x / steps,
                "episode_length": 8.0,
                "episodes": 100.0,
                "label": "before" if i == 0 else "periodic",
            }
        )
    lines.sort(key=lambda r: (r["env_steps"], r["kind"] == "eval"))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    length = rec.MAX_STEPS if worst else 16
    make_step = _worst_step if worst else _scoring_step
    with (folder / rec.EPISODES_NAME).open("w") as fh:
        for i, x in enumerate(eval_steps):
            size = 0
            for episode in range(episodes):
                record = EpisodeRecord(
                    x,
                    "before" if i == 0 else "periodic",
                    i,
                    episode,
                    10_000 + episode,
                    "greedy",
                    1.0,
                    True,
                    length,
                    [make_step(rng, x / steps) for _ in range(length)],
                )
                line = record.to_json() + "\n"
                size += len(line.encode())
                if (
                    episode and size > rec.MAX_EVALUATION_BYTES
                ):  # as EpisodeRecorder.records bounds an evaluation
                    break
                fh.write(line)
    return folder


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("no headless Chromium found: apt-get install chromium")


def load(report: Path) -> tuple[float, float]:
    """``(data-ready-ms, dump-dom wall seconds)`` of one headless load."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        tick = time.perf_counter()
        proc = subprocess.run(
            [
                _chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={profile}",
                "--dump-dom",
                report.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        wall = time.perf_counter() - tick
    found = re.search(r'data-ready-ms="(\d+)"', proc.stdout)
    if found is None:
        raise SystemExit(f"the report's script did not run: {proc.stderr[-1000:]}")
    return float(found.group(1)), wall


def measure(folder: Path, repeats: int) -> dict[str, float]:
    tick = time.perf_counter()
    report = write_report([folder])
    write_s = time.perf_counter() - tick
    loads = [load(report) for _ in range(repeats)]
    return {
        "episodes_mb": (folder / rec.EPISODES_NAME).stat().st_size / 1e6,
        "report_mb": report.stat().st_size / 1e6,
        "write_s": write_s,
        "ready_ms": statistics.median(ms for ms, _ in loads),
        "wall_s": statistics.median(w for _, w in loads),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--evaluations", type=int, default=50)
    parser.add_argument("--episodes", type=int, default=3, help="logging.record_episodes")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        baseline = measure(synthesize(root / "baseline", UPDATE_STEPS * 2, 1, 1, worst=False), args.repeats)
        print(
            f"{'case':<10} {'episodes.jsonl':>15} {'report.html':>12} {'write':>8} {'ready':>9} {'dump-dom wall':>14} {'wall/baseline':>14}"
        )
        for name, worst in (("baseline", None), ("typical", False), ("worst", True)):
            result = (
                baseline
                if worst is None
                else measure(
                    synthesize(root / name, args.steps, args.evaluations, args.episodes, worst), args.repeats
                )
            )
            print(
                f"{name:<10} {result['episodes_mb']:>12.2f} MB {result['report_mb']:>9.2f} MB {result['write_s']:>7.2f}s "
                f"{result['ready_ms']:>7.0f}ms {result['wall_s']:>13.2f}s {result['wall_s'] / baseline['wall_s']:>13.2f}x"
            )
    print(
        f"({args.steps} env steps, {args.evaluations} evaluations, {args.episodes} episodes recorded per evaluation; "
        "baseline: a 1-evaluation report)"
    )


if __name__ == "__main__":
    main()
