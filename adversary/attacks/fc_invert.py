"""``fc-invert``: exact inversion of a first fully-connected layer by an honest-but-curious server.

For a first layer y = W x + b on the flattened input, row j of the update is dW_j = sum_i c_ij x_i and
db_j = sum_i c_ij (``adversary.inversion.first_layer``: any learning rate, FedAvg or SecAgg+ weighting,
several plain SGD steps, momentum; weight decay removed when the local training is known). Behind a
ReLU-like activation, a unit that only image i activated has c_ij = 0 for every other image, so

    x_i = dW_j / db_j

exactly (Phong et al. 2017, "Privacy-preserving deep learning via additively homomorphic encryption", for
one image; Geiping et al. 2020 note that in a batch an image is still read off a unit only it activated).
A unit that several images activated gives a weighted mean of them; behind a smooth activation (sigmoid,
tanh) every image activates every unit, so only an update of a single image comes back.

Which ratios are returned, without ground truth:

1. units whose bias update exceeds ``min_bias_share`` of the largest (smaller ones only carry noise);
2. ratios that are equal within ``tolerance`` (relative distance, measured on a seeded random projection)
   are one candidate: units that one image alone activated give the same image, while two mixtures of the
   same images are equal only if their coefficients happen to agree. A candidate's image is the least
   squares ratio over its units (sum_j db_j dW_j / sum_j db_j^2);
3. candidates go first when several units gave them (an image confirmed twice), then those inside the
   view's ``input_bounds`` (a single image is a valid input; a mixture with coefficients of both signs
   leaves the range), then by bias update (largest first: least noise);
4. in that order a candidate is kept unless the kept images already explain it (relative distance to their
   span below ``tolerance``: a mixture of images already found), until ``view.num_samples`` are kept. If
   fewer remain, the best of the explained candidates fill in, then repeats of the first.

Labels: the class whose first-layer gradient at the recovered image matches the image's coefficient
column (``first_layer.gradient_labels``). Objective: the returned images that no second unit confirmed
(0 when every image came from at least two identical ratios).
"""

from __future__ import annotations

from typing import ClassVar, Literal

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
from adversary.inversion.requirements import AttackSetting
from adversary.registry import ATTACKS
from adversary.view import AttackerView

_PROJECTION = 64  # dimensions of the random projection the ratios are compared in


class FcInvertOptions(AttackOptions):
    name: Literal["fc-invert"] = Field("fc-invert", description="exact inversion of a first fully-connected layer")
    threat_model: ClassVar[str] = "honest"
    requires: ClassVar[str] = "a first nn.Linear (with bias) on the flattened input; client.optimizer: sgd"
    tolerance: float = Field(
        0.02,
        gt=0,
        lt=1,
        description="relative distance under which two unit ratios are one image, "
        "and a candidate counts as explained by the images already kept",
    )
    min_bias_share: float = Field(
        1e-4,
        gt=0,
        lt=1,
        description="units whose bias update is below this share of the largest are left out (their ratio is noise)",
    )

    def refusal(self, setting: AttackSetting) -> str | None:
        return super().refusal(setting) or first_layer_refusal(self.name, setting)


def candidates(
    view: AttackerView, options: FcInvertOptions, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distinct ratio images in preference order: (K, D) images, (K,) units behind each, and the update's rows."""
    _, weight, bias = first_layer_update(view)
    strength = bias.abs()
    live = torch.nonzero(strength > options.min_bias_share * strength.max().clamp(min=torch.finfo(torch.float64).tiny))
    live = live.flatten()[torch.argsort(strength[live.flatten()], descending=True)]
    ratios = weight[live] / bias[live, None]
    generator = torch.Generator().manual_seed(seed)
    projection = torch.randn(ratios.shape[1], _PROJECTION, generator=generator, dtype=torch.float64) / _PROJECTION**0.5
    projected = ratios @ projection
    norms = projected.norm(dim=1)
    distances = torch.cdist(projected, projected)
    unassigned = torch.ones(len(live), dtype=torch.bool)
    images, support = [], []
    for index in range(len(live)):  # strongest unit first: it seeds its group
        if not unassigned[index]:
            continue
        members = torch.nonzero(unassigned & (distances[index] <= options.tolerance * norms[index])).flatten()
        unassigned[members] = False
        rows, biases = weight[live[members]], bias[live[members]]
        images.append((biases[:, None] * rows).sum(dim=0) / (biases**2).sum())
        support.append(len(members))
    if not images:
        return torch.zeros(0, weight.shape[1], dtype=torch.float64), torch.zeros(0, dtype=torch.int64), weight
    stacked, units = torch.stack(images), torch.tensor(support)
    inside = out_of_bounds(stacked, view) <= options.tolerance
    # stable sorts, least important key first: groups are already in order of bias strength
    order = torch.arange(len(stacked))
    order = order[torch.argsort((~inside[order]).to(torch.int8), stable=True)]
    order = order[torch.argsort((units[order] < 2).to(torch.int8), stable=True)]
    return stacked[order], units[order], weight


def select(images: torch.Tensor, count: int, tolerance: float) -> tuple[list[int], list[int]]:
    """Indices of the kept candidates (in order), and of those the kept ones already explained."""
    kept: list[int] = []
    explained: list[int] = []
    basis = torch.zeros(0, images.shape[1], dtype=torch.float64)
    for index, image in enumerate(images):
        if len(kept) == count:
            break
        residual = image - basis.T @ (basis @ image)
        if residual.norm() <= tolerance * image.norm():
            explained.append(index)
            continue
        kept.append(index)
        basis = torch.cat([basis, (residual / residual.norm())[None]])
    return kept, explained


def invert(view: AttackerView, options: FcInvertOptions, seed: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The images (num_samples, C, H, W) float64, their labels, and the objective (images no second unit confirmed)."""
    layer_name = first_layer_update(view)[0]
    found, units, weight = candidates(view, options, seed)
    count = view.num_samples
    kept, explained = select(found, count, options.tolerance)
    order = kept + explained[: count - len(kept)]
    if not order:  # no unit was updated at all: blank guesses
        images = torch.zeros(count, *view.input_shape, dtype=torch.float64)
        return images, torch.zeros(count, dtype=torch.int64), float(count)
    while len(order) < count:
        order.append(order[(len(order)) % len(kept or order)])
    images = found[order].reshape(count, *view.input_shape)
    labels = gradient_labels(view, layer_name, images, coefficients(weight, images))
    unconfirmed = float(sum(1 for index in order if units[index] < 2))
    return images, labels, unconfirmed


attack = each_view_in_closed_form(invert)


ATTACKS.register(
    "fc-invert",
    help="exact inversion of a first fully-connected layer (Phong et al. 2017): an image that "
    "alone activated a unit is dW_j / db_j; per client or aggregated",
    config=FcInvertOptions,
)(attack)
