"""The README's app audit bench: its data as Flower Datasets stores CIFAR-10, and its variants by name."""

import datasets
import numpy as np
import pytest

from bench import app_audit


def test_the_parquet_holds_images_and_labels_as_flower_datasets_stores_cifar10(tmp_path):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(4, 3, 32, 32), dtype=np.uint8)
    np.savez(tmp_path / "cifar.npz", x_train=pixels, y_train=np.array([3, 1, 4, 1]))
    path = app_audit.write_parquet(tmp_path / "cifar.npz", 3, tmp_path / "out" / "cifar10-3.parquet")
    table = datasets.Dataset.from_parquet(str(path))
    assert table["label"] == [3, 1, 4]
    first = np.asarray(table[0]["img"])  # (H, W, 3), as a PIL image from the parquet
    assert first.shape == (32, 32, 3) and (first == pixels[0].transpose(1, 2, 0)).all()


def test_an_unknown_variant_is_named_with_the_allowed_ones(capsys):
    with pytest.raises(SystemExit):
        app_audit.main(["--only", "app,sekagg"])
    error = capsys.readouterr().err
    assert "--only: sekagg is not a variant" in error and "secagg" in error
