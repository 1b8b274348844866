"""The processes a command left behind: its descendants, read from /proc (Linux), and whether each still runs.

A process is named by (pid, start time), so a pid reused after its process ended is not mistaken for it. An orphan
is reparented away from its parent, so a command's descendants are listed while it runs and checked afterwards.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

Process = tuple[int, str]  # pid, start time in clock ticks since boot


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from the state on (the name may hold spaces)


def descendants(root: int) -> list[Process]:
    children: dict[int, list[Process]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            children.setdefault(int(fields[1]), []).append((int(entry), fields[19]))
    found, todo = [], [root]
    while todo:
        for process in children.get(todo.pop(), []):
            found.append(process)
            todo.append(process[0])
    return found


def running(process: Process) -> bool:
    fields = _stat(process[0])
    return fields is not None and fields[19] == process[1] and fields[0] != "Z"


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
    children = descendants(process.pid)
    (os.killpg if group else os.kill)(process.pid, signum)
    return children


def still_running(processes: list[Process], after: float, since: float) -> list[Process]:
    """Which of ``processes`` still run ``after`` seconds past ``since`` (a time.monotonic())."""
    time.sleep(max(0.0, since + after - time.monotonic()))
    return [process for process in processes if running(process)]


def alive(pid: int) -> bool:
    """Whether ``pid`` names a process that has not ended (for a pid just read from that process)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"
