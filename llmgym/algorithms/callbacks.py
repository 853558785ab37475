"""Callbacks of :meth:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm.learn` (stable-baselines3's shape).

A :class:`Callback` is told when training starts, around each rollout's collection, after every
vector step of a rollout (:meth:`Callback.on_step`, called by every collection loop through
:meth:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm.rollout_step`), after every update (with the
iteration's metrics, which it may extend) and when training ends. ``llmgym train``'s logging, periodic
evaluation and checkpoints are three of them (:mod:`llmgym.run.trainer`), and the recording of
training episodes for the run report a fourth (:class:`~llmgym.report.records.TrainingEpisodeSampler`);
a plain function ``f(algorithm, metrics)`` is a callback too (:class:`FunctionCallback`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from llmgym.algorithms.on_policy import OnPolicyAlgorithm, RolloutStep

__all__ = ["Callback", "CallbackArgument", "CallbackList", "FunctionCallback", "as_callback"]


class Callback:
    """Hooks into the training loop; each does nothing unless overridden."""

    def on_training_start(self, algorithm: OnPolicyAlgorithm) -> None:
        """Before the first rollout of :meth:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm.learn`."""

    def on_rollout_start(self, algorithm: OnPolicyAlgorithm) -> None:
        """Before each rollout is collected."""

    def on_step(self, algorithm: OnPolicyAlgorithm, step: RolloutStep) -> None:
        """After each vector step of a rollout (it must not change the step: training uses it)."""

    def on_rollout_end(self, algorithm: OnPolicyAlgorithm, metrics: dict[str, float]) -> None:
        """After each rollout is collected, before its update; ``metrics`` are the rollout's statistics."""

    def on_update(self, algorithm: OnPolicyAlgorithm, metrics: dict[str, float]) -> None:
        """After each rollout and its update; ``metrics`` are the iteration's (a callback may add some)."""

    def on_training_end(self, algorithm: OnPolicyAlgorithm) -> None:
        """After the last update (not called when training raised)."""


class FunctionCallback(Callback):
    """A function ``f(algorithm, metrics)`` called after each update.

    Args:
        function: The function.
    """

    def __init__(self, function: Callable[[OnPolicyAlgorithm, dict[str, float]], None]) -> None:
        self.function = function

    def on_update(self, algorithm: OnPolicyAlgorithm, metrics: dict[str, float]) -> None:
        """Call the function."""
        self.function(algorithm, metrics)


class CallbackList(Callback):
    """Callbacks called in order.

    Args:
        callbacks: The callbacks.
    """

    def __init__(self, callbacks: Sequence[Callback]) -> None:
        self.callbacks = list(callbacks)

    def on_training_start(self, algorithm: OnPolicyAlgorithm) -> None:
        """Each callback's, in order."""
        for callback in self.callbacks:
            callback.on_training_start(algorithm)

    def on_rollout_start(self, algorithm: OnPolicyAlgorithm) -> None:
        """Each callback's, in order."""
        for callback in self.callbacks:
            callback.on_rollout_start(algorithm)

    def on_step(self, algorithm: OnPolicyAlgorithm, step: RolloutStep) -> None:
        """Each callback's, in order."""
        for callback in self.callbacks:
            callback.on_step(algorithm, step)

    def on_rollout_end(self, algorithm: OnPolicyAlgorithm, metrics: dict[str, float]) -> None:
        """Each callback's, in order."""
        for callback in self.callbacks:
            callback.on_rollout_end(algorithm, metrics)

    def on_update(self, algorithm: OnPolicyAlgorithm, metrics: dict[str, float]) -> None:
        """Each callback's, in order."""
        for callback in self.callbacks:
            callback.on_update(algorithm, metrics)

    def on_training_end(self, algorithm: OnPolicyAlgorithm) -> None:
        """Each callback's, in order."""
        for callback in self.callbacks:
            callback.on_training_end(algorithm)


#: What :meth:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm.learn` takes as its ``callback``.
CallbackArgument = Union[
    Callback, Sequence[Callback], Callable[["OnPolicyAlgorithm", dict[str, float]], None], None
]


def as_callback(callback: CallbackArgument) -> Callback:
    """One :class:`Callback` of a callback, a list of them, a function, or ``None`` (does nothing)."""
    if isinstance(callback, Callback):
        return callback
    if callback is None:
        return Callback()
    if isinstance(callback, Sequence):
        return CallbackList(callback)
    return FunctionCallback(callback)
