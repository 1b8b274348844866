"""What a sequential sweep starts once and lends to each of its runs: Ray and the pool of attack workers.

A run on its own starts Ray and its attack workers, and stops both when it ends. In a sweep whose points run one
after another, that start-up would be paid again by every point: ``SharedServices`` keeps them instead. Ray stays
up between points as long as a point asks for the same Ray (the same ``ray.init`` arguments; another point's are
honoured by restarting it), and the attack workers as long as a point asks for the same worker settings. Flower's
simulation starts a pool of client actors for every run and shuts Ray down when the run ends (its Ray backend's
``build`` and ``terminate``); while a run plays on a shared Ray, that backend keeps the pool instead and hands it
to the next run that asks for actors with the same resources, once every actor of it is idle again (a run that
stopped midway leaves busy ones: the next run gets a fresh pool). A client actor holds no state of a run: Flower
hands it the run's ClientApp with every message. Every Ray process the sweep started is noted and killed when the
services close (``RayProcesses``), as a run on its own does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from adversary.workers import AttackJob, PortfolioJob, ProcessAttackWorkers, WorkerSettings
from fedsim.core.flower_private import replaced_ray_backend
from fedsim.engine.lifecycle.ray_processes import RayProcesses
from fedsim.engine.lifecycle.ray_resources import start_ray, stop_ray

logger = logging.getLogger("fedsim")


class LentAttackWorkers:
    """A run's view of the shared pool: its jobs go to the pool, and its ``shutdown`` leaves the pool running for
    the next run (``terminate``, a stopped run, ends the pool: the sweep stops with it)."""

    def __init__(self, services: SharedServices, pool: ProcessAttackWorkers) -> None:
        self._services, self._pool = services, pool

    def submit(self, job: AttackJob | PortfolioJob) -> Future[Any]:
        return self._pool.submit(job)

    def shutdown(self) -> None:
        """The run is done with the workers; they stay for the next run."""

    def terminate(self) -> None:
        self._services.drop_attack_workers()


class SharedServices:
    """``with SharedServices() as services:`` Ray and attack workers for several runs in turn (one at a time)."""

    def __init__(self) -> None:
        self._ray_args: dict[str, Any] | None = None
        self._actor_pools: dict[str, Any] = {}  # Flower's BasicActorPool, by the actors' resources
        self._ray_processes: RayProcesses | None = None
        self._pool: ProcessAttackWorkers | None = None
        self._settings: WorkerSettings | None = None
        self.started: list[str] = []  # what the last ``ray`` / ``attack_workers`` calls had to start, for the log

    def has_ray(self, init_args: Mapping[str, Any]) -> bool:
        """Whether Ray runs as ``init_args`` ask for it."""
        return self._ray_args == dict(init_args)

    def ray(self, init_args: Mapping[str, Any]) -> bool:
        """Ray as ``init_args`` ask for it: the running one when it was started with the same arguments; returns
        whether it had to be started."""
        wanted = dict(init_args)
        if self._ray_args == wanted:
            return False
        if self._ray_args is not None:
            logger.info("restarting Ray: this point asks for another Ray (%s)", wanted)
            self._actor_pools.clear()  # their actors end with Ray
            stop_ray()
        if self._ray_processes is None:
            self._ray_processes = RayProcesses().__enter__()
        start_ray(wanted)
        self._ray_args = wanted
        self.started.append("Ray")
        return True

    @contextmanager
    def keeping_ray(self) -> Iterator[None]:
        """While inside: Flower's simulation takes its client actors from the previous run and leaves them, and Ray,
        running when it ends."""
        pools = self._actor_pools

        def sharing_actors(flower_backend: type) -> type:
            class SharedActorsBackend(flower_backend):
                def build(self, app_fn: Any) -> None:
                    key = json.dumps([self.client_resources, repr(self.actor_kwargs)], sort_keys=True)
                    pool = pools.pop(key, None)
                    if pool is not None and len(pool.pool) == pool.num_actors:  # every actor idle: the last run ended
                        self.pool, self.app_fn = pool, app_fn
                    elif pool is not None:  # a run stopped midway: its idle actors go, its busy ones end with Ray
                        pool.terminate_all_actors()
                    if self.pool is None:
                        super().build(app_fn)
                    pools[key] = self.pool

                def terminate(self) -> None:
                    """The actors stay for the next run; Ray stays for the sweep."""

            return SharedActorsBackend

        with replaced_ray_backend(sharing_actors):
            yield

    def attack_workers(self, settings: WorkerSettings) -> LentAttackWorkers:
        """The pool of attack workers with ``settings``: the running one when its settings are these."""
        if self._pool is not None and self._settings != settings:
            self.drop_attack_workers()
        if self._pool is None:
            self._pool, self._settings = ProcessAttackWorkers(settings), settings
            self.started.append("attack workers")
        return LentAttackWorkers(self, self._pool)

    def drop_attack_workers(self) -> None:
        """End the pool now (jobs under way included); the next run that needs one starts another."""
        if self._pool is not None:
            self._pool.terminate()
        self._pool, self._settings = None, None

    def take_started(self) -> list[str]:
        """What was started since the last call (and forget it)."""
        started, self.started = self.started, []
        return started

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool, self._settings = None, None
        if self._ray_args is not None:
            self._actor_pools.clear()
            stop_ray()
            self._ray_args = None
        if self._ray_processes is not None:
            self._ray_processes.__exit__(None, None, None)
            self._ray_processes = None

    def __enter__(self) -> SharedServices:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
