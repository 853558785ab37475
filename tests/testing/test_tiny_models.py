import pytest
import torch

from llmgym.errors import InputError
from llmgym.testing import tiny_causal_lm, tiny_seq2seq_lm, tiny_tokenizer


def test_tokenizer_round_trips_any_text_with_offsets():
    tok = tiny_tokenizer()
    text = "Action: go forward ✓ héllo"
    enc = tok(text, return_offsets_mapping=True)
    assert tok.decode(enc["input_ids"]) == text
    assert enc["offset_mapping"][-1][1] == len(text)
    assert tok.eos_token == "<|im_end|>" and tok.padding_side == "left"
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_tiny_causal_is_seeded_and_small(arch):
    model_a, tok = tiny_causal_lm(arch, seed=1)
    model_b, _ = tiny_causal_lm(arch, seed=1)
    assert sum(p.numel() for p in model_a.parameters()) < 200_000
    ids = torch.tensor([tok("You see a red ball")["input_ids"]])
    assert torch.equal(model_a(ids).logits, model_b(ids).logits)


def test_tiny_seq2seq_runs():
    model, tok = tiny_seq2seq_lm()
    enc = tok(["hello"], return_tensors="pt")
    out = model(**enc, decoder_input_ids=torch.tensor([[tok.pad_token_id]]))
    assert out.logits.shape[-1] == len(tok)


def test_unknown_arch_is_clear():
    with pytest.raises(InputError, match="llama"):
        tiny_causal_lm("mamba")
