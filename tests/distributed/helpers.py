"""Picklable pieces for the distributed tests with the real LocalLLM (imported by the servers too)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from llmgym.llm.updater import Updater


class SGDUpdater(Updater):
    """Policy + value loss, averaged over this server's samples, then the weighted all-reduce."""

    def setup(self) -> None:
        self.optimizer = torch.optim.SGD(self.llm.trainable_parameters(), lr=0.05)

    def perform_update(
        self,
        contexts: Sequence[str],
        candidates: Sequence[Sequence[str]] | None,
        _current_batch_ids: Sequence[int],
        **kwargs: Any,
    ) -> dict[str, Any]:
        assert self.optimizer is not None
        self.optimizer.zero_grad()
        if contexts:
            out = self.llm.forward(["score", "value"], contexts, candidates, require_grad=True)
            returns = torch.tensor([kwargs["returns"][i] for i in _current_batch_ids])
            logp = torch.stack([o["score"][0] for o in out])
            values = torch.stack([o["value"].reshape(()) for o in out]).cpu()
            loss = (-logp.cpu() + (values - returns) ** 2).mean()
            loss.backward()
        self.llm.sync_gradients(len(contexts))
        self.optimizer.step()
        return {"samples": len(contexts)}


class FailingUpdater(Updater):
    """Raises on the server that gets the context 'explode'."""

    def perform_update(self, contexts, candidates, _current_batch_ids, **kwargs):  # type: ignore[no-untyped-def]
        if "explode" in contexts:
            raise KeyError("explode: this updater found a bad sample")
        self.llm.sync_gradients(len(contexts))
        return {}


class CacheProbe(Updater):
    """Reports how many items this server's frozen-trunk cache holds (trains nothing)."""

    def perform_update(self, contexts, candidates, _current_batch_ids, **kwargs):  # type: ignore[no-untyped-def]
        return {"cached": len(self.llm.trunk_cache)}
