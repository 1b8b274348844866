"""``dirichlet``: label skew, each class's share per client drawn from Dirichlet(alpha)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from fedsim.data.base import DataError
from fedsim.data.partitions.base import PartitionScheme
from fedsim.data.registry import PARTITIONS


class DirichletPartition(PartitionScheme):
    name: Literal["dirichlet"] = Field("dirichlet", description="label skew drawn from Dirichlet(alpha)")
    alpha: float = Field(0.5, gt=0, description="concentration; small alpha = strong label skew")
    min_partition_size: int = Field(1, ge=0, description="redraw until every client has this many samples")

    def partitioner(self, labels: np.ndarray, num_clients: int, seed: int) -> Any:
        from flwr_datasets.partitioner import DirichletPartitioner

        return DirichletPartitioner(
            num_partitions=num_clients,
            partition_by="label",
            alpha=float(self.alpha),
            # A client without samples cannot train, so at least one sample is always required.
            min_partition_size=max(1, self.min_partition_size),
            seed=seed,
        )

    def infeasible(self, num_clients: int) -> DataError:
        return DataError(
            f"data.partition.alpha = {self.alpha}: 10 Dirichlet draws all left some of the {num_clients} clients "
            f"with fewer than {max(1, self.min_partition_size)} samples; raise alpha, lower "
            f"data.partition.min_partition_size or use fewer clients"
        )


PARTITIONS.register(
    "dirichlet", help=DirichletPartition.model_fields["name"].description or "", config=DirichletPartition
)(DirichletPartition)
