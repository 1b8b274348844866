"""A run's plugins and engine components, assembled from its whole config.

Plugins (clients, strategies, models) and the engine's components (the adversary's wiring, the privacy audit's)
take only the sections and values they read; this is where a run's ``ExperimentConfig`` is taken apart for them:
the clients' spec with their failure schedule, the server's strategy with its central-DP wrapper, the run's
model as the server, the clients and the adversary all build it, and the adversary's pieces. It belongs to the
composition roots (``fedsim.engine.run``, ``fedsim.engine.app_audit``, ``fedsim.engine.deployment``), which
alone import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from adversary.privacy_audit.canaries import CarriedCanaries, ExampleCanaries
from adversary.privacy_audit.config import CLIENT, EXAMPLE, audit_level, canary_norm
from adversary.threat_models import Architecture, TrainingHyperparameters
from adversary.workers import AttackWorkers, WorkerSettings
from clients.client_app import ClientSpec
from clients.failures import FailureSchedule
from fedsim.config import SECAGG_STRATEGY, SECAGG_TRAINING_STAGE, ClientConfig, ExperimentConfig
from fedsim.core.seeding import derive_seed
from fedsim.data import ChannelStats, ImageDataset, TextDataset
from fedsim.engine.leakage.portfolio import attack_setting, resolve_attacks, verdict_warning
from fedsim.engine.leakage.rehearsal import PublicRehearsal, setting_description, tuned_attacks
from fedsim.engine.leakage.wiring import (
    AdversaryPieces,
    AdversaryWiring,
    attach_adversary,
    input_bounds_of,
    input_shape_of,
)
from fedsim.engine.lifecycle.federation import Federation, prepare_federation
from fedsim.engine.lifecycle.protocols import protocol_of, secagg_parameters
from fedsim.engine.lifecycle.rounds import ServerSettings
from fedsim.engine.privacy_audit import PrivacyAuditPieces, PrivacyAuditWiring, attach_privacy_audit
from fedsim.judge.metrics import Lpips
from fedsim.models import DataShape, build_run_model
from fedsim.rundir.writer import RunStore
from strategies import build_strategy
from strategies.base import ServerStrategy


def failure_schedule(config: ExperimentConfig) -> FailureSchedule:
    """The failures ``federation.failures`` injects; under SecAgg+ a failure without a stage fires in training."""
    return FailureSchedule(
        failures=tuple(config.federation.failures),
        round_timeout=config.federation.round_timeout,
        training_stage=SECAGG_TRAINING_STAGE if config.strategy.secagg is not None else None,
    )


def client_spec_of(
    config: ExperimentConfig,
    run_dir: Path,
    *,
    partitions: tuple[np.ndarray, ...],
    stats: tuple[ChannelStats, ...],
    num_classes: int,
    channels: int,
    image_size: int,
) -> ClientSpec:
    """What every client of the run is handed: the sections it reads, the run directory and the data's shape."""
    return ClientSpec(
        run_dir=run_dir,
        partitions=partitions,
        stats=stats,
        num_classes=num_classes,
        channels=channels,
        image_size=image_size,
        seed=config.seed,
        data=config.data,
        model=config.model,
        client=config.client,
        rounds=config.federation.rounds,
        device=config.device,
        gpus=config.federation.client_resources.gpus,
        failures=failure_schedule(config),
        dp=config.strategy.dp,
        ground_truth=config.output.ground_truth,
        example_canaries=example_canaries(config),  # adversary.privacy_audit at example level: the host's canaries
        canary_clients=carried_canaries(config),  # adversary.privacy_audit at client level under SecAgg+
    )


def example_canaries(config: ExperimentConfig) -> ExampleCanaries | None:
    """What the clients' spec carries under ``adversary.privacy_audit``: the host's canaries at example level, else
    nothing."""
    audit, dp = config.adversary.privacy_audit, config.strategy.dp
    if audit is None or audit_level(dp, config.strategy.secagg) != EXAMPLE:
        return None
    norm = canary_norm(audit, dp, config.client.defenses)
    examples = audit.threat_model == "black-box"
    return ExampleCanaries(audit.canaries, norm, audit.host, derive_seed(config.seed, "audit"), examples)


def carried_canaries(config: ExperimentConfig) -> CarriedCanaries | None:
    """The canary clients the SecAgg+ clients carry in their masked vectors (client-level audit under SecAgg+)."""
    audit, dp, secagg = config.adversary.privacy_audit, config.strategy.dp, config.strategy.secagg
    if audit is None or secagg is None or audit_level(dp, secagg) != CLIENT:
        return None
    norm = canary_norm(audit, dp, config.client.defenses, CLIENT)
    return CarriedCanaries(audit.canaries, norm, derive_seed(config.seed, "audit"))


def strategy_of(config: ExperimentConfig, history: Iterable[Mapping[str, Any]] = ()) -> ServerStrategy:
    """The strategy of ``config.strategy``, wrapped by ``strategy.dp`` if set; ``history`` is a resumed run's
    metrics rows (restores DP state)."""
    return build_strategy(config.strategy.name, config.federation, config.seed, config.strategy.dp, history)


def federation_of(config: ExperimentConfig) -> Federation:
    """The run's data side: ``data`` split among ``federation.num_clients`` clients under the run's seed."""
    return prepare_federation(config.data, config.federation.num_clients, config.seed)


def server_settings_of(config: ExperimentConfig) -> ServerSettings:
    """What the server side reads of the run's config (``fedsim.engine.lifecycle.rounds.ServerSpec``)."""
    return ServerSettings(
        federation=config.federation,
        seed=config.seed,
        secagg=config.strategy.secagg,
        keep_checkpoints=config.output.save_checkpoints,
        last_attacked_round=config.adversary.last_attacked_round(),
    )


def run_model_of(config: ExperimentConfig, shape: DataShape, seed: int, *, with_weights: bool) -> nn.Module:
    """The run's model (``config.model``, built as ``client.dp_compatible_model`` says) for the data's shape;
    see ``fedsim.models.build_run_model``."""
    return build_run_model(
        config.model, shape, seed, with_weights=with_weights, dp_compatible=config.client.dp_compatible_model
    )


def architecture_of(config: ExperimentConfig, federation: Federation, model_seed: int) -> Architecture:
    """The model the clients train and send, as the attacker knows it (its input shape, classes and bounds)."""
    dataset = federation.dataset
    return Architecture(
        model=run_model_of(config, dataset, seed=model_seed, with_weights=False),
        input_shape=input_shape_of(dataset),
        num_classes=dataset.num_classes,
        input_bounds=input_bounds_of(federation),
    )


def training_of(client: ClientConfig) -> TrainingHyperparameters:
    """The clients' local training, as a threat model that knows it grants it."""
    return TrainingHyperparameters(
        client.lr, client.batch_size, client.local_steps, client.local_epochs, client.momentum, client.weight_decay
    )


def rehearsal_of(config: ExperimentConfig, client: ClientSpec, federation: Federation) -> PublicRehearsal:
    """The attacker's rehearsal of the run's clients on public images (``adversary.tuning``)."""
    attacks = tuned_attacks(config.adversary, config.client.defenses)
    setting = setting_description(config.data, config.model, config.client, config.adversary)
    return PublicRehearsal(config.adversary.tuning, attacks, setting, client, federation)


def tuner_of(config: ExperimentConfig, client: ClientSpec | None, federation: Federation) -> Any:
    """The rehearsal that builds tuning tasks, where ``adversary.tuning`` selects an attack of the run."""
    if client is None or not tuned_attacks(config.adversary, config.client.defenses):
        return None
    if not len(federation.dataset.x_test):
        return None
    return rehearsal_of(config, client, federation).task


def adversary_of(
    config: ExperimentConfig,
    federation: Federation,
    store: RunStore,
    model_seed: int,
    lpips: Lpips | None = None,
    client_spec: ClientSpec | None = None,
    attack_workers: Callable[[WorkerSettings], AttackWorkers] | None = None,
) -> AdversaryWiring:
    """The configured adversary attached to the run (``fedsim.engine.leakage.wiring.attach_adversary``), built from
    the pieces of ``config`` it reads. ``client_spec``: what the run's clients are handed, for rehearsing them on
    public images when attacks are tuned (adversary.tuning); ``attack_workers``: a sweep's shared pool."""
    pieces = AdversaryPieces(
        settings=config.adversary,
        architecture=architecture_of(config, federation, model_seed),
        training=training_of(config.client),
        protocol=protocol_of(config.strategy.name),
        seed=config.seed,
        defended=bool(config.client.defenses),
        lower_bound=verdict_warning(config.adversary, config.client.defenses) is not None,
        legacy_path=config.strategy.name == SECAGG_STRATEGY,
        tuner=tuner_of(config, client_spec, federation),
        aggregate_noise=(
            secagg_parameters(config.strategy.secagg, config.federation, federation).aggregate_noise
            if config.strategy.secagg is not None
            else None
        ),
    )
    return attach_adversary(pieces, federation, store, lpips, attack_workers)


def privacy_audit_of(
    config: ExperimentConfig, federation: Federation, store: RunStore, model_seed: int, committed: int
) -> PrivacyAuditWiring:
    """The privacy audit of ``adversary.privacy_audit`` attached to the run
    (``fedsim.engine.privacy_audit.attach_privacy_audit``), built from the pieces of ``config`` it reads;
    ``committed``: a resumed run's last committed round."""
    assert config.adversary.privacy_audit is not None
    pieces = PrivacyAuditPieces(
        audit=config.adversary.privacy_audit,
        dp=config.strategy.dp,
        secagg=config.strategy.secagg,
        defenses=config.client.defenses,
        lr=config.client.lr,
        model=run_model_of(config, federation.dataset, seed=model_seed, with_weights=True),
        seed=config.seed,
        protocol=protocol_of(config.strategy.name),
    )
    return attach_privacy_audit(pieces, federation, store, committed)


def with_attacks_resolved(
    config: ExperimentConfig, architecture: nn.Module | None, dataset: ImageDataset | TextDataset
) -> tuple[ExperimentConfig, Lpips | None]:
    """The run's config with the attacks that apply (``resolve_attacks``) and the LPIPS network that scores them;
    ``architecture``: the run's model (None where no attack is configured: the config is returned as it is).
    An attack that cannot apply, or ``adversary.lpips: required`` without its weights, is refused here, before
    the run directory exists."""
    if not config.adversary.attacks or architecture is None:
        return config, None
    shape = (dataset.channels, dataset.image_size, dataset.image_size)
    secagg = config.strategy.name == SECAGG_STRATEGY
    setting = attack_setting(
        config.adversary, config.client, config.model.name, secagg, architecture, shape, dataset.num_classes
    )
    adversary = resolve_attacks(config.adversary, config.client.defenses, setting)
    return config.model_copy(update={"adversary": adversary}), Lpips(adversary.lpips)
