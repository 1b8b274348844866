"""The data side of a run: the data set, which samples each client holds, and how each normalises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsim.data import (
    TOKEN_IDS,
    ChannelStats,
    DataConfig,
    DataError,
    ImageDataset,
    TextDataset,
    federation_stats,
    load_dataset,
    partition_indices,
)


@dataclass(frozen=True)
class Federation:
    """The data side of a run: the data set, who holds what, and how each client normalises."""

    dataset: ImageDataset | TextDataset
    partitions: tuple[np.ndarray, ...]
    client_stats: tuple[ChannelStats, ...]
    test_stats: ChannelStats


def prepare_federation(data: DataConfig, num_clients: int, seed: int) -> Federation:
    """The data set of ``data``, split among ``num_clients`` clients, and how each normalises."""
    dataset = load_dataset(data, seed)
    partitions = tuple(partition_indices(partition_labels(dataset, data), data, num_clients, seed))
    if isinstance(dataset, TextDataset):  # token ids: embedded as they are, never normalised
        return Federation(dataset, partitions, tuple(TOKEN_IDS for _ in partitions), TOKEN_IDS)
    client_stats, test_stats = federation_stats(dataset.x_train, partitions, data.normalize)
    return Federation(dataset, partitions, client_stats, test_stats)


def sequence_labels(dataset: ImageDataset | TextDataset) -> np.ndarray | None:
    """One class id per training sample, or None where samples have none (next-token text: a target per token)."""
    return dataset.y_train if dataset.y_train.ndim == 1 else None


def partition_labels(dataset: ImageDataset | TextDataset, data: DataConfig) -> np.ndarray:
    """What the partitioner splits by: the class ids, or (next-token text) one label, which only iid splits."""
    labels = sequence_labels(dataset)
    if labels is not None:
        return labels
    if data.partition.name != "iid":
        raise DataError(
            f"data.partition.name = '{data.partition.name}': next-token text has no class labels to skew; "
            "use iid (or data.task: classification)"
        )
    return np.zeros(len(dataset.y_train), dtype=np.int64)


def partition_record(federation: Federation) -> dict[str, Any]:
    """Who holds which samples and how they are normalised (scoring side only, never the attacker)."""
    labels = sequence_labels(federation.dataset)
    return {
        "clients": [
            {
                "client": client,
                "num_examples": len(ids),
                **(
                    {"label_counts": np.bincount(labels[ids], minlength=federation.dataset.num_classes).tolist()}
                    if labels is not None
                    else {}
                ),
                "normalization": stats.to_dict(),
                "sample_ids": ids.tolist(),
            }
            for client, (ids, stats) in enumerate(zip(federation.partitions, federation.client_stats))
        ],
        "test_normalization": federation.test_stats.to_dict(),
    }
