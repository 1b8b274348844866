"""``mnist``, ``fashion-mnist``, ``cifar10``, ``cifar100``: torchvision's data sets, read by one reader through
their in-memory ``.data``/``.targets`` (the four differ only in torchvision's class and its files)."""

from __future__ import annotations

import pickle
import tarfile

import numpy as np

from fedsim.data.base import DataError, ImageDataset
from fedsim.data.config import TorchvisionDataConfig
from fedsim.data.registry import DATASETS
from fedsim.data.sources.arrays import float_images, int_labels

# What torchvision's own loaders raise when files are missing, truncated or cannot be fetched
# (RuntimeError "Dataset not found", URLError/OSError offline, broken archives or pickles).
_TORCHVISION_FAILURES = (RuntimeError, OSError, ValueError, EOFError, tarfile.TarError, pickle.UnpicklingError)


def _torchvision(cfg: TorchvisionDataConfig, class_name: str, files: str) -> ImageDataset:
    """Read a torchvision data set through its in-memory ``.data``/``.targets`` (no per-item transforms)."""
    import torchvision.datasets

    dataset_class = getattr(torchvision.datasets, class_name)
    root = cfg.root.expanduser()
    try:
        train = dataset_class(str(root), train=True, download=cfg.download)
        test = dataset_class(str(root), train=False, download=cfg.download)
    except _TORCHVISION_FAILURES as error:
        reason = "could not be downloaded (offline?)" if cfg.download else "data.download is false"
        raise DataError(
            f"data.dataset = {cfg.dataset!r}: not found under {cfg.root} and {reason}; put torchvision's {files} "
            f"there, set data.root, or use dataset: npz with data.path"
        ) from error
    x_train = float_images(np.asarray(train.data), class_name)
    x_test = float_images(np.asarray(test.data), class_name)
    y_train = int_labels(np.asarray(train.targets), f"{class_name} targets", len(x_train))
    y_test = int_labels(np.asarray(test.targets), f"{class_name} targets", len(x_test))
    return ImageDataset(x_train, y_train, x_test, y_test, len(train.classes), tuple(train.classes))


@DATASETS.register(
    "mnist",
    help="MNIST digits via torchvision: 60k/10k gray 28x28, 10 classes (downloads)",
    config=TorchvisionDataConfig,
)
def load_mnist(cfg: TorchvisionDataConfig) -> ImageDataset:
    return _torchvision(cfg, "MNIST", "MNIST/raw folder (the four unpacked *-ubyte files)")


@DATASETS.register(
    "fashion-mnist",
    help="Fashion-MNIST via torchvision: 60k/10k gray 28x28, 10 classes (downloads)",
    config=TorchvisionDataConfig,
)
def load_fashion_mnist(cfg: TorchvisionDataConfig) -> ImageDataset:
    return _torchvision(cfg, "FashionMNIST", "FashionMNIST/raw folder (the four unpacked *-ubyte files)")


@DATASETS.register(
    "cifar10",
    help="CIFAR-10 via torchvision: 50k/10k color 32x32, 10 classes (downloads)",
    config=TorchvisionDataConfig,
)
def load_cifar10(cfg: TorchvisionDataConfig) -> ImageDataset:
    return _torchvision(cfg, "CIFAR10", "cifar-10-batches-py folder")


@DATASETS.register(
    "cifar100",
    help="CIFAR-100 via torchvision: 50k/10k color 32x32, 100 classes (downloads)",
    config=TorchvisionDataConfig,
)
def load_cifar100(cfg: TorchvisionDataConfig) -> ImageDataset:
    return _torchvision(cfg, "CIFAR100", "cifar-100-python folder")
