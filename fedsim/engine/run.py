"""The composition root of ``fedsim run``: one experiment's config taken apart and its pieces put together.

``run_experiment`` prepares the data and the model, opens the run's session (``fedsim.engine.session.RunSession``:
the store, the adversary, the privacy audit, the commits, the summary), and plays the rounds on an engine
(Flower's simulation by default: ``fedsim.engine.lifecycle.simulation``). ``fedsim audit`` has its own root on the
same session (``fedsim.engine.app_audit.runner``). The summary itself (what ``summary.json`` holds, and whether a
run trained at all) is ``fedsim.engine.lifecycle.summary``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path

import torch

from clients.client_app import ClientSpec
from clients.training import check_training_defenses
from fedsim.config import ExperimentConfig
from fedsim.core.devices import resolve_device
from fedsim.core.errors import RunInterrupted, TrainingFailed
from fedsim.core.seeding import derive_seed
from fedsim.core.stopping import StopRequested, StopSignal, force_exit, stop_on_signals
from fedsim.engine.assembly import (
    adversary_of,
    client_spec_of,
    privacy_audit_of,
    run_model_of,
    server_settings_of,
    strategy_of,
    with_attacks_resolved,
)
from fedsim.engine.lifecycle.evaluation import CentralEvaluator
from fedsim.engine.lifecycle.federation import Federation, prepare_federation
from fedsim.engine.lifecycle.progress import LogProgress, RichProgress
from fedsim.engine.lifecycle.protocols import protocol_of
from fedsim.engine.lifecycle.rounds import ServerSpec, State
from fedsim.engine.lifecycle.services import SharedServices
from fedsim.engine.lifecycle.simulation import Engine, SimulationEngine, quiet_frameworks
from fedsim.engine.lifecycle.summary import log_summary, rounds_without_update
from fedsim.engine.session import RunSession
from fedsim.judge.metrics import Lpips
from fedsim.rundir.layout import METRICS_FILE
from fedsim.rundir.writer import RunStore

logger = logging.getLogger("fedsim")


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
    many rounds; ``ray_resources``: see ``fedsim.engine.lifecycle.simulation.backend_config``; ``engine``: where the
    rounds are played, Flower's simulation by default, or the grid a deployed ServerApp got:
    ``fedsim.engine.deployment.app``).

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
    """run_experiment's body; the session it opens is closed by ``held`` (the caller's) when the run ends."""
    started = time.perf_counter()
    quiet_frameworks()
    session: RunSession | None = None
    if resume is not None:
        session, config, last_round = RunSession.resume(resume, rounds, started=started)
        held.enter_context(session)
        initial_state: State | None = session.store.load_checkpoint(last_round)
    else:
        assert config is not None, "a config or a run to resume is required"
        last_round, initial_state = 0, None
    device = resolve_device(config.device)
    if engine is None:
        engine = SimulationEngine(config.federation, config.adversary, ray_resources, services)
    federation = prepare_federation(config.data, config.federation.num_clients, config.seed)
    model_seed = derive_seed(config.seed, "model")
    if initial_state is None:
        initial_state = _initial_state(config, federation, model_seed)
    architecture = (
        run_model_of(config, federation.dataset, seed=model_seed, with_weights=False)
        if config.adversary.attacks
        else None
    )
    config, lpips = with_attacks_resolved(config, architecture, federation.dataset)
    if stop.requested:  # stopped while the data and models loaded: nothing written yet
        raise RunInterrupted(session.run_dir if session else None, stop.signum, last_round + 1)
    if session is None:  # created once data and model are known good: a failed start leaves no orphan directory
        store = RunStore.create(config, str(device), run_dir, engine.environment())
        new = RunSession.create(store, started=started, keep_checkpoints=config.output.save_checkpoints)
        session = held.enter_context(new)
    else:
        session.record_resumption(str(device), engine.environment())
    session.record_partitions(federation)
    client_spec, server_spec = _assemble(
        config, session, federation, initial_state, last_round, resume is not None, device, quiet, stop, services, lpips
    )
    _play(engine, config, session, server_spec, federation, client_spec, stop, resume is None)
    summary = session.summarise(config.federation, config.adversary.last_attacked_round())
    untrained = rounds_without_update(session.store, after=last_round, withheld=_withheld_rounds(config))
    if untrained is not None:
        raise TrainingFailed(f"{untrained}; reasons in the fit rows of {session.run_dir / METRICS_FILE}")
    log_summary(summary)
    return session.run_dir


def _initial_state(config: ExperimentConfig, federation: Federation, model_seed: int) -> State:
    """A new run's global model before round 1; its defenses checked against it first (e.g. BatchNorm under
    dpsgd: one line, no round run)."""
    model = run_model_of(config, federation.dataset, seed=model_seed, with_weights=True)
    check_training_defenses(model, config.client.defenses)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def _assemble(
    config: ExperimentConfig,
    session: RunSession,
    federation: Federation,
    initial_state: State,
    last_round: int,
    resumed: bool,
    device: torch.device,
    quiet: bool,
    stop: StopSignal,
    services: SharedServices | None,
    lpips: Lpips | None,
) -> tuple[ClientSpec, ServerSpec]:
    """The clients' spec and the server's, with the adversary and the privacy audit attached to the session."""
    dataset = federation.dataset
    model_seed = derive_seed(config.seed, "model")
    client_spec = client_spec_of(
        config,
        session.run_dir.resolve(),
        partitions=federation.partitions,
        stats=federation.client_stats,
        num_classes=dataset.num_classes,
        channels=dataset.channels,
        image_size=dataset.image_size,
    )
    strategy = strategy_of(config, history=session.store.rows() if resumed else ())
    if config.adversary.attacks:
        workers = services.attack_workers if services is not None else None
        wiring = session.attach_adversary(
            adversary_of(config, federation, session.store, model_seed, lpips, client_spec, attack_workers=workers)
        )
        queued = wiring.adversary.resume(session.store.rows(), last_round) if resumed else 0
        if queued:
            logger.info("re-running %d attack job(s) that the killed run left unfinished", queued)
    if (
        config.adversary.privacy_audit
    ):  # canary clients join the DP aggregate; the auditor's tap sees what its threat model sees
        session.attach_privacy_audit(privacy_audit_of(config, federation, session.store, model_seed, last_round))
    progress = LogProgress() if quiet else RichProgress()
    server_spec = ServerSpec(
        settings=server_settings_of(config),
        store=session.store,
        strategy=session.wrap_strategy(strategy),  # the audit's wrapping under the adversary's own
        initial_state=initial_state,
        start_round=last_round,
        evaluate=CentralEvaluator(run_model_of(config, dataset, seed=0, with_weights=False), federation, device),
        progress=progress,
        wrap_grid=session.wrap_grid,
        round_hooks=session.round_hooks,
        stop=stop,
    )
    return client_spec, server_spec


def _play(
    engine: Engine,
    config: ExperimentConfig,
    session: RunSession,
    server: ServerSpec,
    federation: Federation,
    client: ClientSpec,
    stop: StopSignal,
    new_run: bool,
) -> None:
    """Play the rounds left, then let the attacks under way finish (or abandon them: a stop, a crash)."""
    stopped: StopRequested | KeyboardInterrupt | None = None
    try:
        if server.start_round < config.federation.rounds:
            protocol = protocol_of(config.strategy.name)  # Message API, or Flower's legacy path for SecAgg+
            engine.play(protocol, server, federation, client)
    except (StopRequested, KeyboardInterrupt) as interrupt:  # KeyboardInterrupt: a signal the run did not handle
        stopped = interrupt
    finally:
        server.progress.stop()
        # every reconstruction already under way gets scored and recorded, unless a stop comes first: then the
        # unfinished attacks stay in the backlog and a resumed run re-runs them
        session.end_attacks(stop, completed=stopped is None)
    if stopped is not None or stop.requested:
        raise _interrupted(session.store, config, new_run, stop.signum) from stopped


def _interrupted(store: RunStore, config: ExperimentConfig, new_run: bool, signum: int | None) -> RunInterrupted:
    """What a stop leaves: the directory to resume, or none when a new run had not committed its first round
    (it is given back as the stop propagates: ``RunSession.give_back_uncommitted``)."""
    committed = store.last_committed_round()
    if committed is None and new_run:
        return RunInterrupted(None, signum)
    in_progress = (committed or 0) + 1
    return RunInterrupted(store.run_dir, signum, in_progress if in_progress <= config.federation.rounds else None)


def _withheld_rounds(config: ExperimentConfig) -> Callable[[int], bool]:
    """Rounds whose aggregate a malicious server keeps to itself by design (they are not failures)."""
    adversary = config.adversary
    return adversary.attacks_round if adversary.server == "malicious" else (lambda server_round: False)
