"""``iid``: every client gets a uniformly random, equal share."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from fedsim.data.partitions.base import PartitionScheme
from fedsim.data.registry import PARTITIONS


class IidPartition(PartitionScheme):
    name: Literal["iid"] = Field("iid", description="every client gets a uniformly random, equal share")

    def partitioner(self, labels: np.ndarray, num_clients: int, seed: int) -> Any:
        from flwr_datasets.partitioner import IidPartitioner

        # IidPartitioner takes no seed and does not shuffle: the seeded shuffle before it provides the randomness.
        return IidPartitioner(num_partitions=num_clients)


PARTITIONS.register("iid", help=IidPartition.model_fields["name"].description or "", config=IidPartition)(IidPartition)
