"""The processes a command left behind: its descendants, read from /proc (Linux), and whether each still runs.

A process is named by (pid, start time), so a pid reused after its process ended is not mistaken for it. An orphan
is reparented away from its parent, so a command's descendants are listed while it runs and checked afterwards.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from fedsim.core.processes import Process, descendants, proc_stat, running


def signal_when(
    process: subprocess.Popen, ready: Path, signum: int, *, group: bool = False, timeout: float = 300
) -> list[Process]:
    """Wait until ``ready`` exists, then send ``signum`` (to the process group: as a terminal's Ctrl-C does);
    returns the descendants as they were at the signal."""
    deadline = time.monotonic() + timeout
    while not ready.exists():
        assert process.poll() is None, f"the command ended before {ready.name} existed"
        assert time.monotonic() < deadline, f"{ready.name} never appeared"
        time.sleep(0.02)
    children = list(descendants(process.pid))
    (os.killpg if group else os.kill)(process.pid, signum)
    return children


def still_running(processes: list[Process], within: float = 60) -> list[Process]:
    """Which of ``processes`` still run once every one has ended or ``within`` seconds have passed: a bound on
    liveness (an orphan would run on for minutes), never a measure of how fast they end, which depends on the
    machine's load."""
    deadline = time.monotonic() + within
    while (left := [process for process in processes if running(process)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def alive(pid: int) -> bool:
    """Whether ``pid`` names a process that has not ended (for a pid just read from that process)."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] != "Z"
