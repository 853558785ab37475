"""The weight of the KL to the reference policy, fixed or adaptive, and the KL as a reward penalty.

``algorithm.kl`` (:class:`~llmgym.config.KLConfig`) says how strongly a policy is held to its
reference (the model with its LoRA adapter disabled, or a frozen copy of the initial weights) and
where: as ``-beta * KL`` added to each action's reward at rollout time (``penalty: reward``, as
RL4LMs and TRL's PPO do) or as ``+beta * KL`` in the update's loss (``penalty: loss``).

The adaptive controller is Ziegler et al. (2019)'s, as TRL's ``AdaptiveKLController`` writes it:
after an update over ``n`` actions whose measured KL was ``KL``,
``beta <- beta * (1 + clip(KL / target - 1, -0.2, 0.2) * n / horizon)``. RL4LMs' controller,
``beta <- beta * (1 + 0.1 * clip(KL / target - 1, -0.2, 0.2))`` per update, is the same with
``horizon = 10 n``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from llmgym.config import KLConfig
from llmgym.errors import InputError

__all__ = ["KLController", "KLMeasurement", "adaptive_kl_coef", "reward_penalty"]

#: The largest relative error the adaptive controller reacts to (Ziegler et al., TRL, RL4LMs).
ERROR_CLIP = 0.2


def adaptive_kl_coef(coef: float, measured: float, target: float, n_steps: int, horizon: int) -> float:
    """One step of Ziegler et al.'s proportional controller.

    Args:
        coef: The current weight ``beta`` (> 0).
        measured: The KL measured over the last update, in the unit of ``target``.
        target: The KL to hold (> 0).
        n_steps: Actions in the last update (> 0).
        horizon: Actions over which ``beta`` may change by about ``e^0.2`` at most (> 0).

    Returns:
        ``coef * (1 + clip(measured / target - 1, -0.2, 0.2) * n_steps / horizon)``.

    Raises:
        InputError: A non-positive ``target``, ``n_steps`` or ``horizon``, or a measurement that is not finite.
    """
    if not (target > 0 and n_steps > 0 and horizon > 0):
        raise InputError(
            f"adaptive KL needs target > 0, n_steps > 0 and horizon > 0; got target={target!r}, n_steps={n_steps!r}, "
            f"horizon={horizon!r}."
        )
    if not math.isfinite(measured):
        raise InputError(f"the measured KL is {measured!r}; the KL controller needs a finite measurement.")
    error = min(max(measured / target - 1.0, -ERROR_CLIP), ERROR_CLIP)
    return coef * (1.0 + error * n_steps / horizon)


@dataclass(frozen=True)
class KLMeasurement:
    """The KL to the reference measured over one update's actions.

    Attributes:
        total: Nats summed over every action (each action's KL summed over its tokens).
        actions: Actions measured.
        tokens: Generated tokens among them (a candidate action counts as one).
    """

    total: float
    actions: int
    tokens: int

    @property
    def per_action(self) -> float:
        """Mean KL of an action (a completion; one token for a token agent, one candidate for a scoring agent)."""
        return self.total / self.actions if self.actions else 0.0

    @property
    def per_token(self) -> float:
        """Mean KL of a generated token."""
        return self.total / self.tokens if self.tokens else 0.0


class KLController:
    """The current weight ``beta`` of the KL to the reference, and how it changes after each update.

    Args:
        config: The ``algorithm.kl`` section.

    Attributes:
        coef: The current ``beta`` (``config.coef`` at the start).
    """

    def __init__(self, config: KLConfig) -> None:
        self.config = config
        self.coef = float(config.coef)

    @property
    def enabled(self) -> bool:
        """Whether the KL is measured and weighted at all (``coef > 0``)."""
        return self.coef > 0

    @property
    def in_reward(self) -> bool:
        """Whether the KL is a reward penalty at rollout time (else a loss term)."""
        return self.enabled and self.config.penalty == "reward"

    @property
    def loss_coef(self) -> float:
        """The weight of the KL term in the update's loss (0 when the KL is in the reward)."""
        return self.coef if self.enabled and self.config.penalty == "loss" else 0.0

    def measured(self, measurement: KLMeasurement) -> float:
        """The measurement in the unit of ``algorithm.kl.target`` (per completion or per token)."""
        return measurement.per_token if self.config.unit == "token" else measurement.per_action

    def update(self, measurement: KLMeasurement) -> float:
        """Adapt ``beta`` to the last update's KL (``adaptive``; ``fixed`` keeps it).

        Args:
            measurement: The KL over the update's actions.

        Returns:
            The new ``beta``.
        """
        cfg = self.config
        if (
            cfg.controller == "adaptive"
            and self.enabled
            and cfg.target is not None
            and measurement.actions > 0
        ):
            self.coef = adaptive_kl_coef(
                self.coef, self.measured(measurement), cfg.target, measurement.actions, cfg.horizon
            )
        return self.coef

    def metrics(self, measurement: Optional[KLMeasurement]) -> dict[str, float]:
        """What the run logs every update: ``kl_coef`` (the beta used) and ``kl_ref`` / ``kl_ref_per_token``."""
        if measurement is None:
            return {"kl_coef": self.coef}
        return {
            "kl_coef": self.coef,
            "kl_ref": measurement.per_action,
            "kl_ref_per_token": measurement.per_token,
        }

    def state_dict(self) -> dict[str, float]:
        """The current ``beta`` (a resumed run goes on from it)."""
        return {"coef": self.coef}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore :meth:`state_dict`."""
        self.coef = float(state["coef"])


def reward_penalty(kl: Tensor, coef: float) -> Tensor:
    """The reward added to each action for its KL to the reference: ``-coef * kl``.

    Args:
        kl: ``[B]`` KL of each action, summed over its tokens (``Policy.reference_kl``).
        coef: ``beta`` (>= 0).

    Returns:
        ``[B]`` float64 penalties (0 where ``coef`` is 0).
    """
    return -float(coef) * kl.detach().to(torch.float64)
