"""Hugging Face ``datasets`` and Flower Datasets sources: local parquet, arrow and saved folders, partitioned by fedsim,
and the one-line errors of each (the Hub offline included). Data is written by the tests from scikit-learn's digits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from data_configs import assert_images, data_config
from tiny_configs import tiny_config

from fedsim.data import DataError, load_dataset, partition_indices

datasets = pytest.importorskip("datasets")


def digits_dataset(n: int = 60):
    """The first ``n`` digits as a ``datasets.Dataset`` with an Image column ``img`` and a ClassLabel ``label``."""
    from PIL import Image
    from sklearn.datasets import load_digits

    bunch = load_digits()
    pixels = (bunch.images[:n] * 255 / 16).round().astype(np.uint8)
    features = datasets.Features(
        {"img": datasets.Image(), "label": datasets.ClassLabel(names=[f"digit {c}" for c in range(10)])}
    )
    return datasets.Dataset.from_dict(
        {"img": [Image.fromarray(p) for p in pixels], "label": bunch.target[:n].tolist()}, features=features
    ), pixels


@pytest.fixture()
def digits_parquet(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    dataset, pixels = digits_dataset()
    path = tmp_path / "digits.parquet"
    dataset.to_parquet(str(path))
    return path, pixels, np.asarray(dataset["label"])


@pytest.mark.parametrize("source", ["huggingface", "flwr-datasets"])
def test_a_local_parquet_file_loads_as_the_images_and_labels_written(digits_parquet, source: str) -> None:
    path, pixels, labels = digits_parquet
    data = load_dataset(data_config(dataset=source, files=str(path), test_fraction=0.25), seed=0)
    assert_images(data.x_train, (1, 8, 8))
    assert len(data.y_train) + len(data.y_test) == 60 and len(data.y_test) == 15
    assert data.class_names == tuple(f"digit {c}" for c in range(10))
    # every training image is one of the written ones, with its own label
    written = {p.tobytes(): y for p, y in zip(pixels, labels)}
    for image, label in zip(data.x_train, data.y_train):
        key = np.round(image[0] * 255).astype(np.uint8).tobytes()
        assert written[key] == label


def test_both_sources_read_the_same_data_from_the_same_file(digits_parquet) -> None:
    path, _, _ = digits_parquet
    via_datasets = load_dataset(data_config(dataset="huggingface", files=str(path)), seed=1)
    via_flower = load_dataset(data_config(dataset="flwr-datasets", files=str(path)), seed=1)
    np.testing.assert_array_equal(via_datasets.x_train, via_flower.x_train)
    np.testing.assert_array_equal(via_datasets.y_test, via_flower.y_test)


def test_an_arrow_file_and_a_saved_folder_with_a_test_split_load_both_splits(tmp_path: Path) -> None:
    dataset, _ = digits_dataset(40)
    splits = dataset.train_test_split(test_size=10, shuffle=False)
    splits.save_to_disk(str(tmp_path / "saved"))
    saved = load_dataset(data_config(dataset="huggingface", files=str(tmp_path / "saved"), test_split="test"), seed=0)
    assert (len(saved.y_train), len(saved.y_test)) == (30, 10)
    np.testing.assert_array_equal(saved.y_test, splits["test"]["label"])
    arrow_file = next((tmp_path / "saved" / "train").glob("*.arrow"))
    from_arrow = load_dataset(data_config(dataset="huggingface", files=str(arrow_file), test_fraction=0.5), seed=0)
    assert len(from_arrow.y_train) + len(from_arrow.y_test) == 30


def test_fedsims_partitioners_split_a_flower_dataset_among_clients(digits_parquet) -> None:
    path, _, _ = digits_parquet
    cfg = data_config(dataset="flwr-datasets", files=str(path), partition={"name": "dirichlet", "alpha": 0.5})
    data = load_dataset(cfg, seed=0)
    parts = partition_indices(data.y_train, cfg, num_clients=3, seed=0)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(data.y_train)))


def test_a_run_config_accepts_a_flower_dataset_from_local_files(digits_parquet) -> None:
    path, _, _ = digits_parquet
    config = tiny_config(data={"dataset": "flwr-datasets", "files": str(path), "label_key": "label"})
    assert config.data.dataset == "flwr-datasets" and config.data.files == path


@pytest.mark.parametrize(
    "fields, message",
    [
        ({}, "hub_id and files: neither given; set data.hub_id"),
        ({"hub_id": "x/y", "files": "."}, "hub_id and files: both given"),
        ({"files": "/no/such/file.parquet"}, "files = '/no/such/file.parquet': no such file or folder"),
    ],
)
def test_where_the_data_comes_from_is_checked_with_the_config(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        data_config(dataset="huggingface", **fields)


@pytest.mark.parametrize("source", ["huggingface", "flwr-datasets"])
def test_a_missing_split_or_column_names_the_field_and_what_there_is(digits_parquet, source: str) -> None:
    path, _, _ = digits_parquet
    with pytest.raises(DataError, match=r"data.test_split = 'test': no such split; the data set has \['train'\]"):
        load_dataset(data_config(dataset=source, files=str(path), test_split="test"), seed=0)
    with pytest.raises(
        DataError, match=r"data.image_key = 'image': no such column; the data set has \['img', 'label'\]"
    ):
        load_dataset(data_config(dataset=source, files=str(path), image_key="image"), seed=0)


def test_a_file_that_is_not_data_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(DataError, match=r"expected a .parquet or .arrow file, or a folder"):
        load_dataset(data_config(dataset="huggingface", files=str(path)), seed=0)


@pytest.mark.parametrize("source", ["huggingface", "flwr-datasets"])
def test_the_hub_offline_is_one_line_that_points_to_local_files(monkeypatch, source: str) -> None:
    import datasets.config
    import huggingface_hub.constants

    # What HF_HUB_OFFLINE=1 sets: no request leaves the machine, as without network.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataError) as caught:
        load_dataset(data_config(dataset=source, hub_id="someone/no-such-data-set-for-fedsim-tests"), seed=0)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("data.hub_id = 'someone/no-such-data-set-for-fedsim-tests': could not be loaded")
    assert text.endswith("set data.files to a local copy instead")
