"""``gradient_dropout``: paper 004's Algorithm 1, on every layer's tensor.

Each entry is kept with probability ``p`` and scaled by ``1/p`` (so the kept part is unbiased: E[mask/p] = 1),
the others are replaced by fresh N(0, sigma^2) draws. Masks come from the client's generator, seeded per
(run seed, round, client), so they are fresh every round and reproducible on resume.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from clients.defenses.base import DefenseConfig, DefenseContext, DefenseEntry, DefenseOutcome, Update, norm_record
from clients.defenses.registry import DEFENSES


class GradientDropoutDefense(DefenseConfig):
    name: Literal["gradient_dropout"] = Field(
        "gradient_dropout",
        description="Gradient Dropout, Algorithm 1 of Safeguarding Federated Learning from Data "
        "Reconstruction Attacks via Gradient Dropout",
    )
    p: float = Field(..., gt=0, le=1, description="retention probability; kept entries are scaled by 1/p")
    sigma: float = Field(..., ge=0, description="std of the Gaussian noise replacing dropped entries")


def gradient_dropout(update: Update, config: GradientDropoutDefense, context: DefenseContext) -> DefenseOutcome:
    protected: Update = {}
    kept = 0
    for name, grad in update.items():
        # Algorithm 1, lines 3-5: X ~ U(0, 1), mask = X < p; kept entries / p, the rest ~ N(0, sigma^2)
        keep = torch.rand(grad.shape, generator=context.generator) < config.p
        noise = torch.randn(grad.shape, generator=context.generator) * config.sigma
        keep, noise = keep.to(grad.device), noise.to(grad.device, grad.dtype)
        protected[name] = torch.where(keep, grad / config.p, noise)
        kept += int(keep.sum())
    total = sum(t.numel() for t in update.values())
    return DefenseOutcome(protected, norm_record(update, protected) | {"fraction_kept": kept / total})


DEFENSES.register(
    "gradient_dropout",
    help="Gradient Dropout (Safeguarding FL from Data Reconstruction Attacks via Gradient Dropout): keep "
    "entries w.p. p (scaled 1/p), replace the rest by N(0, sigma^2)",
    config=GradientDropoutDefense,
)(DefenseEntry(kind="update", apply=gradient_dropout))
