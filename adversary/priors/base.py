"""The contract of a generative prior: a denoiser with a noise schedule (not an attack regularizer such as TV).

A prior works in its own image space, [-1, 1] per pixel as diffusers' pipelines do, on images of shape
``(C, H, W)``; ``x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps`` (DDPM). ``predict_noise(x_t, t)`` is the
prior's estimate of ``eps``; ``alphas_cumprod`` is ``abar`` over the training timesteps. Each prior registers
its name, help line and config model in ``PRIORS``; its config's ``load(shape, device, dtype)`` builds it.
"""

from __future__ import annotations

from typing import Protocol

import torch

from fedsim.core.sections import Section


class Prior(Protocol):
    alphas_cumprod: torch.Tensor  # (T,) on the prior's device

    def predict_noise(self, x_t: torch.Tensor, t: int) -> torch.Tensor:
        """eps estimate for a batch ``x_t`` (B, C, H, W) at training timestep ``t``; differentiable in ``x_t``."""
        ...


class PriorConfig(Section):
    """Base of every prior's config: ``name`` (a ``Literal`` of the registered name)."""

    name: str

    def image_shape(self) -> tuple[int, int, int] | None:
        """The (C, H, W) the prior makes, when known without loading it (None: any shape, or unknown yet)."""
        return None

    def load(self, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> Prior:
        raise NotImplementedError(f"prior {self.name!r} has no loader")


def linear_alphas_cumprod(timesteps: int, beta_start: float = 1e-4, beta_end: float = 0.02) -> torch.Tensor:
    """abar_t of DDPM's linear beta schedule (Ho et al. 2020), in float64."""
    betas = torch.linspace(beta_start, beta_end, timesteps, dtype=torch.float64)
    return torch.cumprod(1.0 - betas, dim=0)
