"""The Gaussian prior: its denoiser is the posterior mean."""

from __future__ import annotations

import torch
from linear_views import CPU

from adversary.priors.gaussian import GaussianPrior


def test_the_gaussian_prior_denoiser_is_the_posterior_mean():
    prior = GaussianPrior(0.2, 0.5, 1000, CPU, torch.float64)
    generator = torch.Generator().manual_seed(1)
    x0 = 0.2 + 0.5 * torch.randn(20000, 1, 1, 1, generator=generator, dtype=torch.float64)
    t = 400
    abar = prior.alphas_cumprod[t]
    x_t = abar.sqrt() * x0 + (1 - abar).sqrt() * torch.randn(x0.shape, generator=generator, dtype=torch.float64)
    # the posterior mean is the best estimate: its error is below any other linear gain's
    error = ((prior.denoise(x_t, t) - x0) ** 2).mean()
    shrunk = ((0.2 + 0.9 * (prior.denoise(x_t, t) - 0.2) - x0) ** 2).mean()
    assert error < shrunk
