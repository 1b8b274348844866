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


def still_running(processes: list[Process], after: float, since: float) -> list[Process]:
    """Which of ``processes`` still run ``after`` seconds past ``since`` (a time.monotonic())."""
    time.sleep(max(0.0, since + after - time.monotonic()))
    return [process for process in processes if running(process)]


def alive(pid: int) -> bool:
    """Whether ``pid`` names a process that has not ended (for a pid just read from that process)."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] != "Z"
