"""Leakage scheduling: the configured adversary wired into one run's server, with the scorer behind it.

``attach_adversary`` builds the adversary (its tap, its knowledge, the attack backlog) and returns how it
plugs in: a wrapped grid for a wire tap, a wrapped strategy for a server tap or a malicious server. The
attacks' results go to ``fedsim.engine.leakage.scoring.LeakageScorer`` through callbacks only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from flwr.serverapp import Grid

from adversary.adversary import Adversary
from adversary.malicious_server import LegacyMaliciousServer, MaliciousServer
from adversary.modifications.base import PublicData
from adversary.tap_positions import TAPS
from adversary.threat_models import Architecture, LabelGrant, TrainingHyperparameters
from adversary.workers import AttackWorkers, WorkerSettings, settings_for
from clients.client_app import ClientSpec
from fedsim.config import ExperimentConfig
from fedsim.core.devices import resolve_device
from fedsim.core.seeding import derive_seed
from fedsim.data import ImageDataset, TextDataset
from fedsim.engine.leakage.portfolio import verdict_warning
from fedsim.engine.leakage.rehearsal import PublicRehearsal, tuned_attacks
from fedsim.engine.leakage.scoring import LeakageScorer
from fedsim.engine.lifecycle.assembly import run_model_of
from fedsim.engine.lifecycle.federation import Federation
from fedsim.engine.lifecycle.protocols import protocol_of
from fedsim.judge.metrics import Lpips
from fedsim.rundir.backlog import AttackBacklog
from fedsim.rundir.writer import RunStore
from strategies.secagg import SECAGG_STRATEGY


@dataclass
class AdversaryWiring:
    """How an adversary plugs into one run's server."""

    adversary: Adversary
    wrap_grid: Callable[[Grid], Grid] | None
    wrap_strategy: Callable[[object], object]


def attach_adversary(
    config: ExperimentConfig,
    federation: Federation,
    store: RunStore,
    model_seed: int,
    lpips: Lpips | None = None,
    client_spec: ClientSpec | None = None,
    attack_workers: Callable[[WorkerSettings], AttackWorkers] | None = None,
) -> AdversaryWiring:
    """Build the configured adversary with its tap, its knowledge and the scorer behind it. ``client_spec``: what the
    run's clients are handed, for rehearsing them on public images when attacks are tuned (adversary.tuning).
    ``attack_workers``: where its attacks run, given the workers' settings (a sweep's shared pool); by default a
    pool of the run's own."""
    dataset = federation.dataset
    architecture = Architecture(
        # the architecture the clients train and send
        model=run_model_of(config, dataset, seed=model_seed, with_weights=False),
        input_shape=input_shape_of(dataset),
        num_classes=dataset.num_classes,
        input_bounds=input_bounds_of(federation),
    )
    client = config.client
    training = TrainingHyperparameters(
        client.lr, client.batch_size, client.local_steps, client.local_epochs, client.momentum, client.weight_decay
    )
    scorer = LeakageScorer(
        store,
        federation,
        config.adversary.save_images,
        lpips or Lpips(config.adversary.lpips),
        seed=config.seed,
        level=config.adversary.floor.level,
        draws=config.adversary.floor.draws,
    )
    # under a client defense, leakage from attacks that ignore it (or that did not saturate) is a lower bound
    scorer.defended = bool(config.client.defenses)
    scorer.lower_bound = verdict_warning(config) is not None
    grant: LabelGrant | None = scorer.grant_labels if config.adversary.knows.labels == "known" else None
    device = resolve_device(config.adversary.device)
    settings = settings_for(config.adversary.workers, config.adversary.resources.cpus, device)
    adversary = Adversary(
        config.adversary,
        architecture,
        training,
        seed=derive_seed(config.seed, "adversary"),
        device=device,
        workers=attack_workers(settings) if attack_workers is not None else None,
        on_result=scorer.on_result,
        on_failure=scorer.on_failure,
        grant_labels=grant,
        backlog=AttackBacklog(store.run_dir),
        tuner=tuner_of(config, client_spec, federation),
    )
    wants = config.adversary.attacks_round
    protocol = protocol_of(config)  # what each tap sees depends on how the strategy's rounds travel
    layout = {name: tuple(value.shape) for name, value in architecture.model.state_dict().items()}
    if config.adversary.server == "malicious":  # validated: only at a position a malicious server can take
        public = public_data(federation, config.adversary.modification)
        scorer.extra_fields = {
            "threat_model": "malicious server",
            "modification": config.adversary.modification.name,
            "public_data": public.source,
        }

        def malicious(strategy: object) -> object:
            tapped = protocol.strategy_tap(strategy, adversary.observe, wants, layout)
            arguments = (
                tapped,
                config.adversary.modification,
                architecture.model,
                architecture.input_shape,
                architecture.num_classes,
                public,
                derive_seed(config.seed, "modification"),
                wants,
                adversary.set_round_model,
            )
            if config.strategy.name != SECAGG_STRATEGY:
                return MaliciousServer(*arguments)
            # the legacy path sends unnamed arrays: the tap reads an attacked round's by the module's layout
            return LegacyMaliciousServer(
                *arguments,
                layout_of=lambda server_round, module: tapped.set_round_layout(
                    server_round, {name: tuple(value.shape) for name, value in module.state_dict().items()}
                ),
            )

        return AdversaryWiring(adversary, None, malicious)
    tapped = TAPS.get(config.adversary.tap).attach(protocol, adversary.observe, wants, layout)
    return AdversaryWiring(adversary, tapped.wrap_grid, tapped.wrap_strategy)


def input_shape_of(dataset: ImageDataset | TextDataset) -> tuple[int, int, int]:
    """One sample's shape as attacks read it: (C, H, W) images, or (1, 1, L) for sequences of L token ids."""
    if isinstance(dataset, TextDataset):
        return (1, 1, dataset.image_size)
    return (dataset.channels, dataset.image_size, dataset.image_size)


def input_bounds_of(federation: Federation) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Valid inputs in model space: [0, 1] images under the public normalisation; None for token ids."""
    if isinstance(federation.dataset, TextDataset):
        return None
    mean, std = torch.tensor(federation.test_stats.mean), torch.tensor(federation.test_stats.std)
    return (0 - mean) / std, (1 - mean) / std


def tuner_of(config: ExperimentConfig, client: ClientSpec | None, federation: Federation) -> Any:
    """The rehearsal that builds tuning tasks, where ``adversary.tuning`` selects an attack of the run."""
    if client is None or not tuned_attacks(config) or not len(federation.dataset.x_test):
        return None
    return PublicRehearsal(config, client, federation).task


def public_data(federation: Federation, modification: Any) -> PublicData:
    """The images a malicious server calibrates with: the first test-split images (no client holds them),
    in the model's input space."""
    count = min(int(getattr(modification, "public_images", 256)), len(federation.dataset.x_test))
    images = federation.test_stats.normalize(torch.from_numpy(federation.dataset.x_test[:count]))
    return PublicData(images, f"test split 0-{count - 1}")
