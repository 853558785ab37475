"""The policy: the distribution an agent's actions are drawn from and re-scored under, written once.

A policy acts (:meth:`Policy.act`: draws one action per prompt and returns the
:class:`~llmgym.agents.actions.Decision` with its log-prob and value) and evaluates
(:meth:`Policy.evaluate`: re-scores stored actions with gradients, giving log-probs, entropies,
values and the KL to the reference policy), as CleanRL's ``get_action_and_value`` and SB3's
``evaluate_actions`` do over one distribution. Two kinds:

* :class:`CandidatePolicy` (ScoringAgent): a softmax over the candidate actions' logits divided by
  the temperature (:func:`~llmgym.agents.distributions.tempered_logits`); the logits are the
  candidates' log-probs under the LLM (summed or averaged over their tokens, ``normalize``) or, when
  the LLM has an :class:`~llmgym.llm.modules.ActionHead`, that head's logits (:func:`policy_logits_key`);
* :class:`TokenPolicy` (GenerativeAgent, TokenAgent): each token from the LLM's distribution under a
  :class:`~llmgym.llm.sampling.Sampling` (temperature, top-k, top-p, and NLPO's mask-policy top-p
  set), which the LLM applies when it generates and re-scores; an action's log-prob is the sum of its tokens'.

The policy travels in every :class:`~llmgym.algorithms.batch.UpdateBatch`, so the distribution an
update trains is the one the actions were drawn from. The actions travel typed
(:mod:`llmgym.agents.actions`), built by the policy from the decisions; the categorical math is
:mod:`llmgym.agents.distributions`. This module re-exports both modules' names, which were defined
here before the split.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional, Protocol, runtime_checkable

import torch
from torch import Tensor

from llmgym.agents.actions import (
    Actions,
    CandidateActions,
    CandidateChoice,
    Decision,
    PolicyOutputs,
    ReferenceKL,
    TokenActions,
    TokenChoice,
)
from llmgym.agents.distributions import (
    KLEstimator,
    categorical_entropy,
    categorical_kl,
    categorical_log_prob,
    kl_estimate,
    masked_log_softmax,
    pad_candidate_scores,
    segment_sums,
    tempered_logits,
)
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
        return masked_log_softmax(tempered_logits(scores.float(), self.temperature))

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
        log_p = torch.where(mask, masked_log_softmax(logits), torch.zeros_like(logits))
        ref_kl = torch.zeros_like(log_probs)
        if with_reference:
            if logits_key == POLICY_KEY:
                raise InputError(
                    "A KL penalty (algorithm.kl.coef > 0) measures the KL to the LLM's own scoring policy, which an "
                    "action head replaces; set agent.action_head=false or algorithm.kl.coef=0."
                )
            with torch.no_grad(), llm.reference():
                _, ref_logits, _ = self._logits(llm, [SCORE_KEY], list(contexts), actions, False)
            ref_kl = categorical_kl(log_p, masked_log_softmax(ref_logits.to(logits.device)), mask)
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
        ref_log_p = masked_log_softmax(ref_logits, mask)
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

    def generation_kwargs(self, greedy: bool, min_new_tokens: Optional[int] = None) -> dict[str, Any]:
        """Keyword arguments of ``llm.generate`` for one step (greedy: the argmax at every token).

        Greedy keeps NLPO's mask, the repetition penalty and ``min_new_tokens`` (they shape the argmax
        too) and the stop strings.

        Args:
            greedy: The argmax at every token.
            min_new_tokens: EOS banned for this many of the tokens instead of ``sampling.min_new_tokens``
                (what is left of it after the episode's earlier tokens: :meth:`eos_bans`).
        """
        sampling = self._banning(min_new_tokens)
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens}
        if greedy:
            kwargs.update(do_sample=False, **sampling.mask_kwargs(), **sampling.history_kwargs())
        else:
            kwargs.update(sampling.generation_kwargs())
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
        generations: list[Any] = [None] * len(prompts)
        for banned, group in self.eos_bans([p.episode_tokens for p in prompts]).items():
            kwargs = self.generation_kwargs(greedy, banned)
            if any(prefixes):
                kwargs["decoder_prefixes"] = [prefixes[i] for i in group]
            for index, gens in zip(group, llm.generate([texts[i] for i in group], **kwargs)):
                generations[index] = gens
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
                        list(gen.token_ids),
                        gen.logprobs.tolist(),
                        prefix,
                        gen.raw_logprobs.tolist(),
                        prompt.episode_tokens,
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
        counts = [c.episode_tokens for c in choices]
        return TokenActions(
            [list(d.prompt_ids) for d in decisions],
            [list(c.token_ids) for c in choices],
            prefixes if any(prefixes) else None,
            counts if any(counts) else None,
        )

    def eos_bans(self, episode_tokens: Sequence[int]) -> dict[int, list[int]]:
        """Positions grouped by how many of their tokens EOS is banned for.

        ``sampling.min_new_tokens`` counts the episode's tokens: a generation after ``n`` of them has EOS
        banned for its first ``max(0, min_new_tokens - n)`` tokens (RL4LMs' ``min_length`` for a token
        agent, one token per step). A generative agent's generations all start at 0.

        Args:
            episode_tokens: Per generation, the tokens its episode generated before it.

        Returns:
            ``{tokens banned: positions}``, one entry when every generation has the same ban.
        """
        groups: dict[int, list[int]] = {}
        for index, before in enumerate(episode_tokens):
            groups.setdefault(max(0, self.sampling.min_new_tokens - int(before)), []).append(index)
        return groups

    def _banning(self, min_new_tokens: Optional[int]) -> Sampling:
        """:attr:`sampling` with EOS banned for ``min_new_tokens`` tokens (``None``: its own ``min_new_tokens``)."""
        if min_new_tokens is None or min_new_tokens == self.sampling.min_new_tokens:
            return self.sampling
        return replace(self.sampling, min_new_tokens=min_new_tokens)

    def _scored(
        self, llm: TrainableLLM, actions: TokenActions, keys: list[str], require_grad: bool
    ) -> list[dict[str, Any]]:
        """``llm.token_logprobs`` of the actions under :attr:`sampling`, each with EOS banned as when it was drawn."""
        groups = self.eos_bans(actions.episode_tokens or [0] * len(actions))
        outputs: list[dict[str, Any]] = [{} for _ in range(len(actions))]
        for banned, group in groups.items():
            part = actions if len(groups) == 1 else actions.select(group)
            prefixed: dict[str, Any] = (
                {} if part.decoder_prefixes is None else {"decoder_prefixes": part.decoder_prefixes}
            )
            scored = llm.token_logprobs(
                part.prompt_ids,
                part.token_ids,
                keys=keys,
                require_grad=require_grad,
                sampling=self._banning(banned),
                **prefixed,
            )
            for index, output in zip(group, scored):
                outputs[index] = output
        return outputs

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

        The log-probs (the PPO ratio's) are under :attr:`sampling`, cut as the tokens were drawn (EOS
        banned where it was: :meth:`eos_bans`). The
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
        outputs = self._scored(llm, actions, [VALUE_KEY] if has_value else [], require_grad)
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
            ref_kl = segment_sums(kl_estimate(flat, ref_flat, kl_estimator), [lp.numel() for lp in token_lp])
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
        kl = segment_sums(kl_estimate(sampled, ref_flat, estimator), lengths)
        return ReferenceKL(kl, torch.as_tensor(lengths, dtype=torch.long), segment_sums(ref_flat, lengths))

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
