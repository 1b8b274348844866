"""Data sets, client partitions and input normalisation.

``load_dataset`` reads a registered data set (``DATASETS``) into an ``ImageDataset`` of float32 images in
[0, 1]; ``partition_indices`` decides which training samples each client holds; ``channel_stats`` gives the
``ChannelStats`` a client normalises with, and that attacks use to map reconstructions back to image space.
"""

from fedsim.data.base import DataError, ImageDataset
from fedsim.data.load import load_dataset
from fedsim.data.registry import DATASETS
from fedsim.data.sources import DataConfig
from fedsim.data.normalization import ChannelStats, channel_stats, federation_stats
from fedsim.data.partition import partition_indices

__all__ = [
    "DATASETS",
    "DataConfig",
    "ChannelStats",
    "DataError",
    "ImageDataset",
    "channel_stats",
    "federation_stats",
    "load_dataset",
    "partition_indices",
]
