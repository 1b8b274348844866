"""The vocabulary of the data layer: the in-memory image data set and the one error type users see."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class DataError(ValueError):
    """A data problem phrased as one line for the user: the config field, its value and what to do."""


# eq=False: field-wise equality of arrays is ambiguous (and hashing them impossible); two data sets are
# "the same" only when they are the same object, which is what the per-process cache hands out.
@dataclass(frozen=True, eq=False)
class ImageDataset:
    """Train and test images as float32 (N, C, H, W) in [0, 1], labels as int64 class ids.

    A loader whose source ships without a test split returns an empty test set (M = 0); ``load_dataset``
    then holds out ``data.test_fraction`` of the training set. The arrays returned by ``load_dataset`` are
    shared by every caller in the process: index or copy them, never modify them in place.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    class_names: tuple[str, ...]

    def __post_init__(self) -> None:
        # Loaders are the only producers; these checks catch a loader bug where it happens, not three
        # modules later as a shape error inside a model.
        for name in ("x_train", "x_test"):
            x = getattr(self, name)
            if x.dtype != np.float32 or x.ndim != 4:
                raise TypeError(f"ImageDataset.{name} must be float32 (N, C, H, W), got {x.dtype} {x.shape}")
        for name in ("y_train", "y_test"):
            y = getattr(self, name)
            if y.dtype != np.int64 or y.ndim != 1:
                raise TypeError(f"ImageDataset.{name} must be int64 (N,), got {y.dtype} {y.shape}")
        if len(self.x_train) != len(self.y_train) or len(self.x_test) != len(self.y_test):
            raise ValueError("ImageDataset: images and labels differ in length")
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ValueError(f"ImageDataset: train images {self.x_train.shape[1:]} != test {self.x_test.shape[1:]}")
        if len(self.class_names) != self.num_classes:
            raise ValueError(f"ImageDataset: {len(self.class_names)} class names for {self.num_classes} classes")

    @property
    def channels(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def image_size(self) -> int:
        """Image side; images are square once ``load_dataset`` has resized them."""
        return int(self.x_train.shape[2])
