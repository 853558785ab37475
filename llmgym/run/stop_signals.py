"""A run stopped by a signal keeps its progress: what SIGTERM, SIGINT and SIGUSR1 do while training.

While :meth:`~llmgym.run.trainer.Trainer.train` runs in the main thread, :class:`SignalStop`
handles these signals (a signal ignored when training starts, as SIGINT is in a job that a
non-interactive shell started in the background, stays ignored):

- **SIGTERM** (what schedulers send before SIGKILL) and **SIGINT** (Ctrl-C) stop the run with a
  checkpoint it resumes from exactly. A rollout being collected or an evaluation in progress is
  abandoned at once (:class:`StopRequest` is raised in it): neither changes the weights, so the state
  captured when it began (its *restore point*) is the checkpoint. An update is finished first (its
  state before the update is gone once weights change, and half an update cannot be resumed), and
  the checkpoint is the state after it. A second SIGINT or SIGTERM stops at once, without a new
  checkpoint (``KeyboardInterrupt``, or ``SystemExit(143)``).
- Each signal of ``train.checkpoint_signals`` (SIGUSR1 by default, a scheduler's warning) asks for a
  checkpoint after the step in progress; training goes on.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Optional, Union

__all__ = ["StopRequest", "TrainingStopped", "SignalStop", "exit_status"]

#: The signals that stop a run with a checkpoint.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_Handler = Union[Callable[[int, Optional[FrameType]], Any], int, None]


def exit_status(signum: int) -> int:
    """The conventional exit status of a process stopped by ``signum``: ``128 + signum`` (SIGINT: 130)."""
    return 128 + int(signum)


class StopRequest(BaseException):
    """Raised in the main thread to stop training: by the handler in an abandonable phase, else at a step's end.

    A ``BaseException``, so that no ``except Exception`` on the way turns it into an error.

    Args:
        signum: The signal that asked for the stop.
        restore_point: The trainer's state when the abandoned phase began (``None``: the state now,
            between two steps).
    """

    def __init__(self, signum: int, restore_point: Any = None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)
        self.restore_point = restore_point


class TrainingStopped(Exception):
    """:meth:`~llmgym.run.trainer.Trainer.train` was stopped by a signal, after its checkpoint and report.

    Args:
        signum: The signal.
        checkpoint: The checkpoint folder the run resumes from.
        env_steps: Its env steps.
    """

    def __init__(self, signum: int, checkpoint: Path, env_steps: int) -> None:
        self.signum = int(signum)
        self.checkpoint = checkpoint
        self.env_steps = env_steps
        super().__init__(
            f"stopped by {signal.Signals(signum).name} at {env_steps} env steps; checkpoint {checkpoint}"
        )

    @property
    def exit_status(self) -> int:
        """``128 + signum`` (130 for SIGINT, 143 for SIGTERM)."""
        return exit_status(self.signum)


def _note(text: str) -> None:
    """One line on stderr, written by the handler itself (``print`` is not safe to re-enter)."""
    try:
        os.write(2, f"llmgym: {text}\n".encode())
    except OSError:
        pass


class SignalStop:
    """The stop and checkpoint signals of one training run; a context manager that installs their handlers.

    Handlers are installed only in the main thread (elsewhere signals keep their handlers and
    nothing here is triggered); the previous handlers are restored on exit.

    Args:
        checkpoint_signals: Names of the signals that ask for a checkpoint (``train.checkpoint_signals``).
    """

    def __init__(self, checkpoint_signals: Sequence[str] = ("SIGUSR1",)) -> None:
        self._checkpoint_signals = tuple(signal.Signals[name] for name in checkpoint_signals)
        #: The signal that asked to stop, once one did.
        self.requested: Optional[int] = None
        #: Whether a checkpoint signal came since :meth:`take_checkpoint_request` last returned ``True``.
        self.checkpoint_requested = False
        self._restore_point: Any = None
        self._abandonable = False
        self._previous: dict[int, _Handler] = {}
        self._pid = os.getpid()

    def __enter__(self) -> SignalStop:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in (*STOP_SIGNALS, *self._checkpoint_signals):
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN:
                continue
            self._previous[signum] = previous
            signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def begin_abandonable(self, restore_point: Any) -> None:
        """A phase that a stop may abandon begins (a rollout, an evaluation); ``restore_point`` is the state now.

        Raises:
            StopRequest: At once, when a stop was asked for already.
        """
        self._restore_point = restore_point
        self._abandonable = True
        if self.requested is not None:
            self.end_abandonable()
            raise StopRequest(self.requested, restore_point)

    def end_abandonable(self) -> None:
        """The abandonable phase ended (its work is kept): a stop from now on waits for the step's end."""
        self._abandonable = False
        self._restore_point = None

    def raise_if_requested(self) -> None:
        """Between two steps: stop now if a stop was asked for.

        Raises:
            StopRequest: Without a restore point (the state now is the one to save).
        """
        if self.requested is not None:
            raise StopRequest(self.requested)

    def take_checkpoint_request(self) -> bool:
        """Whether a checkpoint signal came (since the last call that returned ``True``)."""
        requested, self.checkpoint_requested = self.checkpoint_requested, False
        return requested

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        del frame
        if os.getpid() != self._pid:  # a process forked while training: the signal's default action
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        name = signal.Signals(signum).name
        if signum in self._checkpoint_signals:
            self.checkpoint_requested = True
            _note(f"{name}: writing a checkpoint after the step in progress; training goes on")
            return
        if self.requested is not None:
            _note(f"{name} again: stopping at once, without a new checkpoint")
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(exit_status(signum))
        self.requested = signum
        if self._abandonable:
            _note(f"{name}: abandoning the rollout or evaluation in progress, writing a checkpoint, stopping")
            restore_point = self._restore_point
            self.end_abandonable()
            raise StopRequest(signum, restore_point)
        _note(
            f"{name}: finishing the update in progress, then writing a checkpoint and stopping "
            f"({name} again stops at once, without one)"
        )
