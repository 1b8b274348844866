"""``fedsim audit``: run an unedited Flower app under Flower's simulation engine with fedsim's adversary attached.

The app's own ServerApp runs on a tapped grid (``fedsim.engine.app_audit.grid``) and its own ClientApp on every
simulated node; nothing of the app is replaced or configured by fedsim beyond what ``flwr run`` does (its run config,
``--run-config``, its number of nodes). The run directory is fedsim's: its config (the audit's, resolved), partitions,
metrics rows (an `eval` row per round the global model was seen released, an `attack` row per attack), summary and
reconstructions; reports and ``fedsim.load_run`` read it as any run.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.config import ExperimentConfig
from fedsim.core.devices import resolve_device
from fedsim.core.errors import ConfigError, ExternalFailure, RunInterrupted, first_line
from fedsim.core.failure_log import pointer_to, write_failure_log
from fedsim.core.flower_private import client_app_mods, recording_node_registration, run_simulation
from fedsim.core.importing import on_path
from fedsim.core.seeding import derive_seed
from fedsim.core.stopping import StopSignal, force_exit, stop_on_signals
from fedsim.data import ChannelStats
from fedsim.data.sources.flower_app import AppDataConfig, read_app_partitions
from fedsim.engine.app_audit.app import FlowerApp, load_components, read_app
from fedsim.engine.app_audit.audit_file import AppSection
from fedsim.engine.app_audit.classes import with_model_classes
from fedsim.engine.app_audit.client_canaries import ClientLevelAudit
from fedsim.engine.app_audit.client_probe import ProbedClientApp
from fedsim.engine.app_audit.config import audit_config
from fedsim.engine.app_audit.dp_watch import DpWatch, dry_probe_line, log_dp_summary, with_found_defenses
from fedsim.engine.app_audit.dry_probe import DryProbe, dry_probe
from fedsim.engine.app_audit.grid import AppGrid
from fedsim.engine.app_audit.metrics import app_evaluation
from fedsim.engine.app_audit.privacy_audit import app_privacy_audit
from fedsim.engine.app_audit.recording import AppRecording
from fedsim.engine.app_audit.server_watch import Recorder, watching_strategies
from fedsim.engine.app_audit.workdir import app_working_directory, relative_paths, with_absolute_paths
from fedsim.engine.assembly import adversary_of, run_model_of, with_attacks_resolved
from fedsim.engine.lifecycle.evaluation import CentralEvaluator
from fedsim.engine.lifecycle.federation import Federation
from fedsim.engine.lifecycle.ray_processes import RayProcesses
from fedsim.engine.lifecycle.ray_resources import start_ray, stop_ray
from fedsim.engine.lifecycle.simulation import backend_config as simulation_backend_config
from fedsim.engine.lifecycle.simulation import quiet_frameworks
from fedsim.engine.lifecycle.summary import log_summary
from fedsim.engine.session import RunSession
from fedsim.rundir.writer import RunStore

logger = logging.getLogger("fedsim")

ENGINE = "simulation"
LEGACY_PARAMETERS = "parameters"  # where Flower's DefaultWorkflow keeps the global model (its MAIN_PARAMS_RECORD)


def audit_app(
    app_dir: Path,
    config_path: Path | None = None,
    overrides: list[str] | None = None,
    run_config: str | None = None,
    *,
    run_dir: Path | None = None,
) -> Path:
    """Audit the Flower app in ``app_dir`` (``run_config``: `flwr run`'s --run-config) and return the run directory."""
    started = time.perf_counter()
    quiet_frameworks()
    app = read_app(app_dir, run_config)
    config, section = audit_config(app, config_path, overrides)
    config = with_absolute_paths(config)  # the app runs in its own working directory (``app_working_directory``)
    run_dir = Path(run_dir).resolve() if run_dir is not None else None
    for line in relative_paths(app.run_config):
        logger.warning(line)
    importable(app.path)
    server_app, client_app = load_components(app)
    federation = app_federation(config, section)
    model_seed = derive_seed(config.seed, "model")
    architecture = run_model_of(config, federation.dataset, seed=model_seed, with_weights=False)
    federation = with_model_classes(federation, architecture)
    dataset = federation.dataset
    probe = probed(config, app, server_app, client_app)
    config, adapted = with_found_defenses(config, client_app, probe)  # the app's DP: the attacks adapt to it
    declared = [defense.name for defense in config.client.defenses]  # what the attacks know
    config, lpips = with_attacks_resolved(config, architecture, dataset)
    device = resolve_device(config.device)
    environment = {"engine": ENGINE, "flower_app": str(app.path), "run_config": app.run_config}
    with (
        stop_on_signals(StopSignal(), force_exit) as stop,
        RunSession.create(
            RunStore.create(config, str(device), run_dir, environment), started=started, keep_checkpoints=True
        ) as session,
    ):
        session.record_partitions(federation)
        if config.adversary.attacks:
            session.attach_adversary(adversary_of(config, federation, session.store, model_seed, lpips))
        evaluator = (
            CentralEvaluator(run_model_of(config, dataset, seed=0, with_weights=False), federation, device)
            if len(dataset.x_test)
            else None
        )
        audit = app_privacy_audit(
            config.adversary.privacy_audit, data_of(config), config.seed, federation, architecture
        )
        layout = {name: tuple(value.shape) for name, value in architecture.state_dict().items()}
        dp_watch = DpWatch(session.store, declared, audit, adapted, client_level_audit(config, client_app, layout))
        recording = AppRecording(session, federation, evaluator, dp_watch)
        tapped = recording.tapped(stop, tap=config.adversary.tap, wants=config.adversary.attacks_round, layout=layout)
        try:
            with app_working_directory(session.run_dir):  # what the app writes lands in the run directory
                run_app(
                    app,
                    server_app,
                    ProbedClientApp(client_app, dp_watch.notes.folder, dp_watch.canaries),
                    config,
                    section,
                    wrap_grid=tapped,
                    node_partitions=recording.node_partitions,
                    stop=stop,
                    record_metrics=recording.app_metrics.record,
                    strategy_started=dp_watch.strategy_started,
                )
        except BaseException as failure:  # a failed or interrupted app: its attacks are dropped at once
            replacement = _failed(session, stop, failure)
            if replacement is None:
                raise
            raise replacement from failure
        session.end_attacks(stop, completed=True)
        if stop.requested:
            raise RunInterrupted(session.run_dir, stop.signum)
        evals = [row for row in session.store.rows() if row["event"] == "eval"]
        app_summary = {"app_evaluation": app_evaluation(evals[-1]) if evals else {}, "app_dp": dp_watch.summary()}
        summary = session.summarise(extra=app_summary)
        log_summary(summary)
        log_dp_summary(summary["app_dp"])
        return session.run_dir


def _failed(session: RunSession, stop: StopSignal, failure: BaseException) -> BaseException | None:
    """What an app that failed or was stopped raises instead of ``failure`` (None: ``failure`` itself), once its
    attacks are abandoned and an uncommitted directory is given back (an empty run would only be in the way of a
    retry)."""
    session.end_attacks(stop, completed=False)
    kept = session.give_back_uncommitted()
    if stop.requested:
        return RunInterrupted(kept, stop.signum)
    if isinstance(failure, Exception) and not isinstance(failure, ConfigError | ExternalFailure):
        return app_failure(failure, kept)
    return None


def app_failure(failure: Exception, run_dir: Path | None) -> ExternalFailure:
    """The audited app's own error in one line, its traceback in a log file (``fedsim.core.failure_log``)."""
    cause: BaseException = failure
    while cause.__cause__ is not None:  # Flower wraps what the ServerApp raised ("An error was encountered")
        cause = cause.__cause__
    log = write_failure_log(failure, "audit")
    kept = f"; what it wrote stays in {run_dir}" if run_dir is not None else "; no run directory was kept"
    return ExternalFailure(f"the Flower app failed: {type(cause).__name__}: {first_line(cause)}{kept}{pointer_to(log)}")


def probed(config: ExperimentConfig, app: FlowerApp, server_app: Any, client_app: Any) -> DryProbe | None:
    """The DP the app's first round sets up on each node, found by a dry call before the attacks are chosen (None
    where no attack runs: nothing to adapt)."""
    if not config.adversary.attacks:
        return None
    logger.info(
        "a dry call of the app's first round, to find the DP its nodes train with before the attacks are chosen"
    )
    probe = dry_probe(server_app, client_app, config.federation.num_clients, app.run_config)
    line = dry_probe_line(probe)
    if line is not None:  # DP it missed, found as the nodes train, ends the audit with a warning and its --set
        logger.info(line)
    return probe


def client_level_audit(
    config: ExperimentConfig, client_app: Any, layout: dict[str, tuple[int, ...]]
) -> ClientLevelAudit | None:
    """Canary clients through the app's own ``LocalDpMod`` or server-side DP wrapper (None: no privacy audit)."""
    audit = config.adversary.privacy_audit
    return None if audit is None else ClientLevelAudit(audit, config.seed, client_app_mods(client_app), layout)


def importable(app_path: Path) -> None:
    """The app's modules importable here, in spawned attack workers and in Ray's client processes."""
    folder = on_path(app_path)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if folder not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([folder, *paths])


def data_of(config: ExperimentConfig) -> AppDataConfig:
    """The app's data function, as the audit config names it."""
    assert isinstance(config.data, AppDataConfig), "an app audit's config reads the app's data (audit_config sets it)"
    return config.data


def app_federation(config: ExperimentConfig, section: AppSection) -> Federation:
    """The app's training images per partition, read through its own data function (scoring side only)."""
    dataset, partitions = read_app_partitions(data_of(config))
    stats = ChannelStats(tuple(section.mean), tuple(section.std))
    return Federation(dataset, partitions, tuple(stats for _ in partitions), stats)


def run_app(
    app: FlowerApp,
    server_app: Any,
    client_app: Any,
    config: ExperimentConfig,
    section: AppSection,
    *,
    wrap_grid: Callable[[Any], AppGrid] | None = None,
    node_partitions: dict[int, int] | None = None,
    stop: StopSignal | None = None,
    record_metrics: Recorder = lambda server_round, kind, metrics: None,
    strategy_started: Callable[[Any], None] = lambda strategy: None,
) -> None:
    """Play the app under Flower's simulation engine, as `flwr run` would, its ServerApp on ``wrap_grid``'s grid;
    ``stop``, requested before the simulation starts, starts neither Ray nor the simulation."""
    stop = stop if stop is not None else StopSignal()
    from flwr.serverapp import Grid, ServerApp

    audited = ServerApp()

    @audited.main()
    def main(grid: Grid, context: Any) -> None:
        tapped = wrap_grid(grid) if wrap_grid is not None else None
        server_app(grid=tapped if tapped is not None else grid, context=context)
        if tapped is not None:  # a legacy workflow keeps the global model in the server's state
            tapped.finish(context.state.array_records.get(LEGACY_PARAMETERS))

    backend_config = simulation_backend_config(config.federation, config.adversary)
    nodes = config.federation.num_clients
    with (
        RayProcesses(),
        recording_node_registration(node_partitions if node_partitions is not None else {}),
        watching_strategies(record_metrics, strategy_started),
    ):
        stop.check()  # asked for while the audit got ready: Ray is never started
        logger.info("starting the Flower app %s: %d nodes in Flower's simulation", app.name, nodes)
        try:
            start_ray(backend_config["init_args"])
            stop.check()  # asked for while Ray started: the app never runs
            run_simulation(
                num_supernodes=nodes,
                client_app=client_app,
                server_app=audited,
                backend_config=backend_config,
                app_dir=str(app.path),
                run_config=app.run_config,
                overrides=app.overrides,  # what each node fuses with the app's run config, as under `flwr run`
            )
        finally:
            stop_ray()


def final_state(path: Path) -> dict[str, np.ndarray]:
    """A saved state_dict as arrays (to compare an app's final models)."""
    return {name: value.numpy() for name, value in torch.load(path, weights_only=True).items()}
