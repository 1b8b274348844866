"""Run one experiment: prepare data and model, launch the Flower simulation, write the summary.

The summary itself (what ``summary.json`` holds, and whether a run trained at all) is
``fedsim.engine.lifecycle.summary``'s.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from typing import Protocol as TypingProtocol

import torch

from clients.client_app import ClientSpec
from clients.training import check_training_defenses
from fedsim.config import ExperimentConfig
from fedsim.core.devices import resolve_device
from fedsim.core.errors import ConfigError, RunInterrupted, TrainingFailed
from fedsim.core.evaluation import evaluate
from fedsim.core.flower_private import canonical_ray_address
from fedsim.core.seeding import derive_seed
from fedsim.core.stopping import StopRequested, StopSignal, force_exit, stop_on_signals
from fedsim.engine.audit import attach_audit
from fedsim.engine.leakage.portfolio import attack_setting, resolve_attacks
from fedsim.engine.leakage.wiring import attach_adversary
from fedsim.engine.lifecycle.assembly import client_spec_of, run_model_of, strategy_of
from fedsim.engine.lifecycle.federation import Federation, partition_record, prepare_federation
from fedsim.engine.lifecycle.network import probe
from fedsim.engine.lifecycle.progress import LogProgress, RichProgress
from fedsim.engine.lifecycle.protocols import Protocol, protocol_of
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
from fedsim.engine.lifecycle.summary import log_summary, rounds_without_update, summarize
from fedsim.judge.metrics import Lpips
from fedsim.rundir.layout import METRICS_FILE, PARTITIONS_FILE, SUMMARY_FILE
from fedsim.rundir.writer import RunStore

logger = logging.getLogger("fedsim")


class Engine(TypingProtocol):
    """Where a run's rounds are played: Flower's simulation, or a SuperLink's grid (the deployment engine)."""

    name: str

    def environment(self) -> dict[str, Any]:
        """What environment.json records of the engine (its name first)."""

    def play(self, protocol: Protocol, server: ServerSpec, federation: Federation, client: ClientSpec) -> None:
        """Play every round of the run (the server side; the clients are the engine's)."""


class CentralEvaluator:
    """Scores global weights on the held-out test set (server side, after every round)."""

    def __init__(self, config: ExperimentConfig, federation: Federation, device: torch.device) -> None:
        dataset = federation.dataset
        self.model = run_model_of(config, dataset, seed=0, with_weights=False).to(device)
        self.x = federation.test_stats.normalize(torch.from_numpy(dataset.x_test))
        self.y = torch.from_numpy(dataset.y_test)
        self.num_classes = dataset.num_classes

    def __call__(self, state: dict[str, torch.Tensor]) -> dict[str, float]:
        self.model.load_state_dict(state)
        return evaluate(self.model, self.x, self.y, self.num_classes)


def _quiet_frameworks() -> None:
    # Ray warns that it will stop hiding GPUs from actors that reserved none; clients pick their device
    # from federation.client_resources.gpus themselves (clients.client_app.client_device), so that is moot.
    warnings.filterwarnings("ignore", message="Tip: In future versions of Ray", category=FutureWarning)
    # Flower's own INFO/WARNING lines (deprecations, sampling chatter) would drown the progress display.
    logging.getLogger("flwr").setLevel(logging.ERROR)


def _backend_config(
    config: ExperimentConfig, ray_resources: Mapping[str, float] | None = None, ray_address: str | None = None
) -> dict[str, Any]:
    """Flower's Ray backend settings; ``ray_resources`` (e.g. ``{"num_cpus": 1}``) caps this run's Ray instance,
    so that runs side by side (``fedsim sweep --parallel``) share the machine instead of each claiming all of it.
    The attack workers' CPUs and GPU shares are kept out of it (fedsim.engine.lifecycle.ray_resources).

    ``ray_address``: join that running Ray cluster instead (``federation.ray_address`` or ``RAY_ADDRESS``); its
    resources are the cluster's, so nothing is capped and Ray places the clients on its nodes."""
    resources = config.federation.client_resources
    logs = {"logging_level": logging.ERROR, "log_to_driver": False, "include_dashboard": False}
    if ray_address is not None:
        init_args = {**logs, "address": ray_address}
    else:
        machine_cpus = usable_cpus()
        check_fits_machine(
            config, int((ray_resources or {}).get("num_cpus", machine_cpus)), machine_cpus, machine_gpus()
        )
        attack_device = str(resolve_device(config.adversary.device)) if config.adversary.attacks else "cpu"
        # "local": a Ray instance of the run's own, even when `ray start` left a cluster on this machine (which a
        # plain ray.init() would join, with the caps below refused there)
        init_args = {
            **logs,
            "address": "local",
            **(ray_resources or {}),
            **ray_node_counts(config, attack_device, ray_resources),
        }
    return {"client_resources": {"num_cpus": resources.cpus, "num_gpus": resources.gpus}, "init_args": init_args}


class SimulationEngine:
    """Flower's in-process simulation (Ray backend): a Ray instance of its own, or a running Ray cluster."""

    name = "simulation"

    def __init__(
        self,
        config: ExperimentConfig,
        ray_resources: Mapping[str, float] | None = None,
        services: SharedServices | None = None,
    ) -> None:
        self.ray_resources = ray_resources
        self.ray_address = cluster_address(config)
        self.services = services  # a sweep's Ray, kept between its runs

    def environment(self) -> dict[str, Any]:
        return {"engine": self.name, "ray_address": self.ray_address}

    def play(self, protocol: Protocol, server: ServerSpec, federation: Federation, client: ClientSpec) -> None:
        from flwr.simulation import run_simulation

        if self.ray_address is not None and self.ray_resources:
            logger.info(
                "on Ray cluster %s: the cluster's resources apply, not %s", self.ray_address, dict(self.ray_resources)
            )
        backend_config = _backend_config(server.config, self.ray_resources, self.ray_address)
        simulation = {
            "server_app": protocol.server_app(server, federation),
            "client_app": protocol.client_app(client),
            "num_supernodes": server.config.federation.num_clients,
            "backend_config": backend_config,
        }
        if self.services is not None:  # Ray outlives the run: the sweep stops it (and its processes) at its end
            if self.services.has_ray(backend_config["init_args"]):
                logger.info("Ray: kept from the previous run")
            else:
                logger.info(
                    "starting Ray (%s), kept for the next runs",
                    _ray_text(backend_config["init_args"], self.ray_address),
                )
            server.stop.check()  # asked for while the run got ready: Ray is not started for it
            self.services.ray(backend_config["init_args"])
            server.stop.check()
            logger.info(federation_start_line(server))
            with self.services.keeping_ray():
                run_simulation(**simulation)
            return
        with RayProcesses():  # none of them outlives the run
            server.stop.check()  # asked for while the run got ready: Ray is never started
            # what takes seconds before round 1 says so as it starts: a silent console looks like a hang
            logger.info("starting Ray (%s)", _ray_text(backend_config["init_args"], self.ray_address))
            try:
                start_ray(backend_config["init_args"])
                server.stop.check()  # asked for while Ray started (seconds; more on a loaded machine): no federation
                logger.info(federation_start_line(server))
                run_simulation(**simulation)
            finally:
                stop_ray()  # and SIGTERM taken back from Ray, which leaves it at the default (killed outright)


def federation_start_line(server: ServerSpec) -> str:
    """What the log says as the federation starts, with the round the run plays first (a resumed run's too)."""
    resumed = f" (resumed after round {server.start_round})" if server.start_round > 0 else ""
    return (
        f"starting the federation: {server.config.federation.num_clients} clients in Flower's simulation, "
        f"then round {server.start_round + 1}{resumed}"
    )


def _ray_text(init_args: Mapping[str, Any], address: str | None) -> str:
    """Which Ray a run starts or joins, in a few words for its log."""
    if address is not None:
        return f"joining the cluster at {address}"
    cpus = init_args.get("num_cpus")
    return f"{cpus:g} CPU(s) on this machine" if isinstance(cpus, int | float) else "on this machine"


def cluster_address(config: ExperimentConfig) -> str | None:
    """The running Ray cluster this run joins: ``federation.ray_address``, else Ray's own ``RAY_ADDRESS``
    (``auto`` resolved to the cluster's GCS address), or None for a Ray instance of the run's own."""
    requested = config.federation.ray_address or os.environ.get("RAY_ADDRESS") or None
    if requested is None:
        return None
    where = "federation.ray_address" if config.federation.ray_address else "RAY_ADDRESS"
    hint = "start one with `ray start --head`, or drop the setting for a Ray instance of the run's own"
    try:
        address = canonical_ray_address(requested)  # `auto`: the cluster `ray start` last started here
    except (ConnectionError, ValueError) as error:
        raise ConfigError(f"{where} = '{requested}': no running Ray cluster found ({error}); {hint}") from None
    if address is None:
        raise ConfigError(f"{where} = '{requested}': no running Ray cluster found; {hint}")
    probe(requested if requested != "auto" else address, where, hint)  # the address as the user wrote it
    return address


def run_experiment(
    config: ExperimentConfig | None = None,
    *,
    resume: Path | None = None,
    rounds: int | None = None,
    quiet: bool = False,
    run_dir: Path | None = None,
    ray_resources: Mapping[str, float] | None = None,
    engine: Engine | None = None,
    stop: StopSignal | None = None,
    services: SharedServices | None = None,
) -> Path:
    """Run (or resume) one experiment and return its run directory (``rounds``: extend a resumed run to that
    many rounds; ``ray_resources``: see _backend_config; ``engine``: where the rounds are played, Flower's
    simulation by default, or the grid a deployed ServerApp got: ``fedsim.engine.deployment.app``).

    The run directory stays locked (one writer per run) from its creation or reopening until this returns or
    raises, whatever ends it.

    Stopping: called from the main thread without ``stop``, the run handles SIGINT and SIGTERM itself; with
    ``stop`` (a sweep's), whoever requests it stops the run. Either way a stop ends the round in progress
    without committing it, shuts the simulation and the attack workers down, and raises ``RunInterrupted``
    naming the directory to resume (a new run stopped before its first commit leaves no directory). A second
    signal ends the process at once (``fedsim.core.stopping.force_exit``).

    ``services``: Ray and attack workers that outlive the run (a sequential sweep's, started once for all its
    points); by default the run starts its own and stops them when it ends."""
    with ExitStack() as held:
        if stop is None:
            stop = held.enter_context(stop_on_signals(StopSignal(), force_exit))
        return _run_experiment(config, resume, rounds, quiet, run_dir, ray_resources, engine, stop, held, services)


def _run_experiment(
    config: ExperimentConfig | None,
    resume: Path | None,
    rounds: int | None,
    quiet: bool,
    run_dir: Path | None,
    ray_resources: Mapping[str, float] | None,
    engine: Engine | None,
    stop: StopSignal,
    held: ExitStack,
    services: SharedServices | None = None,
) -> Path:
    """run_experiment's body; every store it opens is closed by ``held`` (the caller's) when the run ends."""
    started = time.perf_counter()
    _quiet_frameworks()
    store: RunStore | None = None
    if resume is not None:
        store, config, last_round = RunStore.open_for_resume(resume, rounds)
        held.enter_context(store)
        initial_state = store.load_checkpoint(last_round)
    else:
        assert config is not None, "a config or a run to resume is required"
        last_round, initial_state = 0, None
    device = resolve_device(config.device)
    if engine is None:
        engine = SimulationEngine(config, ray_resources, services)
    federation = prepare_federation(config)
    dataset = federation.dataset
    model_seed = derive_seed(config.seed, "model")
    if initial_state is None:
        model = run_model_of(config, dataset, seed=model_seed, with_weights=True)
        check_training_defenses(model, config.client.defenses)  # e.g. BatchNorm under dpsgd: one line, no round run
        initial_state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    if config.adversary.attacks:  # an attack that cannot apply is refused here, before the run directory exists
        architecture = run_model_of(config, dataset, seed=model_seed, with_weights=False)
        shape = (dataset.channels, dataset.image_size, dataset.image_size)
        config = resolve_attacks(config, attack_setting(config, architecture, shape, dataset.num_classes))
    # adversary.lpips: required refuses here, before the run directory exists
    lpips = Lpips(config.adversary.lpips) if config.adversary.attacks else None
    if stop.requested:  # stopped while the data and models loaded: nothing written yet
        raise RunInterrupted(store.run_dir if store else None, stop.signum, last_round + 1)
    if store is None:  # created once data and model are known good: a failed start leaves no orphan directory
        store = held.enter_context(RunStore.create(config, str(device), run_dir, engine.environment()))
        # innermost, so it runs before the store is closed: a failed start leaves nothing that blocks a retry
        held.enter_context(_given_back_unless_committed(store))
    else:
        store.record_resumption(str(device), engine.environment())
    store.write_json(PARTITIONS_FILE, partition_record(federation))

    client_spec = client_spec_of(
        config,
        store.run_dir.resolve(),
        partitions=federation.partitions,
        stats=federation.client_stats,
        num_classes=dataset.num_classes,
        channels=dataset.channels,
        image_size=dataset.image_size,
    )
    strategy = strategy_of(config, history=store.rows() if resume is not None else ())
    wiring = (
        attach_adversary(
            config,
            federation,
            store,
            model_seed,
            lpips,
            client_spec,
            attack_workers=services.attack_workers if services is not None else None,
        )
        if config.adversary.attacks
        else None
    )
    if wiring and resume is not None:
        queued = wiring.adversary.resume(store.rows(), last_round)
        if queued:
            logger.info("re-running %d attack job(s) that the killed run left unfinished", queued)

    audit = attach_audit(config, federation, store, model_seed, last_round) if config.adversary.audit else None
    if audit is not None:  # canary clients join the DP aggregate; the auditor's tap sees what its threat model does
        strategy = audit.wrap_strategy(strategy)  # under the adversary's own wrapping (ServerSpec below)
    progress = LogProgress() if quiet else RichProgress()
    server_spec = ServerSpec(
        config=config,
        store=store,
        strategy=wiring.wrap_strategy(strategy) if wiring else strategy,
        initial_state=initial_state,
        start_round=last_round,
        evaluate=CentralEvaluator(config, federation, device),
        progress=progress,
        wrap_grid=chained(wiring.wrap_grid if wiring else None, audit.wrap_grid if audit else None),
        round_hooks=((wiring.adversary.round_finished,) if wiring else ()) + ((audit.round_finished,) if audit else ()),
        stop=stop,
    )
    stopped: StopRequested | KeyboardInterrupt | None = None
    try:
        if last_round < config.federation.rounds:
            protocol = protocol_of(config)  # Message API, or Flower's legacy path for SecAgg+
            engine.play(protocol, server_spec, federation, client_spec)
    except (StopRequested, KeyboardInterrupt) as interrupt:  # KeyboardInterrupt: a signal the run did not handle
        stopped = interrupt
    finally:
        progress.stop()
        # every reconstruction already under way gets scored and recorded, unless a stop comes first: then the
        # unfinished attacks stay in the backlog and a resumed run re-runs them
        if wiring and not (stopped is None and wiring.adversary.finish(stop)):
            wiring.adversary.abandon()
    if stopped is not None or stop.requested:
        raise _interrupted(store, config, resume is None, stop.signum) from stopped
    if audit is not None:
        audit.finish()  # the `audit` row (summarize reads it) and the warning if the bound exceeds the accountant
    summary = summarize(store, time.perf_counter() - started, config)
    store.write_json(SUMMARY_FILE, summary)
    untrained = rounds_without_update(store, after=last_round, withheld=_withheld_rounds(config))
    if untrained is not None:
        raise TrainingFailed(f"{untrained}; reasons in the fit rows of {store.run_dir / METRICS_FILE}")
    log_summary(summary)
    return store.run_dir


def chained(*wrappers: Callable[[Any], Any] | None) -> Callable[[Any], Any] | None:
    """One grid wrapper applying each of ``wrappers`` (None: none) in turn, innermost first."""
    present = [wrapper for wrapper in wrappers if wrapper is not None]
    if not present:
        return None

    def wrap(grid: Any) -> Any:
        for wrapper in present:
            grid = wrapper(grid)
        return grid

    return wrap


@contextmanager
def _given_back_unless_committed(store: RunStore) -> Iterator[None]:
    """A new run that ends (refused by Ray's resources, stopped, crashed) before round 0 is committed has nothing
    to resume: its directory is given back (fedsim's own files removed, never the user's), so that the same
    ``output.run_name`` can start again."""
    try:
        yield
    except BaseException:
        if store.last_committed_round() is None:
            store.discard()
        raise


def _interrupted(store: RunStore, config: ExperimentConfig, new_run: bool, signum: int | None) -> RunInterrupted:
    """What a stop leaves: the directory to resume, or none when a new run had not committed its first round
    (it is given back as the stop propagates: ``_given_back_unless_committed``)."""
    committed = store.last_committed_round()
    if committed is None and new_run:
        return RunInterrupted(None, signum)
    in_progress = (committed or 0) + 1
    return RunInterrupted(store.run_dir, signum, in_progress if in_progress <= config.federation.rounds else None)


def _withheld_rounds(config: ExperimentConfig) -> Callable[[int], bool]:
    """Rounds whose aggregate a malicious server keeps to itself by design (they are not failures)."""
    adversary = config.adversary
    return adversary.attacks_round if adversary.server == "malicious" else (lambda server_round: False)
