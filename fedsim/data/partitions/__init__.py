"""The partition schemes (``data.partition.name``), one module each, registered in ``PARTITIONS``
(``fedsim.data.registry``) with their config model: every module here is imported, so a new scheme is one new
file. A scheme's config builds the flwr-datasets partitioner that ``fedsim.data.partition`` cuts the shuffled
training set with."""

from fedsim.core.registry import import_submodules

import_submodules(__name__, __path__)
