"""How a command ends on a signal that no run is handling: one line and the shell's status, never killed
without a word; imports nothing of the project but its errors.

While a run plays, ``fedsim.core.stopping.stop_on_signals`` handles SIGINT and SIGTERM. Outside it (importing
torch, loading a config, writing the report of a finished run), Ctrl-C raises ``KeyboardInterrupt`` as Python
does, and SIGTERM (``sigterm_interrupts``) raises ``Interrupted`` the same way, so that the command line prints
its one line and exits with 143 where the system default would have killed the process mid-write.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fedsim.core.errors import Interrupted


class ReportInterrupted(Interrupted):
    """Stopped while the report of a complete run was being written: the run is whole, its report can be redone."""

    def __init__(self, run_dir: Path, signum: int | None) -> None:
        super().__init__(
            f"interrupted while writing the report; the run is complete in {run_dir}: "
            f"`fedsim report {run_dir}` writes it",
            signum,
        )


def sigterm_interrupts() -> None:
    """From now on (main thread), SIGTERM raises ``Interrupted`` wherever no run handles it, as Ctrl-C does."""

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted("interrupted", signum)

    signal.signal(signal.SIGTERM, interrupt)


@contextmanager
def reporting_on(run_dir: Path) -> Iterator[None]:
    """While inside, a stop says the run in ``run_dir`` is complete and how to write its report, not that nothing
    was run."""
    try:
        yield
    except KeyboardInterrupt as interrupt:
        raise ReportInterrupted(run_dir, getattr(interrupt, "signum", None) or signal.SIGINT) from None
