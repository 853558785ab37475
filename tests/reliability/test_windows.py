"""Windows and budgets checked before anything is allocated, for every spelling of the length.

Before: ``generate(max_length=10**9)`` (the transformers and Lamorel spelling) ran past the window
until killed; a T5 with ``max_new_tokens=10**9`` allocated gigabytes before failing (its window was
unknown to the check).
"""

from __future__ import annotations

from typing import Any

import pytest

from llmgym.config import ModelConfig
from llmgym.errors import InputError
from llmgym.llm.local import LocalLLM
from llmgym.llm.tokenization import UNBOUNDED_DECODER_CAP


@pytest.mark.timeout(60)
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_max_length_is_checked_against_the_window(arch: str, request: pytest.FixtureRequest) -> None:
    model, tok = request.getfixturevalue(arch)
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    with pytest.raises(InputError, match=rf"context window of {llm.window} tokens"):
        llm.generate(["Hello there"], max_length=10**9)
    length = len(llm.encoder.encode_contexts(["Hello there"])[0])
    with pytest.raises(InputError, match=r"max_length=2 leaves no room"):
        llm.generate(["Hello there"] if length >= 2 else ["Hello there, friend"], max_length=2)
    out = llm.generate(["Hello there"], max_length=length + 3, do_sample=False, eos_token_id=-1)
    assert len(out[0][0].token_ids) == 3  # max_length counts the prompt, as in transformers


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spelling", ["max_new_tokens", "max_length"])
def test_t5_lengths_are_capped_before_allocating(tiny_t5: Any, spelling: str) -> None:
    model, tok = tiny_t5
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    with pytest.raises(
        InputError, match=rf"more than the {UNBOUNDED_DECODER_CAP} decoder positions allowed by llmgym's cap"
    ):
        llm.generate(["Hello there"], **{spelling: 10**9})
    old = tok.model_max_length
    tok.model_max_length = 8
    try:
        with pytest.raises(
            InputError, match=r"more than the 8 decoder positions allowed by the tokenizer's model_max_length"
        ):
            llm.generate(["Hello there"], **{spelling: 9 if spelling == "max_new_tokens" else 10})
        out = llm.generate(
            ["Hello there"], do_sample=False, **{spelling: 8 if spelling == "max_new_tokens" else 9}
        )
        assert 1 <= len(out[0][0].token_ids) <= 8
    finally:
        tok.model_max_length = old


@pytest.mark.parametrize("value", [0, -1, 2.5, "10"])
def test_max_length_must_be_a_positive_integer(value: Any) -> None:
    from llmgym.llm.validation import check_generation_kwargs

    with pytest.raises(InputError, match=r"max_length=.* expected an integer >= 1"):
        check_generation_kwargs({"max_length": value})
