"""``tv``: the anisotropic total variation of the dummy images (Inverting Gradients, Geiping et al. 2020, eq. 4)."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from adversary.inversion.regularizers.base import Regularizer, RegularizerConfig, RegularizerContext
from adversary.inversion.regularizers.registry import REGULARIZERS


class TvRegularizer(RegularizerConfig):
    name: Literal["tv"] = Field("tv", description="total variation of the dummy images")


def total_variation(x: torch.Tensor, context: RegularizerContext | None = None) -> torch.Tensor:
    """Anisotropic TV of a batch (N, C, H, W): mean absolute difference of horizontal plus vertical neighbours.

    As in Inverting Gradients' code (``inversefed.metrics.total_variation``); means, not sums, so the
    weight does not depend on the image size.
    """
    dx = (x[..., :, 1:] - x[..., :, :-1]).abs().mean()
    dy = (x[..., 1:, :] - x[..., :-1, :]).abs().mean()
    return dx + dy


REGULARIZERS.register("tv", help="total variation of the images (Geiping et al. 2020)", config=TvRegularizer)(
    Regularizer(term=total_variation)
)
