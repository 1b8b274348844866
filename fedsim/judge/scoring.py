"""Score an attack's ``Reconstruction`` against the ground truth it never saw.

Scoring happens in [0, 1] image space: reconstructions are mapped back from the model's input space
with the caller's ``to_image_space`` (``ChannelStats.denormalize`` of the victim's statistics) and
clamped to [0, 1], since pixels outside the displayable range are not part of any image and would
only inflate the error. Reconstructions are then paired with the truth by minimum total MSE
(``fedsim.judge.matching``), and every metric is computed over that one pairing.

PSNR of an exact reconstruction is ``+inf``. Per-image values keep it; ``psnr_mean`` averages the
per-pair values capped at ``PSNR_CAP_DB`` (100 dB: an error below 1e-10 per pixel, beyond what any image
format stores), so an exact pair counts as 100 dB, never drops out of the mean or turns it into null; and
``psnr_exact`` counts the exact pairs beside it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from adversary.view import Reconstruction
from fedsim.judge.matching import pair_by_mse
from fedsim.judge.metrics import Lpips, label_accuracy, mse, psnr, ssim

PAIRING = "hungarian-mse"
_RANGE_TOLERANCE = 1e-3  # truth must be [0, 1] images; this only absorbs float noise from loading

ToImageSpace = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class AttackScore:
    """How closely one reconstruction matches the truth, per pair and on average."""

    pairing: str  # how reconstructions were paired with truth ("hungarian-mse")
    num_reconstructed: int
    num_truth: int
    rec_index: tuple[int, ...]  # pair i is reconstruction rec_index[i] ...
    truth_index: tuple[int, ...]  # ... with true image truth_index[i]; ordered by truth index
    mse: tuple[float, ...]
    psnr: tuple[float, ...]  # dB; +inf for an exact pair
    ssim: tuple[float, ...]
    lpips: tuple[float, ...] | None  # None: LPIPS unavailable (no cached AlexNet) or not asked for
    mse_mean: float
    psnr_mean: float | None  # mean of the per-pair PSNRs capped at PSNR_CAP_DB; None only without pairs
    psnr_exact: int  # pairs with MSE 0 (counted at the cap in psnr_mean)
    recovered_40db: int  # true images whose pair reaches 40 dB PSNR (an image recovered, as paper 001 counts)
    ssim_mean: float
    lpips_mean: float | None
    label_accuracy: float  # over the image pairing: label of rec_index[i] vs label of truth_index[i]
    label_accuracy_multiset: float  # pairing-free: |multiset intersection| / max(N_rec, N_true)
    objective: float  # the attack's own final objective, copied from the Reconstruction
    iterations: int
    seconds: float

    def to_row(self) -> dict[str, Any]:
        """A JSON-safe dict (``json.dumps(..., allow_nan=False)`` accepts it): non-finite floats become None."""
        return {key: _json_safe(value) for key, value in asdict(self).items()}


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (tuple, list)):
        return [_json_safe(v) for v in value]
    return value


def image_space(images: torch.Tensor, to_image_space: ToImageSpace) -> torch.Tensor:
    """Model-input-space images -> [0, 1] float32 CPU images (mapped, then clamped)."""
    return to_image_space(images.detach().cpu().float()).clamp(0.0, 1.0)


def _check_truth(truth_images: torch.Tensor) -> torch.Tensor:
    truth = truth_images.detach().cpu().float()
    if truth.ndim != 4 or len(truth) == 0:
        raise ValueError(f"truth images must be a non-empty (N, C, H, W) tensor, got shape {tuple(truth.shape)}")
    low, high = float(truth.min()), float(truth.max())
    if low < -_RANGE_TOLERANCE or high > 1.0 + _RANGE_TOLERANCE:
        raise ValueError(
            f"truth images must be in [0, 1] image space, got values in [{low:.3f}, {high:.3f}] "
            "(model-space truth? map it with ChannelStats.denormalize first)"
        )
    return truth.clamp(0.0, 1.0)


def multiset_label_accuracy(pred: torch.Tensor, true: torch.Tensor) -> float:
    """|pred ∩ true| as multisets over max(len(pred), len(true)).

    Label-recovery attacks (iDLG, LLG) output a bag of labels with no tie to any image; this scores
    that bag alone. Dividing by the larger count penalises both missed labels and surplus guesses.
    """
    pred_counts = Counter(pred.detach().cpu().reshape(-1).tolist())
    true_counts = Counter(true.detach().cpu().reshape(-1).tolist())
    denominator = max(sum(pred_counts.values()), sum(true_counts.values()))
    if denominator == 0:
        raise ValueError("multiset_label_accuracy needs at least one label")
    return sum((pred_counts & true_counts).values()) / denominator


#: ceiling of every PSNR that enters a mean (dB); exact pairs (+inf) count as this
PSNR_CAP_DB = 100.0
#: a true image counts as recovered when its pair reaches this PSNR (dB)
RECOVERED_DB = 40.0


def capped_psnr_mean(values: Sequence[float]) -> float | None:
    """Mean of per-pair PSNRs, each capped at PSNR_CAP_DB (None only for no pairs at all)."""
    return sum(min(v, PSNR_CAP_DB) for v in values) / len(values) if values else None


def score_reconstruction(
    reconstruction: Reconstruction,
    truth_images: torch.Tensor,
    truth_labels: torch.Tensor,
    to_image_space: ToImageSpace,
    lpips: Lpips | None = None,
) -> AttackScore:
    """Pair ``reconstruction`` with the [0, 1] truth by MSE and score every pair (MSE, PSNR, SSIM, LPIPS, labels)."""
    truth = _check_truth(truth_images)
    truth_labels = truth_labels.detach().cpu().reshape(-1)
    if len(truth_labels) != len(truth):
        raise ValueError(f"{len(truth)} truth images but {len(truth_labels)} truth labels")
    rec_labels = reconstruction.labels.detach().cpu().reshape(-1)
    if len(rec_labels) != len(reconstruction.images):
        raise ValueError(f"reconstruction has {len(reconstruction.images)} images but {len(rec_labels)} labels")
    rec = image_space(reconstruction.images, to_image_space)
    if len(rec) == 0:
        raise ValueError("reconstruction has no images to score")

    rec_idx, truth_idx = pair_by_mse(rec, truth)
    rec_paired, truth_paired = rec[rec_idx], truth[truth_idx]
    per_mse = mse(rec_paired, truth_paired).tolist()
    per_psnr = psnr(rec_paired, truth_paired).tolist()
    per_ssim = ssim(rec_paired, truth_paired).tolist()
    lpips_values = lpips(rec_paired, truth_paired) if lpips is not None else None
    per_lpips = tuple(lpips_values.tolist()) if lpips_values is not None else None

    return AttackScore(
        pairing=PAIRING,
        num_reconstructed=len(rec),
        num_truth=len(truth),
        rec_index=tuple(rec_idx.tolist()),
        truth_index=tuple(truth_idx.tolist()),
        mse=tuple(per_mse),
        psnr=tuple(per_psnr),
        ssim=tuple(per_ssim),
        lpips=per_lpips,
        mse_mean=sum(per_mse) / len(per_mse),
        psnr_mean=capped_psnr_mean(per_psnr),
        psnr_exact=sum(1 for v in per_psnr if math.isinf(v)),
        recovered_40db=sum(1 for v in per_psnr if v >= RECOVERED_DB),
        ssim_mean=sum(per_ssim) / len(per_ssim),
        lpips_mean=sum(per_lpips) / len(per_lpips) if per_lpips is not None else None,
        label_accuracy=label_accuracy(rec_labels[rec_idx], truth_labels[truth_idx]),
        label_accuracy_multiset=multiset_label_accuracy(rec_labels, truth_labels),
        objective=float(reconstruction.objective),
        iterations=int(reconstruction.iterations),
        seconds=float(reconstruction.seconds),
    )


def score_trajectory(
    reconstruction: Reconstruction, truth_images: torch.Tensor, to_image_space: ToImageSpace
) -> list[dict[str, Any]]:
    """One JSON-safe row per trajectory point: ``iteration``, ``objective``, mean ``psnr`` and ``ssim``.

    Each point is paired with the truth on its own: early iterates resemble no image in particular and
    their best pairing changes as the optimisation converges. ``psnr`` is the capped mean as in
    ``AttackScore.psnr_mean``; non-finite values are None.
    """
    truth = _check_truth(truth_images)
    rows: list[dict[str, Any]] = []
    for point in reconstruction.trajectory:
        rec = image_space(point.images, to_image_space)
        rec_idx, truth_idx = pair_by_mse(rec, truth)
        rec_paired, truth_paired = rec[rec_idx], truth[truth_idx]
        per_ssim = ssim(rec_paired, truth_paired).tolist()
        rows.append(
            {
                "iteration": int(point.iteration),
                "objective": _json_safe(float(point.objective)),
                "psnr": capped_psnr_mean(psnr(rec_paired, truth_paired).tolist()),
                "ssim": _json_safe(sum(per_ssim) / len(per_ssim)) if per_ssim else None,
            }
        )
    return rows


def public_ssim(
    reconstruction: Reconstruction, images: torch.Tensor, labels: torch.Tensor, to_image_space: ToImageSpace
) -> float:
    """Mean SSIM of ``reconstruction`` against public ``images``, paired as a run scores its targets: what an
    attacker's tuning on its own public problems maximises (``adversary.inversion.tuning.PublicProblems``)."""
    return score_reconstruction(reconstruction, images, labels, to_image_space).ssim_mean
