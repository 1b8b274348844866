"""``digits``: scikit-learn's bundled 8x8 handwritten digits (no download)."""

from __future__ import annotations

import numpy as np

from fedsim.data.base import ImageDataset
from fedsim.data.config import DataConfig
from fedsim.data.registry import DATASETS
from fedsim.data.sources.arrays import without_test_split


@DATASETS.register(
    "digits", help="scikit-learn's 8x8 handwritten digits: 1,797 gray images, 10 classes, bundled", config=DataConfig
)
def load_digits(cfg: DataConfig) -> ImageDataset:
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    # Pixels are counts of set bits in 4x4 blocks of the scanned 32x32 bitmap: 0..16.
    x = (bunch.images / 16.0).astype(np.float32)[:, None]
    return without_test_split(x, bunch.target.astype(np.int64), [str(c) for c in bunch.target_names])
