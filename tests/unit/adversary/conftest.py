"""Fixtures of the adversary tests: the digits every attack test inverts."""

from __future__ import annotations

import pytest
import torch
from digit_views import SIDE

from fedsim.config import DataConfig
from fedsim.data import load_dataset


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    data = load_dataset(DataConfig(dataset="digits", image_size=SIDE), seed=0)
    return torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
