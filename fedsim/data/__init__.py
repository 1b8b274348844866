"""Data sets, client partitions and input normalisation.

* ``sources``: the registry of readers (``DATASETS``), one per data set (digits, MNIST, CIFAR, ``npz``,
  ``imagefolder``, ...), each with its config model; a reader returns the source as it is, at native size;
* ``load``: the one pipeline every source goes through (``load_dataset``): the reader, then the held-out
  test split, the first-N limits and the square resize, cached per process;
* ``partition``: which training samples each client holds (``partition_indices``);
* ``normalization``: the ``ChannelStats`` a client normalises with (``channel_stats``), which attacks also
  use to map reconstructions back to image space;
* ``base``: ``ImageDataset`` (float32 images in [0, 1] with labels) and ``DataError``;
* ``text``, ``tokenizer``: text sources (local files, the hub) tokenized into a ``TextDataset``.
"""

from fedsim.data import python_docs, text  # noqa: F401  (registers the text sources)
from fedsim.data.base import DataError, ImageDataset
from fedsim.data.load import load_dataset
from fedsim.data.normalization import TOKEN_IDS, ChannelStats, channel_stats, federation_stats
from fedsim.data.partition import partition_indices
from fedsim.data.registry import DATASETS
from fedsim.data.sources import DataConfig
from fedsim.data.text import TextDataset

__all__ = [
    "DATASETS",
    "TOKEN_IDS",
    "ChannelStats",
    "DataConfig",
    "DataError",
    "ImageDataset",
    "TextDataset",
    "channel_stats",
    "federation_stats",
    "load_dataset",
    "partition_indices",
]
