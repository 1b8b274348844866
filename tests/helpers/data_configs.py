"""A data config in one call, for the data tests."""

from __future__ import annotations

import numpy as np

from fedsim.config import DataConfig


def data_config(**fields: object) -> DataConfig:
    return DataConfig.model_validate(fields)


def assert_images(x: np.ndarray, shape_tail: tuple[int, ...]) -> None:
    assert x.dtype == np.float32
    assert x.shape[1:] == shape_tail
    assert x.min() >= 0.0 and x.max() <= 1.0
