"""Data sets, client partitions and input normalisation.

* ``sources``: the readers, one module per data set (digits, MNIST, CIFAR, ``npz``, ``imagefolder``, text, ...),
  each registering itself and its config model in ``DATASETS`` (``registry``); every module of the package is
  imported, so a new source is one new file; a reader returns the source as it is, at native size;
* ``config``: ``DataConfig``, what every data set takes (the ``data:`` section), and the config models readers share;
* ``load``: the one pipeline every source goes through (``load_dataset``): the reader, then the held-out
  test split, the first-N limits and the square resize, cached per process;
* ``partition``: which training samples each client holds (``partition_indices``), cut by the scheme of
  ``partitions`` (one module per scheme, each registering in ``PARTITIONS``; a new scheme is one new file);
* ``normalization``: the ``ChannelStats`` a client normalises with (``channel_stats``), which attacks also
  use to map reconstructions back to image space;
* ``base``: ``ImageDataset`` (float32 images in [0, 1] with labels) and ``DataError``;
* ``text``, ``tokenizer``: what text sources share: their config, tokenizing into a ``TextDataset``.
"""

from fedsim.data import sources  # noqa: F401  (imports every reader: each registers its data set)
from fedsim.data.base import DataError, ImageDataset
from fedsim.data.config import DataConfig
from fedsim.data.load import load_dataset
from fedsim.data.normalization import TOKEN_IDS, ChannelStats, channel_stats, federation_stats
from fedsim.data.partition import partition_indices
from fedsim.data.registry import DATASETS
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
