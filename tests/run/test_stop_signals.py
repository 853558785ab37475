"""SignalStop: what each signal does to a run's phase, with real signals sent to this process."""

import os
import signal

import pytest

from llmgym.run.stop_signals import SignalStop, StopRequest, TrainingStopped


@pytest.fixture(autouse=True)
def _python_sigint():
    """SIGINT at Python's handler, as in a terminal (a background shell may start pytest with it ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_stop_in_an_abandonable_phase_raises_at_once_with_its_restore_point():
    with SignalStop() as stop:
        stop.begin_abandonable("state at the rollout's start")
        with pytest.raises(StopRequest) as info:
            os.kill(os.getpid(), signal.SIGTERM)
        assert (
            info.value.signum == signal.SIGTERM and info.value.restore_point == "state at the rollout's start"
        )


def test_a_stop_during_an_update_waits_for_the_steps_end_and_a_second_one_stops_at_once():
    with SignalStop() as stop:
        os.kill(os.getpid(), signal.SIGINT)  # not abandonable: nothing is raised now
        assert stop.requested == signal.SIGINT
        with pytest.raises(StopRequest) as info:
            stop.begin_abandonable("state before the evaluation")  # the next phase stops at once
        assert info.value.restore_point == "state before the evaluation"
        with pytest.raises(StopRequest) as info:
            stop.raise_if_requested()
        assert info.value.restore_point is None
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(SystemExit) as exit_info:
            os.kill(os.getpid(), signal.SIGTERM)
        assert exit_info.value.code == 143


def test_a_checkpoint_signal_asks_once_and_training_goes_on():
    with SignalStop(["SIGUSR1"]) as stop:
        stop.begin_abandonable("state")
        os.kill(os.getpid(), signal.SIGUSR1)  # no stop, even in an abandonable phase
        assert stop.requested is None
        assert stop.take_checkpoint_request() is True
        assert stop.take_checkpoint_request() is False


def test_handlers_are_restored_and_an_ignored_signal_stays_ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a job started in the background by a non-interactive shell
    before = signal.getsignal(signal.SIGTERM)
    with SignalStop([]) as stop:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested is None
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # train.checkpoint_signals=[]
    assert signal.getsignal(signal.SIGTERM) is before


def test_training_stopped_has_the_conventional_exit_status(tmp_path):
    assert TrainingStopped(signal.SIGTERM, tmp_path, 8).exit_status == 143
    assert TrainingStopped(signal.SIGINT, tmp_path, 8).exit_status == 130
    assert "stopped by SIGUSR2 at 8 env steps" in str(TrainingStopped(signal.SIGUSR2, tmp_path, 8))
