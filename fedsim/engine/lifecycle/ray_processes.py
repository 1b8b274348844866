"""The Ray processes of a run, so that none outlives it.

Flower ends a simulation by asking each client actor to exit and shutting Ray down at once: an actor that had
not exited yet outlives its killed raylet by 10 to 20 seconds. ``RayProcesses`` notes the run's Ray processes
while the simulation runs (the driver's children that are Ray's, and all their descendants, read from Linux's
/proc; elsewhere it notes nothing) and kills those still there once Ray was shut down. A process is named by its
pid and start time, so a pid the system reused is never touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from fedsim.core.processes import Process, ProcessWatch, descendants, proc_stat, running

__all__ = ["Process", "RayProcesses", "descendants", "proc_stat", "ray_descendants", "running"]


def _is_ray(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"/ray/" in command or command.startswith(b"ray::")


def ray_descendants(driver: int) -> set[Process]:
    """The driver's children that are Ray's (GCS, raylet, agents) and every process under them (the workers)."""
    return descendants(driver, keep=_is_ray)


class RayProcesses(ProcessWatch):
    """While inside: note the run's Ray processes every half second; on leaving, kill those still running."""

    def __init__(self) -> None:
        super().__init__(keep=_is_ray)

    def __enter__(self) -> RayProcesses:
        super().__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        super().__exit__(*exc_info)
        for process in self.noted:
            if running(process):
                with contextlib.suppress(ProcessLookupError):  # it ended after all
                    os.kill(process[0], signal.SIGKILL)
