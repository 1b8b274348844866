"""A diffusers checkpoint that is not there is one clear line."""

from __future__ import annotations

import pytest
import torch
from linear_views import CPU

from adversary.priors import PRIORS


def test_a_missing_diffusers_checkpoint_is_one_clear_line(tmp_path):
    config = PRIORS.config("diffusers")(path=str(tmp_path / "absent"), offline=True)
    with pytest.raises(ValueError, match=r"prior.path") as error:
        config.load((1, 8, 8), CPU, torch.float32)
    assert "\n" not in str(error.value)
