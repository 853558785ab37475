"""ScienceWorld random baseline: a uniformly random valid action per step, on every task's dev split.

For each of the 30 tasks, ``--episodes`` episodes (``reset(seed=i)``, actions drawn with
``numpy.random.default_rng(i)`` from ``info["valid_actions"]``), at most ``--steps`` steps each.
Prints a markdown table: the mean normalised score (the final score over 100, a failed task counting
0), the success rate, the failure rate (score -100, mostly from focusing on a wrong object), the mean
episode length, then the mean step time including the listing of the valid actions.

Run: ``python benchmarks/scienceworld_random.py [--episodes 10] [--steps 30] [--split dev]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from llmgym.envs._scienceworld_tasks import SCIENCEWORLD_TASKS
from llmgym.envs.scienceworld_env import ScienceWorldTextEnv


def run_task(
    task: str, episodes: int, steps: int, split: str
) -> tuple[list[float], list[bool], list[bool], list[int], float]:
    """Play the random baseline on one task.

    Args:
        task: ScienceWorld task name.
        episodes: Episodes, seeded 0..episodes-1.
        steps: Step limit per episode.
        split: Variation split.

    Returns:
        Per episode: normalised score, success, failure, length; and the total step time in seconds.
    """
    env = ScienceWorldTextEnv(task, split)
    scores, successes, failures, lengths, step_time = [], [], [], [], 0.0
    try:
        for episode in range(episodes):
            _, info = env.reset(seed=episode)
            rng = np.random.default_rng(episode)
            length = 0
            while length < steps:
                length += 1
                valid = info["valid_actions"]
                start = time.perf_counter()
                _, _, terminated, _, info = env.step(valid[int(rng.integers(len(valid)))])
                step_time += time.perf_counter() - start
                if terminated:
                    break
            scores.append(max(info["score"], 0) / 100)
            successes.append(info["success"])
            failures.append(info["score"] < 0)
            lengths.append(length)
    finally:
        env.close()
    return scores, successes, failures, lengths, step_time


def main() -> None:
    """Run the baseline on every task and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--split", default="dev", choices=("train", "dev", "test"))
    args = parser.parse_args()
    print(
        f"Random valid action, {args.split} split, {args.episodes} episodes per task, at most {args.steps} steps.\n"
    )
    print("| task | score | success | failed | steps |")
    print("|---|---|---|---|---|")
    began, all_scores, all_success, total_steps, total_time = time.perf_counter(), [], [], 0, 0.0
    for task in SCIENCEWORLD_TASKS:
        scores, successes, failures, lengths, step_time = run_task(
            task, args.episodes, args.steps, args.split
        )
        all_scores += scores
        all_success += successes
        total_steps += sum(lengths)
        total_time += step_time
        print(
            f"| {task} | {np.mean(scores):.3f} | {np.mean(successes):.2f} | {np.mean(failures):.2f} "
            f"| {np.mean(lengths):.1f} |",
            flush=True,
        )
    print(
        f"| **all {len(SCIENCEWORLD_TASKS)} tasks** | {np.mean(all_scores):.3f} | {np.mean(all_success):.2f} | | |"
    )
    print(
        f"\n{total_steps} steps, {1000 * total_time / total_steps:.0f} ms per step with the valid-action listing; "
        f"{time.perf_counter() - began:.0f} s in all."
    )


if __name__ == "__main__":
    main()
