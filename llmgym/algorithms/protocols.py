"""The typed seams of the algorithms: the loss (or step) an updater runs and the LLM backend it trains."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from torch import Tensor

if TYPE_CHECKING:
    from llmgym.algorithms.batch import PolicyOutputs, SampleTargets
    from llmgym.algorithms.updaters import UpdateContext

__all__ = ["MaskedPolicyBackend", "NaturalGradientObjective", "Objective", "PolicyBackend"]


@runtime_checkable
class Objective(Protocol):
    """An algorithm's loss on a chunk of samples (picklable: it travels to every LLM server)."""

    @property
    def kl_coef(self) -> float:
        """Weight of the KL to the reference policy (> 0: the updater computes ``ref_kl``)."""
        ...

    def loss(self, outputs: PolicyOutputs, targets: SampleTargets) -> tuple[Tensor, dict[str, Tensor]]:
        """The 0-d mean loss over the chunk and its detached 0-d statistics.

        Args:
            outputs: The current policy's ``[B]`` log-probs, entropies, values and reference KLs.
            targets: The rollout's ``[B]`` old log-probs, old values, advantages and returns.
        """
        ...


@runtime_checkable
class NaturalGradientObjective(Protocol):
    """An algorithm whose server-side step is not a loss minimised by the optimizer (TRPO's).

    The :class:`~llmgym.algorithms.updaters.PolicyUpdater` hands it the whole update through an
    :class:`~llmgym.algorithms.updaters.UpdateContext`: its share of the samples, the policy's and
    the critic's parameters, the sample-weighted all-reduce across servers and the updater's
    minibatch loop. Picklable, as an :class:`Objective`.
    """

    @property
    def kl_coef(self) -> float:
        """Weight of the KL to the reference policy (> 0: the updater computes ``ref_kl``)."""
        ...

    def step(self, context: UpdateContext) -> dict[str, float]:
        """Update the policy and the critic on this server's share; return the statistics.

        Every server calls it with its own share and must leave its parameters equal to the
        others' (every quantity the step depends on goes through ``context.mean``).
        """
        ...


@runtime_checkable
class PolicyBackend(Protocol):
    """The LLM an on-policy algorithm trains: :class:`llmgym.LLM`, local or distributed."""

    def update(
        self, contexts: Sequence[str], candidates: Sequence[Sequence[str]] | None = None, **kwargs: Any
    ) -> list[dict[str, Any]]:
        """Run the LLM's updater on a batch; one result per LLM server."""
        ...


@runtime_checkable
class MaskedPolicyBackend(PolicyBackend, Protocol):
    """An LLM that also holds NLPO's mask policy (:class:`llmgym.LLM`, local or distributed)."""

    def refresh_mask_policy(self) -> None:
        """Snapshot the current trainable weights as the mask policy, on every LLM server."""
        ...
