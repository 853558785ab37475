"""What a policy decides and hands to training: decisions, the typed actions an update stores, and re-scores.

An agent's step gives one :class:`Decision` per env (prompt, action, log-prob, value and the action
in the policy's terms: a :class:`CandidateChoice` or a :class:`TokenChoice`). An update stores the
decisions' actions typed (:class:`CandidateActions` or :class:`TokenActions`, ``Actions``), built by
the policy (:meth:`~llmgym.agents.policies.Policy.actions`), and re-scores them into
:class:`PolicyOutputs`; :class:`ReferenceKL` is their KL to the reference measured at rollout time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch
from torch import Tensor

from llmgym.errors import InputError

__all__ = [
    "Actions",
    "CandidateActions",
    "CandidateChoice",
    "Decision",
    "PolicyOutputs",
    "ReferenceKL",
    "TokenActions",
    "TokenChoice",
]


@dataclass(frozen=True)
class CandidateChoice:
    """One chosen candidate action.

    Attributes:
        candidates: The candidate strings as scored (:func:`~llmgym.agents.policies.scored_candidates`).
        index: The chosen one's index.
        log_probs: Every candidate's log-prob under the policy that chose (the run report's probability
            bars); empty when not recorded.

    Raises:
        InputError: ``index`` outside ``[0, len(candidates))``.
    """

    candidates: list[str]
    index: int
    log_probs: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 <= self.index < len(self.candidates):
            raise InputError(
                f"the chosen index {self.index} is outside [0, {len(self.candidates)}) for the candidates "
                f"{self.candidates[:5]}; pass the index of the chosen candidate."
            )


@dataclass(frozen=True)
class TokenChoice:
    """One generated token sequence (its log-prob, the tokens' sum, is the decision's).

    Attributes:
        token_ids: The sampled token ids (never re-tokenized text).
        token_log_probs: Their log-probs under the distribution they were drawn from (the run report
            shows them); empty when not recorded.
        decoder_prefix: An encoder-decoder model's decoder ids the tokens were generated after (the
            episode's earlier tokens, :attr:`~llmgym.agents.history.Prompt.decoder_ids`); empty otherwise.
        raw_log_probs: Their log-probs under the model's own distribution (no temperature, top-k,
            top-p, mask or penalty: ``Generation.raw_logprobs``), the KL's policy side; empty when not recorded.
        episode_tokens: Tokens generated earlier in the episode that ``min_new_tokens`` counts
            (:attr:`~llmgym.agents.history.Prompt.episode_tokens`, a token agent's decision index): EOS
            was banned for the first ``min_new_tokens - episode_tokens`` of the tokens, and the update's
            re-scoring bans it likewise (:meth:`TokenPolicy.eos_bans`).
    """

    token_ids: list[int]
    token_log_probs: list[float] = field(default_factory=list)
    decoder_prefix: list[int] = field(default_factory=list)
    raw_log_probs: list[float] = field(default_factory=list)
    episode_tokens: int = 0


@dataclass
class Decision:
    """What the agent decided for one env at one step, with everything training needs.

    Attributes:
        prompt: The prompt text sent to the LLM.
        prompt_ids: Its exact token ids.
        action: What is passed to ``env.step``.
        response: The action as text (the chosen candidate or the generated text).
        log_prob: Log-prob of the decision under the policy that took it.
        value: ``V(prompt)`` from the value head (0 when the LLM has none).
        choice: The action in the policy's terms: a :class:`CandidateChoice` or a :class:`TokenChoice`.
        parse_failed: The generated text could not be parsed and the fallback action was used.
    """

    prompt: str
    prompt_ids: list[int]
    action: Any
    response: str
    log_prob: float
    value: float
    choice: Union[CandidateChoice, TokenChoice]
    parse_failed: bool = False


@dataclass(frozen=True)
class CandidateActions:
    """``B`` chosen candidates, as an update stores them.

    Attributes:
        candidates: ``B`` candidate lists as scored.
        index: ``[B]`` int64 chosen indices.
    """

    candidates: list[list[str]]
    index: Tensor

    def __len__(self) -> int:
        return len(self.candidates)

    @property
    def candidate_sets(self) -> Optional[list[list[str]]]:
        """The candidates ``LLM.update`` splits with the contexts across servers."""
        return self.candidates

    @property
    def token_counts(self) -> list[int]:
        """Tokens of each action for the per-token KL: one per chosen candidate."""
        return [1] * len(self.candidates)

    def select(self, indices: Sequence[int]) -> CandidateActions:
        """The actions at ``indices`` (positions in this batch)."""
        return CandidateActions(
            [self.candidates[i] for i in indices],
            self.index[torch.as_tensor(list(indices), dtype=torch.long)],
        )


@dataclass(frozen=True)
class TokenActions:
    """``B`` generated token sequences, as an update stores them.

    Attributes:
        prompt_ids: ``B`` prompt token-id lists (the exact ids the sequences were generated after; an
            encoder-decoder's encoder ids).
        token_ids: ``B`` generated token-id lists.
        decoder_prefixes: ``B`` decoder prefixes of an encoder-decoder's sequences (fed before the
            tokens, not scored), or ``None`` when no sequence has one.
        episode_tokens: ``B`` counts of the tokens generated earlier in each sequence's episode
            (:attr:`TokenChoice.episode_tokens`, for ``min_new_tokens``), or ``None`` when all are 0.
    """

    prompt_ids: list[list[int]]
    token_ids: list[list[int]]
    decoder_prefixes: Optional[list[list[int]]] = None
    episode_tokens: Optional[list[int]] = None

    def __post_init__(self) -> None:
        if len(self.prompt_ids) != len(self.token_ids):
            raise InputError(
                f"TokenActions got {len(self.prompt_ids)} prompts and {len(self.token_ids)} token sequences; "
                "pass one prompt per sequence."
            )
        if self.decoder_prefixes is not None and len(self.decoder_prefixes) != len(self.token_ids):
            raise InputError(
                f"TokenActions got {len(self.decoder_prefixes)} decoder prefixes for {len(self.token_ids)} token "
                "sequences; pass one per sequence (empty where there is none), or None."
            )
        if self.episode_tokens is not None and len(self.episode_tokens) != len(self.token_ids):
            raise InputError(
                f"TokenActions got {len(self.episode_tokens)} episode token counts for {len(self.token_ids)} token "
                "sequences; pass one per sequence, or None."
            )

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def candidate_sets(self) -> Optional[list[list[str]]]:
        """``None``: generated actions have no candidates for ``LLM.update`` to split."""
        return None

    @property
    def token_counts(self) -> list[int]:
        """Generated tokens of each action."""
        return [len(ids) for ids in self.token_ids]

    def select(self, indices: Sequence[int]) -> TokenActions:
        """The actions at ``indices`` (positions in this batch)."""
        prefixes, counts = self.decoder_prefixes, self.episode_tokens
        return TokenActions(
            [self.prompt_ids[i] for i in indices],
            [self.token_ids[i] for i in indices],
            None if prefixes is None else [prefixes[i] for i in indices],
            None if counts is None else [counts[i] for i in indices],
        )


#: The typed actions of a batch: chosen candidates or generated token sequences.
Actions = Union[CandidateActions, TokenActions]


@dataclass(frozen=True)
class PolicyOutputs:
    """The current policy on a chunk of ``B`` stored actions, with gradients.

    Attributes:
        log_probs: ``[B]`` log-prob of each stored action (a generated action: its tokens' sum).
        entropy: ``[B]`` entropy of the action distribution (generated: mean token surprisal).
        values: ``[B]`` critic values (zeros when the LLM has no value head).
        ref_kl: ``[B]`` KL to the reference policy (zeros unless asked for).
        candidate_log_probs: ``[B, K]`` log-probs of every candidate (candidate policies; 0 on
            padding), or ``None`` for generated actions, whose full distribution is not kept.
        candidate_mask: Bool ``[B, K]``, True on real candidates (with ``candidate_log_probs``).
    """

    log_probs: Tensor
    entropy: Tensor
    values: Tensor
    ref_kl: Tensor
    candidate_log_probs: Optional[Tensor] = None
    candidate_mask: Optional[Tensor] = None

    def to(self, device: torch.device) -> PolicyOutputs:
        """The same outputs on ``device`` (graphs kept)."""
        log_p, mask = self.candidate_log_probs, self.candidate_mask
        return PolicyOutputs(
            self.log_probs.to(device),
            self.entropy.to(device),
            self.values.to(device),
            self.ref_kl.to(device),
            candidate_log_probs=log_p.to(device) if log_p is not None else None,
            candidate_mask=mask.to(device) if mask is not None else None,
        )

    def detach(self) -> PolicyOutputs:
        """The same outputs without their graphs."""
        log_p = self.candidate_log_probs
        return PolicyOutputs(
            self.log_probs.detach(),
            self.entropy.detach(),
            self.values.detach(),
            self.ref_kl.detach(),
            candidate_log_probs=log_p.detach() if log_p is not None else None,
            candidate_mask=self.candidate_mask,
        )


@dataclass(frozen=True)
class ReferenceKL:
    """The KL of ``B`` decisions' actions to the reference policy, measured at rollout time.

    Attributes:
        kl: ``[B]`` KL of each action, summed over its tokens (a candidate action: the exact KL
            over the candidates).
        tokens: ``[B]`` generated tokens of each action (a candidate action counts as one).
        reference_log_probs: ``[B]`` log-prob of each action under the reference (summed over its
            tokens): the reference's perplexity of the actions is ``exp(-sum / tokens.sum())``.
    """

    kl: Tensor
    tokens: Tensor
    reference_log_probs: Tensor
