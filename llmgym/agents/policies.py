"""The policy: the distribution an agent's actions are drawn from and re-scored under, written once.

A policy acts (:meth:`Policy.act`: draws one action per prompt and returns the :class:`Decision`
with its log-prob and value) and evaluates (:meth:`Policy.evaluate`: re-scores stored actions with
gradients, giving log-probs, entropies, values and the KL to the reference policy), as CleanRL's
``get_action_and_value`` and SB3's ``evaluate_actions`` do over one distribution. Two kinds:

* :class:`CandidatePolicy` (ScoringAgent): a softmax over the candidate actions' logits divided by
  the temperature; the logits are the candidates' log-probs under the LLM (summed or averaged over
  their tokens, ``normalize``) or, when the LLM has an :class:`~llmgym.llm.modules.ActionHead`, that
  head's logits (:func:`policy_logits_key`);
* :class:`TokenPolicy` (GenerativeAgent, TokenAgent): each token from the LLM's distribution under a
  :class:`~llmgym.llm.sampling.Sampling` (temperature, top-k, top-p, and NLPO's mask-policy top-p
  set); an action's log-prob is the sum of its tokens'.

The policy travels in every :class:`~llmgym.algorithms.batch.UpdateBatch`, so the distribution an
update trains is the one the actions were drawn from. The actions travel typed
(:class:`CandidateActions` or :class:`TokenActions`), built by the policy from the decisions.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Optional, Protocol, Union, runtime_checkable

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from llmgym.agents.history import Prompt
from llmgym.errors import ConfigError, InputError
from llmgym.llm.masking import check_mask_top_p
from llmgym.llm.modules import POLICY_KEY, SCORE_KEY, VALUE_KEY
from llmgym.llm.protocols import PolicyLLM, TrainableLLM
from llmgym.llm.sampling import Sampling

__all__ = [
    "Actions",
    "CandidateActions",
    "CandidateChoice",
    "CandidatePolicy",
    "Decision",
    "KLEstimator",
    "Policy",
    "PolicyOutputs",
    "ReferenceKL",
    "TokenActions",
    "TokenChoice",
    "TokenPolicy",
    "categorical_entropy",
    "categorical_kl",
    "categorical_log_prob",
    "decoder_state_values",
    "kl_estimate",
    "pad_candidate_scores",
    "policy_logits_key",
    "prompt_values",
    "scored_candidates",
]

KLEstimator = Literal["k1", "k2", "k3"]


# ---------------------------------------------------------------------- distributions
def kl_estimate(log_probs: Tensor, ref_log_probs: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """Per-sample estimate of ``KL(pi || pi_ref)`` from actions sampled from ``pi``.

    With ``log_ratio = log pi(a) - log pi_ref(a)`` (Schulman's estimators):
    ``k1 = log_ratio`` (unbiased, can be negative), ``k2 = log_ratio ** 2 / 2`` (biased, low variance),
    ``k3 = exp(-log_ratio) - 1 + log_ratio`` (unbiased, always >= 0). All are 0 where the two
    log-probs are equal.

    Args:
        log_probs: Log-probs of the sampled actions under the policy, ``[B]`` or ``[B, L]``.
        ref_log_probs: Log-probs of the same actions under the reference policy, same shape.
        estimator: ``"k1"``, ``"k2"`` or ``"k3"``.

    Returns:
        Element-wise estimates, shape of ``log_probs``.

    Raises:
        InputError: On a shape mismatch or an unknown estimator.
    """
    if tuple(log_probs.shape) != tuple(ref_log_probs.shape):
        raise InputError(
            f"ref_log_probs has shape {list(ref_log_probs.shape)} but log_probs has {list(log_probs.shape)}; "
            "pass tensors of one shape ([B] per transition or [B, L] per token)."
        )
    log_ratio = log_probs - ref_log_probs
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.expm1(-log_ratio) + log_ratio
    raise InputError(f"estimator={estimator!r} is not a KL estimator; use 'k1', 'k2' or 'k3'.")


def _masked_logits(logits: Tensor, mask: Optional[Tensor]) -> Tensor:
    if mask is not None:
        if tuple(mask.shape) != tuple(logits.shape):
            raise InputError(
                f"mask has shape {list(mask.shape)} but logits has {list(logits.shape)}; pass a mask of the logits' shape."
            )
        logits = logits.masked_fill(~mask.to(device=logits.device, dtype=torch.bool), float("-inf"))
    if logits.dim() == 0 or logits.shape[-1] == 0:
        raise InputError(f"logits has shape {list(logits.shape)}; expected [..., K] with K >= 1 candidates.")
    if bool((logits == float("-inf")).all(dim=-1).any()):
        raise InputError(
            "a row of logits has no finite entry (every candidate is padding or masked out); "
            "give every row at least one valid candidate."
        )
    return logits


def _log_softmax(logits: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """``log softmax(logits)`` over the last dimension, ``-inf`` where ``mask`` is False: the one softmax."""
    return torch.log_softmax(_masked_logits(logits, mask), dim=-1)


def categorical_entropy(logits: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Entropy of the categorical distribution ``softmax(logits)`` along the last dimension.

    Works on raw logits or on log-probs (they are renormalised), on candidate sets ``[B, K]`` padded
    with ``-inf`` and on vocabularies ``[B, L, V]``. Padded entries contribute 0.

    Args:
        logits: Unnormalised log-probabilities ``[..., K]``; ``-inf`` marks an invalid candidate.
        mask: Bool ``[..., K]``, True on valid candidates; False entries are treated as ``-inf``.

    Returns:
        Entropies ``[...]`` (``log K`` for a uniform distribution over ``K`` valid candidates).

    Raises:
        InputError: On a mask shape mismatch or a row without any valid candidate.
    """
    log_p = _log_softmax(logits, mask)
    safe_log_p = torch.where(torch.isfinite(log_p), log_p, torch.zeros_like(log_p))
    return -(log_p.exp() * safe_log_p).sum(dim=-1)


def categorical_log_prob(logits: Tensor, actions: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Log-probability of the chosen candidate under ``softmax(logits)``.

    Args:
        logits: Candidate logits (e.g. candidate log-likelihoods / temperature) ``[B, K]``, ``-inf``
            on padding.
        actions: Chosen candidate index per row, int ``[B]``.
        mask: Bool ``[B, K]``, True on valid candidates, or ``None``.

    Returns:
        ``log pi(actions)``, ``[B]``.

    Raises:
        InputError: On a shape mismatch, a row without valid candidates, or an index pointing outside
            the row's valid candidates.
    """
    log_p_all = _log_softmax(logits, mask)
    if actions.dim() != 1 or actions.shape[0] != log_p_all.shape[0] or log_p_all.dim() != 2:
        raise InputError(
            f"actions has shape {list(actions.shape)} and logits {list(logits.shape)}; expected actions [B] "
            "and logits [B, K]."
        )
    index = actions.to(device=log_p_all.device, dtype=torch.long)
    if bool(((index < 0) | (index >= log_p_all.shape[1])).any()):
        raise InputError(f"actions must lie in [0, {log_p_all.shape[1]}); got {index.tolist()}.")
    log_p = log_p_all.gather(1, index.unsqueeze(1)).squeeze(1)
    # -inf is a masked candidate; NaN (weights gone non-finite) flows on to the loss, which the update checks.
    if bool(torch.isneginf(log_p).any()):
        raise InputError(
            "an action index points at a padded or masked-out candidate; pick a valid candidate."
        )
    return log_p


def categorical_kl(log_p: Tensor, other_log_p: Tensor, mask: Tensor) -> Tensor:
    """``KL(p || q) = sum_k p_k (log p_k - log q_k)`` over the real candidates of each row.

    Args:
        log_p: ``[B, K]`` log-probs of ``p`` (anything on padding).
        other_log_p: ``[B, K]`` log-probs of ``q``.
        mask: Bool ``[B, K]``, True on real candidates.

    Returns:
        ``[B]`` KLs.
    """
    terms = log_p.exp() * (log_p - other_log_p.to(log_p.device))
    return torch.where(mask, terms, torch.zeros_like(terms)).sum(-1)


def pad_candidate_scores(
    scores: Sequence[Tensor], temperature: float = 1.0, padding_value: float = float("-inf")
) -> tuple[Tensor, Tensor]:
    """Stack per-context candidate scores of different lengths (``LLM.score`` output) into logits.

    Args:
        scores: One 1-D tensor ``[k_i]`` per context (log p(candidate | context)).
        temperature: The policy is ``softmax(score / temperature)``; must be > 0.
        padding_value: Value of the padded entries (``-inf``: zero probability).

    Returns:
        ``(logits, mask)``: ``logits [B, K]`` with ``K = max k_i`` (scores divided by the temperature,
        padding at the end of each row) and bool ``mask [B, K]``, True on real candidates.

    Raises:
        InputError: On an empty list, a non 1-D or empty score tensor, or ``temperature <= 0``.
    """
    if not temperature > 0:
        raise InputError(f"temperature={temperature!r} must be > 0; use 1.0 for the plain softmax.")
    if len(scores) == 0:
        raise InputError("scores is empty; pass one tensor of candidate scores per context.")
    for i, row in enumerate(scores):
        if not isinstance(row, Tensor) or row.dim() != 1 or row.numel() == 0:
            shape = list(row.shape) if isinstance(row, Tensor) else type(row).__name__
            raise InputError(f"scores[{i}] is {shape}; each entry must be a non-empty 1-D tensor [k_i].")
    first = scores[0]
    rows = [row.to(device=first.device, dtype=first.dtype) / temperature for row in scores]
    logits = pad_sequence(rows, batch_first=True, padding_value=padding_value)
    lengths = torch.tensor([row.shape[0] for row in rows], device=first.device)
    mask = torch.arange(logits.shape[1], device=first.device).unsqueeze(0) < lengths.unsqueeze(1)
    return logits, mask


def policy_logits_key(module_function_keys: Sequence[str]) -> str:
    """The ``LLM.forward`` output the candidate policy is a softmax of.

    ``"policy"`` (the :class:`~llmgym.llm.modules.ActionHead`'s logits) when the LLM has that
    module function, else ``"score"`` (the candidates' log-probs).
    """
    return POLICY_KEY if POLICY_KEY in module_function_keys else SCORE_KEY


def scored_candidates(prompt: str, candidates: list[str]) -> list[str]:
    """The candidate strings as scored after ``prompt``.

    A space is put between a prompt that does not end in whitespace and a candidate that does not
    start with one, so ``"Action:"`` is followed by ``" go forward"`` as a model would write it.
    """
    if not prompt or prompt[-1].isspace():
        return list(candidates)
    return [c if c[:1].isspace() else " " + c for c in candidates]


# ---------------------------------------------------------------------- actions
@dataclass(frozen=True)
class CandidateChoice:
    """One chosen candidate action.

    Attributes:
        candidates: The candidate strings as scored (:func:`scored_candidates`).
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
    """

    token_ids: list[int]
    token_log_probs: list[float] = field(default_factory=list)
    decoder_prefix: list[int] = field(default_factory=list)
    raw_log_probs: list[float] = field(default_factory=list)


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
    """

    prompt_ids: list[list[int]]
    token_ids: list[list[int]]
    decoder_prefixes: Optional[list[list[int]]] = None

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
        prefixes = self.decoder_prefixes
        return TokenActions(
            [self.prompt_ids[i] for i in indices],
            [self.token_ids[i] for i in indices],
            None if prefixes is None else [prefixes[i] for i in indices],
        )


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


def _segment_sums(values: Tensor, lengths: Sequence[int]) -> Tensor:
    """``[B]`` sums of consecutive runs of ``lengths[b]`` entries of the flat ``values [N]``."""
    counts = torch.as_tensor(list(lengths), dtype=torch.long, device=values.device)
    segments = torch.repeat_interleave(torch.arange(len(counts), device=values.device), counts)
    return torch.zeros(len(counts), dtype=values.dtype, device=values.device).index_add_(0, segments, values)


# ---------------------------------------------------------------------- policies
@runtime_checkable
class Policy(Protocol):
    """The distribution an agent's actions are drawn from and re-scored under (picklable: it travels)."""

    def act(
        self,
        llm: PolicyLLM,
        prompts: Sequence[Prompt],
        candidates: Sequence[Optional[list[str]]],
        *,
        greedy: bool,
        generator: torch.Generator,
    ) -> list[Decision]:
        """Draw one action per prompt (or take the most likely with ``greedy``).

        Returns:
            One decision per prompt with its log-prob and value; its ``action`` and ``response``
            are the action's text (an agent may parse it into the env's action).
        """
        ...

    def actions(self, decisions: Sequence[Decision]) -> Actions:
        """The decisions' actions as an update stores them (all drawn from this kind of policy)."""
        ...

    def evaluate(
        self,
        llm: TrainableLLM,
        contexts: Sequence[str],
        actions: Actions,
        *,
        require_grad: bool = True,
        with_reference: bool = False,
        kl_estimator: KLEstimator = "k1",
    ) -> PolicyOutputs:
        """Re-score stored actions: ``[B]`` log-probs, entropies, values and (``with_reference``) KL to the reference.

        Args:
            llm: The in-process LLM being trained.
            contexts: ``B`` prompts the actions were taken after.
            actions: The ``B`` actions.
            require_grad: Keep the autograd graph.
            with_reference: Compute ``ref_kl`` (the KL to the LLM's reference: its adapter disabled
                or its frozen copy).
            kl_estimator: Per-token estimate of generated tokens' KL (:func:`kl_estimate`).
        """
        ...

    def kl(self, old: PolicyOutputs, new: PolicyOutputs) -> Tensor:
        """``[B]`` ``KL(pi_old || pi_new)`` on the same samples (``new`` may carry gradients)."""
        ...

    def reference_kl(
        self, llm: PolicyLLM, decisions: Sequence[Decision], estimator: KLEstimator = "k1"
    ) -> ReferenceKL:
        """The KL of the decisions' actions to the reference policy, in one batched reference pass.

        Args:
            llm: The LLM that took the decisions (the reference is its adapter disabled or its frozen copy).
            decisions: ``B`` decisions drawn from this policy.
            estimator: Per-token estimate of generated tokens' KL (:func:`kl_estimate`).
        """
        ...

    def masked(self, top_p: float, min_tokens: int = 1) -> Policy:
        """The policy restricted to the top-p set (at least ``min_tokens``) of the LLM's mask policy at every token (NLPO)."""
        ...


def prompt_values(llm: PolicyLLM, prompts: Sequence[str]) -> list[float]:
    """``V(prompt)`` of each prompt from the LLM's ``"value"`` head (0 without one)."""
    if VALUE_KEY not in llm.module_function_keys:
        return [0.0] * len(prompts)
    outputs = llm.forward([VALUE_KEY], contexts=list(prompts))
    return [float(torch.as_tensor(o[VALUE_KEY]).reshape(-1)[0]) for o in outputs]


def decoder_state_values(
    llm: PolicyLLM, prompt_ids: Sequence[Sequence[int]], prefixes: Sequence[Sequence[int]]
) -> list[float]:
    """``V`` of encoder-decoder states: the decoder's state after each prefix, from the LLM's ``"value"`` head (0 without one).

    The state that predicts the token after ``prefixes[i]``: the value :meth:`TokenPolicy.evaluate`
    re-computes for a token generated there. The decoder is causal, so the token scored after
    the prefix (EOS) does not change it.

    Args:
        llm: An encoder-decoder LLM.
        prompt_ids: ``B`` encoder token-id lists.
        prefixes: ``B`` decoder prefixes (empty: the state at the decoder's start token).
    """
    if VALUE_KEY not in llm.module_function_keys:
        return [0.0] * len(prompt_ids)
    probe = llm.tokenizer.eos_token_id if llm.tokenizer.eos_token_id is not None else 0
    outputs = llm.token_logprobs(
        [list(p) for p in prompt_ids],
        [[probe] for _ in prompt_ids],
        keys=[VALUE_KEY],
        require_grad=False,
        decoder_prefixes=[list(p) for p in prefixes],
    )
    return [float(torch.as_tensor(o[VALUE_KEY]).reshape(-1)[0]) for o in outputs]


def _values(llm: TrainableLLM, outputs: Sequence[dict[str, Any]], like: Tensor) -> Tensor:
    if VALUE_KEY not in llm.module_function_keys:
        return torch.zeros_like(like)
    return torch.stack([torch.as_tensor(o[VALUE_KEY]).reshape(-1)[0] for o in outputs])


@dataclass(frozen=True)
class CandidatePolicy:
    """``pi(a | s) = softmax(logits(s) / temperature)[a]`` over the candidate actions.

    Attributes:
        temperature: Softmax temperature (> 0).
        normalize: How a candidate's token log-probs make its score, ``"sum"`` or ``"mean"``
            (unused with an action head).

    Raises:
        InputError: ``temperature <= 0``.
    """

    temperature: float = 1.0
    normalize: str = "sum"

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise InputError(
                f"temperature={self.temperature!r} must be > 0 (agent.temperature); 1.0 is the plain softmax."
            )

    def log_probs(self, scores: Tensor) -> Tensor:
        """``[k]`` log-probs of the candidates with logits ``scores [k]``: ``log_softmax(scores / T)``."""
        return _log_softmax(scores.float() / self.temperature)

    def act(
        self,
        llm: PolicyLLM,
        prompts: Sequence[Prompt],
        candidates: Sequence[Optional[list[str]]],
        *,
        greedy: bool,
        generator: torch.Generator,
    ) -> list[Decision]:
        """Sample a candidate per prompt from one forward pass (greedy: the most likely).

        Raises:
            InputError: A prompt has no candidate.
        """
        for i, options in enumerate(candidates):
            if not options:
                raise InputError(
                    f"env {i} offers no candidate actions; ScoringAgent needs info['valid_actions'] from the env "
                    "or an overridden get_candidates(observation, info)."
                )
        texts = [p.text for p in prompts]
        options_per_env = [list(c or []) for c in candidates]
        groups = [scored_candidates(text, options) for text, options in zip(texts, options_per_env)]
        module_keys = llm.module_function_keys
        logits_key = policy_logits_key(module_keys)
        keys = [logits_key, VALUE_KEY] if VALUE_KEY in module_keys else [logits_key]
        outputs = llm.forward(keys, contexts=texts, candidates=groups, normalize=self.normalize)
        decisions = []
        for prompt, options, scored, out in zip(prompts, options_per_env, groups, outputs):
            log_probs = self.log_probs(torch.as_tensor(out[logits_key]))
            if greedy:
                index = int(torch.argmax(log_probs))
            else:
                index = int(torch.multinomial(log_probs.exp(), 1, generator=generator))
            value = float(torch.as_tensor(out[VALUE_KEY]).reshape(-1)[0]) if VALUE_KEY in out else 0.0
            decisions.append(
                Decision(
                    prompt=prompt.text,
                    prompt_ids=prompt.token_ids,
                    action=options[index],
                    response=options[index],
                    log_prob=float(log_probs[index]),
                    value=value,
                    choice=CandidateChoice(scored, index, log_probs.tolist()),
                )
            )
        return decisions

    def actions(self, decisions: Sequence[Decision]) -> CandidateActions:
        """The chosen candidates of ``decisions``.

        Raises:
            InputError: A decision is not a candidate choice.
        """
        choices = [d.choice for d in decisions]
        wrong = [i for i, c in enumerate(choices) if not isinstance(c, CandidateChoice)]
        if wrong:
            raise InputError(
                f"decisions {wrong[:5]} generated tokens but the policy chooses candidates; train with the agent's own "
                "policy (agent.policy)."
            )
        chosen = [c for c in choices if isinstance(c, CandidateChoice)]
        return CandidateActions(
            [c.candidates for c in chosen], torch.tensor([c.index for c in chosen], dtype=torch.long)
        )

    def _logits(
        self,
        llm: TrainableLLM,
        keys: list[str],
        contexts: list[str],
        actions: CandidateActions,
        require_grad: bool,
    ) -> tuple[list[dict[str, Any]], Tensor, Tensor]:
        outputs = llm.forward(
            keys, contexts, actions.candidates, require_grad=require_grad, normalize=self.normalize
        )
        logits, mask = pad_candidate_scores([o[keys[0]] for o in outputs], temperature=self.temperature)
        return outputs, logits, mask

    def evaluate(
        self,
        llm: TrainableLLM,
        contexts: Sequence[str],
        actions: Actions,
        *,
        require_grad: bool = True,
        with_reference: bool = False,
        kl_estimator: KLEstimator = "k1",
    ) -> PolicyOutputs:
        """Re-score chosen candidates (see :meth:`Policy.evaluate`); the outputs carry every candidate's log-prob.

        ``ref_kl`` is the exact KL over the candidates (``kl_estimator`` does not apply).

        Raises:
            InputError: ``actions`` are generated tokens, or ``with_reference`` with an action head
                (the reference is the LLM's own scoring policy, which the head replaces).
        """
        del kl_estimator
        if not isinstance(actions, CandidateActions):
            raise InputError(
                "CandidatePolicy.evaluate got generated token actions; it re-scores chosen candidates."
            )
        module_keys = llm.module_function_keys
        logits_key = policy_logits_key(module_keys)
        keys = [logits_key, VALUE_KEY] if VALUE_KEY in module_keys else [logits_key]
        outputs, logits, mask = self._logits(llm, keys, list(contexts), actions, require_grad)
        log_probs = categorical_log_prob(logits, actions.index.to(logits.device), mask)
        entropy = categorical_entropy(logits, mask)
        log_p = torch.where(mask, _log_softmax(logits), torch.zeros_like(logits))
        ref_kl = torch.zeros_like(log_probs)
        if with_reference:
            if logits_key == POLICY_KEY:
                raise InputError(
                    "A KL penalty (algorithm.kl.coef > 0) measures the KL to the LLM's own scoring policy, which an "
                    "action head replaces; set agent.action_head=false or algorithm.kl.coef=0."
                )
            with torch.no_grad(), llm.reference():
                _, ref_logits, _ = self._logits(llm, [SCORE_KEY], list(contexts), actions, False)
            ref_kl = categorical_kl(log_p, _log_softmax(ref_logits.to(logits.device)), mask)
        values = _values(llm, outputs, log_probs)
        return PolicyOutputs(
            log_probs, entropy, values, ref_kl, candidate_log_probs=log_p, candidate_mask=mask
        )

    def kl(self, old: PolicyOutputs, new: PolicyOutputs) -> Tensor:
        """``[B]`` exact ``KL(pi_old || pi_new)`` over the candidates.

        Raises:
            InputError: The outputs carry no candidate distributions.
        """
        if old.candidate_log_probs is None or new.candidate_log_probs is None or old.candidate_mask is None:
            raise InputError(
                "CandidatePolicy.kl needs outputs of CandidatePolicy.evaluate (with candidate_log_probs)."
            )
        return categorical_kl(old.candidate_log_probs.detach(), new.candidate_log_probs, old.candidate_mask)

    def reference_kl(
        self, llm: PolicyLLM, decisions: Sequence[Decision], estimator: KLEstimator = "k1"
    ) -> ReferenceKL:
        """Exact ``KL(pi || pi_ref)`` over each decision's candidates, from one forward of the reference.

        ``pi`` is the distribution the candidate was chosen from (its recorded log-probs), ``pi_ref``
        the softmax of the reference's candidate scores at the same temperature.

        Raises:
            InputError: A decision is not a candidate choice or did not record its candidates' log-probs,
                or the LLM has an action head (its reference is the LLM's own scoring policy, which the
                head replaces).
        """
        del estimator
        actions = self.actions(decisions)
        if POLICY_KEY in llm.module_function_keys:
            raise InputError(
                "A KL penalty (algorithm.kl.coef > 0) measures the KL to the LLM's own scoring policy, which an "
                "action head replaces; set agent.action_head=false or algorithm.kl.coef=0."
            )
        recorded = [d.choice.log_probs for d in decisions if isinstance(d.choice, CandidateChoice)]
        if any(len(lp) != len(c) for lp, c in zip(recorded, actions.candidates)):
            raise InputError(
                "CandidatePolicy.reference_kl needs decisions that recorded every candidate's log-prob (act)."
            )
        outputs = llm.forward(
            [SCORE_KEY],
            [d.prompt for d in decisions],
            actions.candidates,
            normalize=self.normalize,
            reference=True,
        )
        ref_logits, mask = pad_candidate_scores([o[SCORE_KEY] for o in outputs], temperature=self.temperature)
        log_p, _ = pad_candidate_scores([torch.tensor(lp) for lp in recorded], padding_value=0.0)
        ref_log_p = _log_softmax(ref_logits, mask)
        kl = categorical_kl(log_p.to(ref_logits.device), ref_log_p, mask)
        chosen = ref_log_p.gather(1, actions.index.to(ref_log_p.device).unsqueeze(1)).squeeze(1)
        return ReferenceKL(
            kl.float().cpu(), torch.ones(len(decisions), dtype=torch.long), chosen.float().cpu()
        )

    def masked(self, top_p: float, min_tokens: int = 1) -> Policy:
        """Refused: a candidate policy generates no tokens to mask.

        Raises:
            ConfigError: Always.
        """
        raise ConfigError(
            "ScoringAgent chooses among candidate actions and generates no tokens, so NLPO's token mask cannot apply; "
            "use agent.type=generative or agent.type=token with algorithm.name=nlpo, or train this agent with "
            "algorithm.name=ppo."
        )


@dataclass(frozen=True)
class TokenPolicy:
    """Each token from the LLM's distribution under ``sampling``; an action's log-prob is its tokens' sum.

    Attributes:
        sampling: Temperature, top-k, top-p and NLPO's ``mask_top_p``.
        max_new_tokens: Tokens generated per action at most.
        special_tokens: The response text keeps special tokens (EOS is sent to the env as its
            string: :class:`~llmgym.agents.generative.TokenAgent`).
        stop: Generation ends after the token that completes one of these strings (transformers'
            ``stop_strings``; the action keeps it). Not a change of distribution: the stored tokens
            are re-scored as they are.
    """

    sampling: Sampling = Sampling()
    max_new_tokens: int = 32
    special_tokens: bool = False
    stop: tuple[str, ...] = ()

    def generation_kwargs(self, greedy: bool) -> dict[str, Any]:
        """Keyword arguments of ``llm.generate`` for one step (greedy: the argmax at every token).

        Greedy keeps the repetition penalty and ``min_new_tokens`` (they shape the argmax too) and the stop strings.
        """
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens}
        if greedy:
            kwargs.update(do_sample=False, **self.sampling.history_kwargs())
        else:
            kwargs.update(self.sampling.generation_kwargs())
        if self.stop:
            kwargs["stop_strings"] = list(self.stop)
        return kwargs

    def act(
        self,
        llm: PolicyLLM,
        prompts: Sequence[Prompt],
        candidates: Sequence[Optional[list[str]]],
        *,
        greedy: bool,
        generator: torch.Generator,
    ) -> list[Decision]:
        """Generate a response per prompt; its log-prob is the sum of its tokens' under :attr:`sampling`.

        An encoder-decoder prompt with :attr:`~llmgym.agents.history.Prompt.decoder_ids` is continued
        after them (its text goes to the encoder), and its value is the decoder's state after them.
        """
        texts = [p.text for p in prompts]
        prefixes = [list(p.decoder_ids) for p in prompts]
        kwargs = self.generation_kwargs(greedy)
        if any(prefixes):
            kwargs["decoder_prefixes"] = prefixes
        generations = llm.generate(texts, **kwargs)
        if any(prefixes):
            values = decoder_state_values(llm, [gens[0].prompt_ids for gens in generations], prefixes)
        else:
            values = prompt_values(llm, texts)
        decisions = []
        for prompt, gens, value, prefix in zip(prompts, generations, values, prefixes):
            gen = gens[0]
            text = (
                llm.tokenizer.decode(gen.token_ids, skip_special_tokens=False)
                if self.special_tokens
                else gen.text
            )
            decisions.append(
                Decision(
                    prompt=prompt.text,
                    prompt_ids=list(gen.prompt_ids),
                    action=text,
                    response=str(text),
                    log_prob=float(gen.logprobs.sum()),
                    value=value,
                    choice=TokenChoice(
                        list(gen.token_ids), gen.logprobs.tolist(), prefix, gen.raw_logprobs.tolist()
                    ),
                )
            )
        return decisions

    def actions(self, decisions: Sequence[Decision]) -> TokenActions:
        """The generated token sequences of ``decisions``, with their prompts' ids.

        Raises:
            InputError: A decision is a candidate choice.
        """
        wrong = [i for i, d in enumerate(decisions) if not isinstance(d.choice, TokenChoice)]
        if wrong:
            raise InputError(
                f"decisions {wrong[:5]} chose candidates but the policy generates tokens; train with the agent's own "
                "policy (agent.policy)."
            )
        choices = [d.choice for d in decisions if isinstance(d.choice, TokenChoice)]
        prefixes = [list(c.decoder_prefix) for c in choices]
        return TokenActions(
            [list(d.prompt_ids) for d in decisions],
            [list(c.token_ids) for c in choices],
            prefixes if any(prefixes) else None,
        )

    def evaluate(
        self,
        llm: TrainableLLM,
        contexts: Sequence[str],
        actions: Actions,
        *,
        require_grad: bool = True,
        with_reference: bool = False,
        kl_estimator: KLEstimator = "k1",
    ) -> PolicyOutputs:
        """Re-score generated sequences on their stored ids (see :meth:`Policy.evaluate`).

        The log-probs (the PPO ratio's) are under :attr:`sampling`, cut as the tokens were drawn. The
        reference KL compares the policy and the reference under the same uncut distribution
        (:meth:`reference_sampling`), as RL4LMs measures it: a second policy pass scores the tokens
        so when :attr:`sampling` cuts (top-k, top-p, NLPO's mask, a penalty), so that the KL is 0
        while the policy is the reference. ``contexts`` is unused: the prompts' exact ids travel with the actions.

        Raises:
            InputError: ``actions`` are chosen candidates.
        """
        del contexts
        if not isinstance(actions, TokenActions):
            raise InputError(
                "TokenPolicy.evaluate got chosen candidates; it re-scores generated token sequences."
            )
        has_value = VALUE_KEY in llm.module_function_keys
        prefixed: dict[str, Any] = (
            {} if actions.decoder_prefixes is None else {"decoder_prefixes": actions.decoder_prefixes}
        )
        outputs = llm.token_logprobs(
            actions.prompt_ids,
            actions.token_ids,
            keys=[VALUE_KEY] if has_value else [],
            require_grad=require_grad,
            sampling=self.sampling,
            **prefixed,
        )
        token_lp = [o["logprobs"] for o in outputs]
        log_probs = torch.stack([lp.sum() for lp in token_lp])
        entropy = torch.stack([-lp.mean() if lp.numel() else lp.new_zeros(()) for lp in token_lp])
        ref_kl = torch.zeros_like(log_probs)
        if with_reference:
            kl_lp = token_lp
            if self.sampling != self.reference_sampling():  # the KL's policy side, uncut
                uncut = llm.token_logprobs(
                    actions.prompt_ids,
                    actions.token_ids,
                    require_grad=require_grad,
                    sampling=self.reference_sampling(),
                    **prefixed,
                )
                kl_lp = [o["logprobs"] for o in uncut]
            with torch.no_grad(), llm.reference():
                ref = llm.token_logprobs(
                    actions.prompt_ids,
                    actions.token_ids,
                    require_grad=False,
                    sampling=self.reference_sampling(),
                    **prefixed,
                )
            flat = torch.cat(kl_lp)
            ref_flat = torch.cat([r["logprobs"] for r in ref]).to(flat.device)
            ref_kl = _segment_sums(kl_estimate(flat, ref_flat, kl_estimator), [lp.numel() for lp in token_lp])
        return PolicyOutputs(log_probs, entropy, _values(llm, outputs, log_probs), ref_kl)

    def kl(self, old: PolicyOutputs, new: PolicyOutputs) -> Tensor:
        """``[B]`` Schulman's ``k3`` estimate of ``KL(pi_old || pi_new)`` on the sampled sequences.

        ``pi_new/pi_old - 1 - log(pi_new/pi_old)``: unbiased and >= 0 (the token distributions are not kept).
        """
        return kl_estimate(old.log_probs.detach(), new.log_probs, "k3")

    def reference_sampling(self) -> Sampling:
        """The KL's distribution: the model at :attr:`sampling`'s temperature, without top-k, top-p, mask or penalty.

        Uncut, so every sampled token has a finite log-prob under it (TRL scores its reference
        likewise); both sides of the reference KL are scored under it (RL4LMs' raw log-probs at temperature 1).
        """
        return Sampling(temperature=self.sampling.temperature)

    def reference_kl(
        self, llm: PolicyLLM, decisions: Sequence[Decision], estimator: KLEstimator = "k1"
    ) -> ReferenceKL:
        """Per-token KL estimates of the generated tokens to the reference, summed per decision.

        One batched ``token_logprobs`` pass of the reference (``reference=True``) on the stored ids.
        Both sides are under :meth:`reference_sampling` (uncut, as RL4LMs' ``raw_log_probs``): the
        policy's side is the log-probs recorded when the tokens were drawn when :attr:`sampling`
        cuts nothing, their recorded raw log-probs at temperature 1, else a policy pass (no gradients).

        Raises:
            InputError: A decision is not a token choice or did not record its tokens' log-probs.
        """
        actions = self.actions(decisions)
        recorded = [d.choice.token_log_probs for d in decisions if isinstance(d.choice, TokenChoice)]
        lengths = [len(ids) for ids in actions.token_ids]
        if any(len(lp) != n for lp, n in zip(recorded, lengths)):
            raise InputError(
                "TokenPolicy.reference_kl needs decisions that recorded their tokens' log-probs (act)."
            )
        kept = [i for i, n in enumerate(lengths) if n > 0]
        uncut = self.reference_sampling()
        raw = [d.choice.raw_log_probs for d in decisions if isinstance(d.choice, TokenChoice)]
        rescore = self.sampling != uncut  # the recorded log-probs are cut: the KL's policy side is not them
        if rescore and uncut == Sampling() and all(len(r) == n for r, n in zip(raw, lengths)):
            recorded, rescore = raw, False
        sampled = torch.tensor(list(itertools.chain.from_iterable(recorded)), dtype=torch.float32)
        ref_flat = sampled.clone()
        if kept:
            prefixes = actions.decoder_prefixes
            prefixed: dict[str, Any] = (
                {} if prefixes is None else {"decoder_prefixes": [prefixes[i] for i in kept]}
            )
            if rescore:
                policy_side = llm.token_logprobs(
                    [actions.prompt_ids[i] for i in kept],
                    [actions.token_ids[i] for i in kept],
                    require_grad=False,
                    sampling=uncut,
                    **prefixed,
                )
                sampled = torch.cat([r["logprobs"] for r in policy_side]).float().cpu()
            ref = llm.token_logprobs(
                [actions.prompt_ids[i] for i in kept],
                [actions.token_ids[i] for i in kept],
                require_grad=False,
                sampling=self.reference_sampling(),
                reference=True,
                **prefixed,
            )
            ref_flat = torch.cat([r["logprobs"] for r in ref]).float().cpu()
        kl = _segment_sums(kl_estimate(sampled, ref_flat, estimator), lengths)
        return ReferenceKL(kl, torch.as_tensor(lengths, dtype=torch.long), _segment_sums(ref_flat, lengths))

    def masked(self, top_p: float, min_tokens: int = 1) -> TokenPolicy:
        """The same policy with every token restricted to the mask policy's top-p set (NLPO).

        Args:
            top_p: The mask's mass.
            min_tokens: The mask policy's most likely tokens kept whatever their mass (RL4LMs' ``min_tokens_to_keep``).

        Raises:
            InputError: ``top_p`` outside ``(0, 1]`` or ``min_tokens`` below 1.
        """
        return replace(
            self,
            sampling=replace(self.sampling, mask_top_p=check_mask_top_p(top_p), mask_min_tokens=min_tokens),
        )
