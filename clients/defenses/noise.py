"""``noise``: add i.i.d. Gaussian or Laplacian noise of scale ``sigma`` to every entry (papers 001, 002)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from pydantic import Field

from clients.defenses.base import DefenseConfig, DefenseContext, DefenseEntry, DefenseOutcome, Update, norm_record
from clients.defenses.registry import DEFENSES

Sampler = Callable[[torch.Size, float, torch.Generator], torch.Tensor]


class NoiseDefense(DefenseConfig):
    name: Literal["noise"] = Field("noise", description="additive noise on the update")
    sigma: float = Field(..., gt=0, description="noise scale (std for gaussian, b for laplace)")
    distribution: Literal["gaussian", "laplace"] = Field("gaussian", description="noise distribution")


def _gaussian(shape: torch.Size, sigma: float, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator, dtype=torch.float64) * sigma


def _laplace(shape: torch.Size, scale: float, generator: torch.Generator) -> torch.Tensor:
    # Inverse CDF, so that the client's seeded generator drives it (torch.distributions cannot take one).
    u = torch.rand(shape, generator=generator, dtype=torch.float64) - 0.5
    return -scale * torch.sign(u) * torch.log1p(-2 * u.abs())


SAMPLERS: dict[str, Sampler] = {"gaussian": _gaussian, "laplace": _laplace}


def add_noise(update: Update, config: NoiseDefense, context: DefenseContext) -> DefenseOutcome:
    sample = SAMPLERS[config.distribution]
    noisy = {
        name: delta + sample(delta.shape, config.sigma, context.generator).to(delta.device, delta.dtype)
        for name, delta in update.items()
    }
    return DefenseOutcome(noisy, norm_record(update, noisy))


DEFENSES.register(
    "noise",
    help="additive Gaussian or Laplacian noise of scale sigma on the update",
    config=NoiseDefense,
)(DefenseEntry(kind="update", apply=add_noise))
