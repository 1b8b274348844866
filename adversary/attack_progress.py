"""What the attacks still under way are doing, in one line: while a run waits for them at its end, the console says
which attack on which round and targets runs, for how long, and against which budget, every ``EVERY_S`` seconds."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

EVERY_S = 30.0  # between two progress lines while a run waits for its attacks


@dataclass
class _Job:
    label: str  # e.g. "dlg on round 1 (2 targets)"
    budget_s: float | None  # the attack's time_limit, or the portfolio's max_seconds
    submitted: float = field(default_factory=time.monotonic)


class AttackProgress:
    """The attack jobs of a run, each noted as it is submitted."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self._jobs: dict[int, tuple[Future, _Job]] = {}
        self._lock = threading.Lock()
        self._every_s = every_s
        self._last = time.monotonic()

    def note(self, job: Future, label: str, budget_s: float | None) -> None:
        with self._lock:
            self._jobs[id(job)] = (job, _Job(label, budget_s))

    def line(self, now: float | None = None) -> str:
        """``2 of 5 attack job(s) done; running: dlg on round 1 (2 targets) 1m40s of 2m0s budget; ...``."""
        now = time.monotonic() if now is None else now
        with self._lock:
            jobs = list(self._jobs.values())
        done = sum(future.done() for future, _ in jobs)
        under_way = [
            f"{job.label} {_duration(now - job.submitted)}"
            + (f" of {_duration(job.budget_s)} budget" if job.budget_s is not None else " (no time budget)")
            + ("" if future.running() else ", queued")
            for future, job in jobs
            if not future.done()
        ]
        return f"{done} of {len(jobs)} attack job(s) done" + (
            f"; under way: {'; '.join(under_way)}" if under_way else ""
        )

    def due(self, now: float | None = None) -> bool:
        """Whether a progress line is due (every ``every_s`` seconds while waiting)."""
        now = time.monotonic() if now is None else now
        if now - self._last < self._every_s:
            return False
        self._last = now
        return True


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"
