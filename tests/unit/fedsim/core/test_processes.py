"""The processes a command starts: noted while they run, stopped with SIGKILL after a grace period, and (Linux) gone
with their parent even when the parent is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from fedsim.core.processes import ProcessWatch, descendants, die_with_parent, running, stop_processes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")

# A parent that starts a sleeping child (with the given preexec_fn), prints the child's pid, and waits.
PARENT = """
import subprocess, sys, time
from fedsim.core.processes import die_with_parent
child = subprocess.Popen(["sleep", "60"], preexec_fn=die_with_parent if sys.argv[1] == "yes" else None)
print(child.pid, flush=True)
time.sleep(60)
"""

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"


def _wait_until_gone(process: tuple[int, str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while running(process):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("dies_with_parent", [True, False])
def test_a_child_set_to_die_with_its_parent_is_gone_once_the_parent_is_sigkilled(dies_with_parent):
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, "yes" if dies_with_parent else "no"], stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    noted = next(process for process in descendants(parent.pid) if process[0] == child)
    parent.kill()
    parent.wait()
    try:
        assert _wait_until_gone(noted, timeout=5) is dies_with_parent  # without it, the orphan sleeps on
    finally:
        stop_processes([noted], grace=0)


def test_a_process_that_ignores_sigterm_is_sigkilled_after_the_grace_period():
    stubborn = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE)
    stubborn.stdout.readline()  # its handler is in place
    process = next(process for process in descendants(os.getpid()) if process[0] == stubborn.pid)
    readings = []  # a clock at 0.05 s per reading, whatever the machine's load: the grace of 0.5 s is 10 readings

    def clock() -> float:
        readings.append(len(readings) * 0.05)
        return readings[-1]

    stop_processes([process], grace=0.5, clock=clock)
    assert stubborn.wait(timeout=60) == -signal.SIGKILL
    assert 0.5 <= readings[-1] <= 0.55  # killed once the grace had passed, not before and not a reading later


def test_the_watch_keeps_a_grandchild_that_was_orphaned_since():
    with ProcessWatch() as watch:
        parent = subprocess.Popen([sys.executable, "-c", PARENT, "no"], stdout=subprocess.PIPE, text=True)
        grandchild = int(parent.stdout.readline())
        watch.note()
        parent.kill()
        parent.wait()
        assert grandchild not in {pid for pid, _ in descendants(os.getpid())}  # reparented away
        orphans = [process for process in watch.alive() if process[0] == grandchild]
    assert len(orphans) == 1
    stop_processes(orphans, grace=1)
    assert not running(orphans[0])


def test_die_with_parent_is_harmless_in_a_normal_child():
    done = subprocess.run(["true"], preexec_fn=die_with_parent, check=False)
    assert done.returncode == 0
