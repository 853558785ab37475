"""A scripted GoTo policy that reads the target's position from BabyAI-Text's words: a reference for the recipe.

It parses "red ball N steps left/right and M steps forward" from the observation; with the ball out
of view it turns left, with the ball ahead it goes forward (turning towards the ball's side when an
object or a wall blocks the next cell), with the ball beside it turns towards it. It plays
``--episodes`` seeded episodes at each step limit (episode ``j`` uses seed ``--seed + j``; the
trainer's evaluation of run seed ``S`` starts at ``10000 + S``) and prints the success rate: what a policy that reads the text can reach within
the 16 steps of ``configs/gotoredball.yaml`` (docs/results.md).

    python benchmarks/babyai_scripted.py --limits 16 64
"""

from __future__ import annotations

import argparse
import re

import gymnasium as gym

import llmgym  # noqa: F401  (registers the ids)

_BALL = re.compile(r"red ball (?:(\d+) steps? (left|right))?(?: and )?(?:(\d+) steps? forward)?")
_BLOCKED = re.compile(r"(You see a \w+ \w+|wall) 1 step forward(,|$)")


def scripted_action(view: str) -> str:
    """The scripted action for one BabyAI-Text view (``obs["view"]``)."""
    match = _BALL.search(view)
    if not match or (match.group(1) is None and match.group(3) is None):
        return "turn left"
    lateral, side, forward = int(match.group(1) or 0), match.group(2), int(match.group(3) or 0)
    turn = "turn left" if side == "left" else "turn right"
    if forward > 0 and not (lateral == 0 and forward == 1):
        return turn if _BLOCKED.search(view) else "go forward"
    return turn if lateral > 0 else "go forward"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="llmgym/BabyAI-Text-GoToRedBall-v0")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument(
        "--seed",
        type=int,
        default=10_000,
        help="seed of the first episode (the trainer evaluates seed S on 10000 + S)",
    )
    parser.add_argument("--limits", type=int, nargs="+", default=[16, 64], help="episode step limits")
    args = parser.parse_args()
    for limit in args.limits:
        env = gym.make(args.env, max_episode_steps=limit)
        wins = 0
        for episode in range(args.episodes):
            obs, info = env.reset(seed=args.seed + episode)
            done = False
            while not done:
                obs, _, terminated, truncated, info = env.step(scripted_action(obs["view"]))
                done = terminated or truncated
            wins += bool(info["success"])
        env.close()
        print(
            f"{args.env} step limit {limit}: success {wins / args.episodes:.2f} over {args.episodes} episodes"
        )


if __name__ == "__main__":
    main()
