"""partition_indices: which training samples each simulated client holds, drawn by flwr-datasets partitioners
(the scheme's, ``fedsim.data.partitions``)."""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from fedsim.data.base import DataError

if TYPE_CHECKING:
    from fedsim.data.config import DataConfig
    from fedsim.data.partitions.base import PartitionScheme

logger = logging.getLogger("fedsim")


def partition_indices(labels: np.ndarray, cfg: DataConfig, num_clients: int, seed: int) -> list[np.ndarray]:
    """For clients 0..num_clients-1, the sorted int64 indices into the training set that each one holds.

    Partitions are disjoint and the same for the same labels, config and seed. iid and Dirichlet partitions
    cover every sample; a pathological one leaves out classes that no client was assigned (logged).
    """
    from datasets import Dataset

    labels = np.asarray(labels, dtype=np.int64)
    if num_clients < 1:
        raise DataError(f"federation.num_clients = {num_clients}: must be at least 1")
    if num_clients > len(labels):
        raise DataError(
            f"federation.num_clients = {num_clients}: more clients than the {len(labels)} training samples; "
            f"use fewer clients or more data (data.max_train_samples)"
        )
    partitioner = cfg.partition.partitioner(labels, num_clients, seed)
    # Shuffle first: the partitioners cut the data (iid) or each class (dirichlet, pathological) into contiguous
    # runs in data set order, so without it a client's samples would be a fixed run of the source order (the seed
    # would at most move the cut points) and inherit any ordering of the source (e.g. one person's photos in a row).
    table = Dataset.from_dict({"label": labels, "index": np.arange(len(labels), dtype=np.int64)})
    partitioner.dataset = table.shuffle(seed=seed)
    with warnings.catch_warnings():
        # Dirichlet re-draw notices and "classes will not be used": the outcome is reported below, in our terms.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"flwr_datasets\.")
        try:
            parts = [_indices(partitioner, client) for client in range(num_clients)]
        except ValueError as error:
            raise cfg.partition.infeasible(num_clients) from error
    _check_every_client_has_data(parts, cfg.partition)
    _log_unused(parts, labels)
    return parts


def _indices(partitioner: Any, client: int) -> np.ndarray:
    column = partitioner.load_partition(client).with_format("numpy")["index"][:]
    return np.sort(np.asarray(column, dtype=np.int64))


def _check_every_client_has_data(parts: list[np.ndarray], partition: PartitionScheme) -> None:
    empty = [client for client, part in enumerate(parts) if len(part) == 0]
    if empty:
        raise DataError(
            f"data.partition = {partition.name!r}: clients {empty} would get no samples; use fewer clients or more data"
        )


def _log_unused(parts: list[np.ndarray], labels: np.ndarray) -> None:
    used = np.zeros(len(labels), dtype=bool)
    for part in parts:
        used[part] = True
    if not used.all():
        classes = sorted(set(np.unique(labels).tolist()) - set(np.unique(labels[used]).tolist()))
        logger.warning(
            "data.partition: no client holds classes %s, so %d training samples go unused; use more clients or "
            "more classes per client",
            classes,
            int((~used).sum()),
        )
