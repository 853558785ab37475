"""A generate request too big for the memory free is refused before anything is allocated."""

from __future__ import annotations

import pytest
import torch
from transformers import T5Config

from llmgym.config import ModelConfig
from llmgym.errors import InputError
from llmgym.llm.local import LocalLLM
from llmgym.llm.request_limits import available_bytes, check_generation_memory, generation_bytes
from llmgym.llm.tokenization import UNBOUNDED_DECODER_CAP


def test_t5_smalls_decoder_cap_of_one_row_is_8_gib_of_scores():
    # t5-small's config (no weights needed): 32,128 tokens, 6 decoder layers of 8 heads x 64
    config = T5Config(vocab_size=32128, d_model=512, d_kv=64, num_heads=8, num_layers=6, num_decoder_layers=6)
    needed = generation_bytes(
        config, rows=1, prompt_tokens=16, new_tokens=UNBOUNDED_DECODER_CAP, dtype_bytes=4
    )
    scores = 2 * UNBOUNDED_DECODER_CAP * 32128 * 4
    cache = (UNBOUNDED_DECODER_CAP + 1 + 16) * 6 * 2 * 512 * 4
    assert needed == scores + cache and needed > 8 * 2**30
    with pytest.raises(
        InputError, match=r"needs about 8\.\d GiB .*max_new_tokens=32,768.*more than the 4\.0 GiB free"
    ):
        check_generation_memory(needed, 4 * 2**30, 1, UNBOUNDED_DECODER_CAP, 1, "cpu")
    check_generation_memory(needed, 16 * 2**30, 1, UNBOUNDED_DECODER_CAP, 1, "cpu")  # fits: allowed


@pytest.mark.timeout(120)
def test_a_million_return_sequences_are_refused_before_allocation(tiny_llama):
    model, tok = tiny_llama
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    with pytest.raises(InputError, match=r"1,000,000 sequences.*num_return_sequences=1,000,000.*Fix: lower"):
        llm.generate(["Say:"], num_return_sequences=10**6, max_new_tokens=8, do_sample=True)
    assert len(llm.generate(["Say:"], num_return_sequences=2, max_new_tokens=2, do_sample=True)[0]) == 2


@pytest.mark.timeout(120)
def test_a_t5_request_at_the_decoder_cap_is_refused_before_allocation():
    from transformers import AutoModelForSeq2SeqLM

    from llmgym.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    config = T5Config(  # a real vocabulary's width (t5-small's), tiny layers
        vocab_size=32128,
        d_model=16,
        d_kv=4,
        d_ff=32,
        num_layers=1,
        num_heads=4,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    llm = LocalLLM(ModelConfig(name="tiny", model_type="seq2seq"), model=model, tokenizer=tok)
    free = available_bytes(torch.device("cpu"))
    rows = 1 + free // (2 * UNBOUNDED_DECODER_CAP * 32128 * 4)  # enough rows to pass the memory free
    with pytest.raises(InputError, match=r"max_new_tokens=32,768.*GiB free on cpu"):
        llm.generate(["Say:"], num_return_sequences=int(rows), max_new_tokens=UNBOUNDED_DECODER_CAP)
