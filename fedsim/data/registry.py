"""Registries of the data: data sets (``data.dataset`` -> loader) and partition schemes (``data.partition.name``
-> its config model), each with its config model; the modules of ``sources`` and ``partitions`` register the
built-in ones."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedsim.core.registry import Registry
from fedsim.core.sections import Section

if TYPE_CHECKING:
    from fedsim.data.config import Loader

DATASETS: Registry[Loader] = Registry("data set")
PARTITIONS: Registry[type[Section]] = Registry("partition")
