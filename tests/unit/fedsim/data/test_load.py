"""The load pipeline: the held-out test split, resizing and sample limits."""

from __future__ import annotations

import numpy as np
import pytest
from data_configs import assert_images, data_config

from fedsim.data import load_dataset


def test_held_out_split_depends_on_the_seed_only() -> None:
    cfg = data_config(dataset="digits")
    first, again, other = load_dataset(cfg, 1), load_dataset(cfg.model_copy(), 1), load_dataset(cfg, 2)
    assert again is first  # cached per process: every simulated client reuses the same arrays
    assert np.array_equal(first.y_test, load_dataset(data_config(dataset="digits", partition="pathological"), 1).y_test)
    assert not np.array_equal(first.x_test, other.x_test)


@pytest.mark.parametrize("dataset, size", [("digits", 32), ("lfw-faces", 16)])
def test_image_size_resizes_every_image_to_a_square_in_unit_range(dataset: str, size: int) -> None:
    data = load_dataset(data_config(dataset=dataset, image_size=size), seed=0)
    assert_images(data.x_train, (1, size, size))
    assert_images(data.x_test, (1, size, size))
    assert data.image_size == size


def test_max_samples_keep_the_first_n_of_each_split() -> None:
    full = load_dataset(data_config(dataset="digits"), seed=0)
    limited = load_dataset(data_config(dataset="digits", max_train_samples=50, max_test_samples=7), seed=0)
    assert len(limited.x_train) == 50 and len(limited.x_test) == 7
    assert np.array_equal(limited.x_train, full.x_train[:50])
    assert np.array_equal(limited.y_test, full.y_test[:7])
