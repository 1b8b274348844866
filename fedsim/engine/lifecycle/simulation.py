"""Where a run's rounds are played: the ``Engine`` contract and Flower's simulation engine (Ray backend).

The deployment engine (a SuperLink's grid) is ``fedsim.engine.deployment.app``'s.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping
from typing import Any
from typing import Protocol as TypingProtocol

from clients.client_app import ClientSpec
from fedsim.config import AdversaryConfig, FederationConfig
from fedsim.core.devices import resolve_device
from fedsim.core.errors import ConfigError
from fedsim.core.flower_private import canonical_ray_address
from fedsim.engine.lifecycle.federation import Federation
from fedsim.engine.lifecycle.network import probe
from fedsim.engine.lifecycle.protocols import Protocol
from fedsim.engine.lifecycle.ray_processes import RayProcesses
from fedsim.engine.lifecycle.ray_resources import (
    check_fits_machine,
    machine_gpus,
    ray_node_counts,
    start_ray,
    stop_ray,
    usable_cpus,
)
from fedsim.engine.lifecycle.rounds import ServerSpec
from fedsim.engine.lifecycle.services import SharedServices

logger = logging.getLogger("fedsim")


class Engine(TypingProtocol):
    """Where a run's rounds are played: Flower's simulation, or a SuperLink's grid (the deployment engine)."""

    name: str

    def environment(self) -> dict[str, Any]:
        """What environment.json records of the engine (its name first)."""

    def play(self, protocol: Protocol, server: ServerSpec, federation: Federation, client: ClientSpec) -> None:
        """Play every round of the run (the server side; the clients are the engine's)."""


def quiet_frameworks() -> None:
    # Ray warns that it will stop hiding GPUs from actors that reserved none; clients pick their device
    # from federation.client_resources.gpus themselves (clients.client_app.client_device), so that is moot.
    warnings.filterwarnings("ignore", message="Tip: In future versions of Ray", category=FutureWarning)
    # Flower's own INFO/WARNING lines (deprecations, sampling chatter) would drown the progress display.
    logging.getLogger("flwr").setLevel(logging.ERROR)


def backend_config(
    federation: FederationConfig,
    adversary: AdversaryConfig,
    ray_resources: Mapping[str, float] | None = None,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Flower's Ray backend settings; ``ray_resources`` (e.g. ``{"num_cpus": 1}``) caps this run's Ray instance,
    so that runs side by side (``fedsim sweep --parallel``) share the machine instead of each claiming all of it.
    The attack workers' CPUs and GPU shares are kept out of it (fedsim.engine.lifecycle.ray_resources).

    ``ray_address``: join that running Ray cluster instead (``federation.ray_address`` or ``RAY_ADDRESS``); its
    resources are the cluster's, so nothing is capped and Ray places the clients on its nodes."""
    resources = federation.client_resources
    logs = {"logging_level": logging.ERROR, "log_to_driver": False, "include_dashboard": False}
    if ray_address is not None:
        init_args = {**logs, "address": ray_address}
    else:
        machine_cpus = usable_cpus()
        check_fits_machine(
            federation,
            adversary,
            int((ray_resources or {}).get("num_cpus", machine_cpus)),
            machine_cpus,
            machine_gpus(),
        )
        attack_device = str(resolve_device(adversary.device)) if adversary.attacks else "cpu"
        # "local": a Ray instance of the run's own, even when `ray start` left a cluster on this machine (which a
        # plain ray.init() would join, with the caps below refused there)
        init_args = {
            **logs,
            "address": "local",
            **(ray_resources or {}),
            **ray_node_counts(federation, adversary, attack_device, ray_resources),
        }
    return {"client_resources": {"num_cpus": resources.cpus, "num_gpus": resources.gpus}, "init_args": init_args}


class SimulationEngine:
    """Flower's in-process simulation (Ray backend): a Ray instance of its own, or a running Ray cluster."""

    name = "simulation"

    def __init__(
        self,
        federation: FederationConfig,
        adversary: AdversaryConfig,
        ray_resources: Mapping[str, float] | None = None,
        services: SharedServices | None = None,
    ) -> None:
        """``federation`` and ``adversary``: the run's sections (its clients' and attack workers' resources, the Ray
        cluster it joins)."""
        self.federation = federation
        self.adversary = adversary
        self.ray_resources = ray_resources
        self.ray_address = cluster_address(federation.ray_address)
        self.services = services  # a sweep's Ray, kept between its runs

    def environment(self) -> dict[str, Any]:
        return {"engine": self.name, "ray_address": self.ray_address}

    def play(self, protocol: Protocol, server: ServerSpec, federation: Federation, client: ClientSpec) -> None:
        from flwr.simulation import run_simulation

        if self.ray_address is not None and self.ray_resources:
            logger.info(
                "on Ray cluster %s: the cluster's resources apply, not %s", self.ray_address, dict(self.ray_resources)
            )
        settings = backend_config(self.federation, self.adversary, self.ray_resources, self.ray_address)
        server_app, client_app = protocol.server_app(server, federation), protocol.client_app(client)

        def simulate() -> None:
            run_simulation(
                server_app=server_app,
                client_app=client_app,
                num_supernodes=self.federation.num_clients,
                backend_config=settings,
            )

        if self.services is not None:  # Ray outlives the run: the sweep stops it (and its processes) at its end
            if self.services.has_ray(settings["init_args"]):
                logger.info("Ray: kept from the previous run")
            else:
                logger.info(
                    "starting Ray (%s), kept for the next runs",
                    _ray_text(settings["init_args"], self.ray_address),
                )
            server.stop.check()  # asked for while the run got ready: Ray is not started for it
            self.services.ray(settings["init_args"])
            server.stop.check()
            logger.info(federation_start_line(server))
            with self.services.keeping_ray():
                simulate()
            return
        with RayProcesses():  # none of them outlives the run
            server.stop.check()  # asked for while the run got ready: Ray is never started
            # what takes seconds before round 1 says so as it starts: a silent console looks like a hang
            logger.info("starting Ray (%s)", _ray_text(settings["init_args"], self.ray_address))
            try:
                start_ray(settings["init_args"])
                server.stop.check()  # asked for while Ray started (seconds; more on a loaded machine): no federation
                logger.info(federation_start_line(server))
                simulate()
            finally:
                stop_ray()  # and SIGTERM taken back from Ray, which leaves it at the default (killed outright)


def federation_start_line(server: ServerSpec) -> str:
    """What the log says as the federation starts, with the round the run plays first (a resumed run's too)."""
    resumed = f" (resumed after round {server.start_round})" if server.start_round > 0 else ""
    return (
        f"starting the federation: {server.settings.federation.num_clients} clients in Flower's simulation, "
        f"then round {server.start_round + 1}{resumed}"
    )


def _ray_text(init_args: Mapping[str, Any], address: str | None) -> str:
    """Which Ray a run starts or joins, in a few words for its log."""
    if address is not None:
        return f"joining the cluster at {address}"
    cpus = init_args.get("num_cpus")
    return f"{cpus:g} CPU(s) on this machine" if isinstance(cpus, int | float) else "on this machine"


def cluster_address(ray_address: str | None) -> str | None:
    """The running Ray cluster this run joins: ``federation.ray_address``, else Ray's own ``RAY_ADDRESS``
    (``auto`` resolved to the cluster's GCS address), or None for a Ray instance of the run's own."""
    requested = ray_address or os.environ.get("RAY_ADDRESS") or None
    if requested is None:
        return None
    where = "federation.ray_address" if ray_address else "RAY_ADDRESS"
    hint = "start one with `ray start --head`, or drop the setting for a Ray instance of the run's own"
    try:
        address = canonical_ray_address(requested)  # `auto`: the cluster `ray start` last started here
    except (ConnectionError, ValueError) as error:
        raise ConfigError(f"{where} = '{requested}': no running Ray cluster found ({error}); {hint}") from None
    if address is None:
        raise ConfigError(f"{where} = '{requested}': no running Ray cluster found; {hint}")
    probe(requested if requested != "auto" else address, where, hint)  # the address as the user wrote it
    return address
