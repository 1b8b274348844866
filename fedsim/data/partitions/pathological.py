"""``pathological``: each client holds only a few classes."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from fedsim.data.base import DataError
from fedsim.data.partitions.base import PartitionScheme
from fedsim.data.registry import PARTITIONS


class PathologicalPartition(PartitionScheme):
    name: Literal["pathological"] = Field("pathological", description="each client holds only a few classes")
    classes_per_client: int = Field(2, ge=1, description="number of distinct classes per client")

    def partitioner(self, labels: np.ndarray, num_clients: int, seed: int) -> Any:
        from flwr_datasets.partitioner import PathologicalPartitioner

        present = len(np.unique(labels))
        if self.classes_per_client > present:
            raise DataError(
                f"data.partition.classes_per_client = {self.classes_per_client}: the training set has only "
                f"{present} classes; use at most {present}"
            )
        return PathologicalPartitioner(
            num_partitions=num_clients,
            partition_by="label",
            num_classes_per_partition=self.classes_per_client,
            # The setting of the paper it implements: client i surely holds class i mod C, so with at least
            # as many clients as classes every class is used; the other classes are drawn with the seed.
            class_assignment_mode="first-deterministic",
            seed=seed,
        )

    def infeasible(self, num_clients: int) -> DataError:
        return DataError(
            f"data.partition.classes_per_client = {self.classes_per_client}: with {num_clients} clients some "
            f"class must be shared by more clients than it has samples; use fewer clients or classes per client"
        )


PARTITIONS.register(
    "pathological", help=PathologicalPartition.model_fields["name"].description or "", config=PathologicalPartition
)(PathologicalPartition)
