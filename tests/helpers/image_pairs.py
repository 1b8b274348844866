"""Random image pairs and reconstructions to score."""

import torch


def _pair(n, c, side, seed=0):
    generator = torch.Generator().manual_seed(seed)
    a = torch.rand(n, c, side, side, generator=generator)
    b = (a + 0.1 * torch.randn(n, c, side, side, generator=generator)).clamp(0, 1)
    return a, b
