"""Stop signals: the first one asks the run to stop where it can, the second forces it."""

from __future__ import annotations

import os
import signal

import pytest

from fedsim.core.stopping import StopRequested, StopSignal, exit_status, reclaim_signals, stop_on_signals


def test_the_first_signal_only_requests_a_stop_and_the_second_forces_it():
    forced = []
    with stop_on_signals(StopSignal(), forced.append) as stop:
        os.kill(os.getpid(), signal.SIGTERM)  # delivered before os.kill returns, in this (the main) thread
        assert stop.requested and forced == []
        with pytest.raises(StopRequested) as stopped:
            stop.check()
        assert stopped.value.signum == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGINT)
        assert forced == [signal.SIGINT]
    assert stop.signum == signal.SIGTERM  # the first signal is the one the exit status reports


def test_the_previous_handlers_come_back_on_leaving():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with stop_on_signals(StopSignal(), lambda signum: None):
        assert signal.getsignal(signal.SIGINT) is not before[0]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_library_that_took_sigterm_over_gives_it_back_when_the_run_reclaims_it():
    def library_exit(signum, frame):  # what ray.init installs: sys.exit wherever the main thread is
        raise SystemExit(signum)

    with stop_on_signals(StopSignal(), lambda signum: None) as stop:
        signal.signal(signal.SIGTERM, library_exit)
        reclaim_signals()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested


def test_no_stop_requested_checks_out():
    StopSignal().check()


def test_exit_statuses_are_the_shells():
    assert (exit_status(signal.SIGINT), exit_status(signal.SIGTERM)) == (130, 143)
