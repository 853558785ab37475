"""Turn contexts and candidates into token ids: joint tokenization, special tokens, overflow."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from llmgym.errors import InputError
from llmgym.llm.layout import ItemSpec, candidate_start

__all__ = ["TextEncoder", "UNBOUNDED_DECODER_CAP", "decoder_limit", "model_window"]


def model_window(model_config: Any) -> int | None:
    """Maximum number of positions of a model (``None`` for relative-position models like T5)."""
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(model_config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


#: Decoder positions allowed for a seq2seq model with no window (relative positions, as T5) whose
#: tokenizer states no ``model_max_length`` either: refuses absurd lengths before memory is allocated.
UNBOUNDED_DECODER_CAP = 32768

#: ``model_max_length`` of a tokenizer that does not state one (transformers' ``VERY_LARGE_INTEGER``
#: is 1e30): values above this mean "unknown".
_UNSTATED_MODEL_MAX_LENGTH = 10**7


def decoder_limit(model_config: Any, tokenizer: Any) -> tuple[int, str]:
    """Most decoder positions of a seq2seq model, and where the limit comes from (for messages).

    The model's window (``max_position_embeddings`` / ``n_positions``) where it has one; else, for
    relative-position models such as T5, which have no hard window, the tokenizer's
    ``model_max_length`` (its ``tokenizer_config.json``; set ``tokenizer.model_max_length`` to
    change it); else :data:`UNBOUNDED_DECODER_CAP`.

    Args:
        model_config: The model's ``config``.
        tokenizer: Its tokenizer.

    Returns:
        ``(limit, source)``.
    """
    window = model_window(model_config)
    if window is not None:
        return window, "the model's window"
    stated = getattr(tokenizer, "model_max_length", None)
    if isinstance(stated, int) and 0 < stated <= _UNSTATED_MODEL_MAX_LENGTH:
        return stated, (
            "the tokenizer's model_max_length (the model has relative positions and no hard window; raise "
            "tokenizer.model_max_length to allow more)"
        )
    return UNBOUNDED_DECODER_CAP, (
        f"llmgym's cap of {UNBOUNDED_DECODER_CAP} for a model with no window whose tokenizer states no "
        "model_max_length (set tokenizer.model_max_length to allow more)"
    )


def _special_affixes(tokenizer: Any) -> tuple[list[int], list[int]]:
    """Token ids the tokenizer adds before and after a text (e.g. BOS, or T5's ``</s>``)."""
    text = "a b"
    plain = tokenizer(text, add_special_tokens=False)["input_ids"]
    full = tokenizer(text)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain) :])
    return [], []


class TextEncoder:
    """Tokenizes contexts and candidates for one model.

    Causal models score a candidate from the joint tokenization of context + candidate: its
    tokens are those whose character span ends past the end of the context, so a token straddling
    the boundary is scored as part of the candidate. Seq2seq models encode the context (with the
    tokenizer's special tokens) and decode the candidate tokenized on its own.

    Args:
        tokenizer: A fast (offset-capable) transformers tokenizer.
        is_seq2seq: Whether the model is an encoder-decoder.
        max_context_tokens: Longest context allowed, in tokens (``None``: no limit).
        overflow: ``"truncate_left"`` (drop the oldest text, with a warning) or ``"error"``.
        window: Model window; a joint sequence longer than this is an error.
    """

    def __init__(
        self,
        tokenizer: Any,
        is_seq2seq: bool,
        max_context_tokens: int | None,
        overflow: str,
        window: int | None,
    ) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise InputError(
                f"tokenizer={type(tokenizer).__name__} is a slow tokenizer without character offsets; "
                "load the fast one (AutoTokenizer.from_pretrained(..., use_fast=True))."
            )
        self.tokenizer = tokenizer
        self.is_seq2seq = is_seq2seq
        self.max_context_tokens = max_context_tokens
        self.overflow = overflow
        self.window = window
        self.prefix_ids, self.suffix_ids = _special_affixes(tokenizer)
        if not is_seq2seq:
            self.suffix_ids = []

    def _tokenize(self, texts: Sequence[str]) -> tuple[list[list[int]], list[list[tuple[int, int]]]]:
        if not texts:
            return [], []
        encoded = self.tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
        return encoded["input_ids"], [[tuple(o) for o in offs] for offs in encoded["offset_mapping"]]

    def fit_contexts(self, contexts: Sequence[str]) -> list[str]:
        """Apply the overflow policy to contexts longer than ``max_context_tokens``.

        Args:
            contexts: Context strings.

        Returns:
            The contexts, left-truncated at a token boundary where too long.

        Raises:
            InputError: With ``overflow="error"`` when a context is too long.
        """
        if self.max_context_tokens is None:
            return list(contexts)
        budget = self.max_context_tokens - len(self.prefix_ids) - len(self.suffix_ids)
        ids, offsets = self._tokenize(contexts)
        fitted = list(contexts)
        truncated: list[int] = []
        for index, (tokens, offs) in enumerate(zip(ids, offsets)):
            if len(tokens) <= budget:
                continue
            if self.overflow == "error":
                raise InputError(
                    f"contexts[{index}] has {len(tokens) + len(self.prefix_ids)} tokens, more than "
                    f"max_context_tokens={self.max_context_tokens}; shorten it, raise model.max_context_tokens, "
                    "or set model.context_overflow=truncate_left."
                )
            fitted[index] = contexts[index][offs[len(tokens) - budget][0] :]
            truncated.append(index)
        if truncated:
            warnings.warn(
                f"{len(truncated)} context(s) (indices {truncated[:8]}) exceeded max_context_tokens="
                f"{self.max_context_tokens} and were truncated from the left.",
                stacklevel=4,
            )
        return fitted

    def encode_contexts(self, contexts: Sequence[str]) -> list[list[int]]:
        """Token ids of each context alone, with the tokenizer's special tokens."""
        ids, _ = self._tokenize(contexts)
        return [self.prefix_ids + tokens + self.suffix_ids for tokens in ids]

    def encode_items(
        self, contexts: Sequence[str], candidates: Sequence[Sequence[str]] | None, add_eos: bool
    ) -> list[ItemSpec]:
        """Token ids of each context and its candidates.

        Args:
            contexts: Context strings (already fitted).
            candidates: Candidate strings per context, or ``None``.
            add_eos: Append the EOS token to every candidate.

        Returns:
            One :class:`ItemSpec` per context. For seq2seq models ``candidate_ids`` are the decoder
            tokens of each candidate and ``candidate_starts`` are 0.

        Raises:
            InputError: When a candidate has no token to condition on, or a joint sequence is longer
                than the model window.
        """
        context_ids = self.encode_contexts(contexts)
        groups = candidates if candidates is not None else [[] for _ in contexts]
        eos = [self.tokenizer.eos_token_id] if add_eos else []
        if add_eos and self.tokenizer.eos_token_id is None:
            raise InputError(
                "add_eos=True but the tokenizer has no eos_token; set tokenizer.eos_token or use add_eos=False."
            )
        flat_candidates = [c for group in groups for c in group]
        if self.is_seq2seq:
            flat_ids, _ = self._tokenize(flat_candidates)
            flat_ids = [ids + eos for ids in flat_ids]
            flat_starts = [0] * len(flat_ids)
        else:
            owners = [i for i, group in enumerate(groups) for _ in group]
            joint_ids, joint_offsets = self._tokenize(
                [contexts[i] + c for i, c in zip(owners, flat_candidates)]
            )
            flat_ids, flat_starts = [], []
            for owner, ids, offs in zip(owners, joint_ids, joint_offsets):
                start = candidate_start(offs, len(contexts[owner])) + len(self.prefix_ids)
                if start == 0:
                    raise InputError(
                        f"contexts[{owner}]={contexts[owner]!r} is empty or merges whole into the first token of "
                        "its candidate when tokenized together, and the tokenizer adds no BOS token, so that "
                        "token has nothing to be conditioned on; give a longer context or end it with a space "
                        "or punctuation."
                    )
                flat_ids.append(self.prefix_ids + ids + eos)
                flat_starts.append(start)
        items: list[ItemSpec] = []
        cursor = 0
        for index, group in enumerate(groups):
            group_ids = flat_ids[cursor : cursor + len(group)]
            starts = flat_starts[cursor : cursor + len(group)]
            cursor += len(group)
            self._check_window(index, [context_ids[index], *group_ids])
            items.append(ItemSpec(context_ids[index], group_ids, starts))
        return items

    def _check_window(self, index: int, sequences: Sequence[Sequence[int]]) -> None:
        if self.window is None:
            return
        longest = max(len(s) for s in sequences)
        if longest > self.window:
            raise InputError(
                f"contexts[{index}] with its candidates needs {longest} tokens, more than the model window "
                f"of {self.window}; set model.max_context_tokens below {self.window} minus the candidate length, "
                "or shorten the context."
            )
