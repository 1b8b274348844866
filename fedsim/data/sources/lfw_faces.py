"""``lfw-faces``: scikit-image's bundled LFW subset, faces against non-faces (no download)."""

from __future__ import annotations

import numpy as np

from fedsim.data.base import ImageDataset
from fedsim.data.config import DataConfig
from fedsim.data.registry import DATASETS
from fedsim.data.sources.arrays import float_images, without_test_split


@DATASETS.register(
    "lfw-faces", help="scikit-image's LFW subset: 200 gray 25x25 crops, face vs non-face, bundled", config=DataConfig
)
def load_lfw_faces(cfg: DataConfig) -> ImageDataset:
    from skimage.data import lfw_subset

    images = lfw_subset()
    # scikit-image documents the order: the first half are faces, the second half are not.
    half = len(images) // 2
    labels = np.r_[np.ones(half, np.int64), np.zeros(len(images) - half, np.int64)]
    return without_test_split(float_images(images, "lfw_subset"), labels, ["non-face", "face"])
