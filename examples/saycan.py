"""A SayCan-style planner: the LLM says which skill is useful, the world says which is possible.

At each step every skill is scored with ``llm.score`` (log p(skill | instruction and plan so far)),
turned into a distribution over skills, and multiplied by the skill's affordance in a small
kitchen world (1 when its preconditions hold, 0 otherwise, as SayCan's value functions would
say). The best skill runs, changes the world, and joins the plan, until ``done`` is chosen.

Run::

    python examples/saycan.py                          # SmolLM2-135M-Instruct
    python examples/saycan.py --instruction "put the apple in the bowl" --max-steps 6
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import torch

import llmgym

OBJECTS = ("apple", "sponge", "cup")
PLACES = ("counter", "table", "bowl", "sink")

PROMPT = """Robot: I can pick up objects and put them somewhere.
Human: put the sponge in the sink
Robot: 1. pick up the sponge, 2. put the sponge in the sink, 3. done.
Human: {instruction}
Robot: {plan}"""


@dataclass
class Kitchen:
    """A tiny kitchen: where each object is and what the robot holds (the affordance model)."""

    where: dict[str, str] = field(
        default_factory=lambda: {"apple": "counter", "sponge": "table", "cup": "counter"}
    )
    holding: str | None = None

    def skills(self) -> list[str]:
        """Every skill the robot knows, possible or not."""
        picks = [f"pick up the {o}" for o in OBJECTS]
        puts = [
            f"put the {o} {'in' if p in ('bowl', 'sink') else 'on'} the {p}" for o in OBJECTS for p in PLACES
        ]
        return [*picks, *puts, "done"]

    def affordance(self, skill: str) -> float:
        """1.0 when the skill can run now, else 0.0."""
        if skill.startswith("pick up the "):
            return float(self.holding is None)
        if skill.startswith("put the "):
            return float(self.holding == skill.split()[2])
        return 1.0

    def run(self, skill: str) -> None:
        """Execute a possible skill."""
        words = skill.split()
        if skill.startswith("pick up the "):
            self.holding, self.where[words[3]] = words[3], "hand"
        elif skill.startswith("put the "):
            self.where[words[2]], self.holding = words[-1], None


def plan(llm: llmgym.LLM, instruction: str, world: Kitchen, max_steps: int) -> list[str]:
    """Greedy SayCan: argmax over skills of p_LLM(skill) * affordance(skill) until ``done``.

    Args:
        llm: The language model.
        instruction: What the human asked.
        world: The kitchen, changed by the executed skills.
        max_steps: Most skills to execute.

    Returns:
        The executed skills.
    """
    steps: list[str] = []
    skills = world.skills()
    for step in range(max_steps):
        so_far = "".join(f"{i + 1}. {s}, " for i, s in enumerate(steps)) + f"{step + 1}."
        context = PROMPT.format(instruction=instruction, plan=so_far)
        say = torch.softmax(llm.score([context], [[" " + s for s in skills]], normalize="mean")[0], dim=0)
        can = torch.tensor([world.affordance(s) for s in skills])
        combined = say * can
        best = int(combined.argmax())
        print(
            f"step {step + 1}: {skills[best]!r:34} say {say[best]:.3f}  can {can[best]:.0f}  "
            f"(the LLM alone prefers {skills[int(say.argmax())]!r})"
        )
        if skills[best] == "done":
            break
        world.run(skills[best])
        steps.append(skills[best])
    return steps


def main(argv: list[str] | None = None) -> list[str]:
    """Plan for one instruction; returns the executed skills."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="SmolLM2-135M-Instruct", help="model name or local folder")
    parser.add_argument("--instruction", default="put the apple in the bowl", help="what to do")
    parser.add_argument("--max-steps", type=int, default=5, help="most skills to execute")
    args = parser.parse_args(argv)
    world = Kitchen()
    with llmgym.LLM(args.model) as llm:
        steps = plan(llm, args.instruction, world, args.max_steps)
    print("plan:", steps)
    print("world:", world.where)
    return steps


if __name__ == "__main__":
    main()
