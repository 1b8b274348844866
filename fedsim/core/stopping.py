"""Stopping a run on SIGINT or SIGTERM without faking a round; imports nothing of the project.

The first signal only *asks* the run to stop (``StopSignal.request``): the parts that wait (the server's
grid polls, the round driver before it commits) see the request and raise ``StopRequested``, so the round
in progress is never committed and every child process is shut down by the code that started it. Python's
default would raise ``KeyboardInterrupt`` in the main thread wherever it happens to be (inside Ray's or
gRPC's calls, which then abort the interpreter) while Flower's server thread plays on. A second signal
forces the stop: ``force`` (the caller's) kills what is left and ends the process at once; what was
committed before stays committed, since every run file is written atomically.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

logger = logging.getLogger("fedsim")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_status(signum: int) -> int:
    """The shell's status for a process ended by ``signum``: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum)


class StopRequested(Exception):
    """A stop was requested while this part of the run waited or was about to commit.

    An ``Exception`` (not a ``KeyboardInterrupt``) so that Flower's server thread hands it to the main thread,
    which re-raises it from ``run_simulation`` once the simulation has shut down.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = int(signum)


class StopSignal:
    """A stop request shared by the threads of one run (or of one sweep); set once, never cleared."""

    def __init__(self) -> None:
        self._requested = threading.Event()
        self.signum: int | None = None

    def request(self, signum: int = signal.SIGINT) -> None:
        if self.signum is None:
            self.signum = int(signum)
        self._requested.set()

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def check(self) -> None:
        """Raise ``StopRequested`` if a stop was requested."""
        if self.signum is not None and self._requested.is_set():
            raise StopRequested(self.signum)


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


_installed: list[Callable[[int, object], None]] = []  # the handler of the innermost stop_on_signals, if any


@contextmanager
def stop_on_signals(stop: StopSignal, force: Callable[[int], None]) -> Iterator[StopSignal]:
    """While inside: the first SIGINT or SIGTERM requests ``stop``; the next one calls ``force(signum)``.

    Signal handlers can only be installed from the main thread; elsewhere this does nothing (the thread's owner
    decides how to stop). The previous handlers come back on leaving.
    """
    if not in_main_thread():
        yield stop
        return

    def on_signal(signum: int, frame: object) -> None:
        if not stop.requested:
            stop.request(signum)
            logger.warning(
                "%s: stopping without committing the round in progress (press Ctrl-C again to force)",
                signal.Signals(signum).name,
            )
            return
        force(signum)

    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    _installed.append(on_signal)
    reclaim_signals()
    try:
        yield stop
    finally:
        _installed.remove(on_signal)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def handling_signals() -> bool:
    """Whether a ``stop_on_signals`` handles SIGINT and SIGTERM for this (the main) thread now."""
    return bool(_installed) and in_main_thread()


def reclaim_signals() -> None:
    """Route SIGINT and SIGTERM to the active ``stop_on_signals`` again, after a library took them over.

    ``ray.init`` sets its own SIGTERM handler (``sys.exit`` wherever the main thread is), and ``ray.shutdown``
    leaves SIGTERM at the system default: call this after either. Python installs the handler again even when
    ``signal.getsignal`` already names it (Ray changed it below Python).
    """
    if _installed and in_main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, _installed[-1])


def force_exit(signum: int) -> NoReturn:
    """The second signal: kill this process's children (attack workers, sweep workers) and exit at once.

    Ray's own processes share their driver's fate and end with it. Nothing here waits, logs or takes a lock
    the interrupted code may hold: it runs inside a signal handler.
    """
    os.write(2, f"fedsim: {signal.Signals(signum).name} again: forced to stop now\n".encode())
    for child in multiprocessing.active_children():
        child.kill()
    os._exit(exit_status(signum))
