"""fedsim as a Flower App: the ``server_app`` and ``client_app`` that ``[tool.flwr.app.components]`` names.

``flwr run`` (and ``fedsim run --engine deployment``, which calls it) starts them on a SuperLink and its
SuperNodes. Each gets everything from its ``Context``, nothing from memory the other holds:

* the ServerApp reads the experiment from the run config (``fedsim.engine.deployment.run_config``) and runs it
  exactly as a simulation does (``fedsim.engine.run.run_experiment``), on the grid the SuperLink
  hands it: the run directory, the adversary and its taps, scoring and checkpoints all live on the SuperLink's
  machine;
* the ClientApp reads the experiment from the run config and its partition from the node config
  (``partition-id``, ``num-partitions``: ``flower-supernode --node-config``), derives the partitions from the
  seed as the server does, and plays the protocol the config's strategy speaks (Message API, or SecAgg+ on
  Flower's legacy path) with the very handlers a simulated client has (``clients.client_app``).

What the server side scores with (which samples a client trained on) is written by the client into the run
directory (``fedsim.rundir.ground_truth``), never into its reply: see docs/how-to/deploy.md.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

import fedsim.core.wire as wire
from clients.client_app import ClientSpec
from fedsim.config import ConfigError, ExperimentConfig, config_changes, dump_config, load_config
from fedsim.data import DataError
from fedsim.engine.assembly import client_spec_of
from fedsim.engine.deployment.run_config import RunRequest, client_config, from_run_config
from fedsim.engine.lifecycle.federation import Federation, prepare_federation
from fedsim.engine.lifecycle.protocols import Protocol, protocol_of
from fedsim.engine.lifecycle.rounds import ServerSpec
from fedsim.rundir.layout import CONFIG_FILE

logger = logging.getLogger("fedsim")


# ------------------------------------------------------------------------------------------- server side


class GridEngine:
    """The deployment engine, server side: the rounds are played on the grid the SuperLink handed the ServerApp."""

    name = "deployment"

    def __init__(self, grid: Grid, context: Context, request: RunRequest) -> None:
        self.grid, self.context, self.request = grid, context, request

    def environment(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "flower_run_id": self.context.run_id,
            "submitted_by": self.request.submitted_by or None,
        }

    def play(self, protocol: Protocol, server: ServerSpec, federation: Federation, client: ClientSpec) -> None:
        # `client` is the simulation's: here the SuperNodes' ClientApps build their own from the run config
        protocol.serve(server, federation, self.grid, self.context)


def _log_to_flower() -> None:
    """fedsim's log lines go to the ServerApp's stderr, which Flower streams to `flwr log` (no live display)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    fedsim_logger = logging.getLogger("fedsim")
    fedsim_logger.handlers[:] = [handler]
    fedsim_logger.setLevel(logging.INFO)
    fedsim_logger.propagate = False


def check_resumed_config(request: RunRequest) -> None:
    """A resumed run's ClientApps train with the config the submitter sent: it must be the run's own."""
    assert request.resume is not None
    if request.config is None:
        return
    recorded = load_config(request.resume / CONFIG_FILE)
    if request.rounds is not None:
        recorded.federation.rounds = request.rounds
    changed = config_changes(dump_config(recorded), dump_config(request.config))
    if changed:
        raise ConfigError(
            f"--resume {request.resume}: the config sent to the SuperNodes differs from the run's "
            f"{CONFIG_FILE} ({', '.join(changed)})"
        )


server_app = ServerApp()


@server_app.main()
def _serve(grid: Grid, context: Context) -> None:
    from fedsim.engine.run import (
        run_experiment,
    )  # the server side only: a ClientApp process need not import it

    _log_to_flower()
    request = from_run_config(context.run_config)
    engine = GridEngine(grid, context, request)
    if request.resume is not None:
        check_resumed_config(request)
        run_dir = run_experiment(resume=request.resume, rounds=request.rounds, quiet=True, engine=engine)
    else:
        run_dir = run_experiment(request.config, quiet=True, run_dir=request.run_dir, engine=engine)
    logger.info("run directory (on this SuperLink's machine): %s", run_dir)


# ------------------------------------------------------------------------------------------- client side


def partition_of_node(context: Context, config: ExperimentConfig) -> int:
    """This SuperNode's partition, checked against the federation the run config describes."""
    node_config = context.node_config
    start = "start the SuperNode with --node-config 'partition-id=P num-partitions=N'"
    if wire.PARTITION_ID not in node_config:
        raise ConfigError(f"node {context.node_id}: its node config has no '{wire.PARTITION_ID}'; {start}")
    partition = int(node_config[wire.PARTITION_ID])
    clients = config.federation.num_clients
    declared = int(node_config.get(wire.NUM_PARTITIONS, clients))
    if declared != clients:
        raise ConfigError(
            f"node {context.node_id}: num-partitions = {declared} in its node config, but the run has "
            f"federation.num_clients = {clients}; {start}"
        )
    if not 0 <= partition < clients:
        raise ConfigError(f"node {context.node_id}: partition-id = {partition}; allowed: 0 to {clients - 1}")
    return partition


def client_spec(context: Context) -> tuple[ClientSpec, ExperimentConfig]:
    """What a simulated client is handed in memory, rebuilt from the Context alone."""
    where = f"node {context.node_id} (partition {context.node_config.get(wire.PARTITION_ID, '?')})"
    try:  # the config names its data files: they must exist on this node's machine too
        config, run_dir = client_config(context.run_config)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    partition_of_node(context, config)
    try:
        # the seed fixes the partitions: the server derives the same
        federation = prepare_federation(config.data, config.federation.num_clients, config.seed)
    except (DataError, FileNotFoundError) as error:
        raise DataError(f"{where} cannot load its data: {error}") from None
    dataset = federation.dataset
    Path(run_dir).mkdir(parents=True, exist_ok=True)  # on another machine than the server's: a local copy of the path
    spec = client_spec_of(
        config,
        Path(run_dir),
        partitions=federation.partitions,
        stats=federation.client_stats,
        num_classes=dataset.num_classes,
        channels=dataset.channels,
        image_size=dataset.image_size,
    )
    return spec, config


def match_simulated_threads(config: ExperimentConfig) -> None:
    """Compute with as many threads as a simulated client: Ray starts each client actor with OMP_NUM_THREADS set to
    its CPUs (federation.client_resources.cpus), and the thread count changes the order of float sums, so a
    SuperNode with torch's default (every core) would train a slightly different model than the simulation."""
    import math
    import os

    import torch

    if "OMP_NUM_THREADS" not in os.environ:  # as Ray does: a setting of the user's own wins in both
        torch.set_num_threads(max(1, math.floor(config.federation.client_resources.cpus)))


class FedsimClientApp(ClientApp):
    """The ClientApp of the run the message belongs to, built from its Context on first use.

    A ClientApp's handlers are fixed when it is built, but which ones a run needs (Message API or SecAgg+'s
    legacy client) and what they train on is in the run config: so this app builds the protocol's own
    ClientApp per run (a SuperNode may serve several runs) and hands it every message.
    """

    def __init__(self) -> None:
        super().__init__()
        self._apps: dict[int, tuple[ClientApp, ExperimentConfig]] = {}

    def __call__(self, message: Message, context: Context) -> Message:
        if context.run_id not in self._apps:
            spec, config = client_spec(context)
            match_simulated_threads(config)
            self._apps[context.run_id] = (protocol_of(config.strategy.name).client_app(spec), config)
        app, config = self._apps[context.run_id]
        partition_of_node(context, config)  # every node of a simulation shares this process's app
        return app(message, context)


client_app = FedsimClientApp()
