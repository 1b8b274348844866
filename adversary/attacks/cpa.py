"""``cpa``: the Cocktail Party Attack (Kariyappa et al., ICML 2023) on a first fully-connected layer.

The first layer's weight update is dW = G X (``adversary.inversion.first_layer``): the N images X (N, D) mixed
by one coefficient column per image (G, units x N), for one client's batch and for a FedAvg or SecAgg+
aggregate alike. Seen over the D pixels, the rows of dW are linear mixtures of N sources, the images, and
images are far from Gaussian and from each other: independent component analysis separates them, up to
an order and a scale per image, as a cocktail party's voices are separated.

1. Whitening: the top ``num_samples`` left singular vectors of dW (a seeded randomised range finder) project
   its rows onto an N-dimensional signal space, P = U^T dW (N, D); with exactly N images dW has rank N and
   nothing is lost.
2. Separation: scikit-learn's ``FastICA`` (whitened to N unit-variance components, seeded with the
   attack's seed). Its samples are, by default, the differences of horizontally and vertically
   neighbouring pixels of the mixtures (``samples: differences``): a linear filter applied to every row
   keeps the mixing, and image gradients are sparser (more super-Gaussian, hence the ``exp`` contrast) and
   far less dependent across images than raw intensities, which all share a positive mean and smooth
   shapes (on CIFAR-10 test images this raised the mean PSNR of 8-image aggregates from about 16 to 31 dB).
   The unmixing matrix, applied to the uncentred P, gives Z = A X, whose rows are the images each up to a
   factor when A is a scaled permutation; no offset is lost, the unmixing being linear.
   Refinement (``refine`` rounds, not in the paper): behind a ReLU an image leaves the units it does not
   activate untouched, so its true coefficient column (U m_i in the signal space) vanishes on them. Each
   round takes an image's ``zero_share`` quietest units under the current separation and replaces m_i by
   the direction that vanishes best on them (the last right singular vector of those rows of U). The
   refined separation is kept only when its images leave the input bounds less than ICA's (below), and
   not when two images' columns collapse onto one.
3. Sign and scale, without the ground truth, from the bias update db = G 1: with H the least squares
   coefficients of dW on Z (dW = H Z, so H = G A^-1), db = H (A 1), and the least squares solution s of
   db = H s is A 1: for a separated image, exactly its factor, sign included. Each image is Z_i / s_i.
   This is the same relation that makes ``fc-invert`` exact (a unit's bias update is the sum of the
   coefficients of its weight row), so it needs no assumption about the images' brightness, skewness or
   range. For an imperfectly separated row, Z_i / s_i is an affine combination of the images (weights
   summing to one): a blend at the images' scale, never a rescaled one.
4. The images are clipped to the view's ``input_bounds`` (what the attacker knows to be a valid input).

Labels: the class whose first-layer gradient at the image matches its coefficient column
(``first_layer.gradient_labels``). Objective: the mean share of the pixels' range the separated images
fall outside the input bounds before clipping (0 for exact images; mixtures with coefficients of both
signs leave the range); it also chooses between the ICA and the refined separation. Pairing with the truth
is the scorer's (minimum-MSE matching).

Refused for a model whose first weighted layer is a convolution: ICA recovers the input of a
fully-connected layer, which there would be convolutional features, and no feature-inversion step back
to the images is implemented.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field

from adversary.inversion.first_layer import (
    coefficients,
    each_view_in_closed_form,
    first_layer_refusal,
    first_layer_update,
    gradient_labels,
    out_of_bounds,
)
from adversary.inversion.options import AttackOptions
from adversary.inversion.requirements import AttackSetting, named_first_weighted_layer
from adversary.registry import ATTACKS
from adversary.view import AttackerView

_OVERSAMPLING = 10  # extra directions of the randomised range finder
_POWER_ITERATIONS = 4
_DEAD_UNIT = 1e-6  # a unit whose row in the signal space is below this share of the largest was not updated
_MAX_CONDITION = 1e8  # of a refined mixing matrix; beyond it two images' columns collapsed onto one


class CpaOptions(AttackOptions):
    name: Literal["cpa"] = Field(
        "cpa", description="Cocktail Party Attack (Kariyappa et al. 2023): ICA of the first FC layer"
    )
    threat_model: ClassVar[str] = "honest"
    requires: ClassVar[str] = (
        "a first nn.Linear (with bias) on the flattened input; client.optimizer: sgd; one unit per image at least"
    )
    samples: Literal["pixels", "differences"] = Field(
        "differences",
        description="what ICA sees as samples: the "
        "pixels, or the differences of neighbouring pixels (sparser and more independent across images)",
    )
    contrast: Literal["logcosh", "exp", "cube"] = Field("exp", description="FastICA's non-Gaussianity contrast")
    refine: int = Field(10, ge=0, description="rounds of the zero-set refinement of the separation (0 = plain ICA)")
    zero_share: float = Field(
        0.4,
        gt=0,
        lt=1,
        description="share of the units taken as inactive for an image in the refinement (its quietest coefficients)",
    )
    max_iter: int = Field(1000, ge=1, description="FastICA iterations")
    tol: float = Field(1e-4, gt=0, description="FastICA's convergence tolerance")

    def refusal(self, setting: AttackSetting) -> str | None:
        named = named_first_weighted_layer(setting.model)
        if named is not None and isinstance(named[1], torch.nn.modules.conv._ConvNd):
            return (
                f"cpa separates the inputs of a first fully-connected layer; the first weighted layer of "
                f"{setting.model_name} is '{named[0]}' ({type(named[1]).__name__}), whose inputs cpa would only "
                "recover as features, and no feature-inversion step is implemented"
            )
        return super().refusal(setting) or first_layer_refusal(self.name, setting)


def signal_space(weight: torch.Tensor, rank: int, generator: torch.Generator) -> torch.Tensor:
    """(units, rank): the top left singular vectors of ``weight``, by a randomised range finder (Halko et al. 2011)."""
    width = min(rank + _OVERSAMPLING, *weight.shape)
    sketch = torch.randn(weight.shape[1], width, generator=generator, dtype=weight.dtype)
    basis = torch.linalg.qr(weight @ sketch).Q
    for _ in range(_POWER_ITERATIONS):
        basis = torch.linalg.qr(weight @ torch.linalg.qr(weight.T @ basis).Q).Q
    left, _, _ = torch.linalg.svd(basis.T @ weight, full_matrices=False)
    return (basis @ left)[:, :rank]


def _samples(projected: torch.Tensor, input_shape: tuple[int, int, int], kind: str) -> torch.Tensor:
    """(samples, rank): the mixtures seen at each pixel, or at each pair of horizontal and vertical neighbours."""
    if kind == "pixels":
        return projected.T
    images = projected.reshape(len(projected), *input_shape)
    across = (images[..., :, 1:] - images[..., :, :-1]).flatten(1)
    down = (images[..., 1:, :] - images[..., :-1, :]).flatten(1)
    return torch.cat([across, down], dim=1).T


def _sparsest_columns(
    basis: torch.Tensor, unmixing: torch.Tensor, rounds: int, zero_share: float
) -> torch.Tensor | None:
    """The unmixing whose images' coefficient columns vanish on their quietest units, or None (ill-conditioned)."""
    mixing = torch.linalg.inv(unmixing)  # column i: image i's coefficients in the signal space
    # units no image activated (zero rows) constrain nothing: the quiet units are chosen among the others
    norms = basis.norm(dim=1)
    basis = basis[norms > _DEAD_UNIT * norms.max()]
    quiet_count = max(int(zero_share * len(basis)), basis.shape[1])
    if len(basis) <= basis.shape[1]:
        return None
    for _ in range(rounds):
        columns = basis @ mixing
        for i in range(mixing.shape[1]):
            quiet = torch.argsort(columns[:, i].abs())[:quiet_count]
            mixing[:, i] = torch.linalg.svd(basis[quiet], full_matrices=False).Vh[-1]
    if torch.linalg.cond(mixing) > _MAX_CONDITION:  # two images' columns collapsed onto one
        return None
    return torch.linalg.inv(mixing)


def _images(
    sources: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, view: AttackerView
) -> tuple[torch.Tensor, float]:
    """Sources with sign and scale fixed by the bias update, and their objective (before clipping to the bounds)."""
    columns = coefficients(weight, sources)
    factors = torch.linalg.lstsq(columns, bias[:, None], driver="gelsd").solution.flatten()
    factors = torch.where(factors.abs() > 0, factors, torch.ones_like(factors))
    images = (sources / factors[:, None]).reshape(len(sources), *view.input_shape)
    objective = float(out_of_bounds(images.flatten(1), view).mean())
    return images, objective if math.isfinite(objective) else math.inf


def separate(view: AttackerView, options: CpaOptions, seed: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The images (num_samples, C, H, W) float64 in model space, their labels, and the objective."""
    layer_name, weight, bias = first_layer_update(view)
    count = view.num_samples
    rank = min(count, *weight.shape)
    generator = torch.Generator().manual_seed(seed)
    basis = signal_space(weight, rank, generator)
    projected = basis.T @ weight  # (rank, D)
    # Imported here, not with the registry: scikit-learn pulls in rich, which records the importing process's
    # working directory, and an attack worker imports the registry before it leaves the server's.
    from sklearn.decomposition import FastICA

    ica = FastICA(
        n_components=rank,
        whiten="unit-variance",
        fun=options.contrast,
        max_iter=options.max_iter,
        tol=options.tol,
        random_state=seed % 2**32,
    )
    ica.fit(_samples(projected, view.input_shape, options.samples).numpy())
    unmixing = torch.from_numpy(np.asarray(ica.components_, dtype=np.float64))
    images, objective = _images(unmixing @ projected, weight, bias, view)  # uncentred mixtures: no offset lost
    if options.refine > 0 and len(basis) > rank:
        refined = _sparsest_columns(basis, unmixing, options.refine, options.zero_share)
        if refined is not None:
            candidate, candidate_objective = _images(refined @ projected, weight, bias, view)
            if candidate_objective < objective:
                images, objective = candidate, candidate_objective
    if view.input_bounds is not None:
        low, high = (b.double().reshape(1, -1, 1, 1) for b in view.input_bounds)
        images = torch.maximum(torch.minimum(images, high), low)
    if rank < count:  # fewer units (or pixels) than images: the rest repeat the separated ones
        images = images[torch.arange(count) % rank]
    labels = gradient_labels(view, layer_name, images, coefficients(weight, images))
    return images, labels, objective


attack = each_view_in_closed_form(separate)


ATTACKS.register(
    "cpa",
    help="Cocktail Party Attack (Kariyappa et al. 2023): ICA separates the images mixed in a first "
    "fully-connected layer's update; sign and scale from its bias update",
    config=CpaOptions,
)(attack)
