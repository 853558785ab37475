"""A huge observation is cut to what the token budget can hold before it is tokenized.

Before, a 1 MB observation was tokenized whole about 25 times per step (the full prompt, each
step of the search over past turns, each step of the search for the cut), making steps 156x
slower. Now no tokenizer call sees more than the budget's character bound (``max_prompt_tokens``
times the longest token string) plus the template; the test counts characters, it times nothing.
"""

from __future__ import annotations

import pytest

from llmgym.agents.history import History
from llmgym.errors import InputError
from llmgym.testing import tiny_tokenizer
from llmgym.testing.counting import CountingTokenizer

TOK = tiny_tokenizer()
HUGE = "You see a wall 3 steps forward. " * 32_768  # 1 MiB


@pytest.mark.parametrize("chat", [True, False])
def test_a_1mb_observation_is_cut_before_tokenizing(chat: bool) -> None:
    counting = CountingTokenizer(TOK)
    history = History(
        counting,
        system_prompt="sys",
        max_turns=3,
        max_prompt_tokens=64,
        use_chat_template=chat,
        overflow="truncate_left",
    )
    for step in range(3):  # the huge text stays in the history's past turns too
        history.add_observation(HUGE if step != 1 else "small")
        prompt = history.render()
        assert (
            len(prompt.token_ids) <= 64
            and prompt.token_ids == TOK(prompt.text, add_special_tokens=not chat)["input_ids"]
        )
        history.add_action("go forward")
    limit = history.char_limit()
    assert limit is not None and limit < 64 * 32
    overhead = 200  # system prompt, template and the action of a kept turn
    assert max(counting.lengths) <= limit + overhead
    assert sum(counting.lengths) <= 3 * 40 * (
        limit + overhead
    )  # a few dozen bounded calls per step, not 25 MB


def test_error_mode_names_the_size_without_tokenizing_it_whole() -> None:
    counting = CountingTokenizer(TOK)
    history = History(counting, system_prompt="sys", max_prompt_tokens=64)
    history.add_observation(HUGE)
    with pytest.raises(
        InputError, match=rf"observation alone has {len(HUGE)} characters.*max_prompt_tokens=64"
    ):
        history.render()
    assert not counting.lengths or max(counting.lengths) < len(HUGE)


def test_the_cut_keeps_the_longest_suffix_that_fits() -> None:
    history = History(TOK, system_prompt="sys", max_prompt_tokens=64, overflow="truncate_left")
    history.add_observation(HUGE)
    prompt = history.render()
    reference = History(TOK, system_prompt="sys", max_prompt_tokens=64, overflow="truncate_left")
    reference.add_observation(
        HUGE[-(history.char_limit() or 0) :]
    )  # the text the bound keeps, searched in full
    assert prompt.text == reference.render().text and prompt.observation_truncated
