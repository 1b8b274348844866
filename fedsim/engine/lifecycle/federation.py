"""The data side of a run: the data set, which samples each client holds, and how each normalises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsim.config import ExperimentConfig
from fedsim.data import ChannelStats, DataError, ImageDataset, federation_stats, load_dataset, partition_indices


@dataclass(frozen=True)
class Federation:
    """The data side of a run: the data set, who holds what, and how each client normalises."""

    dataset: ImageDataset
    partitions: tuple[np.ndarray, ...]
    client_stats: tuple[ChannelStats, ...]
    test_stats: ChannelStats


def prepare_federation(config: ExperimentConfig) -> Federation:
    dataset = load_dataset(config.data, config.seed)
    if not isinstance(dataset, ImageDataset):
        raise DataError(
            f"data.dataset = '{config.data.dataset}': text data sets are not yet federated by `fedsim run` "
            "(bench.text runs them through the clients' training, DAGER and the text floor)"
        )
    partitions = tuple(partition_indices(dataset.y_train, config.data, config.federation.num_clients, config.seed))
    client_stats, test_stats = federation_stats(dataset.x_train, partitions, config.data.normalize)
    return Federation(dataset, partitions, client_stats, test_stats)


def partition_record(federation: Federation) -> dict[str, Any]:
    """Who holds which samples and how they are normalised (scoring side only, never the attacker)."""
    labels = federation.dataset.y_train
    return {
        "clients": [
            {
                "client": client,
                "num_examples": len(ids),
                "label_counts": np.bincount(labels[ids], minlength=federation.dataset.num_classes).tolist(),
                "normalization": stats.to_dict(),
                "sample_ids": ids.tolist(),
            }
            for client, (ids, stats) in enumerate(zip(federation.partitions, federation.client_stats))
        ],
        "test_normalization": federation.test_stats.to_dict(),
    }
