"""Rolling statistics of the finished training episodes an algorithm logs with each update."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

__all__ = ["EpisodeStats"]


class EpisodeStats:
    """Rolling statistics of finished training episodes (return, length, success).

    Args:
        window: Number of most recent episodes the means are taken over.
    """

    def __init__(self, window: int = 100) -> None:
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.successes: deque[float] = deque(maxlen=window)
        self.episodes = 0

    def add(self, episode: Mapping[str, Any]) -> None:
        """Record one finished episode: a mapping with ``return``, ``length`` and ``success``."""
        self.returns.append(float(episode["return"]))
        self.lengths.append(int(episode["length"]))
        self.successes.append(float(bool(episode.get("success", False))))
        self.episodes += 1

    def summary(self) -> dict[str, float]:
        """Means over the window (empty dict before the first episode)."""
        if not self.returns:
            return {}
        n = len(self.returns)
        return {
            "episode_return": sum(self.returns) / n,
            "episode_length": sum(self.lengths) / n,
            "success_rate": sum(self.successes) / n,
            "episodes": float(self.episodes),
        }
