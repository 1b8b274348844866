"""Clipping bounds the norm and keeps the direction."""

import pytest
import torch
from defense_updates import apply, random_update

from clients.defenses.base import flatten, global_norm


def test_clip_bounds_the_global_norm_and_keeps_the_direction():
    update = random_update()
    outcome = apply({"name": "clip", "max_norm": 1.0}, update)
    assert global_norm(outcome.update) == pytest.approx(1.0)
    cosine = torch.nn.functional.cosine_similarity(flatten(update), flatten(outcome.update), dim=0)
    assert cosine.item() == pytest.approx(1.0)
    assert outcome.record["norm_before"] == pytest.approx(global_norm(update))


def test_clip_leaves_a_small_update_alone_and_clips_per_tensor():
    update = {"small": torch.tensor([0.3, 0.4]), "large": torch.tensor([3.0, 4.0])}
    outcome = apply({"name": "clip", "max_norm": 1.0, "scope": "per-tensor"}, update)
    assert torch.equal(outcome.update["small"], update["small"])
    assert outcome.update["large"].norm().item() == pytest.approx(1.0)
    assert outcome.record["tensors_clipped"] == 1.0
