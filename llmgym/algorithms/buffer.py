"""Rollout storage for on-policy algorithms: one slot per env per step, read back as flat batches.

The buffer holds the agent's :class:`~llmgym.agents.actions.Decision` at each step (the exact
prompt, its token ids, the action in the policy's terms, its log-prob and value) and what the env
answered (reward, terminated, truncated, the value of the final observation of a truncated
episode). Numeric fields are ``[T, N]`` tensors (steps x envs); the decisions are kept as Python
lists indexed ``[t][n]``. A transition's flat index is ``t * num_envs + n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch
from torch import Tensor

from llmgym.agents.actions import Decision
from llmgym.algorithms.advantages import compute_gae
from llmgym.errors import InputError

__all__ = ["RolloutBatch", "RolloutBuffer"]

ArrayLike = Union[Tensor, Sequence[float], Sequence[bool], Any]


@dataclass
class RolloutBatch:
    """A flat batch of ``B`` transitions taken from a :class:`RolloutBuffer`.

    Attributes:
        indices: Flat transition indices ``t * num_envs + n``, int64 ``[B]``.
        step_indices: Step ``t`` of each transition, int64 ``[B]``.
        env_indices: Env ``n`` of each transition, int64 ``[B]``.
        decisions: The agent's ``B`` decisions (prompt, its ids, the action, its log-prob).
        old_log_probs: Log-prob of each action at collection, ``[B]``.
        old_values: Value estimates at collection, ``[B]``.
        rewards: Rewards, ``[B]``.
        advantages: GAE advantages (not whitened), ``[B]``.
        returns: Value targets ``advantages + old_values``, ``[B]``.
    """

    indices: Tensor
    step_indices: Tensor
    env_indices: Tensor
    decisions: list[Decision]
    old_log_probs: Tensor
    old_values: Tensor
    rewards: Tensor
    advantages: Tensor
    returns: Tensor

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    @property
    def prompts(self) -> list[str]:
        """The ``B`` prompt texts sent to the LLM."""
        return [d.prompt for d in self.decisions]


class RolloutBuffer:
    """Fixed-size on-policy storage of ``num_steps`` vector steps of ``num_envs`` envs.

    Typical use: :meth:`add` once per vector step until :attr:`full`, then
    :meth:`compute_returns_and_advantages`, then :meth:`get`, then :meth:`reset` for the next rollout.

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
                raise InputError(
                    f"{name}={value!r} must be a positive int (e.g. algorithm.rollout_steps=64)."
                )
        self.num_envs = num_envs
        self.num_steps = num_steps
        self.dtype = dtype
        self.device = torch.device(device)
        self.reset()

    def reset(self) -> None:
        """Empty the buffer for the next rollout."""
        shape = (self.num_steps, self.num_envs)
        self.rewards = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.values = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.log_probs = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.truncation_values = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.terminated = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.truncated = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.advantages: Optional[Tensor] = None
        self.returns: Optional[Tensor] = None
        self.decisions: list[list[Decision]] = []
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
            got = (
                len(value)
                if isinstance(value, Sequence) and not isinstance(value, (str, bytes))
                else type(value).__name__
            )
            raise InputError(
                f"{name} must be a sequence of {self.num_envs} entries (one per env), got {got}."
            )
        return list(value)

    def add(
        self,
        decisions: Sequence[Decision],
        rewards: ArrayLike,
        terminated: ArrayLike,
        truncated: ArrayLike,
        truncation_values: Optional[ArrayLike] = None,
    ) -> None:
        """Store one vector step: the agent's decisions for all ``N`` envs and the env's outcomes.

        Args:
            decisions: The agent's decisions for this step (``agent.last_decisions``), ``N`` of them.
            rewards: ``[N]`` rewards (after the agent's shaping).
            terminated: Bool ``[N]``, the episode ended in a terminal state at this step.
            truncated: Bool ``[N]``, the episode was cut by a time limit at this step.
            truncation_values: ``[N]`` values of the final observations of truncated episodes;
                required when an env is truncated and not terminated.

        Raises:
            InputError: If the buffer is full, a field has the wrong length or shape, or a
                truncated step has no ``truncation_values``.
        """
        if self.full:
            raise InputError(
                f"RolloutBuffer is full ({self.num_steps} steps of {self.num_envs} envs); call "
                "compute_returns_and_advantages() and get(), then reset() before adding more."
            )
        step = self._per_env("decisions", decisions)
        for n, decision in enumerate(step):
            if not isinstance(decision, Decision):
                raise InputError(
                    f"decisions[{n}] is a {type(decision).__name__}; pass the agent's Decision objects."
                )
        value_vec = self._vector("values", [d.value for d in step], self.dtype)
        log_prob_vec = self._vector("log_probs", [d.log_prob for d in step], self.dtype)
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
        t = self.pos
        self.values[t] = value_vec
        self.rewards[t] = reward_vec
        self.terminated[t] = term_vec
        self.truncated[t] = trunc_vec
        self.truncation_values[t] = trunc_value_vec
        self.log_probs[t] = log_prob_vec
        self.decisions.append(step)
        self.advantages = None
        self.returns = None
        self.pos += 1

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
            raise InputError(
                f"indices must lie in [0, {len(self)}); got min {int(flat.min())}, max {int(flat.max())}."
            )
        steps, envs = flat // self.num_envs, flat % self.num_envs
        dev_steps, dev_envs = steps.to(self.device), envs.to(self.device)
        return RolloutBatch(
            indices=flat.to(self.device),
            step_indices=dev_steps,
            env_indices=dev_envs,
            decisions=[self.decisions[t][n] for t, n in zip(steps.tolist(), envs.tolist())],
            old_log_probs=self.log_probs[dev_steps, dev_envs],
            old_values=self.values[dev_steps, dev_envs],
            rewards=self.rewards[dev_steps, dev_envs],
            advantages=self.advantages[dev_steps, dev_envs],
            returns=self.returns[dev_steps, dev_envs],
        )
