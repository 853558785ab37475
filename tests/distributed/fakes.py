"""A small torch backend with LocalLLM's method names, to test the distributed plumbing fast."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch


class FakeBackend:
    """Scores are a deterministic function of the strings and one trainable vector."""

    def __init__(self, rank: int, fail_update_on: int | None = None, seed: int | None = None) -> None:
        self.rank = rank
        self.fail_update_on = fail_update_on
        torch.manual_seed(rank if seed is None else seed)  # different per server unless broadcast
        self.weight = torch.nn.Parameter(torch.randn(4))

    def _features(self, text: str) -> torch.Tensor:
        return torch.tensor([len(text), sum(map(ord, text)) % 97, text.count(" "), 1.0]) / 10.0

    def score(self, contexts: list[str], candidates: list[list[str]], **kwargs: Any) -> list[torch.Tensor]:
        return [torch.stack([self._features(c + o) @ self.weight for o in opts]).detach() for c, opts in zip(contexts, candidates)]

    def forward(self, keys: list[str], contexts: list[str], candidates: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
        return [{key: self._features(c) @ self.weight for key in keys} for c in contexts]

    def generate(self, contexts: list[str], **kwargs: Any) -> list[list[str]]:
        return [[c[::-1]] for c in contexts]

    def update(self, contexts: list[str], candidates: list[list[str]], _current_batch_ids: list[int], **kwargs: Any) -> list[dict[str, Any]]:
        if self.fail_update_on == self.rank:
            raise ZeroDivisionError(f"boom in updater on rank {self.rank}")
        self.weight.grad = None
        targets = kwargs["targets"]
        if contexts:
            preds = torch.stack([self._features(c) @ self.weight for c in contexts])
            loss = ((preds - torch.tensor([targets[i] for i in _current_batch_ids])) ** 2).mean()
            loss.backward()
        self.sync_gradients(len(contexts))
        with torch.no_grad():
            self.weight -= 0.1 * self.weight.grad
        return [{"rank": self.rank, "n": len(contexts), "pid": os.getpid()}]

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [self.weight]

    def sync_gradients(self, num_samples: int) -> None:
        return None

    def close(self) -> None:
        return None


@dataclass
class FakeFactory:
    fail_update_on: int | None = None
    seed: int | None = None

    def __call__(self, placement: Any) -> FakeBackend:
        return FakeBackend(placement.rank, self.fail_update_on, self.seed)
