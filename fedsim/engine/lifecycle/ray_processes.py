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
import threading
from collections.abc import Callable
from pathlib import Path

Process = tuple[int, str]  # pid, start time (clock ticks after boot)

_NOTE_EVERY_S = 1.0


def proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the state on (the command name before them may hold spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone, or no /proc here
        return None
    return text[text.rindex(")") + 2 :].split()


def _is_ray(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"/ray/" in command or command.startswith(b"ray::")


def descendants(root: int, keep: Callable[[int], bool] = lambda pid: True) -> set[Process]:
    """``root``'s children that ``keep`` accepts, and every process under them."""
    children: dict[int, list[Process]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit() and (fields := proc_stat(int(entry))) is not None:
            children.setdefault(int(fields[1]), []).append((int(entry), fields[19]))
    found: set[Process] = set()
    todo = [process for process in children.get(root, []) if keep(process[0])]
    while todo:
        process = todo.pop()
        found.add(process)
        todo.extend(children.get(process[0], []))
    return found


def ray_descendants(driver: int) -> set[Process]:
    """The driver's children that are Ray's (GCS, raylet, agents) and every process under them (the workers)."""
    return descendants(driver, keep=_is_ray)


def running(process: Process) -> bool:
    """Whether ``process`` still runs: its pid names a live process started when it was."""
    fields = proc_stat(process[0])
    return fields is not None and fields[19] == process[1] and fields[0] != "Z"


class RayProcesses:
    """While inside: note the run's Ray processes every second; on leaving, kill those still running."""

    def __init__(self) -> None:
        self.noted: set[Process] = set()
        self._done = threading.Event()
        self._watch = threading.Thread(target=self._note, name="fedsim-ray-processes", daemon=True)

    def _note(self) -> None:
        driver = os.getpid()
        while True:
            self.noted |= ray_descendants(driver)
            if self._done.wait(_NOTE_EVERY_S):
                return

    def __enter__(self) -> RayProcesses:
        self._watch.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._watch.join()
        for process in self.noted:
            if running(process):
                with contextlib.suppress(ProcessLookupError):  # it ended after all
                    os.kill(process[0], signal.SIGKILL)
