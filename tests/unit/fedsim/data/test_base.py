"""The image data set refuses arrays other code could not rely on."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.data import ImageDataset


def test_image_dataset_rejects_arrays_other_code_could_not_rely_on() -> None:
    x, y = np.zeros((2, 1, 4, 4), np.float32), np.zeros(2, np.int64)
    with pytest.raises(TypeError, match="x_train must be float32"):
        ImageDataset(x.astype(np.float64), y, x, y, 1, ("a",))
    with pytest.raises(ValueError, match="class names"):
        ImageDataset(x, y, x, y, 2, ("a",))
