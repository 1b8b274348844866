"""Leakage scheduling: the configured adversary wired into one run's server, with the scorer behind it.

``attach_adversary`` builds the adversary (its tap, its knowledge, the attack backlog) from the pieces the
composition root took out of the run's config (``AdversaryPieces``; ``fedsim.engine.assembly.adversary_of``) and
returns how it plugs in: a wrapped grid for a wire tap, a wrapped strategy for a server tap or a malicious server. The
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
from adversary.threat_models import AggregateNoise, Architecture, LabelGrant, TrainingHyperparameters
from adversary.workers import AttackWorkers, WorkerSettings, settings_for
from fedsim.config import AdversaryConfig
from fedsim.core.devices import resolve_device
from fedsim.core.seeding import derive_seed
from fedsim.data import ImageDataset, TextDataset
from fedsim.engine.leakage.scoring import LeakageScorer
from fedsim.engine.lifecycle.federation import Federation
from fedsim.engine.lifecycle.protocols import Protocol
from fedsim.judge.metrics import Lpips
from fedsim.rundir.backlog import AttackBacklog
from fedsim.rundir.writer import RunStore


@dataclass
class AdversaryWiring:
    """How an adversary plugs into one run's server."""

    adversary: Adversary
    wrap_grid: Callable[[Grid], Grid] | None
    wrap_strategy: Callable[[object], object]


@dataclass(frozen=True)
class AdversaryPieces:
    """What the adversary of a run is built from, taken out of the run's config by its composition root
    (``fedsim.engine.assembly.adversary_of``): the sections and values it reads, nothing else."""

    settings: AdversaryConfig  # the run's ``adversary`` section, its attacks resolved against the run
    architecture: Architecture  # the model the clients train and send, as the attacker knows it
    training: TrainingHyperparameters  # the clients' local training, as the threat model grants it
    protocol: Protocol  # how the strategy's rounds travel: what each tap sees
    seed: int  # the run's seed
    defended: bool  # a client defense is in force
    lower_bound: bool  # the leakage cannot be read as the defense's protection (``verdict_warning``)
    legacy_path: bool  # the rounds travel Flower's legacy path (SecAgg+): a malicious server sends unnamed arrays
    tuner: Any = None  # the rehearsal that builds tuning tasks (``PublicRehearsal.task``; None: no tuning)
    # the noise the protocol puts into the aggregate it releases, from its public parameters, which the server runs
    # it with (SecAgg+'s quantisation: ``SecAggPlusParameters.aggregate_noise``; None: none known)
    aggregate_noise: AggregateNoise | None = None


def attach_adversary(
    pieces: AdversaryPieces,
    federation: Federation,
    store: RunStore,
    lpips: Lpips | None = None,
    attack_workers: Callable[[WorkerSettings], AttackWorkers] | None = None,
) -> AdversaryWiring:
    """Build the configured adversary with its tap, its knowledge and the scorer behind it. ``attack_workers``:
    where its attacks run, given the workers' settings (a sweep's shared pool); by default a pool of the run's
    own."""
    settings, architecture = pieces.settings, pieces.architecture
    scorer = LeakageScorer(
        store,
        federation,
        settings.save_images,
        lpips or Lpips(settings.lpips),
        seed=pieces.seed,
        level=settings.floor.level,
        draws=settings.floor.draws,
    )
    # under a client defense, leakage from attacks that ignore it (or that did not saturate) is a lower bound
    scorer.defended = pieces.defended
    scorer.lower_bound = pieces.lower_bound
    grant: LabelGrant | None = scorer.grant_labels if settings.knows.labels == "known" else None
    device = resolve_device(settings.device)
    workers = settings_for(settings.workers, settings.resources.cpus, device)
    adversary = Adversary(
        settings,
        architecture,
        pieces.training,
        seed=derive_seed(pieces.seed, "adversary"),
        device=device,
        workers=attack_workers(workers) if attack_workers is not None else None,
        on_result=scorer.on_result,
        on_failure=scorer.on_failure,
        grant_labels=grant,
        backlog=AttackBacklog(store.run_dir),
        tuner=pieces.tuner,
        aggregate_noise=pieces.aggregate_noise,
    )
    wants, protocol = settings.attacks_round, pieces.protocol
    layout = {name: tuple(value.shape) for name, value in architecture.model.state_dict().items()}
    if settings.server == "malicious":  # validated: only at a position a malicious server can take
        return AdversaryWiring(adversary, None, _malicious_server(pieces, adversary, scorer, federation, layout))
    tapped = TAPS.get(settings.tap).attach(protocol, adversary.observe, wants, layout)
    return AdversaryWiring(adversary, tapped.wrap_grid, tapped.wrap_strategy)


def _malicious_server(
    pieces: AdversaryPieces,
    adversary: Adversary,
    scorer: LeakageScorer,
    federation: Federation,
    layout: dict[str, tuple[int, ...]],
) -> Callable[[object], object]:
    """How a malicious server wraps the strategy: a strategy tap under the server's own model modification."""
    settings, architecture, wants = pieces.settings, pieces.architecture, pieces.settings.attacks_round
    modification = settings.modification
    assert modification is not None, "a malicious server's config always holds a modification (imprint by default)"
    public = public_data(federation, modification)
    scorer.extra_fields = {
        "threat_model": "malicious server",
        "modification": modification.name,
        "public_data": public.source,
    }

    def malicious(strategy: object) -> object:
        tapped = pieces.protocol.strategy_tap(strategy, adversary.observe, wants, layout)
        arguments = (
            tapped,
            modification,
            architecture.model,
            architecture.input_shape,
            architecture.num_classes,
            public,
            derive_seed(pieces.seed, "modification"),
            wants,
            adversary.set_round_model,
        )
        if not pieces.legacy_path:
            return MaliciousServer(*arguments)
        # the legacy path sends unnamed arrays: the tap reads an attacked round's by the module's layout
        return LegacyMaliciousServer(
            *arguments,
            layout_of=lambda server_round, module: tapped.set_round_layout(
                server_round, {name: tuple(value.shape) for name, value in module.state_dict().items()}
            ),
        )

    return malicious


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


def public_data(federation: Federation, modification: Any) -> PublicData:
    """The images a malicious server calibrates with: the first test-split images (no client holds them),
    in the model's input space."""
    count = min(int(getattr(modification, "public_images", 256)), len(federation.dataset.x_test))
    images = federation.test_stats.normalize(torch.from_numpy(federation.dataset.x_test[:count]))
    return PublicData(images, f"test split 0-{count - 1}")
