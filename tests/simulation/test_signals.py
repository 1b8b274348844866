"""Real Ray: once Ray is shut down from another thread (as Flower's backend does when the simulation ends),
SIGTERM still reaches the run, which is then waiting for its attacks, instead of killing it outright."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from fedsim.core.stopping import StopSignal, stop_on_signals
from fedsim.engine.lifecycle.ray_processes import RayProcesses
from fedsim.engine.lifecycle.ray_resources import start_ray, stop_ray


def caught_by_the_process(signum: int) -> bool:
    """Whether the kernel delivers ``signum`` to a handler (Linux's SigCgt), whatever Python's getsignal says."""
    status = Path("/proc/self/status").read_text()
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
    return bool(caught >> (signum - 1) & 1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the signal mask from /proc")
def test_sigterm_after_ray_was_shut_down_in_another_thread_asks_the_run_to_stop(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # start_ray extends it for Ray's workers
    with RayProcesses(), stop_on_signals(StopSignal(), lambda signum: None) as stop:
        try:
            start_ray({"address": "local", "num_cpus": 1, "include_dashboard": False, "log_to_driver": False})
            import ray

            shutting_down = threading.Thread(target=ray.shutdown)  # Flower's RayBackend.terminate, in its thread
            shutting_down.start()
            shutting_down.join()
            # before any reclaim: was the system default here (Ray's crash handler uninstalled at shutdown)
            assert caught_by_the_process(signal.SIGTERM)
        finally:
            stop_ray()
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested and stop.signum == signal.SIGTERM
