"""The scoring side of leakage: pairs reconstructions with what the clients really trained on.

This is the one place that reads both the adversary's output and the ground truth. The adversary is
handed ``on_result``/``on_failure`` callbacks and (only when the threat model grants labels) a
label grant; it is never given the store itself.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.serverapp import Grid

from adversary.adversary import Adversary
from adversary.images import plot_trajectory, save_grid
from adversary.malicious_server import LegacyMaliciousServer, MaliciousServer
from adversary.metrics import Lpips
from adversary.modifications.base import PublicData
from adversary.scoring import image_space, score_reconstruction, score_trajectory
from adversary.taps import AGGREGATE
from adversary.threat_models import Architecture, LabelGrant, TrainingHyperparameters
from adversary.view import AttackerView, Reconstruction
from fedsim.rundir.backlog import AttackBacklog
from fedsim.config import AttackOptions, ExperimentConfig
from fedsim.core.devices import resolve_device
from fedsim.engine.lifecycle.protocols import protocol_of
from fedsim.engine.lifecycle.federation import Federation
from fedsim.rundir.ground_truth import GroundTruthStore
from fedsim.engine.lifecycle.assembly import run_model_of
from fedsim.rundir.writer import RunStore
from fedsim.core.seeding import derive_seed
from strategies.secagg import SECAGG_STRATEGY

logger = logging.getLogger("fedsim")
RECONSTRUCTIONS_DIR = "reconstructions"


@dataclass(frozen=True)
class Truth:
    images: torch.Tensor  # [0, 1]
    labels: torch.Tensor
    to_image_space: Callable[[torch.Tensor], torch.Tensor]


class LeakageScorer:
    """Scores every finished attack against the ground truth and records it (rows, grids, trajectories)."""

    def __init__(self, store: RunStore, federation: Federation, save_images: bool, lpips: Lpips | None = None) -> None:
        self.store = store
        self.federation = federation
        self.truth_store = GroundTruthStore(store.run_dir)
        self.save_images = save_images
        self.lpips = lpips if lpips is not None else Lpips()  # unavailable: None + one warning
        self.image_dir = store.run_dir / RECONSTRUCTIONS_DIR
        self._lock = threading.Lock()  # attack workers report concurrently
        self.extra_fields: dict[str, Any] = {"threat_model": "honest"}  # who produced the attacked update

    def used_samples(self, server_round: int, client: int) -> list[int]:
        """The distinct samples a client trained on in a round, in the order first used."""
        batches = self.truth_store.read(server_round, client)["batches"]
        return list(dict.fromkeys(sample for batch in batches for sample in batch))

    def truth_for(self, view: AttackerView) -> Truth:
        dataset = self.federation.dataset
        if view.target == AGGREGATE:
            # exactly the clients whose updates are in the aggregate: not a client that failed, timed out
            # or wrote its file after the round closed
            ids = [sample for client in view.contributors for sample in self.used_samples(view.round, client)]
            stats = self.federation.test_stats
        else:
            client = int(view.target.split(":", 1)[1])
            ids = self.used_samples(view.round, client)
            stats = self.federation.client_stats[client]
        index = np.asarray(ids, dtype=np.int64)
        return Truth(
            torch.from_numpy(dataset.x_train[index]), torch.from_numpy(dataset.y_train[index]), stats.denormalize
        )

    def grant_labels(self, server_round: int, client: int, count: int) -> torch.Tensor:
        """Labels of a client's first ``count`` samples: what `adversary.knows.labels: known` hands over."""
        ids = np.asarray(self.used_samples(server_round, client)[:count], dtype=np.int64)
        return torch.from_numpy(self.federation.dataset.y_train[ids])

    def on_result(self, view: AttackerView, options: AttackOptions, reconstruction: Reconstruction) -> None:
        truth = self.truth_for(view)
        if len(truth.labels) == 0:  # e.g. DP-SGD's Poisson sampling drew empty batches: nothing to leak
            with self._lock:
                self.store.append({"round": view.round, "event": "attack", "tap": view.tap, "target": view.target,
                                   "attack": options.name, "status": "no-data", **self.extra_fields,
                                   "error": "the target trained on no sample this round (empty batches)"})  # fmt: skip
            return
        score = score_reconstruction(reconstruction, truth.images, truth.labels, truth.to_image_space, self.lpips)
        row: dict[str, Any] = {
            "round": view.round,
            "event": "attack",
            "tap": view.tap,
            "target": view.target,
            "attack": options.name,
            "status": "ok",
            "batch_size": len(truth.labels),
            "restarts": getattr(options, "restarts", 1),
            **self.extra_fields,
            **score.to_row(),
        }
        if reconstruction.cut:  # stopped by the attack's time_limit after row["iterations"] steps
            row["cut"] = True
        if reconstruction.trajectory:
            row["trajectory"] = score_trajectory(reconstruction, truth.images, truth.to_image_space)
        with self._lock:
            self.store.append(row)
            if self.save_images:
                self._save_images(view, options, truth, reconstruction, score, row.get("trajectory"))
        logger.info(
            "round %d %s %s: PSNR %s dB, SSIM %.3f, label accuracy %.0f%% (%d images, %.1fs)",
            view.round, view.target, options.name,
            f"{score.psnr_mean:.2f}" if score.psnr_mean is not None else "inf",
            score.ssim_mean, 100 * score.label_accuracy, len(truth.labels), reconstruction.seconds,
        )

    def on_failure(self, view: AttackerView, options: AttackOptions, error: BaseException) -> None:
        with self._lock:
            self.store.append(
                {"round": view.round, "event": "attack", "tap": view.tap, "target": view.target,
                 "attack": options.name, "status": "failed", "error": f"{type(error).__name__}: {error}"}
            )

    def _save_images(self, view, options, truth: Truth, reconstruction, score, trajectory) -> None:
        self.image_dir.mkdir(exist_ok=True)
        stem = f"round_{view.round:04d}_{re.sub(r'[^A-Za-z0-9-]', '-', view.target)}_{options.name}"
        truth_index, rec_index = list(score.truth_index), list(score.rec_index)
        reconstructed = image_space(reconstruction.images, truth.to_image_space)
        psnr_text = f"{score.psnr_mean:.1f} dB" if score.psnr_mean is not None else "exact"
        title = f"round {view.round} {view.target} {options.name}: {psnr_text}"
        save_grid(self.image_dir / f"{stem}.png", truth.images[truth_index], reconstructed[rec_index], title)
        if trajectory:
            plot_trajectory(self.image_dir / f"{stem}_trajectory.png", trajectory, title)


@dataclass
class AdversaryWiring:
    """How an adversary plugs into one run's server."""

    adversary: Adversary
    wrap_grid: Callable[[Grid], Grid] | None
    wrap_strategy: Callable[[object], object]


def attach_adversary(
    config: ExperimentConfig, federation: Federation, store: RunStore, model_seed: int, lpips: Lpips | None = None
) -> AdversaryWiring:
    """Build the configured adversary with its tap, its knowledge and the scorer behind it."""
    dataset = federation.dataset
    stats = federation.test_stats  # the federation's public normalisation
    mean, std = torch.tensor(stats.mean), torch.tensor(stats.std)
    architecture = Architecture(
        # the architecture the clients train and send
        model=run_model_of(config, dataset, seed=model_seed, with_weights=False),
        input_shape=(dataset.channels, dataset.image_size, dataset.image_size),
        num_classes=dataset.num_classes,
        input_bounds=((0 - mean) / std, (1 - mean) / std),
    )
    client = config.client
    training = TrainingHyperparameters(
        client.lr, client.batch_size, client.local_steps, client.local_epochs, client.momentum, client.weight_decay
    )
    scorer = LeakageScorer(store, federation, config.adversary.save_images, lpips or Lpips(config.adversary.lpips))
    grant: LabelGrant | None = scorer.grant_labels if config.adversary.knows.labels == "known" else None
    adversary = Adversary(
        config.adversary,
        architecture,
        training,
        seed=derive_seed(config.seed, "adversary"),
        device=resolve_device(config.adversary.device),
        on_result=scorer.on_result,
        on_failure=scorer.on_failure,
        grant_labels=grant,
        backlog=AttackBacklog(store.run_dir),
    )
    wants = config.adversary.attacks_round
    protocol = protocol_of(config)  # what each tap sees depends on how the strategy's rounds travel
    layout = {name: tuple(value.shape) for name, value in architecture.model.state_dict().items()}
    if config.adversary.tap == "mitm":
        return AdversaryWiring(adversary, lambda grid: protocol.wire_tap(grid, adversary.observe, wants, layout), lambda s: s)
    if config.adversary.server == "malicious":
        public = public_data(federation, config.adversary.modification)
        scorer.extra_fields = {"threat_model": "malicious server", "modification": config.adversary.modification.name,
                               "public_data": public.source}  # fmt: skip

        def malicious(strategy: object) -> object:
            tapped = protocol.strategy_tap(strategy, adversary.observe, wants, layout)
            arguments = (tapped, config.adversary.modification, architecture.model, architecture.input_shape,
                         architecture.num_classes, public, derive_seed(config.seed, "modification"), wants,
                         adversary.set_round_model)  # fmt: skip
            if config.strategy.name != SECAGG_STRATEGY:
                return MaliciousServer(*arguments)
            # the legacy path sends unnamed arrays: the tap reads an attacked round's by the module's layout
            return LegacyMaliciousServer(*arguments, layout_of=lambda server_round, module: tapped.set_round_layout(
                server_round, {name: tuple(value.shape) for name, value in module.state_dict().items()}))  # fmt: skip

        return AdversaryWiring(adversary, None, malicious)
    return AdversaryWiring(adversary, None, lambda strategy: protocol.strategy_tap(strategy, adversary.observe, wants, layout))


def public_data(federation: Federation, modification: Any) -> PublicData:
    """The images a malicious server calibrates with: the first test-split images (no client holds them),
    in the model's input space."""
    count = min(int(getattr(modification, "public_images", 256)), len(federation.dataset.x_test))
    images = federation.test_stats.normalize(torch.from_numpy(federation.dataset.x_test[:count]))
    return PublicData(images, f"test split 0-{count - 1}")
