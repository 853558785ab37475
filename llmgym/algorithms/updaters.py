"""PPOUpdater and A2CUpdater: the training step, run next to the model on every LLM server.

The client (:func:`llmgym.algorithms.update.run_update`) sends one epoch at a time: the whole
rollout (contexts, candidates or generated token ids, old log-probs, values, advantages, returns)
and the epoch's minibatches as lists of indices into it. Each server holds a share of the
contexts (``_current_batch_ids``); for every minibatch it computes the mean loss over its own
samples and calls ``llm.sync_gradients(n_own)``, a weighted all-reduce, so the step equals one
step on the full minibatch whatever the number of servers (a server with no sample joins with
weight 0). Two kinds of action are supported:

* action level (ScoringAgent): the action is a candidate; ``log pi(a|s) = log_softmax(logits / T)[a]``
  with the logits the agent sampled from (:func:`~llmgym.agents.scoring.policy_logits_key`);
* generated (GenerativeAgent): the action is the sampled token sequence; ``log pi(a|s)`` is the
  sum of its token log-probs under the distribution it was sampled from (temperature, top-k,
  top-p: :mod:`llmgym.llm.sampling`), computed on the stored token ids (never re-tokenized text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch

from llmgym.agents.scoring import policy_logits_key
from llmgym.algorithms.losses import (
    a2c_policy_loss,
    categorical_entropy,
    categorical_log_prob,
    pad_candidate_scores,
    ppo_policy_loss,
    value_loss,
)
from llmgym.config import AlgorithmConfig
from llmgym.errors import InputError
from llmgym.llm.modules import POLICY_KEY, SCORE_KEY, VALUE_KEY
from llmgym.llm.updater import Updater

__all__ = ["PolicyGradientUpdater", "PPOUpdater", "A2CUpdater", "VALUE_KEY"]


def _chunks(items: Sequence[int], parts: int) -> list[list[int]]:
    size = max(1, -(-len(items) // parts))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


class PolicyGradientUpdater(Updater):
    """Actor-critic update shared by PPO and A2C; subclasses define the policy loss.

    Args:
        config: The ``algorithm`` section (learning rates, coefficients, clipping...).
    """

    #: Whether the value loss is clipped around the old values (PPO) or not (A2C).
    clips: bool = True

    def __init__(self, config: Optional[AlgorithmConfig] = None) -> None:
        self.config = config if config is not None else AlgorithmConfig()

    def setup(self) -> None:
        """Build AdamW with one learning rate for the LLM and one for the module functions."""
        head_params = {id(p) for p in self.llm.module_functions.parameters()}
        llm_params = [p for p in self.llm.trainable_parameters() if id(p) not in head_params]
        heads = [p for p in self.llm.module_functions.parameters() if p.requires_grad]
        groups: list[dict[str, Any]] = []
        if llm_params:
            groups.append({"params": llm_params, "lr": self.config.learning_rate})
        if heads:
            groups.append({"params": heads, "lr": self.config.head_learning_rate})
        if not groups:
            raise InputError("The LLM has no trainable parameter: add LoRA (model.lora) or a value head.")
        self.optimizer = torch.optim.AdamW(groups, eps=1e-5, weight_decay=0.0)
        self.params: list[torch.nn.Parameter] = [p for group in groups for p in group["params"]]

    def policy_loss(
        self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Mean policy loss over ``[B]`` samples and its statistics."""
        raise NotImplementedError

    # ------------------------------------------------------------------ forward passes
    def _evaluate(
        self,
        contexts: Sequence[str],
        candidates: Optional[Sequence[Sequence[str]]],
        local: Sequence[int],
        chunk: Sequence[int],
        batch: dict[str, Any],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log_probs, entropy, values, kl)``, each ``[B]``, of one chunk, with gradients.

        ``local`` indexes this server's ``contexts``/``candidates``; ``chunk`` holds the same
        samples' indices in the client's batch (for the per-sample fields of ``batch``).
        """
        has_value = VALUE_KEY in self.llm.module_functions
        kl_coef = self.config.kl_coef
        if candidates is not None:
            ctx = [contexts[i] for i in local]
            cands = [list(candidates[i]) for i in local]
            logits_key = policy_logits_key(list(self.llm.module_functions))
            keys = [logits_key, VALUE_KEY] if has_value else [logits_key]
            outputs = self.llm.forward(keys, ctx, cands, require_grad=True, normalize=batch["normalize"])
            logits, mask = pad_candidate_scores([o[logits_key] for o in outputs], temperature=batch["temperature"])
            actions = batch["actions"][torch.tensor(chunk)].long().to(logits.device)
            log_probs = categorical_log_prob(logits, actions, mask)
            entropy = categorical_entropy(logits, mask)
            values = torch.stack([o[VALUE_KEY].reshape(()) for o in outputs]) if has_value else torch.zeros_like(log_probs)
            kl = torch.zeros_like(log_probs)
            if kl_coef > 0:
                if logits_key == POLICY_KEY:
                    raise InputError(
                        "algorithm.kl_coef > 0 measures the KL to the LLM's own scoring policy, which an action head "
                        "replaces; set agent.action_head=false or algorithm.kl_coef=0."
                    )
                with torch.no_grad(), self.llm.reference():
                    ref = self.llm.forward([SCORE_KEY], ctx, cands, normalize=batch["normalize"])
                ref_logits, _ = pad_candidate_scores([o[SCORE_KEY] for o in ref], temperature=batch["temperature"])
                log_p = torch.log_softmax(logits, -1)
                ref_log_p = torch.log_softmax(ref_logits.to(logits.device), -1)
                kl = torch.where(mask, log_p.exp() * (log_p - ref_log_p), torch.zeros_like(log_p)).sum(-1)
            return log_probs, entropy, values, kl
        prompt_ids = [batch["prompt_ids"][g] for g in chunk]
        action_ids = [batch["action_ids"][g] for g in chunk]
        sampling = batch.get("sampling")
        outputs = self.llm.token_logprobs(
            prompt_ids, action_ids, keys=[VALUE_KEY] if has_value else [], require_grad=True, sampling=sampling
        )
        token_lp = [o["logprobs"] for o in outputs]
        log_probs = torch.stack([lp.sum() for lp in token_lp])
        entropy = torch.stack([-lp.mean() if lp.numel() else lp.new_zeros(()) for lp in token_lp])
        if has_value:
            values = torch.stack([o[VALUE_KEY].reshape(-1)[0] for o in outputs])
        else:
            values = torch.zeros_like(log_probs)
        kl = torch.zeros_like(log_probs)
        if kl_coef > 0:
            with torch.no_grad(), self.llm.reference():
                ref = self.llm.token_logprobs(prompt_ids, action_ids, require_grad=False, sampling=sampling)
            kl = torch.stack([(lp - r["logprobs"].to(lp.device)).sum() for lp, r in zip(token_lp, ref)])
        return log_probs, entropy, values, kl

    # ------------------------------------------------------------------ the update
    def perform_update(
        self,
        contexts: Sequence[str],
        candidates: Optional[Sequence[Sequence[str]]],
        _current_batch_ids: Sequence[int],
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One epoch over ``kwargs["minibatches"]`` (lists of indices into the client's batch).

        Expected ``kwargs``: ``minibatches``, ``old_log_probs``, ``old_values``, ``advantages``,
        ``returns`` (``[B_total]`` tensors), ``temperature`` and ``normalize`` (the scoring policy:
        defaults 1.0 and ``"sum"``); ``actions`` with candidates, or ``prompt_ids`` and
        ``action_ids`` for generated actions, with ``sampling`` (the
        :class:`~llmgym.llm.sampling.Sampling` they were drawn from; default the model's own).

        Returns:
            Sample-weighted means of the losses and statistics over this server's samples, and
            ``num_samples``.
        """
        missing = [k for k in ("minibatches", "old_log_probs", "old_values", "advantages", "returns") if k not in kwargs]
        if candidates is not None and "actions" not in kwargs:
            missing.append("actions")
        if candidates is None and not {"prompt_ids", "action_ids"} <= kwargs.keys():
            missing.append("prompt_ids/action_ids")
        if missing:
            raise InputError(f"{type(self).__name__}.perform_update is missing {missing}; call it through run_update().")
        cfg = self.config
        position = {int(g): i for i, g in enumerate(_current_batch_ids)}
        batch = dict(kwargs)
        batch.setdefault("temperature", 1.0)
        batch.setdefault("normalize", "sum")
        for key in ("old_log_probs", "old_values", "advantages", "returns", "actions"):
            if key in batch:
                batch[key] = torch.as_tensor(batch[key])
        totals: dict[str, float] = {}
        seen = 0
        device = next(iter(self.params)).device
        for minibatch in batch["minibatches"]:
            own = [int(g) for g in minibatch if int(g) in position]
            self.optimizer.zero_grad(set_to_none=True)  # type: ignore[union-attr]
            for chunk in _chunks(own, cfg.gradient_accumulation_steps) if own else []:
                local = [position[g] for g in chunk]
                ids = torch.tensor(chunk)
                log_probs, entropy, values, kl = self._evaluate(contexts, candidates, local, chunk, batch)
                old = batch["old_log_probs"][ids].to(device)
                adv = batch["advantages"][ids].to(device)
                pg_loss, pg_stats = self.policy_loss(log_probs, old, adv)
                v_loss, v_stats = value_loss(
                    values, batch["returns"][ids].to(device), batch["old_values"][ids].to(device),
                    clip_range=cfg.value_clip_range if self.clips else None,
                )
                ent = entropy.mean()
                loss = pg_loss + cfg.value_coef * v_loss - cfg.entropy_coef * ent + cfg.kl_coef * kl.mean()
                (loss * (len(chunk) / len(own))).backward()
                stats = {"loss": loss, "policy_loss": pg_loss, "value_loss": v_loss, "entropy": ent, "kl_ref": kl.mean(),
                         **pg_stats, **v_stats}
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + float(value.detach()) * len(chunk)
                seen += len(chunk)
            self.llm.sync_gradients(len(own))
            if cfg.max_grad_norm is not None:
                norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                totals["grad_norm"] = totals.get("grad_norm", 0.0) + float(norm) * len(own)
            self.optimizer.step()  # type: ignore[union-attr]
        result: dict[str, Any] = {key: value / seen for key, value in totals.items()} if seen else {}
        result["num_samples"] = seen
        return result


class PPOUpdater(PolicyGradientUpdater):
    """PPO: clipped surrogate, clipped value loss, entropy bonus, optional KL to the reference."""

    def policy_loss(
        self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """PPO's clipped surrogate loss (see :func:`~llmgym.algorithms.losses.ppo_policy_loss`)."""
        return ppo_policy_loss(log_probs, old_log_probs, advantages, self.config.clip_range)


class A2CUpdater(PolicyGradientUpdater):
    """A2C: vanilla policy gradient with a learned baseline (one epoch, no clipping)."""

    clips = False

    def policy_loss(
        self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``-mean(log_prob * advantage)`` (see :func:`~llmgym.algorithms.losses.a2c_policy_loss`)."""
        del old_log_probs
        return a2c_policy_loss(log_probs, advantages), {}
