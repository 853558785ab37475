"""The distribution generated actions are sampled from, and log-probs under it.

``generate(do_sample=True, temperature=T, top_k=k, top_p=p)`` draws each token from the model's
distribution rescaled by ``T``, cut to the ``k`` most likely tokens and then to the smallest set
whose mass reaches ``p`` (the nucleus), and renormalised. A policy-gradient update of such actions
must score them under that same distribution: :func:`sampled_logprobs` applies transformers' own
warpers, in the order ``generate`` applies them, to the logits of a forward pass. Before them come
the two processors that depend on what came before the token: the repetition penalty (the logit
of every token already in the prompt or the completion so far divided by the penalty, multiplied
when negative; :class:`RepetitionPenaltyProcessor` in ``generate``, which skips left padding) and
``min_new_tokens`` (EOS forbidden before that many tokens), given to :func:`sampled_logprobs` as
per-token masks (:func:`history_masks`).

NLPO (:mod:`llmgym.llm.masking`) further restricts every token to the top-p set of a mask policy
(``Sampling.mask_top_p``); the mask is applied first, as ``generate`` runs it before the warpers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

import torch
from transformers.generation.logits_process import LogitsProcessor

from llmgym.errors import InputError
from llmgym.llm.validation import check_generation_kwargs

__all__ = [
    "RepetitionPenaltyProcessor",
    "Sampling",
    "history_masks",
    "repetition_penalty",
    "sampled_logprobs",
]


@dataclass(frozen=True)
class Sampling:
    """Temperature, top-k and top-p of sampled generation.

    Attributes:
        temperature: Logits are divided by it (> 0).
        top_k: Keep the ``top_k`` most likely tokens (0: all of them).
        top_p: Keep the smallest set of most likely tokens whose probability reaches ``top_p``
            (in ``(0, 1]``; 1: all of them).
        mask_top_p: NLPO: keep only the smallest set of tokens whose probability under the LLM's
            mask policy (:class:`~llmgym.llm.masking.MaskPolicy`) reaches ``mask_top_p``, before
            the other cuts (in ``(0, 1]``; 1: no mask).
        repetition_penalty: Divide the logit of every token already seen (prompt and completion so
            far) by it, multiply it when negative (CTRL's penalty, transformers'; 1: none).
        min_new_tokens: EOS is forbidden before this many generated tokens (0: never).
        mask_min_tokens: NLPO: the mask keeps at least this many of the mask policy's most likely
            tokens (RL4LMs' ``min_tokens_to_keep``; 1: the top-p set alone).

    Raises:
        InputError: On a value out of range.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    mask_top_p: float = 1.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    mask_min_tokens: int = 1

    def __post_init__(self) -> None:
        names = ("temperature", "top_k", "top_p", "mask_top_p", "repetition_penalty", "min_new_tokens")
        unset = [name for name in names if getattr(self, name) is None]
        if unset:
            raise InputError(
                f"Sampling got None for {unset}; give a number (1.0, 0 and 1.0 leave the model's distribution)."
            )
        check_generation_kwargs(
            {
                "temperature": self.temperature,
                "top_k": self.top_k,
                "top_p": self.top_p,
                "mask_top_p": self.mask_top_p,
                "repetition_penalty": self.repetition_penalty,
            }
        )
        _check_count("min_new_tokens", self.min_new_tokens, 0, "0: EOS allowed from the start")
        _check_count("mask_min_tokens", self.mask_min_tokens, 1, "1: the mask's top-p set alone")
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_k", int(self.top_k))
        object.__setattr__(self, "top_p", float(self.top_p))
        object.__setattr__(self, "mask_top_p", float(self.mask_top_p))
        object.__setattr__(self, "repetition_penalty", float(self.repetition_penalty))

    @property
    def is_plain(self) -> bool:
        """Whether this is the model's own distribution (no rescaling, no truncation)."""
        return (
            self.temperature == 1.0
            and self.top_k == 0
            and self.top_p == 1.0
            and not self.is_masked
            and not self.depends_on_history
        )

    @property
    def depends_on_history(self) -> bool:
        """Whether a token's distribution depends on the tokens before it (repetition penalty, ``min_new_tokens``)."""
        return self.repetition_penalty != 1.0 or self.min_new_tokens > 0

    @property
    def is_masked(self) -> bool:
        """Whether tokens are restricted to the mask policy's top-p set (NLPO)."""
        return self.mask_top_p < 1.0

    def without_mask(self) -> Sampling:
        """The same temperature, top-k and top-p without the mask policy's restriction."""
        return replace(self, mask_top_p=1.0, mask_min_tokens=1)

    def generation_kwargs(self) -> dict[str, Any]:
        """The ``generate`` arguments that sample from this distribution (``mask_top_p`` when masked)."""
        kwargs: dict[str, Any] = {
            "do_sample": True,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
        }
        return {**kwargs, **self.mask_kwargs(), **self.history_kwargs()}

    def mask_kwargs(self) -> dict[str, Any]:
        """The ``generate`` arguments of NLPO's mask, greedy or sampled (none when unmasked)."""
        if not self.is_masked:
            return {}
        kwargs: dict[str, Any] = {"mask_top_p": self.mask_top_p}
        if self.mask_min_tokens > 1:
            kwargs["mask_min_tokens"] = self.mask_min_tokens
        return kwargs

    def history_kwargs(self) -> dict[str, Any]:
        """The ``generate`` arguments of the history-dependent processors, greedy or sampled (none by default)."""
        kwargs: dict[str, Any] = {}
        if self.repetition_penalty != 1.0:
            kwargs["repetition_penalty"] = self.repetition_penalty
        if self.min_new_tokens > 0:
            kwargs["min_new_tokens"] = self.min_new_tokens
        return kwargs


def _check_count(name: str, value: Any, minimum: int, meaning: str) -> None:
    """Raise ``InputError`` unless ``value`` is an int (not a bool) >= ``minimum``; ``meaning`` explains ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name}={value!r} must be an int >= {minimum} ({meaning}).")


def _truncate(scores: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Apply transformers' top-k and top-p warpers, in ``generate``'s order, to tempered ``scores`` (removed: -inf)."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    if sampling.top_k != 0:
        scores = TopKLogitsWarper(top_k=sampling.top_k)(None, scores)
    if sampling.top_p < 1.0:
        scores = TopPLogitsWarper(top_p=sampling.top_p)(None, scores)
    return scores


def repetition_penalty(scores: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """``scores [N, V]`` with every ``seen`` token's score divided by ``penalty`` (multiplied when negative).

    Transformers' ``RepetitionPenaltyLogitsProcessor`` arithmetic, on a bool ``seen [N, V]``.
    """
    penalised = torch.where(scores < 0, scores * penalty, scores / penalty)
    return torch.where(seen.to(scores.device), penalised, scores)


class RepetitionPenaltyProcessor(LogitsProcessor):
    """``generate``'s repetition penalty over each row's own tokens: its left padding is not "seen".

    Transformers' processor penalises every id of ``input_ids``, padding included, so a row's
    distribution would depend on the batch it was generated in; this one penalises the prompt's
    and the completion's tokens only, which :func:`history_masks` reproduces when re-scoring.
    No host sync per step.

    Args:
        penalty: The repetition penalty (> 0; 1: none).
        pads: Left padding of each of the ``R`` rows of ``generate``'s ``input_ids``.
    """

    def __init__(self, penalty: float, pads: list[int]) -> None:
        self.penalty = float(penalty)
        self.pads = list(pads)
        self._pads: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """``scores [R, V]`` with the row's seen tokens penalised."""
        if self._pads is None or self._pads.device != input_ids.device:
            self._pads = torch.tensor(self.pads, dtype=torch.long).to(input_ids.device, non_blocking=True)
        real = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :] >= self._pads[:, None]
        seen = torch.zeros(scores.shape, dtype=torch.long, device=scores.device)
        seen.scatter_reduce_(
            1, input_ids.to(scores.device), real.to(torch.long).to(scores.device), reduce="amax"
        )
        return repetition_penalty(scores, seen.bool(), self.penalty)


def history_masks(
    prompt_ids: list[int],
    completion_ids: list[int],
    vocab_size: int,
    sampling: Sampling,
    eos_ids: set[int],
    device: torch.device,
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """The per-token masks of the history-dependent processors for one completion of ``T`` tokens.

    Args:
        prompt_ids: The prompt's ids.
        completion_ids: The completion's ids.
        vocab_size: ``V``, the logits' last dimension.
        sampling: Its ``repetition_penalty`` and ``min_new_tokens``.
        eos_ids: The ids ``min_new_tokens`` forbids.
        device: Where the masks are built.

    Returns:
        ``(seen, keep)``: bool ``[T, V]`` tokens already in the prompt or the completion before each
        token (``None`` without a repetition penalty), and bool ``[T, V]`` tokens allowed (EOS not
        before ``min_new_tokens``; ``None`` when ``min_new_tokens`` is 0).
    """
    steps = len(completion_ids)
    seen = keep = None
    if sampling.repetition_penalty != 1.0:
        completion = torch.tensor(completion_ids, dtype=torch.long, device=device)
        prompt = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        prompt[torch.tensor(prompt_ids, dtype=torch.long, device=device)] = True
        hits = torch.zeros(steps, vocab_size, dtype=torch.int32, device=device)
        hits[torch.arange(steps, device=device), completion] = 1
        before = torch.cumsum(hits, 0) - hits  # tokens strictly before each position
        seen = (before > 0) | prompt[None, :]
    if sampling.min_new_tokens > 0:
        keep = torch.ones(steps, vocab_size, dtype=torch.bool, device=device)
        eos = [e for e in eos_ids if 0 <= e < vocab_size]
        if eos:
            early = min(steps, sampling.min_new_tokens)
            keep[:early, torch.tensor(eos, dtype=torch.long, device=device)] = False
    return seen, keep


def sampled_logprobs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    sampling: Sampling | None,
    keep: Optional[torch.Tensor] = None,
    seen: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Log-probs of target tokens under the sampling distribution of their logits.

    The target token is never cut by the mask, top-k or top-p: it was sampled, so it was kept
    when it was drawn, and at those weights the result equals the log-prob ``generate`` reports
    (``Generation.logprobs``). After an update moves it out of the kept set, it is scored against
    the kept tokens and itself, a finite value where the truncated distribution would give -inf.

    Args:
        logits: ``[N, V]`` logits of the positions that predict the targets.
        targets: ``[N]`` token ids.
        sampling: The distribution; ``None`` (or a plain one) is the model's own.
        keep: ``[N, V]`` bool tokens allowed before the warpers: the mask policy's
            (:func:`~llmgym.llm.masking.top_p_mask`) when ``sampling.mask_top_p < 1``, without EOS
            before ``min_new_tokens`` (:func:`history_masks`); ``None``: every token.
        seen: ``[N, V]`` bool tokens already in each position's prompt and completion so far, for
            ``sampling.repetition_penalty`` (:func:`history_masks`); ``None``: no penalty.

    Returns:
        ``[N]`` float32 log-probs (differentiable in ``logits``).
    """
    scores = logits.float()
    if (sampling is None or sampling.is_plain) and keep is None:
        return torch.log_softmax(scores, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
    sampling = sampling if sampling is not None else Sampling()
    if seen is not None and sampling.repetition_penalty != 1.0:
        scores = repetition_penalty(scores, seen, sampling.repetition_penalty)
    index = targets[:, None]
    tempered = scores / sampling.temperature  # generate's TemperatureLogitsWarper: the one place it applies
    masked = tempered if keep is None else tempered.masked_fill(~keep.to(scores.device), float("-inf"))
    warped = _truncate(masked, sampling).scatter(-1, index, tempered.gather(-1, index))
    return torch.log_softmax(warped, dim=-1).gather(-1, index).squeeze(-1)
