"""A sweep's shared services: the attack workers outlive each run that borrows them, until settings change."""

from __future__ import annotations

import os

from adversary.workers import WorkerSettings
from fedsim.engine.lifecycle.services import SharedServices

ONE_WORKER = WorkerSettings(count=1, threads=1, devices=("cpu",))


def _worker_pid(services: SharedServices, settings: WorkerSettings) -> int:
    lent = services.attack_workers(settings)
    pid = lent._pool.call(os.getpid).result(timeout=120)
    lent.shutdown()  # what a run does when it ends
    return pid


def test_runs_in_turn_borrow_the_same_attack_workers_until_they_ask_for_other_ones():
    with SharedServices() as services:
        first = _worker_pid(services, ONE_WORKER)
        assert services.take_started() == ["attack workers"]
        assert _worker_pid(services, ONE_WORKER) == first  # the run's shutdown left the pool running
        assert services.take_started() == []
        other = _worker_pid(services, WorkerSettings(count=1, threads=2, devices=("cpu",)))
        assert other != first and services.take_started() == ["attack workers"]
