"""A run's plugins, assembled from its whole config.

Plugins (clients, strategies, models) take only the sections and values they read; this is where a run's
``ExperimentConfig`` is taken apart for them: the clients' spec with their failure schedule, the server's
strategy with its central-DP wrapper, and the run's model as the server, the clients and the adversary
all build it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from adversary.audit.canaries import CarriedCanaries, ExampleCanaries
from adversary.audit.config import CLIENT, EXAMPLE, audit_level, canary_norm
from clients.client_app import ClientSpec
from clients.failures import FailureSchedule
from fedsim.config import SECAGG_TRAINING_STAGE, ExperimentConfig
from fedsim.core.seeding import derive_seed
from fedsim.data import ChannelStats
from fedsim.models import DataShape, build_run_model
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
        audit=example_canaries(config),  # adversary.audit at example level: the host's canaries
        canary_clients=carried_canaries(config),  # adversary.audit at client level under SecAgg+
    )


def example_canaries(config: ExperimentConfig) -> ExampleCanaries | None:
    """What the clients' spec carries under ``adversary.audit``: the host's canaries at example level, else nothing."""
    audit, dp = config.adversary.audit, config.strategy.dp
    if audit is None or audit_level(dp, config.strategy.secagg) != EXAMPLE:
        return None
    norm = canary_norm(audit, dp, config.client.defenses)
    examples = audit.threat_model == "black-box"
    return ExampleCanaries(audit.canaries, norm, audit.host, derive_seed(config.seed, "audit"), examples)


def carried_canaries(config: ExperimentConfig) -> CarriedCanaries | None:
    """The canary clients the SecAgg+ clients carry in their masked vectors (client-level audit under SecAgg+)."""
    audit, dp, secagg = config.adversary.audit, config.strategy.dp, config.strategy.secagg
    if audit is None or secagg is None or audit_level(dp, secagg) != CLIENT:
        return None
    norm = canary_norm(audit, dp, config.client.defenses, CLIENT)
    return CarriedCanaries(audit.canaries, norm, derive_seed(config.seed, "audit"))


def strategy_of(config: ExperimentConfig, history: Iterable[Mapping[str, Any]] = ()) -> ServerStrategy:
    """The strategy of ``config.strategy``, wrapped by ``strategy.dp`` if set; ``history`` is a resumed run's
    metrics rows (restores DP state)."""
    return build_strategy(config.strategy.name, config.federation, config.seed, config.strategy.dp, history)


def run_model_of(config: ExperimentConfig, shape: DataShape, seed: int, *, with_weights: bool) -> nn.Module:
    """The run's model (``config.model``, built as ``client.dp_compatible_model`` says) for the data's shape;
    see ``fedsim.models.build_run_model``."""
    return build_run_model(
        config.model, shape, seed, with_weights=with_weights, dp_compatible=config.client.dp_compatible_model
    )
