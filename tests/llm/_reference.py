"""Plain transformers reference scores: one full forward per (context, candidate)."""

from __future__ import annotations

from typing import Any

import torch


def reference_score(model: Any, tokenizer: Any, context: str, candidate: str, add_eos: bool = False) -> float:
    """Log p(candidate | context) by a full forward on the joint text, log-softmax and gather."""
    with torch.no_grad():
        if getattr(model.config, "is_encoder_decoder", False):
            enc = tokenizer(context)["input_ids"]
            dec = tokenizer(candidate, add_special_tokens=False)["input_ids"] + (
                [tokenizer.eos_token_id] if add_eos else []
            )
            start = model.config.decoder_start_token_id
            logits = model(
                input_ids=torch.tensor([enc]), decoder_input_ids=torch.tensor([[start, *dec]])
            ).logits[0]
            logprobs = logits.float().log_softmax(-1)
            return float(sum(logprobs[i, t] for i, t in enumerate(dec)))
        with_special = tokenizer("a b")["input_ids"]
        plain = tokenizer("a b", add_special_tokens=False)["input_ids"]
        bos = with_special[: len(with_special) - len(plain)] if with_special[-len(plain) :] == plain else []
        enc = tokenizer(context + candidate, add_special_tokens=False, return_offsets_mapping=True)
        ids = bos + enc["input_ids"] + ([tokenizer.eos_token_id] if add_eos else [])
        ends = (
            [0] * len(bos)
            + [end for _, end in enc["offset_mapping"]]
            + [len(context) + len(candidate) + 1] * add_eos
        )
        first = next(i for i, end in enumerate(ends) if end > len(context))
        logits = model(torch.tensor([ids])).logits[0]
        logprobs = logits.float().log_softmax(-1)
        return float(sum(logprobs[i - 1, ids[i]] for i in range(first, len(ids))))
