"""Noise has the configured scale and is seeded."""

import pytest
import torch
from defense_updates import apply, context


@pytest.mark.parametrize(
    ("distribution", "spread"), [("gaussian", lambda d: d.std()), ("laplace", lambda d: d.abs().mean())]
)
def test_noise_has_the_configured_scale_and_is_seeded(distribution, spread):
    update = {"w": torch.zeros(50_000, dtype=torch.float64)}
    entry = {"name": "noise", "sigma": 0.01, "distribution": distribution}
    noisy = apply(entry, update).update["w"]
    assert spread(noisy).item() == pytest.approx(0.01, rel=0.03)  # std for gaussian, mean |x| = b for laplace
    assert torch.equal(noisy, apply(entry, update).update["w"])  # same generator seed, same noise
    assert not torch.equal(noisy, apply(entry, update, context(seed=1)).update["w"])
