"""Partitions: disjoint, reproducible, and what IID, Dirichlet and pathological promise."""

from __future__ import annotations

import numpy as np
import pytest
from data_configs import data_config

from fedsim.data import DataError, load_dataset, partition_indices

PARTITIONS = {
    "iid": {"name": "iid"},
    "dirichlet": {"name": "dirichlet", "alpha": 0.3, "min_partition_size": 20},
    "pathological": {"name": "pathological", "classes_per_client": 2},
}


@pytest.fixture(scope="module")
def digit_labels() -> np.ndarray:
    return load_dataset(data_config(dataset="digits"), seed=0).y_train


def split(labels: np.ndarray, partition: str, num_clients: int = 10, seed: int = 0) -> list[np.ndarray]:
    return partition_indices(labels, data_config(dataset="digits", partition=PARTITIONS[partition]), num_clients, seed)


@pytest.mark.parametrize("partition", PARTITIONS)
def test_partitions_are_disjoint_sorted_and_cover_the_training_set(digit_labels: np.ndarray, partition: str) -> None:
    parts = split(digit_labels, partition)
    assert len(parts) == 10
    assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)
    everything = np.concatenate(parts)
    assert len(everything) == len(np.unique(everything)) == len(digit_labels)


@pytest.mark.parametrize("partition", PARTITIONS)
def test_partitions_are_reproducible_for_a_seed_and_change_with_it(digit_labels: np.ndarray, partition: str) -> None:
    first, again, other = (
        split(digit_labels, partition, seed=3),
        split(digit_labels, partition, seed=3),
        split(digit_labels, partition, seed=4),
    )
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_iid_clients_get_equal_shares_of_every_class(digit_labels: np.ndarray) -> None:
    sizes = [len(p) for p in split(digit_labels, "iid")]
    assert max(sizes) - min(sizes) <= 1


def test_dirichlet_skews_labels_but_keeps_min_partition_size(digit_labels: np.ndarray) -> None:
    parts = split(digit_labels, "dirichlet")
    assert min(len(p) for p in parts) >= 20
    shares = np.array([np.bincount(digit_labels[p], minlength=10) / len(p) for p in parts])
    assert shares.max() > 0.3  # with alpha = 0.3 some client is dominated by one class


def test_pathological_clients_hold_at_most_classes_per_client(digit_labels: np.ndarray) -> None:
    parts = split(digit_labels, "pathological")
    assert all(len(np.unique(digit_labels[p])) <= 2 for p in parts)


def test_pathological_classes_left_to_no_client_are_logged(
    digit_labels: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    parts = split(digit_labels, "pathological", num_clients=3)  # 3 clients x 2 classes cannot hold all 10
    assert len(np.concatenate(parts)) < len(digit_labels)
    assert "no client holds classes" in caplog.text


def test_more_clients_than_samples_is_a_data_error() -> None:
    with pytest.raises(DataError, match=r"federation.num_clients = 6: more clients than the 5 training samples"):
        partition_indices(np.arange(5) % 2, data_config(), num_clients=6, seed=0)


def test_more_classes_per_client_than_classes_is_a_data_error(digit_labels: np.ndarray) -> None:
    cfg = data_config(partition={"name": "pathological", "classes_per_client": 11})
    with pytest.raises(
        DataError, match=r"data.partition.classes_per_client = 11: the training set has only 10 classes"
    ):
        partition_indices(digit_labels, cfg, num_clients=4, seed=0)


def test_unreachable_dirichlet_min_partition_size_is_a_data_error(digit_labels: np.ndarray) -> None:
    cfg = data_config(partition={"name": "dirichlet", "alpha": 0.05, "min_partition_size": 100})
    with pytest.raises(DataError, match=r"data.partition.alpha = 0.05: .* fewer than 100 samples"):
        partition_indices(digit_labels, cfg, num_clients=12, seed=0)


def test_pathological_split_finer_than_a_class_allows_is_a_data_error() -> None:
    labels = np.array([0] * 3 + [1] * 30)  # every client must hold both classes, but class 0 has 3 samples
    cfg = data_config(partition={"name": "pathological", "classes_per_client": 2})
    with pytest.raises(DataError, match=r"data.partition.classes_per_client = 2: with 10 clients"):
        partition_indices(labels, cfg, num_clients=10, seed=0)
