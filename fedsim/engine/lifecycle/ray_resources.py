"""Keep the attack workers' CPUs and GPU shares out of the Ray instance that Flower sizes its client pool from.

Flower's Ray backend makes as many client actors as the node's *whole* CPU (and GPU) count allows
(``flwr.simulation.ray_transport.ray_actor.pool_size_from_resources`` reads ``ray.nodes()``, not what is
free). The attack workers are processes beside Ray (``adversary.workers``), so what they hold must be
taken off the counts Ray is started with, before Flower builds its pool: else the clients and the attacks
fight over the same cores. ``ray.init`` counts whole CPUs and GPUs; a fractional GPU share is reserved by
capping the pool through the CPU count (Flower makes ``min(cpus / client cpus, gpus / client gpus)`` actors).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from fedsim.config import AdversaryConfig, ConfigError, FederationConfig
from fedsim.core.errors import ExternalFailure, first_line
from fedsim.core.flower_private import (
    disable_ray_failure_signal_handler,
    ray_default_temp_dir,
    ray_sigterm_handlers_skipped,
)

logger = logging.getLogger("fedsim")


def ray_node_counts(
    federation: FederationConfig,
    adversary: AdversaryConfig,
    attack_device: str,
    ray_resources: Mapping[str, float] | None = None,
    machine_cpus: int | None = None,
    machine_gpus: int | None = None,
) -> dict[str, int]:
    """``num_cpus`` (and ``num_gpus`` when it changes) to start this run's Ray instance with.

    ``ray_resources`` caps the run (``fedsim sweep --parallel``); ``attack_device`` is the resolved
    ``adversary.device``. Without attacks, the caps pass through unchanged.
    """
    caps = {key: int(value) for key, value in (ray_resources or {}).items() if key in ("num_cpus", "num_gpus")}
    if not adversary.attacks:
        return caps
    cpus = caps.get("num_cpus", machine_cpus if machine_cpus is not None else usable_cpus())
    client = federation.client_resources
    reserved_cpus = adversary.workers * adversary.resources.cpus
    left = math.floor(cpus - reserved_cpus + 1e-9)
    if left < client.cpus:
        # Too small a node to set cores aside: the attack workers share them with the clients (as before).
        logger.info(
            "attack workers: %d x %g CPU would leave %d of %d CPUs for clients needing %g each; they share the cores",
            adversary.workers,
            adversary.resources.cpus,
            max(left, 0),
            cpus,
            client.cpus,
        )
        left = cpus
    counts = {**caps, "num_cpus": int(left)}
    reserved_gpus = adversary.workers * adversary.resources.gpus if attack_device.startswith("cuda") else 0.0
    if reserved_gpus > 0 and client.gpus > 0:
        if machine_gpus is None:
            import torch

            machine_gpus = torch.cuda.device_count()
        gpus = caps.get("num_gpus", machine_gpus)
        clients_fit = math.floor((gpus - reserved_gpus) / client.gpus + 1e-9)
        if clients_fit < 1:
            raise ConfigError(
                f"adversary.resources.gpus = {adversary.resources.gpus}: {adversary.workers} attack worker(s) leave "
                f"{max(gpus - reserved_gpus, 0):g} of {gpus} GPU(s), less than one client's "
                f"federation.client_resources.gpus = {client.gpus}; "
                f"allowed: at most {(gpus - client.gpus) / adversary.workers:g}"
            )
        # Flower makes min(cpus / client cpus, gpus / client gpus) actors: the CPU count caps the GPU clients.
        counts["num_cpus"] = int(
            min(counts["num_cpus"], max(math.ceil(client.cpus), math.floor(clients_fit * client.cpus + 1e-9)))
        )
    return counts


def check_fits_machine(
    federation: FederationConfig, adversary: AdversaryConfig, ray_cpus: int, machine_cpus: int, machine_gpus: int
) -> None:
    """Refuse, in one line, a run this machine cannot hold: a client needing more CPUs or GPUs than the run's Ray
    instance has (Flower's actor pool would be empty and the run would hang), or more attack workers than the
    machine has cores for (each is a process with its own copy of the model and the views).

    ``ray_cpus``: the CPUs of the run's own Ray instance (a sweep's share under ``--parallel``); a run that joins a
    Ray cluster is checked against the cluster by Ray, not here."""
    client = federation.client_resources
    if client.cpus > ray_cpus:
        raise ConfigError(
            f"federation.client_resources.cpus = {client.cpus:g}: no client fits in the {ray_cpus} CPU(s) this run "
            f"has here; allowed: at most {ray_cpus}"
        )
    if client.gpus > machine_gpus:
        raise ConfigError(
            f"federation.client_resources.gpus = {client.gpus:g}: this machine has {machine_gpus} GPU(s); "
            f"allowed: at most {machine_gpus}"
        )
    if adversary.attacks and adversary.workers * adversary.resources.cpus > machine_cpus:
        allowed = max(1, math.floor(machine_cpus / adversary.resources.cpus + 1e-9))
        raise ConfigError(
            f"adversary.workers = {adversary.workers}: {adversary.workers} x {adversary.resources.cpus:g} CPU "
            f"(adversary.resources.cpus) exceed the {machine_cpus} CPU(s) of this machine; allowed: at most {allowed}"
        )


def machine_gpus() -> int:
    """The CUDA GPUs this process sees."""
    import torch

    return torch.cuda.device_count()


def usable_cpus() -> int:
    """The CPUs this process may run on (as Ray counts them when started without ``num_cpus``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


#: Ray's setting (read by its raylet from the environment) of the niceness its worker processes start at
RAY_WORKER_NICENESS = "RAY_worker_niceness"


def start_ray(init_args: Mapping[str, object]) -> bool:
    """Start (or join) Ray as Flower's Ray backend would, so that the run, not ``ray.init``, handles SIGTERM.

    ``ray.init`` replaces the process's SIGTERM handler with a ``sys.exit`` that lands wherever the main thread
    happens to be; started here, the run takes the signal back right after (``reclaim_signals``), and Flower's
    backend finds Ray running and keeps it. Returns whether this call started it.
    """
    import ray

    from fedsim.core.stopping import reclaim_signals

    if ray.is_initialized():
        return False
    # as Flower's own Ray backend sets it up: the client actors need the
    # driver's import path
    pythonpath = os.pathsep.join(sys.path)
    if os.environ.get("PYTHONPATH"):
        pythonpath = f"{pythonpath}{os.pathsep}{os.environ['PYTHONPATH']}"
    os.environ["PYTHONPATH"] = pythonpath
    # Ray starts its workers at niceness 15 unless told otherwise: the client actors do the run's training, and on
    # a machine that other jobs keep busy they would get almost no CPU (a user's own setting is kept)
    os.environ.setdefault(RAY_WORKER_NICENESS, "0")
    keep_sigterm_from_ray()
    try:
        with sigterm_left_to_the_run():
            options: dict[str, Any] = {"include_dashboard": False, **init_args}
            ray.init(runtime_env={"env_vars": {"PYTHONPATH": pythonpath}}, **options)
    except Exception as error:  # e.g. "the current node timed out during startup" on a loaded machine: 32 lines
        reclaim_signals()
        address = init_args.get("address")
        what = "Ray did not start" if address in (None, "local") else f"Ray at {address} could not be joined"
        raise ExternalFailure(
            f"{what}: {first_line(error)}; Ray's logs: {ray_logs(init_args)} "
            "(on a busy machine, run again once it is less loaded)"
        ) from error
    reclaim_signals()
    return True


@contextmanager
def sigterm_left_to_the_run() -> Iterator[None]:
    """While inside, where a run handles SIGTERM (``stop_on_signals``): Ray does not take it over.

    ``ray.init`` sets its own handlers as it starts (``sys.exit(15)``; its node's: kill Ray's processes, exit 1): a
    SIGTERM in the seconds it takes ended the command with status 15, no line, the run directory left behind.
    The run's handler only asks for a stop, acted on once ``ray.init`` returns; the run shuts Ray down itself.
    """
    from fedsim.core.stopping import handling_signals

    if not handling_signals():
        yield
        return
    with ray_sigterm_handlers_skipped():
        yield


def keep_sigterm_from_ray() -> None:
    """Start Ray's driver without its crash handler, which Ray installs for SIGTERM too and, at shutdown, replaces
    with the system default, below Python and in whichever thread shuts Ray down (Flower's): from then on a SIGTERM
    (while the run waits for its attacks) killed the process outright, its attack workers and Ray actors
    orphaned. Ray's own processes keep theirs; set before ``ray.init`` (Ray reads it there)."""
    disable_ray_failure_signal_handler()


def ray_logs(init_args: Mapping[str, object]) -> str:
    """Where the Ray that ``init_args`` start or join writes its logs (its latest session's)."""
    address = init_args.get("address")
    if address not in (None, "local"):
        return f"session_latest/logs under the Ray temp folder of the cluster's nodes ({address})"
    temp = init_args.get("_temp_dir")
    if not isinstance(temp, str):
        temp = ray_default_temp_dir()
    return os.path.join(temp, "session_latest", "logs")


def stop_ray() -> None:
    """Shut down the Ray this process started, when Flower's backend did not (a run that failed early), and take
    SIGINT and SIGTERM back for the run (``reclaim_signals``), whoever shut Ray down.

    Ray's shutdown sets SIGTERM back to the system default below Python when its driver installed a crash handler
    (``keep_sigterm_from_ray`` starts it without one; this covers a Ray that installs it anyway), and
    ``signal.getsignal`` still names the run's handler then. Call this from the main thread once the simulation
    has ended.
    """
    import ray

    from fedsim.core.stopping import reclaim_signals

    if ray.is_initialized():
        ray.shutdown()
    reclaim_signals()
