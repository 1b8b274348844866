"""The scoring side of leakage: pairs reconstructions with what the clients really trained on.

This is the one place that reads both the adversary's output and the ground truth. The adversary is
handed ``on_result``/``on_failure`` callbacks and (only when the threat model grants labels) a
label grant; it is never given the store itself (``fedsim.engine.leakage.wiring`` hands them over).
Every scored row also carries its test (``fedsim.judge.floor``): what guesses made without the update (the public mean
image, flat images, random public images, and guesses informed by the target's labels), paired the same way and
put through the same post-processing, score on the same truth; the reconstruction's p-value against them and its verdict
(``leaks`` / ``at floor``) at the configured level. The public split is the data set's test split, which no
client trains on.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from adversary.postprocessing import POSTPROCESSING
from adversary.taps import AGGREGATE
from adversary.view import AttackerView, Reconstruction
from fedsim.config import AttackOptions
from fedsim.core.atomic import inside
from fedsim.core.seeding import derive_seed
from fedsim.data import TextDataset
from fedsim.engine.leakage.no_iterations import no_iterations_row, ran_no_iteration
from fedsim.engine.leakage.text_rows import text_fields
from fedsim.engine.lifecycle.federation import Federation
from fedsim.judge.floor import FLOOR_DRAWS, FLOOR_LEVEL, UNKNOWN, Floor, PublicSplit, public_floor
from fedsim.judge.images import plot_trajectory, save_grid
from fedsim.judge.metrics import Lpips
from fedsim.judge.scoring import AttackScore, image_space, score_reconstruction, score_trajectory
from fedsim.rundir.ground_truth import GroundTruthStore
from fedsim.rundir.layout import RECONSTRUCTIONS_DIR, grid_file, trajectory_file
from fedsim.rundir.writer import RunStore

logger = logging.getLogger("fedsim")


@dataclass(frozen=True)
class Truth:
    images: torch.Tensor  # [0, 1]
    labels: torch.Tensor
    to_image_space: Callable[[torch.Tensor], torch.Tensor]


class LeakageScorer:
    """Scores every finished attack against the ground truth and records it (rows, grids, trajectories)."""

    def __init__(
        self,
        store: RunStore,
        federation: Federation,
        save_images: bool,
        lpips: Lpips | None = None,
        *,
        seed: int,
        level: float = FLOOR_LEVEL,
        draws: int = FLOOR_DRAWS,
    ) -> None:
        self.store = store
        self.seed = seed  # the run's seed: each target's random-public floor draws derive from it
        self.level, self.draws = level, draws  # the verdict's test (fedsim.judge.floor)
        self.federation = federation
        self.truth_store = GroundTruthStore(store.run_dir)
        self.save_images = save_images
        self.lpips = lpips if lpips is not None else Lpips()  # unavailable: None + one warning
        self.image_dir = store.run_dir / RECONSTRUCTIONS_DIR
        self._lock = threading.Lock()  # attack workers report concurrently
        self.extra_fields: dict[str, Any] = {"threat_model": "honest"}  # who produced the attacked update
        self._public: PublicSplit | None = None
        # (round, target, images per guess, post-processing) -> floor
        self._floors: dict[tuple[int, str, int, str | None], Floor] = {}
        self.defended = False  # a client defense is in force
        self.lower_bound = False  # no attack adapted to a defense in force runs (portfolio.verdict_warning)

    def used_samples(self, server_round: int, client: int) -> list[int]:
        """The distinct samples a client trained on in a round, in the order first used."""
        batches = self.truth_store.read(server_round, client)["batches"]
        return list(dict.fromkeys(sample for batch in batches for sample in batch))

    def target_samples(self, view: AttackerView) -> np.ndarray:
        """The training samples behind a target's update: its own, or (aggregate) those of its contributors."""
        if view.target == AGGREGATE:
            # exactly the clients whose updates are in the aggregate: not a client that failed, timed out
            # or wrote its file after the round closed
            ids = [sample for client in view.contributors for sample in self.used_samples(view.round, client)]
        else:
            ids = self.used_samples(view.round, int(view.target.split(":", 1)[1]))
        return np.asarray(ids, dtype=np.int64)

    def truth_for(self, view: AttackerView) -> Truth:
        dataset = self.federation.dataset
        if view.target == AGGREGATE:
            stats = self.federation.test_stats
        else:
            stats = self.federation.client_stats[int(view.target.split(":", 1)[1])]
        index = self.target_samples(view)
        return Truth(
            torch.from_numpy(dataset.x_train[index]), torch.from_numpy(dataset.y_train[index]), stats.denormalize
        )

    def public_split(self) -> PublicSplit | None:
        """The data set's test split, which no client trains on: the images an attacker may hold (None: empty)."""
        dataset = self.federation.dataset
        if self._public is None and len(getattr(dataset, "x_test", ())):
            self._public = PublicSplit(torch.from_numpy(dataset.x_test), torch.from_numpy(dataset.y_test))
        return self._public

    def floor_for(self, view: AttackerView, truth: Truth, count: int, postprocess: str | None = None) -> Floor | None:
        """The floor of a target for guesses of ``count`` images put through ``postprocess`` (the attack's own
        cleaning of its output, ``adversary.postprocessing``), once per (round, target, count, postprocess).

        Its draws are seeded from the run seed, the round and the target, not the attack: every attack on a
        target is read against the same guesses. None when the data set has no public split to draw from.
        """
        key = (view.round, view.target, count, postprocess)
        with self._lock:
            known = self._floors.get(key)
        public = self.public_split()
        if known is not None or public is None:
            return known
        seed = derive_seed(self.seed, f"floor {view.target}", view.round)
        # the guesses are [0, 1] images; the attack cleaned its output in its own input space, and the filters
        # are per-channel order statistics, which the per-channel affine normalisation leaves unchanged
        transform = POSTPROCESSING[postprocess] if postprocess is not None else None
        floor = public_floor(truth.images, truth.labels, public, count, seed, self.draws, self.level, transform)
        with self._lock:
            return self._floors.setdefault(key, floor)

    def grant_labels(self, server_round: int, client: int, count: int) -> torch.Tensor:
        """Labels of a client's first ``count`` samples: what `adversary.knows.labels: known` hands over."""
        ids = np.asarray(self.used_samples(server_round, client)[:count], dtype=np.int64)
        return torch.from_numpy(self.federation.dataset.y_train[ids])

    def on_result(self, view: AttackerView, options: AttackOptions, reconstruction: Reconstruction) -> None:
        if ran_no_iteration(reconstruction):  # cut before its first step: its "best so far" is its starting guess
            row = no_iterations_row(view, options, self.extra_fields)
            with self._lock:
                self.store.append(row)
            logger.warning("round %d %s %s: %s", view.round, view.target, options.label, row["error"])
            return
        truth = self.truth_for(view)
        if len(truth.labels) == 0:  # e.g. DP-SGD's Poisson sampling drew empty batches: nothing to leak
            with self._lock:
                self.store.append(self._no_data_row(view, options))
            return
        if isinstance(self.federation.dataset, TextDataset):
            self._record_text(view, options, reconstruction)
            return
        score = score_reconstruction(reconstruction, truth.images, truth.labels, truth.to_image_space, self.lpips)
        floor = self.floor_for(view, truth, score.num_reconstructed, reconstruction.postprocess)
        row = {
            "round": view.round,
            "event": "attack",
            "tap": view.tap,
            "target": view.target,
            "attack": options.label,
            "status": "ok",
            "batch_size": len(truth.labels),
            # the budget behind this row and whether more of it would still have changed the answer
            "restarts": reconstruction.restarts or getattr(options, "restarts", 1),
            "preset": options.preset,
            "saturation": reconstruction.saturation,
            "saturated": reconstruction.saturation == "saturated",
            "gradient_match": _finite_or_none(reconstruction.gradient_match),
            # the defenses this attack is built for (it runs only where one is in force): ranked first
            "adapts_to": list(options.adapts_to),
            # a raced portfolio: the rung this attack was left behind at, on this target (None: it was not)
            "eliminated_at_rung": reconstruction.eliminated_at,
            # the attacker's own cleaning of its output, chosen by gradient match; the floor's guesses went through it
            "postprocess": reconstruction.postprocess,
            # an attack matching only some entries (ig-dropout: those above the noise): which share it matched
            **(
                {"matched_fraction": reconstruction.matched_fraction}
                if reconstruction.matched_fraction is not None
                else {}
            ),
            # the hyper-parameters tuned on public images for this setting, if any (adversary.tuning)
            **(reconstruction.tuning or {"tuned": False}),
            # leakage that cannot carry a verdict on the defense: the report marks it as a lower bound
            "lower_bound": self.lower_bound or (self.defended and reconstruction.saturation == "capped"),
            **self.extra_fields,
            **score.to_row(),
            **(floor.to_row(score.ssim_mean) if floor is not None else {"verdict": UNKNOWN}),
        }
        if reconstruction.cut:  # stopped by the attack's time_limit after row["iterations"] steps
            row["cut"] = True
        if reconstruction.trajectory:
            row["trajectory"] = score_trajectory(reconstruction, truth.images, truth.to_image_space)
        with self._lock:
            self.store.append(row)
            if self.save_images:
                self._save_images(view, options, truth, reconstruction, score, row.get("trajectory"))
        _log_scored(view, options, reconstruction, score, row, with_floor=floor is not None)

    def _no_data_row(self, view: AttackerView, options: AttackOptions) -> dict[str, Any]:
        return {
            "round": view.round,
            "event": "attack",
            "tap": view.tap,
            "target": view.target,
            "attack": options.label,
            "status": "no-data",
            **self.extra_fields,
            "error": "the target trained on no sample this round (empty batches)",
        }

    def _record_text(self, view: AttackerView, options: AttackOptions, reconstruction: Reconstruction) -> None:
        """A text attack's row: its sequences scored against the target's (``text_rows``), its floor and verdict."""
        if reconstruction.tokens is None:
            raise ValueError(f"attack {options.label} returned no token ids on a text data set")
        seed = derive_seed(self.seed, f"floor {view.target}", view.round)
        dataset = self.federation.dataset
        assert isinstance(dataset, TextDataset)  # a text attack runs on a text data set
        fields = text_fields(
            reconstruction.tokens.numpy(),
            dataset,
            self.target_samples(view),
            seed,
            self.draws,
            self.level,
        )
        row: dict[str, Any] = {
            "round": view.round,
            "event": "attack",
            "tap": view.tap,
            "target": view.target,
            "attack": options.label,
            "status": "ok",
            "batch_size": fields["sequences"],
            "objective": _finite_or_none(reconstruction.objective),
            "iterations": reconstruction.iterations,
            "seconds": reconstruction.seconds,
            "lower_bound": self.lower_bound,
            # the noise per entry the protocol is known to have put in (SecAgg+'s quantisation), as the attack got it
            **({"update_noise": view.update_noise} if view.update_noise is not None else {}),
            **self.extra_fields,
            **fields,
        }
        with self._lock:
            self.store.append(row)
        logger.info(
            "round %d %s %s: %.0f%% of sequences and %.0f%% of tokens recovered, ROUGE-L %.3f (%s, %d sequences)",
            view.round,
            view.target,
            options.label,
            100 * row["exact_mean"],
            100 * row["token_accuracy_mean"],
            row["rougeL_mean"],
            row["verdict"],
            row["sequences"],
        )

    def on_failure(self, view: AttackerView, options: AttackOptions, error: BaseException) -> None:
        with self._lock:
            self.store.append(
                {
                    "round": view.round,
                    "event": "attack",
                    "tap": view.tap,
                    "target": view.target,
                    "attack": options.label,
                    "status": "failed",
                    "error": f"{type(error).__name__}: {error}",
                }
            )

    def _save_images(self, view, options, truth: Truth, reconstruction, score, trajectory) -> None:
        run_dir = self.store.run_dir
        inside(run_dir, self.image_dir).mkdir(exist_ok=True)
        truth_index, rec_index = list(score.truth_index), list(score.rec_index)
        reconstructed = image_space(reconstruction.images, truth.to_image_space)
        psnr_text = f"{score.psnr_mean:.1f} dB" if score.psnr_mean is not None else "exact"
        title = f"round {view.round} {view.target} {options.label}: {psnr_text}"
        grid = grid_file(view.round, view.target, options.label)
        save_grid(inside(run_dir, self.image_dir / grid), truth.images[truth_index], reconstructed[rec_index], title)
        if trajectory:
            plot_trajectory(
                inside(run_dir, self.image_dir / trajectory_file(view.round, view.target, options.label)),
                trajectory,
                title,
            )


def _text(value: float | None) -> str:
    return "untestable" if value is None else f"{value:.3f}"


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _log_scored(
    view: AttackerView,
    options: AttackOptions,
    reconstruction: Reconstruction,
    score: AttackScore,
    row: dict[str, Any],
    *,
    with_floor: bool,
) -> None:
    """One log line per scored reconstruction: PSNR, SSIM and the verdict against its floor."""
    logger.info(
        "round %d %s %s: PSNR %s dB, SSIM %.3f (%s), label accuracy %.0f%% (%d images, %.1fs)",
        view.round,
        view.target,
        options.label,
        f"{score.psnr_mean:.2f}" if score.psnr_mean is not None else "inf",
        score.ssim_mean,
        row["verdict"]
        if not with_floor
        else f"{row['verdict']}, p {row['p_value']:.3f}, floor {_text(row['floor_ssim'])}",
        100 * score.label_accuracy,
        row["batch_size"],
        reconstruction.seconds,
    )
