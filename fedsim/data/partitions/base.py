"""What every partition scheme's config is: a ``Section`` named by ``name`` that builds its partitioner."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedsim.core.sections import Section
from fedsim.data.base import DataError


class PartitionScheme(Section):
    """Base of every scheme's config; ``name`` is a ``Literal`` of its registered name."""

    name: str

    def partitioner(self, labels: np.ndarray, num_clients: int, seed: int) -> Any:
        """The flwr-datasets partitioner that splits the (already shuffled) training set over ``num_clients``."""
        raise NotImplementedError(f"partition {self.name!r} builds no partitioner")

    def infeasible(self, num_clients: int) -> DataError:
        """The partitioner's ValueError (raised after fedsim's own checks passed), phrased in config terms."""
        return DataError(f"data.partition = {self.name!r}: cannot split the training set over {num_clients} clients")
