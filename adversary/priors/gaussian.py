"""A Gaussian prior whose denoiser is known in closed form: x_0 ~ N(mean, std^2 I) per pixel.

Then x_t ~ N(sqrt(abar) mean, (abar std^2 + 1 - abar) I) and the posterior mean is
E[x_0 | x_t] = mean + sqrt(abar) std^2 / (abar std^2 + 1 - abar) (x_t - sqrt(abar) mean),
so the optimal noise prediction is exact. It lets the tests check guided sampling without trained weights.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from adversary.priors.base import PriorConfig, linear_alphas_cumprod
from adversary.priors.registry import PRIORS


class GaussianPrior:
    def __init__(
        self, mean: torch.Tensor | float, std: float, timesteps: int, device: torch.device, dtype: torch.dtype
    ):
        self.mean = torch.as_tensor(mean, device=device, dtype=dtype)
        self.std = float(std)
        self.alphas_cumprod = linear_alphas_cumprod(timesteps).to(device=device, dtype=dtype)

    def denoise(self, x_t: torch.Tensor, t: int) -> torch.Tensor:
        abar = self.alphas_cumprod[t]
        gain = abar.sqrt() * self.std**2 / (abar * self.std**2 + 1 - abar)
        return self.mean + gain * (x_t - abar.sqrt() * self.mean)

    def predict_noise(self, x_t: torch.Tensor, t: int) -> torch.Tensor:
        abar = self.alphas_cumprod[t]
        return (x_t - abar.sqrt() * self.denoise(x_t, t)) / (1 - abar).sqrt()


class GaussianPriorConfig(PriorConfig):
    name: Literal["gaussian"] = Field("gaussian", description="a closed-form Gaussian prior (its denoiser is exact)")
    mean: float = Field(0.0, description="mean of every pixel, in the prior's [-1, 1] space")
    std: float = Field(0.5, gt=0, description="standard deviation of every pixel")
    timesteps: int = Field(1000, ge=2, description="training timesteps of the linear DDPM schedule")

    def load(self, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> GaussianPrior:
        return GaussianPrior(self.mean, self.std, self.timesteps, device, dtype)


PRIORS.register(
    "gaussian",
    help="i.i.d. Gaussian pixels, denoiser in closed form (a weak prior; for tests and baselines)",
    config=GaussianPriorConfig,
)(GaussianPriorConfig)
