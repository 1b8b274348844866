"""The null under a leakage score: what guesses made without the update score on the same images, as a test.

A failed attack does not score zero. A flat image, the data set's average image or any other digit already earns
PSNR and SSIM against a handwritten digit, and the mean public image of a digit's own class, which an attacker gets
from the labels alone (iDLG reads them off a gradient), earns more. So a score means leakage only where no guess
made *without* the update could have reached it: a one-sided test whose null is the attacker guessing.

Four guess families, each scored against every attacked target exactly as a reconstruction is (same [0, 1] image
space, same Hungarian pairing on MSE, same metrics, as many images as the reconstruction holds):

- ``public-mean``: the mean image of the public split, repeated (fixed: one score);
- ``flat-mean``: a flat image at the public split's mean intensity per channel (fixed: one score); a flat guess
  can beat the mean image on SSIM, whose structure term punishes the mean image's faint shapes;
- ``label-mean``: per image, the mean public image of that image's class (fixed: one score);
- ``random-public``: that many images drawn at random from the public split;
- ``flat-public``: per image, a flat image at the mean intensity per channel of a random public image;
- ``label-public``: per image, a random public image of that image's class.

The label-informed families read the target's true labels: a null at least as strong as any label recovery an
attacker runs (stronger nulls make fewer false ``leaks``, never more). The public split is the data set's test
split: no client trains on it, so an attacker may hold it. Random families are scored over ``draws`` independent
draws (``adversary.floor.draws``, 256 by default) from a generator seeded by the caller, so a floor is reproducible.

**p-value.** A score ``s`` of a reconstruction *the attacker picked without the truth* is compared with one guess:
per random family the Monte-Carlo p-value ``(1 + #{draws >= s}) / (1 + draws)``, per fixed family 1 when the guess
scores at least ``s`` and 0 otherwise; the row's p-value is the largest over families (the test rejects only when
it rejects against every kind of guess, which keeps its level against the union of the nulls). Where the score is
the best of ``N`` candidates picked *with* the truth (the ground-truth oracle over ``N`` attacks), the null is the
best of ``N`` guesses: per family ``1 - (1 - p)^N``, the chance that one of ``N`` independent guesses reaches ``s``.

**Verdict**: ``leaks`` when the p-value is at most the level (``adversary.floor.level``, 5 % by default), ``at
floor`` otherwise. The floor shown beside a score (``floor_ssim``) is the critical value of that test: the score
above which the p-value reaches the level, per number of candidates selected over (``floor_ssim_best_of``).
``at floor`` says the attack failed on that target; it is not evidence that a defense protects it, since a
stronger attack may still succeed. PSNR and label accuracy get the same critical values, reported beside their
scores; the verdict is read on SSIM, the metric every leakage table leads with.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from fedsim.judge.matching import mse_cost_matrix, pair_by_cost
from fedsim.judge.metrics import label_accuracy, psnr, ssim
from fedsim.judge.scoring import capped_psnr_mean

FLOOR_DRAWS = 256  # random draws per family: p-values down to 1/257, a best-of-13 selection still testable at 5 %
FLOOR_LEVEL = 0.05  # the test's false-positive rate: a guess without the update is called `leaks` this often
MAX_SELECTED_OVER = 16  # critical values recorded per row for selections over 1..16 candidates
PUBLIC_MEAN = "public-mean"
FLAT_MEAN = "flat-mean"
LABEL_MEAN = "label-mean"
RANDOM_PUBLIC = "random-public"
FLAT_PUBLIC = "flat-public"
LABEL_PUBLIC = "label-public"
FAMILIES = (PUBLIC_MEAN, FLAT_MEAN, LABEL_MEAN, RANDOM_PUBLIC, FLAT_PUBLIC, LABEL_PUBLIC)
LEAKS = "leaks"
AT_FLOOR = "at floor"
UNKNOWN = "unknown"  # a row without a floor: written by an older fedsim, or no public split to draw from
METRICS = ("ssim", "psnr", "label_accuracy")
TIE = 1e-9  # scores this close are equal: the same image scored along two summation orders differs in the last bits
#: post-processing an attack applied to its output, applied to every guess of its null too
TransformGuess = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class PublicSplit:
    """Images an attacker may hold without any update.

    Attributes
    ----------
    images
        (N, C, H, W) images in [0, 1].
    labels
        Their N class ids.

    Raises
    ------
    ValueError
        No images, or not one label per image.
    """

    images: torch.Tensor
    labels: torch.Tensor

    def __post_init__(self) -> None:
        if len(self.images) == 0 or len(self.images) != len(self.labels):
            raise ValueError(
                f"a public split needs images with one label each, got {len(self.images)} images "
                f"and {len(self.labels)} labels"
            )

    @cached_property
    def flat_labels(self) -> torch.Tensor:
        return self.labels.detach().cpu().reshape(-1).long()

    @cached_property
    def mean_image(self) -> torch.Tensor:
        """The pixel-wise mean image, (1, C, H, W) float32: the best fixed guess under MSE."""
        return self.images.double().mean(dim=0, keepdim=True).float()

    @cached_property
    def majority_label(self) -> int:
        """The most frequent public label (the smallest one on a tie)."""
        return int(torch.bincount(self.flat_labels).argmax())

    def class_mean(self, label: int) -> torch.Tensor:
        """The mean public image of a class.

        Parameters
        ----------
        label
            A class id.

        Returns
        -------
        torch.Tensor
            (C, H, W); the public mean where the class has no image.
        """
        return self._class_means.get(int(label), self.mean_image[0])

    def class_indices(self, label: int) -> torch.Tensor:
        """The public images of a class.

        Parameters
        ----------
        label
            A class id.

        Returns
        -------
        torch.Tensor
            Their indices (every public image's where the class has none).
        """
        return self._class_indices.get(int(label), torch.arange(len(self.flat_labels)))

    @cached_property
    def _class_indices(self) -> dict[int, torch.Tensor]:
        return {int(c): torch.nonzero(self.flat_labels == c).reshape(-1) for c in torch.unique(self.flat_labels)}

    @cached_property
    def _class_means(self) -> dict[int, torch.Tensor]:
        images = self.images.detach().cpu().double()
        return {c: images[index].mean(dim=0).float() for c, index in self._class_indices.items()}


@dataclass(frozen=True)
class BaselineScores:
    """One guess family's mean score per draw (one value for a fixed guess).

    Attributes
    ----------
    name
        The family (``FAMILIES``).
    ssim
        Mean SSIM of each draw.
    psnr
        Mean PSNR (dB) of each draw.
    label_accuracy
        Label accuracy of each draw.
    """

    name: str
    ssim: np.ndarray
    psnr: np.ndarray
    label_accuracy: np.ndarray

    @property
    def fixed(self) -> bool:
        return len(self.ssim) == 1

    def p_value(self, score: float, metric: str = "ssim", selected_over: int = 1) -> float:
        """The chance that a guess of this family (the best of ``selected_over`` of them) scores at least ``score``.

        Parameters
        ----------
        score
            The reconstruction's score.
        metric
            ``"ssim"``, ``"psnr"`` or ``"label_accuracy"``.
        selected_over
            How many candidates the scored result was picked among (the test is against the best of as many
            guesses).

        Returns
        -------
        float
            The p-value.
        """
        values = getattr(self, metric)
        reached = int(np.count_nonzero(values >= score - TIE))
        single = float(reached > 0) if self.fixed else (1 + reached) / (1 + len(values))
        return single if selected_over == 1 else 1.0 - (1.0 - single) ** selected_over

    def critical(self, metric: str = "ssim", selected_over: int = 1, level: float = FLOOR_LEVEL) -> float:
        """The score above which ``p_value`` is at most ``level``.

        Parameters
        ----------
        metric
            ``"ssim"``, ``"psnr"`` or ``"label_accuracy"``.
        selected_over
            How many candidates the scored result was picked among (the test is against the best of as many
            guesses).
        level
            The test's level.

        Returns
        -------
        float
            The critical value (inf: no score can reach it, too few draws).
        """
        values = np.sort(getattr(self, metric))[::-1]
        if self.fixed:
            return float(values[0]) + TIE
        single_level = 1.0 - (1.0 - level) ** (1.0 / selected_over)
        allowed = math.floor(single_level * (1 + len(values)) - 1 + 1e-9)  # draws that may reach a leaking score
        return float(values[allowed]) + TIE if allowed >= 0 else math.inf

    def expected(self, metric: str) -> float:
        """The family's mean over its draws: what it scores on average.

        Parameters
        ----------
        metric
            ``"ssim"``, ``"psnr"`` or ``"label_accuracy"``.
        """
        return float(np.mean(getattr(self, metric)))


@dataclass(frozen=True)
class Floor:
    """The guess families of one target and the test they define.

    Attributes
    ----------
    families
        Each family's scores.
    level
        The test's level (its false-positive rate).
    """

    families: tuple[BaselineScores, ...]
    level: float = FLOOR_LEVEL

    def family(self, name: str) -> BaselineScores:
        """One family's scores.

        Parameters
        ----------
        name
            The family's name.
        """
        return next(family for family in self.families if family.name == name)

    def p_values(self, score: float, metric: str = "ssim") -> dict[str, float]:
        """Per family, the single-guess p-value of ``score``.

        Parameters
        ----------
        score
            The reconstruction's score.
        metric
            ``"ssim"``, ``"psnr"`` or ``"label_accuracy"``.
        """
        return {family.name: family.p_value(score, metric) for family in self.families}

    def p_value(self, score: float, metric: str = "ssim", selected_over: int = 1) -> float:
        """The test's p-value: the largest over the families.

        Parameters
        ----------
        score
            The reconstruction's score.
        metric
            ``"ssim"``, ``"psnr"`` or ``"label_accuracy"``.
        selected_over
            How many candidates the scored result was picked among (the test is against the best of as many
            guesses).
        """
        return max(family.p_value(score, metric, selected_over) for family in self.families)

    def value(self, metric: str = "ssim", selected_over: int = 1) -> float:
        """The floor of ``metric``: the test's critical value, the highest over the families.

        Parameters
        ----------
        metric
            ``"ssim"``, ``"psnr"`` or ``"label_accuracy"``.
        selected_over
            How many candidates the scored result was picked among (the test is against the best of as many
            guesses).
        """
        return max(family.critical(metric, selected_over, self.level) for family in self.families)

    def source(self, metric: str = "ssim") -> str:
        """Which family sets the floor of ``metric`` (a fixed guess on a tie: it needs no luck).

        Parameters
        ----------
        metric
            ``"ssim"``, ``"psnr"`` or ``"label_accuracy"``.
        """
        ranked = sorted(self.families, key=lambda f: (f.critical(metric, 1, self.level), f.fixed), reverse=True)
        return ranked[0].name

    def verdict(self, score: float, selected_over: int = 1) -> str:
        """``leaks`` when the SSIM ``score``'s p-value is at most the level, else ``at floor``.

        Parameters
        ----------
        score
            The reconstruction's mean SSIM.
        selected_over
            How many candidates the scored result was picked among (the test is against the best of as many
            guesses).
        """
        return LEAKS if significant(self.p_value(score, "ssim", selected_over), self.level) else AT_FLOOR

    def to_row(self, ssim_mean: float) -> dict[str, object]:
        """The floor's fields of an attack row: p-values, critical values (``floor_ssim_best_of[n - 1]``: for a
        pick over n), verdict.

        Parameters
        ----------
        ssim_mean
            The mean SSIM of a reconstruction the attack picked without the truth.
        """
        row: dict[str, object] = {f"floor_{metric}": _finite(self.value(metric)) for metric in METRICS}
        row["floor_ssim_best_of"] = [_finite(self.value("ssim", n)) for n in range(1, MAX_SELECTED_OVER + 1)]
        row["floor_source"] = self.source("ssim")
        row["floor_draws"] = max(len(family.ssim) for family in self.families)
        row["floor_level"] = self.level
        for family in self.families:
            prefix = f"floor_{family.name.replace('-', '_')}"
            row.update({f"{prefix}_{metric}": family.expected(metric) for metric in METRICS})
        row["p_values"] = self.p_values(ssim_mean)
        row["p_value"] = self.p_value(ssim_mean)
        row["verdict"] = self.verdict(ssim_mean)
        return row


def significant(p_value: float, level: float) -> bool:
    """Whether ``p_value`` is at most ``level``, up to the rounding of ``1 - (1 - p)^N`` (a relative 1e-9)."""
    return p_value <= level * (1 + 1e-9)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _score_guesses(
    guesses: list[torch.Tensor], costs: list[torch.Tensor], guess_labels: list[torch.Tensor], truth, truth_labels
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per guess: mean SSIM, capped mean PSNR and label accuracy over its Hungarian pairing with the truth.

    ``costs[i]``: guess i's MSE cost matrix against the truth. Every guess is paired on its own (as
    ``fedsim.judge.scoring`` pairs a reconstruction); SSIM, which skimage computes image by image, then runs once
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


def _fixed_family(name: str, guess: torch.Tensor, labels: torch.Tensor, truth, truth_labels) -> BaselineScores:
    return BaselineScores(
        name, *_score_guesses([guess], [mse_cost_matrix(guess, truth)], [labels], truth, truth_labels)
    )


def _random_family(
    name: str, picks: list[torch.Tensor], public_images: torch.Tensor, public_labels, truth, truth_labels
) -> BaselineScores:
    # every drawn image's costs once: the draws overlap when they hold more images than the split has
    drawn, position = torch.unique(torch.cat(picks), return_inverse=True)
    drawn_cost = mse_cost_matrix(public_images[drawn], truth)
    costs = [drawn_cost[rows] for rows in position.split([len(p) for p in picks])]
    guesses = [public_images[p] for p in picks]
    return BaselineScores(name, *_score_guesses(guesses, costs, [public_labels[p] for p in picks], truth, truth_labels))


def guess_labels(truth_labels: torch.Tensor, count: int) -> torch.Tensor:
    """The labels a label-informed guess of ``count`` images uses: the target's, repeated or cut to ``count``."""
    labels = truth_labels.reshape(-1).long()
    return labels.repeat(math.ceil(count / len(labels)))[:count]


def public_floor(
    truth_images: torch.Tensor,
    truth_labels: torch.Tensor,
    public: PublicSplit,
    count: int,
    seed: int,
    draws: int = FLOOR_DRAWS,
    level: float = FLOOR_LEVEL,
    transform: TransformGuess | None = None,
) -> Floor:
    """Score the guess families (``FAMILIES``) against one target's truth.

    Parameters
    ----------
    truth_images
        The target's images, (N, C, H, W) in [0, 1].
    truth_labels
        Their class ids.
    public
        The images an attacker may hold without the update, that the guesses are made of.
    count
        How many images each guess holds: the reconstruction's number (so that the Hungarian matching gives a
        guess the same choice of pairs it gave the reconstruction).
    seed
        The random draws' seed.
    draws
        Random draws per family (p-values go down to 1 / (draws + 1)).
    level
        The test's level.
    transform
        The post-processing the attack applied to its own output, applied to every guess too (the null goes
        through the same procedure as the score); None: none.

    Returns
    -------
    Floor
        The families' scores and the test they define.

    Raises
    ------
    ValueError
        ``count`` or ``draws`` below 1, or ``level`` outside (0, 1).
    """
    if count < 1 or draws < 1:
        raise ValueError(f"a floor needs at least one image per guess and one draw, got {count} and {draws}")
    if not 0 < level < 1:
        raise ValueError(f"a floor's level must be in (0, 1), got {level}")
    truth = truth_images.detach().cpu().float()
    truth_labels = truth_labels.detach().cpu().reshape(-1).long()
    raw, labels = public.images.detach().cpu().float(), public.flat_labels
    clean = transform or (lambda x: x)
    images = clean(raw)
    informed = guess_labels(truth_labels, count)

    mean_guess = clean(public.mean_image.expand(count, *truth.shape[1:]).contiguous())
    # flat images: of each public image, or of the public mean, only the mean intensity per channel is kept
    flats = clean(raw.mean(dim=(2, 3), keepdim=True).expand_as(raw).contiguous())
    flat_mean = public.mean_image.mean(dim=(2, 3), keepdim=True).expand(count, *truth.shape[1:]).contiguous()
    flat_mean_guess = clean(flat_mean)
    majority = torch.full((count,), public.majority_label, dtype=torch.long)
    label_mean_guess = clean(torch.stack([public.class_mean(int(c)) for c in informed]))

    generator = np.random.default_rng(seed)
    replace = count > len(images)  # a public split smaller than the guess: draw with replacement
    random_picks = [torch.as_tensor(generator.choice(len(images), size=count, replace=replace)) for _ in range(draws)]
    flat_picks = [torch.as_tensor(generator.choice(len(images), size=count, replace=replace)) for _ in range(draws)]
    per_class = [public.class_indices(int(c)) for c in informed]
    label_picks = [
        torch.stack([pool[int(generator.integers(len(pool)))] for pool in per_class]).long() for _ in range(draws)
    ]
    families = (
        _fixed_family(PUBLIC_MEAN, mean_guess, majority, truth, truth_labels),
        _fixed_family(FLAT_MEAN, flat_mean_guess, majority, truth, truth_labels),
        _fixed_family(LABEL_MEAN, label_mean_guess, informed, truth, truth_labels),
        _random_family(RANDOM_PUBLIC, random_picks, images, labels, truth, truth_labels),
        _random_family(FLAT_PUBLIC, flat_picks, flats, labels, truth, truth_labels),
        _random_family(LABEL_PUBLIC, label_picks, images, labels, truth, truth_labels),
    )
    return Floor(families, level)
