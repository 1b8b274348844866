"""The floor under a leakage score: what a guess made from public data alone reaches on the same images.

A failed attack does not score zero. A flat image, the data set's average image or any other digit already
earns PSNR and SSIM against a handwritten digit (on MNIST an all-black image scores SSIM ~0.26), so a score
means leakage only above what an attacker could produce *without* the update. Two such guesses are scored
against every attacked target, exactly as a reconstruction is (same [0, 1] image space, same Hungarian
pairing on MSE, same metrics, as many images as the reconstruction has):

- ``public-mean``: the mean image of the public split, repeated; its label is the public split's majority
  label. It is the best fixed guess under MSE and has no randomness: it is scored once (one "draw").
- ``random-public``: that many images drawn at random from the public split (without replacement while the
  split has enough), with their own labels, paired with the truth by the same matching. It is scored over
  ``FLOOR_DRAWS`` (32) independent draws from a generator seeded by the caller (from the run seed), so a floor
  is reproducible.

The public split is the data set's test split: no client trains on it, so an attacker may hold it.

The floor of a metric is the higher of the two baselines' one-sided 95 % bounds: for each baseline the
95th percentile (``FLOOR_QUANTILE``, linear interpolation) of its per-draw mean, which for the mean image is
its one score. ``floor_ssim`` is therefore a score that a guess without the update reaches at least one time in
twenty (random draws) or always (the mean image) on these very images; the spread over draws is the floor's
uncertainty, and it shrinks as the target holds more images.

Verdict, on SSIM (the metric every leakage table leads with): a reconstruction ``leaks`` when its mean SSIM is
strictly above ``floor_ssim``, and is ``at floor`` otherwise: a one-sided test at the 5 % level against an
attacker guessing public images, and strictly better than the public mean image on the same images. ``at floor``
says the attack failed on that target; it is not evidence that a defense protects it, since a stronger attack
may still succeed. PSNR and label accuracy get floors by the same rule, reported beside their scores.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from adversary.matching import mse_cost_matrix, pair_by_cost
from adversary.metrics import label_accuracy, psnr, ssim
from adversary.scoring import capped_psnr_mean

FLOOR_DRAWS = 32  # random-public draws per target: enough for a stable 95th percentile at a few ms per image
FLOOR_QUANTILE = 0.95  # one-sided: a guess without the update reaches the floor one time in twenty
PUBLIC_MEAN = "public-mean"
RANDOM_PUBLIC = "random-public"
LEAKS = "leaks"
AT_FLOOR = "at floor"
UNKNOWN = "unknown"  # a row without a floor: written by an older fedsim, or no public split to draw from
METRICS = ("ssim", "psnr", "label_accuracy")


@dataclass(frozen=True)
class PublicSplit:
    """Images an attacker may hold without any update: [0, 1] (N, C, H, W) images and their labels."""

    images: torch.Tensor
    labels: torch.Tensor

    def __post_init__(self) -> None:
        if len(self.images) == 0 or len(self.images) != len(self.labels):
            raise ValueError(
                f"a public split needs images with one label each, got {len(self.images)} images "
                f"and {len(self.labels)} labels"
            )

    @cached_property
    def mean_image(self) -> torch.Tensor:
        """The pixel-wise mean image, (1, C, H, W) float32: the best fixed guess under MSE."""
        return self.images.double().mean(dim=0, keepdim=True).float()

    @cached_property
    def majority_label(self) -> int:
        """The most frequent public label (the smallest one on a tie)."""
        return int(torch.bincount(self.labels.reshape(-1).long()).argmax())


@dataclass(frozen=True)
class BaselineScores:
    """One baseline's mean score per draw (arrays of one value for the deterministic mean image)."""

    name: str
    ssim: np.ndarray
    psnr: np.ndarray
    label_accuracy: np.ndarray

    def bound(self, metric: str) -> float:
        """The baseline's one-sided 95 % bound on ``metric``: the 95th percentile of its draws."""
        return float(np.quantile(getattr(self, metric), FLOOR_QUANTILE))

    def expected(self, metric: str) -> float:
        """The baseline's mean over its draws: what it scores on average."""
        return float(np.mean(getattr(self, metric)))


@dataclass(frozen=True)
class Floor:
    """The public-data baselines of one target and the floor they set per metric."""

    public_mean: BaselineScores
    random_public: BaselineScores

    def value(self, metric: str) -> float:
        """The floor of ``metric``: the higher of the two baselines' one-sided 95 % bounds."""
        return max(self.public_mean.bound(metric), self.random_public.bound(metric))

    def source(self, metric: str = "ssim") -> str:
        """Which baseline sets the floor of ``metric`` (the mean image on a tie: it needs no luck)."""
        return max((self.random_public, self.public_mean), key=lambda b: (b.bound(metric), b is self.public_mean)).name

    def verdict(self, ssim_mean: float) -> str:
        """``leaks`` when the reconstruction's mean SSIM is strictly above the SSIM floor, else ``at floor``."""
        return LEAKS if ssim_mean > self.value("ssim") else AT_FLOOR

    def to_row(self, ssim_mean: float) -> dict[str, object]:
        """The floor's fields of an attack row, with the verdict for a reconstruction of mean SSIM ``ssim_mean``."""
        row: dict[str, object] = {f"floor_{metric}": self.value(metric) for metric in METRICS}
        row["floor_source"] = self.source("ssim")
        row["floor_draws"] = len(self.random_public.ssim)
        for baseline in (self.public_mean, self.random_public):
            prefix = f"floor_{baseline.name.replace('-', '_')}"
            row.update({f"{prefix}_{metric}": baseline.expected(metric) for metric in METRICS})
        row["verdict"] = self.verdict(ssim_mean)
        return row


def _score_guesses(
    guesses: list[torch.Tensor], costs: list[torch.Tensor], guess_labels: list[torch.Tensor], truth, truth_labels
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per guess: mean SSIM, capped mean PSNR and label accuracy over its Hungarian pairing with the truth.

    ``costs[i]``: guess i's MSE cost matrix against the truth. Every guess is paired on its own (as
    ``adversary.scoring`` pairs a reconstruction); SSIM, which skimage computes image by image, then runs once
    over the pairs of all guesses together.
    """
    pairs = [pair_by_cost(cost) for cost in costs]
    guessed = torch.cat([guess[rec] for guess, (rec, _) in zip(guesses, pairs)])
    true = torch.cat([truth[idx] for _, idx in pairs])
    per_ssim, per_psnr = ssim(guessed, true).numpy(), psnr(guessed, true).tolist()
    ssim_means, psnr_means, accuracies, start = [], [], [], 0
    for labels, (rec, idx) in zip(guess_labels, pairs):
        stop = start + len(rec)
        ssim_means.append(float(per_ssim[start:stop].mean()))
        psnr_means.append(capped_psnr_mean(per_psnr[start:stop]))
        accuracies.append(label_accuracy(labels[rec], truth_labels[idx]))
        start = stop
    return np.asarray(ssim_means), np.asarray(psnr_means), np.asarray(accuracies)


def public_floor(
    truth_images: torch.Tensor,
    truth_labels: torch.Tensor,
    public: PublicSplit,
    count: int,
    seed: int,
    draws: int = FLOOR_DRAWS,
) -> Floor:
    """Score the public-mean and random-public baselines against one target's [0, 1] truth.

    ``count``: how many images each guess holds, the reconstruction's number (so that the Hungarian matching
    gives a guess the same choice of pairs it gave the reconstruction); ``seed``: the random draws' seed.
    """
    if count < 1 or draws < 1:
        raise ValueError(f"a floor needs at least one image per guess and one draw, got {count} and {draws}")
    truth = truth_images.detach().cpu().float()
    truth_labels = truth_labels.detach().cpu().reshape(-1).long()
    images, labels = public.images.detach().cpu().float(), public.labels.detach().cpu().reshape(-1).long()

    mean_guess = public.mean_image.expand(count, *truth.shape[1:])
    mean_labels = torch.full((count,), public.majority_label, dtype=torch.long)
    mean_cost = mse_cost_matrix(mean_guess[:1], truth).expand(count, -1)
    public_mean = BaselineScores(
        PUBLIC_MEAN, *_score_guesses([mean_guess], [mean_cost], [mean_labels], truth, truth_labels)
    )

    generator = np.random.default_rng(seed)
    replace = count > len(images)  # a public split smaller than the guess: draw with replacement
    picks = [torch.as_tensor(generator.choice(len(images), size=count, replace=replace)) for _ in range(draws)]
    # every drawn image's costs once: the draws overlap when they hold more images than the split has
    drawn, position = torch.unique(torch.cat(picks), return_inverse=True)
    drawn_cost = mse_cost_matrix(images[drawn], truth)
    costs = [drawn_cost[rows] for rows in position.split(count)]
    random_public = BaselineScores(
        RANDOM_PUBLIC,
        *_score_guesses([images[p] for p in picks], costs, [labels[p] for p in picks], truth, truth_labels),
    )
    return Floor(public_mean, random_public)


def verdict_of(row: dict[str, object]) -> str:
    """A recorded attack row's verdict; ``unknown`` for rows without one (older fedsim, no public split)."""
    verdict = row.get("verdict")
    return verdict if verdict in (LEAKS, AT_FLOOR) else UNKNOWN


def target_verdict(verdicts: Iterable[str]) -> str:
    """One target's verdict from its attack results' verdicts: ``leaks`` when any attack on it scored above its
    floor, ``at floor`` when every one is known to be at or below it, otherwise ``unknown``."""
    known = set(verdicts)
    if LEAKS in known:
        return LEAKS
    return AT_FLOOR if known == {AT_FLOOR} else UNKNOWN
