"""Rollout storage for on-policy algorithms: one slot per env per step, read back as flat batches.

The buffer holds what the policy saw and did at each step (the exact prompt, its token ids, the
candidates and the chosen index for action-level agents, the generated token ids and their
per-token log-probs for token-level agents), what it predicted (old log-prob, value) and what the
env answered (reward, terminated, truncated, the value of the final observation of a truncated
episode). Numeric fields are ``[T, N]`` tensors (steps × envs); per-step variable-length data
(texts, token ids) are kept as Python lists indexed ``[t][n]``. A transition's flat index is
``t * num_envs + n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from llmgym.agents.learning import Decision
from llmgym.algorithms.advantages import compute_gae
from llmgym.errors import InputError

__all__ = ["RolloutBatch", "RolloutBuffer"]

ArrayLike = Union[Tensor, Sequence[float], Sequence[bool], Any]

_OPTIONAL_FIELDS = ("prompt_ids", "candidates", "actions", "action_ids", "token_log_probs")


@dataclass
class RolloutBatch:
    """A flat minibatch of ``B`` transitions taken from a :class:`RolloutBuffer`.

    Attributes:
        indices: Flat transition indices ``t * num_envs + n``, int64 ``[B]``.
        step_indices: Step ``t`` of each transition, int64 ``[B]``.
        env_indices: Env ``n`` of each transition, int64 ``[B]``.
        prompts: The prompt text sent to the LLM, ``B`` strings.
        prompt_ids: The exact prompt token ids sent, or ``None`` if not stored.
        candidates: The candidate actions offered (action level), or ``None``.
        actions: The chosen candidate index, int64 ``[B]`` (action level), or ``None``.
        action_ids: The generated token ids (token level), or ``None``.
        old_token_log_probs: Per-token log-probs at collection, ``[B, L]`` right-padded with 0, or ``None``.
        action_mask: Bool ``[B, L]``, True on real generated tokens, or ``None``.
        old_log_probs: Log-prob of the whole action at collection (token level: sum over tokens), ``[B]``.
        old_values: Value estimates at collection, ``[B]``.
        rewards: Rewards, ``[B]``.
        advantages: GAE advantages (not whitened), ``[B]``.
        returns: Value targets ``advantages + old_values``, ``[B]``.
    """

    indices: Tensor
    step_indices: Tensor
    env_indices: Tensor
    prompts: list[str]
    prompt_ids: Optional[list[list[int]]]
    candidates: Optional[list[list[str]]]
    actions: Optional[Tensor]
    action_ids: Optional[list[list[int]]]
    old_token_log_probs: Optional[Tensor]
    action_mask: Optional[Tensor]
    old_log_probs: Tensor
    old_values: Tensor
    rewards: Tensor
    advantages: Tensor
    returns: Tensor

    def __len__(self) -> int:
        return int(self.indices.shape[0])


class RolloutBuffer:
    """Fixed-size on-policy storage of ``num_steps`` vector steps of ``num_envs`` envs.

    Typical use: ``add(...)`` once per vector step until :attr:`full`, then
    :meth:`compute_returns_and_advantages`, then iterate :meth:`minibatches` for each epoch, then
    :meth:`reset` for the next rollout. Episode counters (:attr:`episode_ids`,
    :attr:`episode_steps`) carry over across :meth:`reset`, since episodes span rollouts.

    Args:
        num_envs: Number of parallel envs ``N`` (> 0).
        num_steps: Steps per env per rollout ``T`` (> 0).
        dtype: Floating dtype of the numeric fields.
        device: Device of the numeric fields.

    Raises:
        InputError: If ``num_envs`` or ``num_steps`` is not a positive int.
    """

    def __init__(
        self,
        num_envs: int,
        num_steps: int,
        dtype: torch.dtype = torch.float32,
        device: Union[str, torch.device] = "cpu",
    ) -> None:
        for name, value in (("num_envs", num_envs), ("num_steps", num_steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{name}={value!r} must be a positive int (e.g. algorithm.rollout_steps=64).")
        self.num_envs = num_envs
        self.num_steps = num_steps
        self.dtype = dtype
        self.device = torch.device(device)
        self._episode_counter = torch.zeros(num_envs, dtype=torch.long)
        self._episode_step = torch.zeros(num_envs, dtype=torch.long)
        self.reset()

    def reset(self) -> None:
        """Empty the buffer for the next rollout (episode counters are kept)."""
        shape = (self.num_steps, self.num_envs)
        self.rewards = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.values = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.log_probs = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.truncation_values = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.terminated = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.truncated = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.actions = torch.full(shape, -1, dtype=torch.long, device=self.device)
        self.episode_ids = torch.zeros(shape, dtype=torch.long, device=self.device)
        self.episode_steps = torch.zeros(shape, dtype=torch.long, device=self.device)
        self.advantages: Optional[Tensor] = None
        self.returns: Optional[Tensor] = None
        self.prompts: list[list[str]] = []
        self.prompt_ids: list[list[list[int]]] = []
        self.candidates: list[list[list[str]]] = []
        self.action_ids: list[list[list[int]]] = []
        self.token_log_probs: list[list[Tensor]] = []
        self._fields: Optional[frozenset[str]] = None
        self.pos = 0

    @property
    def full(self) -> bool:
        """Whether all ``num_steps`` steps have been added."""
        return self.pos == self.num_steps

    def __len__(self) -> int:
        """Return the number of stored transitions, ``pos * num_envs``."""
        return self.pos * self.num_envs

    def _vector(self, name: str, value: ArrayLike, dtype: torch.dtype) -> Tensor:
        try:
            tensor = torch.as_tensor(value).detach().to(device=self.device, dtype=dtype)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InputError(f"{name} could not be read as a tensor [N={self.num_envs}]: {exc}") from exc
        if tuple(tensor.shape) != (self.num_envs,):
            raise InputError(
                f"{name} has shape {list(tensor.shape)} but [N]=[{self.num_envs}] was expected "
                f"(one value per env); pass the vector env's batch for this step."
            )
        return tensor

    def _per_env(self, name: str, value: Sequence[Any]) -> list[Any]:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != self.num_envs:
            got = len(value) if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else type(value).__name__
            raise InputError(f"{name} must be a sequence of {self.num_envs} entries (one per env), got {got}.")
        return list(value)

    def add(
        self,
        *,
        prompts: Sequence[str],
        values: ArrayLike,
        rewards: ArrayLike,
        terminated: ArrayLike,
        truncated: ArrayLike,
        log_probs: Optional[ArrayLike] = None,
        prompt_ids: Optional[Sequence[Sequence[int]]] = None,
        candidates: Optional[Sequence[Sequence[str]]] = None,
        actions: Optional[ArrayLike] = None,
        action_ids: Optional[Sequence[Sequence[int]]] = None,
        token_log_probs: Optional[Sequence[Tensor]] = None,
        truncation_values: Optional[ArrayLike] = None,
    ) -> None:
        """Store one vector step (all ``N`` envs).

        Action-level agents pass ``candidates`` and ``actions`` (the chosen index); token-level agents
        pass ``action_ids`` and ``token_log_probs``. Every call of a rollout must pass the same set of
        optional fields.

        Args:
            prompts: Prompt text per env, ``N`` strings.
            values: ``V(prompt)`` per env, ``[N]``.
            rewards: Rewards returned by the env for this step, ``[N]``.
            terminated: Bool ``[N]``, the episode ended in a terminal state at this step.
            truncated: Bool ``[N]``, the episode was cut by a time limit at this step.
            log_probs: Log-prob of the taken action per env ``[N]``; optional when ``token_log_probs``
                is given (then their per-row sums are used).
            prompt_ids: The exact prompt token ids sent per env (``N`` lists).
            candidates: The candidate actions offered per env (``N`` lists of strings).
            actions: Chosen candidate index per env, int ``[N]``; requires ``candidates``.
            action_ids: Generated token ids per env (``N`` lists).
            token_log_probs: Per-token log-probs of ``action_ids`` per env, ``N`` tensors ``[L_n]``;
                requires ``action_ids`` of matching lengths.
            truncation_values: Value of the final observation of each truncated episode, ``[N]``;
                required when an env is truncated and not terminated.

        Raises:
            InputError: If the buffer is full, a field has the wrong length or shape, an action index
                is out of its candidate range, the optional fields differ from earlier steps, or a
                truncated step has no ``truncation_values``.
        """
        if self.full:
            raise InputError(
                f"RolloutBuffer is full ({self.num_steps} steps of {self.num_envs} envs); call "
                "compute_returns_and_advantages() and minibatches(), then reset() before adding more."
            )
        provided = {
            "prompt_ids": prompt_ids,
            "candidates": candidates,
            "actions": actions,
            "action_ids": action_ids,
            "token_log_probs": token_log_probs,
        }
        fields = frozenset(name for name in _OPTIONAL_FIELDS if provided[name] is not None)
        if self._fields is not None and fields != self._fields:
            raise InputError(
                f"add() got optional fields {sorted(fields)} but earlier steps of this rollout had "
                f"{sorted(self._fields)}; pass the same fields at every step (or reset() the buffer)."
            )
        if actions is not None and candidates is None:
            raise InputError("actions (candidate indices) were given without candidates; pass candidates too.")
        if token_log_probs is not None and action_ids is None:
            raise InputError("token_log_probs were given without action_ids; pass the generated token ids too.")
        if log_probs is None and token_log_probs is None:
            raise InputError("add() needs log_probs [N] (or token_log_probs for token-level agents); got neither.")

        prompt_list = self._per_env("prompts", prompts)
        for n, text in enumerate(prompt_list):
            if not isinstance(text, str):
                raise InputError(f"prompts[{n}] is a {type(text).__name__}; pass the prompt text as a str.")
        value_vec = self._vector("values", values, self.dtype)
        reward_vec = self._vector("rewards", rewards, self.dtype)
        term_vec = self._vector("terminated", terminated, torch.bool)
        trunc_vec = self._vector("truncated", truncated, torch.bool)
        if truncation_values is None:
            if bool((trunc_vec & ~term_vec).any()):
                raise InputError(
                    "truncated has True entries but truncation_values is None; pass the value of "
                    "infos[n]['final_observation'] for each truncated env (0 elsewhere), shape [N]."
                )
            trunc_value_vec = torch.zeros(self.num_envs, dtype=self.dtype, device=self.device)
        else:
            trunc_value_vec = self._vector("truncation_values", truncation_values, self.dtype)

        step_candidates: list[list[str]] = []
        if candidates is not None:
            step_candidates = [list(c) for c in self._per_env("candidates", candidates)]
        action_vec: Optional[Tensor] = None
        if actions is not None:
            action_vec = self._vector("actions", actions, torch.long)
            for n, (index, options) in enumerate(zip(action_vec.tolist(), step_candidates)):
                if not 0 <= index < len(options):
                    raise InputError(
                        f"actions[{n}]={index} is outside [0, {len(options)}) for the {len(options)} "
                        f"candidates of env {n}; pass the index of the chosen candidate."
                    )
        step_prompt_ids = [] if prompt_ids is None else [list(map(int, ids)) for ids in self._per_env("prompt_ids", prompt_ids)]
        step_action_ids = [] if action_ids is None else [list(map(int, ids)) for ids in self._per_env("action_ids", action_ids)]
        step_token_lp: list[Tensor] = []
        if token_log_probs is not None:
            for n, (lp, ids) in enumerate(zip(self._per_env("token_log_probs", token_log_probs), step_action_ids)):
                lp_tensor = torch.as_tensor(lp).detach().to(device=self.device, dtype=self.dtype)
                if tuple(lp_tensor.shape) != (len(ids),):
                    raise InputError(
                        f"token_log_probs[{n}] has shape {list(lp_tensor.shape)} but action_ids[{n}] has "
                        f"{len(ids)} tokens; pass one log-prob per generated token."
                    )
                step_token_lp.append(lp_tensor)
        if log_probs is not None:
            log_prob_vec = self._vector("log_probs", log_probs, self.dtype)
        else:
            log_prob_vec = torch.stack([lp.sum() for lp in step_token_lp])

        t = self.pos
        self.values[t] = value_vec
        self.rewards[t] = reward_vec
        self.terminated[t] = term_vec
        self.truncated[t] = trunc_vec
        self.truncation_values[t] = trunc_value_vec
        self.log_probs[t] = log_prob_vec
        if action_vec is not None:
            self.actions[t] = action_vec
        self.prompts.append(prompt_list)
        self.prompt_ids.append(step_prompt_ids)
        self.candidates.append(step_candidates)
        self.action_ids.append(step_action_ids)
        self.token_log_probs.append(step_token_lp)
        self.episode_ids[t] = self._episode_counter.to(self.device)
        self.episode_steps[t] = self._episode_step.to(self.device)
        done = (term_vec | trunc_vec).cpu()
        self._episode_step = torch.where(done, torch.zeros_like(self._episode_step), self._episode_step + 1)
        self._episode_counter = self._episode_counter + done.long()
        self._fields = fields
        self.advantages = None
        self.returns = None
        self.pos += 1

    def add_decisions(
        self,
        decisions: Sequence[Decision],
        rewards: ArrayLike,
        terminated: ArrayLike,
        truncated: ArrayLike,
        truncation_values: Optional[ArrayLike] = None,
    ) -> None:
        """Store one vector step of agent decisions and env outcomes (:meth:`add` from decisions).

        Args:
            decisions: The agent's decisions for this step (``agent.last_decisions``), ``N`` of them.
            rewards: ``[N]`` rewards (after the agent's shaping).
            terminated: ``[N]`` terminal flags.
            truncated: ``[N]`` time-limit flags.
            truncation_values: ``[N]`` values of the final observations of truncated episodes.
        """
        prompts = [d.prompt for d in decisions]
        prompt_ids = [d.prompt_ids for d in decisions]
        values = [d.value for d in decisions]
        if decisions[0].candidates is not None:
            self.add(
                prompts=prompts, prompt_ids=prompt_ids, values=values, rewards=rewards, terminated=terminated,
                truncated=truncated, truncation_values=truncation_values,
                log_probs=[d.log_prob for d in decisions],
                candidates=[d.candidates or [] for d in decisions],
                actions=[d.action_index if d.action_index is not None else -1 for d in decisions],
            )
        else:
            self.add(
                prompts=prompts, prompt_ids=prompt_ids, values=values, rewards=rewards, terminated=terminated,
                truncated=truncated, truncation_values=truncation_values,
                action_ids=[d.action_ids or [] for d in decisions],
                token_log_probs=[d.token_log_probs if d.token_log_probs is not None else torch.zeros(0) for d in decisions],
            )

    def compute_returns_and_advantages(
        self, last_values: ArrayLike, gamma: float, gae_lambda: float
    ) -> tuple[Tensor, Tensor]:
        """Compute GAE advantages and returns over the stored steps (see :func:`compute_gae`).

        Args:
            last_values: ``V`` of the observation following the last stored step, per env, ``[N]``.
            gamma: Discount factor in ``[0, 1]``.
            gae_lambda: GAE lambda in ``[0, 1]``.

        Returns:
            ``(advantages, returns)``, each ``[pos, N]``; also stored on the buffer.

        Raises:
            InputError: If the buffer is empty or ``last_values`` is not ``[N]``.
        """
        if self.pos == 0:
            raise InputError("RolloutBuffer is empty; add() at least one step before computing advantages.")
        t = self.pos
        self.advantages, self.returns = compute_gae(
            self.rewards[:t],
            self.values[:t],
            self.terminated[:t],
            self.truncated[:t],
            self._vector("last_values", last_values, self.dtype),
            gamma,
            gae_lambda,
            truncation_values=self.truncation_values[:t],
        )
        return self.advantages, self.returns

    def get(self, indices: Tensor) -> RolloutBatch:
        """Gather the transitions at the given flat indices into a :class:`RolloutBatch`.

        Args:
            indices: Flat indices ``t * num_envs + n``, int ``[B]``, each below ``len(self)``.

        Returns:
            The batch, in the order of ``indices``.

        Raises:
            InputError: If advantages were not computed or an index is out of range.
        """
        if self.advantages is None or self.returns is None:
            raise InputError(
                "advantages are not computed for the current contents; call "
                "compute_returns_and_advantages(last_values, gamma, gae_lambda) first."
            )
        flat = torch.as_tensor(indices, dtype=torch.long).reshape(-1).cpu()
        if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= len(self)):
            raise InputError(f"indices must lie in [0, {len(self)}); got min {int(flat.min())}, max {int(flat.max())}.")
        steps, envs = flat // self.num_envs, flat % self.num_envs
        fields = self._fields or frozenset()
        pairs = list(zip(steps.tolist(), envs.tolist()))
        dev_steps, dev_envs = steps.to(self.device), envs.to(self.device)
        token_lp: Optional[Tensor] = None
        action_mask: Optional[Tensor] = None
        if "token_log_probs" in fields:
            rows = [self.token_log_probs[t][n] for t, n in pairs]
            lengths = torch.tensor([row.shape[0] for row in rows], dtype=torch.long, device=self.device)
            token_lp = pad_sequence(rows, batch_first=True, padding_value=0.0)
            action_mask = torch.arange(token_lp.shape[1], device=self.device).unsqueeze(0) < lengths.unsqueeze(1)
        return RolloutBatch(
            indices=flat.to(self.device),
            step_indices=dev_steps,
            env_indices=dev_envs,
            prompts=[self.prompts[t][n] for t, n in pairs],
            prompt_ids=[self.prompt_ids[t][n] for t, n in pairs] if "prompt_ids" in fields else None,
            candidates=[self.candidates[t][n] for t, n in pairs] if "candidates" in fields else None,
            actions=self.actions[dev_steps, dev_envs] if "actions" in fields else None,
            action_ids=[self.action_ids[t][n] for t, n in pairs] if "action_ids" in fields else None,
            old_token_log_probs=token_lp,
            action_mask=action_mask,
            old_log_probs=self.log_probs[dev_steps, dev_envs],
            old_values=self.values[dev_steps, dev_envs],
            rewards=self.rewards[dev_steps, dev_envs],
            advantages=self.advantages[dev_steps, dev_envs],
            returns=self.returns[dev_steps, dev_envs],
        )
