"""partition_indices: which training samples each simulated client holds, drawn by flwr-datasets partitioners."""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import Field

from fedsim.core.sections import Section
from fedsim.data.base import DataError
from fedsim.data.registry import PARTITIONS

if TYPE_CHECKING:
    from fedsim.data.config import DataConfig

logger = logging.getLogger("fedsim")


class IidPartition(Section):
    name: Literal["iid"] = Field("iid", description="every client gets a uniformly random, equal share")


class DirichletPartition(Section):
    name: Literal["dirichlet"] = Field("dirichlet", description="label skew drawn from Dirichlet(alpha)")
    alpha: float = Field(0.5, gt=0, description="concentration; small alpha = strong label skew")
    min_partition_size: int = Field(1, ge=0, description="redraw until every client has this many samples")


class PathologicalPartition(Section):
    name: Literal["pathological"] = Field("pathological", description="each client holds only a few classes")
    classes_per_client: int = Field(2, ge=1, description="number of distinct classes per client")


# `data.partition.name` -> its config model (flwr-datasets' partitioner is chosen by ``_partitioner``)
for _scheme in (IidPartition, DirichletPartition, PathologicalPartition):
    _name = _scheme.model_fields["name"].default
    PARTITIONS.register(_name, help=_scheme.model_fields["name"].description or "", config=_scheme)(_scheme)

Partition = Annotated[IidPartition | DirichletPartition | PathologicalPartition, Field(discriminator="name")]


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
    partitioner = _partitioner(cfg.partition, labels, num_clients, seed)
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
            raise _infeasible(cfg.partition, num_clients) from error
    _check_every_client_has_data(parts, cfg.partition)
    _log_unused(parts, labels)
    return parts


def _partitioner(partition: Partition, labels: np.ndarray, num_clients: int, seed: int) -> Any:
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner, PathologicalPartitioner

    if isinstance(partition, IidPartition):
        # IidPartitioner takes no seed and does not shuffle: the seeded shuffle before it provides the randomness.
        return IidPartitioner(num_partitions=num_clients)
    if isinstance(partition, DirichletPartition):
        return DirichletPartitioner(
            num_partitions=num_clients,
            partition_by="label",
            alpha=float(partition.alpha),
            # A client without samples cannot train, so at least one sample is always required.
            min_partition_size=max(1, partition.min_partition_size),
            seed=seed,
        )
    if isinstance(partition, PathologicalPartition):
        present = len(np.unique(labels))
        if partition.classes_per_client > present:
            raise DataError(
                f"data.partition.classes_per_client = {partition.classes_per_client}: the training set has only "
                f"{present} classes; use at most {present}"
            )
        return PathologicalPartitioner(
            num_partitions=num_clients,
            partition_by="label",
            num_classes_per_partition=partition.classes_per_client,
            # The setting of the paper it implements: client i surely holds class i mod C, so with at least
            # as many clients as classes every class is used; the other classes are drawn with the seed.
            class_assignment_mode="first-deterministic",
            seed=seed,
        )
    raise TypeError(f"unknown partition config {type(partition).__name__}")


def _indices(partitioner: Any, client: int) -> np.ndarray:
    column = partitioner.load_partition(client).with_format("numpy")["index"][:]
    return np.sort(np.asarray(column, dtype=np.int64))


def _infeasible(partition: Partition, num_clients: int) -> DataError:
    """Phrase the partitioners' ValueErrors (raised after our own checks passed) in config terms."""
    if isinstance(partition, DirichletPartition):
        return DataError(
            f"data.partition.alpha = {partition.alpha}: 10 Dirichlet draws all left some of the {num_clients} clients "
            f"with fewer than {max(1, partition.min_partition_size)} samples; raise alpha, lower "
            f"data.partition.min_partition_size or use fewer clients"
        )
    if isinstance(partition, PathologicalPartition):
        return DataError(
            f"data.partition.classes_per_client = {partition.classes_per_client}: with {num_clients} clients some "
            f"class must be shared by more clients than it has samples; use fewer clients or classes per client"
        )
    return DataError(f"data.partition = {partition.name!r}: cannot split the training set over {num_clients} clients")


def _check_every_client_has_data(parts: list[np.ndarray], partition: Partition) -> None:
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
