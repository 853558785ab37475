"""Prompt rendering cost of a huge observation against a small one, in the same run.

Renders three steps of a :class:`~llmgym.agents.history.History` (``max_prompt_tokens`` 1024,
three past turns, ``truncate_left`` as the agents use it) whose observations are a huge text, a
small one, then the huge one again (so the huge text sits in a past turn too), and the same with
only small observations; prints the time ratio and what the tokenizer was given (calls, characters
in all, the largest call). The huge text is cut to the budget's character bound before it is
tokenized, so the largest call stays near that bound whatever the observation's size.

Run: ``python benchmarks/huge_observation.py [--mib 1] [--budget 1024] [--model tiny|NAME]``
(``tiny``: llmgym's offline test tokenizer; a name loads that model's tokenizer).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from llmgym.agents.history import History
from llmgym.testing.counting import CountingTokenizer


def render_steps(tokenizer: Any, huge: str, small: str, budget: int) -> tuple[float, list[int]]:
    """Seconds to render the three steps, and the lengths of the texts tokenized."""
    counting = CountingTokenizer(tokenizer)
    history = History(
        counting,
        system_prompt="You play a text game.",
        max_turns=3,
        max_prompt_tokens=budget,
        overflow="truncate_left",
    )
    start = time.perf_counter()
    for observation in (huge, small, huge):
        history.add_observation(observation)
        history.render()
        history.add_action("go forward")
    return time.perf_counter() - start, counting.lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=1.0, help="size of the huge observation in MiB")
    parser.add_argument("--budget", type=int, default=1024, help="max_prompt_tokens")
    parser.add_argument("--model", default="tiny", help="tiny, or a model name whose tokenizer to load")
    args = parser.parse_args()
    if args.model == "tiny":
        from llmgym.testing import tiny_tokenizer

        tokenizer = tiny_tokenizer()
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model)
    small = "You see a wall 3 steps forward. " * 4
    huge = small * int(args.mib * 2**20 / len(small))
    base, _ = render_steps(tokenizer, small, small, args.budget)
    cost, lengths = render_steps(tokenizer, huge, small, args.budget)
    print(
        f"{len(huge) / 2**20:.2f} MiB observation: {cost:.3f} s for 3 steps, {cost / base:.0f}x the small "
        f"observation's {base:.4f} s; tokenizer calls {len(lengths)}, characters tokenized {sum(lengths)}, "
        f"largest call {max(lengths)}"
    )


if __name__ == "__main__":
    main()
