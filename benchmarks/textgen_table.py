"""Mean reward of trained TextGen runs against the zero-shot model, with bootstrap intervals, KL and fluency.

Every policy (the zero-shot model, then each run's latest checkpoint) samples ``--episodes``
completions at its ``agent.temperature``: episode ``j`` is the TextGen env reset with seed
``--seed + j`` (the same openings for every policy). Per policy the table gives the mean reward with
a 95% percentile-bootstrap interval over episodes, the KL to the reference (the model with its
LoRA adapter disabled, or the run's frozen copy of the initial weights): the mean over completions
of ``sum_t log pi(a_t) - log pi_ref(a_t)`` on the sampled tokens, an unbiased estimate of
``KL(pi || pi_ref)``, and the completions' fluency (:mod:`llmgym.run.fluency`): their
perplexity under the reference and their distinct-2. A trained NLPO policy samples from its mask
policy's top-p tokens, as in training (the zero-shot row is unmasked). A run's training time is its
last training record's ``time_s``. Runs named ``NAME-sSEED`` are also summarised per setting over
their seeds: the IQM of the seeds' mean rewards with a bootstrap interval over seeds, and the pooled
episodes' mean with its interval. The first ``--show`` completions of every policy follow the tables.

    llmgym train textgen_ppo train.run_name=tg-ppo        # one run per algorithm, then:
    python benchmarks/textgen_table.py runs/tg-ppo runs/tg-grpo runs/tg-rloo runs/tg-nlpo --episodes 240
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import gymnasium as gym

from llmgym.agents.actions import Decision
from llmgym.algorithms import NLPO, algorithm_class
from llmgym.checkpoint import latest_checkpoint
from llmgym.config import Config, load_config
from llmgym.run.build import build_agent, build_llm
from llmgym.run.fluency import fluency_metrics
from llmgym.stats import bootstrap_ci, iqm


@dataclass(frozen=True)
class PolicyRow:
    """One line of the table: a policy's sampled rewards, KL to the reference and fluency."""

    name: str
    rewards: list[float]
    fluency: dict[str, float]
    training_s: Optional[float]
    completions: list[str]

    def line(self) -> str:
        """The row as text: mean reward [95% CI], KL, perplexity under the reference, distinct-2, training time."""
        mean = sum(self.rewards) / len(self.rewards)
        low, high = bootstrap_ci(self.rewards, statistic="mean")
        minutes = f"{self.training_s / 60:.1f} min" if self.training_s is not None else "-"
        fl = self.fluency
        return (
            f"| {self.name} | {mean:.3f} [{low:.3f}, {high:.3f}] | {fl['kl_ref']:.3f} | {fl['perplexity_ref']:.2f} | "
            f"{fl['distinct-2']:.3f} | {minutes} |"
        )


def sample_policy(
    llm: Any, config: Config, episodes: int, seed: int, width: int
) -> tuple[list[float], dict[str, float], list[str]]:
    """Rewards of ``episodes`` sampled one-step TextGen episodes, their fluency and KL to the reference.

    Returns:
        ``(rewards, fluency, completions)``: one reward and one completion text per episode, and
        :func:`~llmgym.run.fluency.fluency_metrics` of all of them (``kl_ref``,
        ``perplexity_ref``, ``distinct-1``, ``distinct-2``).
    """
    agent = build_agent(config, llm, width)
    agent.generator.manual_seed(seed)
    if (
        issubclass(algorithm_class(config.algorithm.name), NLPO)
        and llm.backend.mask_policy.params is not None
    ):
        nlpo = config.algorithm.nlpo  # the trained NLPO policy samples through its mask, as in training
        agent.policy = agent.policy.masked(nlpo.mask_top_p, nlpo.min_tokens_to_keep)
    env = gym.make(config.env.id, **dict(config.env.kwargs))
    rewards: list[float] = []
    completions: list[str] = []
    decisions: list[Decision] = []
    try:
        for start in range(0, episodes, width):
            batch = range(start, min(start + width, episodes))
            resets = [env.reset(seed=seed + j) for j in batch]
            for i in range(len(batch)):
                agent.reset_env(i)
            agent.act_batch(
                [obs for obs, _ in resets],
                [info for _, info in resets],
                greedy=False,
                env_indices=list(range(len(batch))),
            )
            for j, decision in zip(batch, agent.last_decisions):
                env.reset(seed=seed + j)
                rewards.append(float(env.step(decision.action)[1]))
                completions.append(decision.response)
                decisions.append(decision)
    finally:
        env.close()
    return rewards, fluency_metrics(llm, agent.policy, decisions, completions, sampled=True), completions


def seed_groups(rows: list[PolicyRow]) -> dict[str, list[PolicyRow]]:
    """The trained rows grouped by setting: the run folder's name without its ``-sN`` seed suffix."""
    groups: dict[str, list[PolicyRow]] = defaultdict(list)
    for row in rows:
        if row.name != "zero-shot":
            groups[re.sub(r"-s\d+\)$", ")", row.name)].append(row)
    return dict(groups)


def group_line(name: str, rows: list[PolicyRow]) -> str:
    """A setting over its seeds: the IQM of the seeds' mean rewards with its bootstrap interval over seeds,
    the pooled episodes' mean with its interval, and the seeds' mean KL, perplexity and distinct-2."""
    means = [sum(r.rewards) / len(r.rewards) for r in rows]
    low, high = bootstrap_ci(means, statistic="iqm")
    pooled = [x for r in rows for x in r.rewards]
    plow, phigh = bootstrap_ci(pooled, statistic="mean")

    def avg(key: str) -> float:
        return sum(r.fluency[key] for r in rows) / len(rows)

    return (
        f"| {name} | {len(rows)} | {iqm(means):.3f} [{low:.3f}, {high:.3f}] | "
        f"{sum(pooled) / len(pooled):.3f} [{plow:.3f}, {phigh:.3f}] | {avg('kl_ref'):.3f} | "
        f"{avg('perplexity_ref'):.2f} | {avg('distinct-2'):.3f} |"
    )


def training_seconds(run_dir: Path) -> Optional[float]:
    """The ``time_s`` of the run's last training record, if any."""
    records = [
        json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    train = [r for r in records if r.get("kind") == "train"]
    return float(train[-1]["time_s"]) if train else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "runs", nargs="+", type=Path, help="run directories written by llmgym train on TextGen"
    )
    parser.add_argument("--episodes", type=int, default=240, help="sampled completions per policy")
    parser.add_argument(
        "--seed", type=int, default=5000, help="seed of the first episode (and of the sampling)"
    )
    parser.add_argument("--width", type=int, default=48, help="completions sampled side by side")
    parser.add_argument("--show", type=int, default=3, help="completions of each policy to print")
    args = parser.parse_args()
    rows: list[PolicyRow] = []
    for index, run_dir in enumerate(args.runs):
        folder = latest_checkpoint(run_dir)
        config = load_config(folder / "config.yaml", [])
        llm = build_llm(config)
        try:
            if index == 0:
                rewards, fluency, texts = sample_policy(llm, config, args.episodes, args.seed, args.width)
                rows.append(PolicyRow("zero-shot", rewards, fluency, None, texts))
            llm.load(folder / "llm")
            rewards, fluency, texts = sample_policy(llm, config, args.episodes, args.seed, args.width)
            name = f"{config.algorithm.name} ({run_dir.name})"
            rows.append(PolicyRow(name, rewards, fluency, training_seconds(run_dir), texts))
        finally:
            llm.close()
        print(rows[-1].line(), flush=True)
    print(
        f"\n{args.episodes} sampled completions per policy (seeds {args.seed}..{args.seed + args.episodes - 1})"
    )
    print(
        "| policy | mean reward [95% bootstrap CI] | KL to reference (nats per completion) | perplexity under reference "
        "| distinct-2 | training time |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(row.line())
    groups = {name: rows for name, rows in seed_groups(rows).items() if len(rows) > 1}
    if groups:
        print("\nSettings over seeds (runs named NAME-sSEED):")
        print(
            "| setting | seeds | IQM of seed means [95% bootstrap CI over seeds] | pooled mean [95% CI] "
            "| KL | perplexity under reference | distinct-2 |"
        )
        print("|---|---|---|---|---|---|---|")
        for name, members in groups.items():
            print(group_line(name, members))
    print(f"\nThe first {args.show} completions of each policy (the same openings):")
    for row in rows:
        print(f"- {row.name}: " + " | ".join(repr(text) for text in row.completions[: args.show]))


if __name__ == "__main__":
    main()
