"""The processes a fedsim command starts, so that none outlives it; imports nothing of the project.

Read from Linux's /proc (elsewhere nothing is noted and nothing is set): a process is named by its pid and start
time, so a pid the system reused is never touched. ``ProcessWatch`` notes a process's descendants while it runs
(an orphan is reparented away, so it is noted before) and ``stop_processes`` ends them: SIGTERM, a grace period,
SIGKILL. ``die_with_parent`` asks the kernel to SIGKILL a child the moment its parent dies (PR_SET_PDEATHSIG), which
covers the one case no handler can: the parent itself killed with SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

Process = tuple[int, str]  # pid, start time (clock ticks after boot)

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_NOTE_EVERY_S = 0.5


def proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the state on (the command name before them may hold spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone, or no /proc here
        return None
    return text[text.rindex(")") + 2 :].split()


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


def running(process: Process) -> bool:
    """Whether ``process`` still runs: its pid names a live process (not a zombie) started when it was."""
    fields = proc_stat(process[0])
    return fields is not None and fields[19] == process[1] and fields[0] != "Z"


def stop_processes(processes: Iterable[Process], grace: float, *, clock: Callable[[], float] = time.monotonic) -> None:
    """SIGTERM every one of ``processes`` still running, then SIGKILL those still there after ``grace`` seconds
    (read on ``clock``: a test moves its own, so that what it checks does not depend on the machine's load)."""
    pending = [process for process in processes if running(process)]
    for process in pending:
        with contextlib.suppress(ProcessLookupError):  # it ended after all
            os.kill(process[0], signal.SIGTERM)
    deadline = clock() + grace
    while (pending := [process for process in pending if running(process)]) and clock() < deadline:
        time.sleep(0.05)
    for process in pending:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process[0], signal.SIGKILL)


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux; elsewhere nothing). Meant as a ``Popen``
    ``preexec_fn``: it runs in the child before exec, and the setting survives exec. The parent is the *thread*
    that started the child, so start such children from a thread that lives as long as they should."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the setting took: nobody would ever kill this one
        os._exit(1)


class ProcessWatch:
    """While inside: note this process's descendants every half second (and on ``note()``), so that those that
    were reparented away still count among them."""

    def __init__(self, keep: Callable[[int], bool] = lambda pid: True) -> None:
        self.noted: set[Process] = set()
        self._keep = keep
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._watch = threading.Thread(target=self._note_until_done, name="fedsim-process-watch", daemon=True)

    def note(self) -> set[Process]:
        found = descendants(os.getpid(), self._keep)
        with self._lock:
            self.noted |= found
            return set(self.noted)

    def _note_until_done(self) -> None:
        while True:
            self.note()
            if self._done.wait(_NOTE_EVERY_S):
                return

    def alive(self) -> list[Process]:
        """The noted processes still running."""
        return [process for process in self.note() if running(process)]

    def start(self) -> None:
        if self._watch.ident is None:
            self._watch.start()

    def close(self) -> None:
        """Stop noting (what was noted stays in ``noted``)."""
        self._done.set()
        if self._watch.ident is not None:
            self._watch.join()

    def __enter__(self) -> ProcessWatch:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
