"""Updater: the pluggable training step run next to the model (on every LLM server)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from llmgym.llm.protocols import CandidateSets, Contexts, TrainableLLM

__all__ = ["Updater"]


class Updater(abc.ABC):
    """One training step on the LLM and its module functions (Lamorel's ``BaseUpdater``).

    ``self.llm`` (the in-process :class:`~llmgym.llm.protocols.TrainableLLM`, a
    :class:`~llmgym.llm.local.LocalLLM`) is set, and :meth:`setup`
    called, before the first update. Build the optimizer in :meth:`setup` and assign it to
    ``self.optimizer``: the default :meth:`state_dict` saves it in checkpoints.

    Attributes:
        llm: The LLM this updater trains.
        optimizer: Optional optimizer, saved and restored with the checkpoint.
    """

    llm: TrainableLLM
    optimizer: torch.optim.Optimizer | None = None

    def bind(self, llm: TrainableLLM) -> None:
        """Attach the LLM and run :meth:`setup` (called once by the backend)."""
        self.llm = llm
        self.setup()

    def setup(self) -> None:  # noqa: B027 - optional hook
        """Build optimizers and schedulers; ``self.llm`` is set."""

    @abc.abstractmethod
    def perform_update(
        self,
        contexts: Contexts,
        candidates: CandidateSets | None,
        _current_batch_ids: Sequence[int],
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Run one update on this server's share of the batch.

        Args:
            contexts: This server's contexts.
            candidates: Their candidates (or ``None``).
            _current_batch_ids: Index of each context in the client's full batch (slice other
                per-sample arrays in ``kwargs`` with it).
            **kwargs: Everything else given to ``LLM.update``.

        Returns:
            Metrics of the update (e.g. ``{"loss": 0.3}``).
        """

    def state_dict(self) -> dict[str, Any]:
        """State saved in checkpoints (the optimizer's by default)."""
        return {"optimizer": self.optimizer.state_dict()} if self.optimizer is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        if self.optimizer is not None and "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
