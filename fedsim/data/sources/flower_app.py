"""``flower-app``: a Flower app's own data function, called once per partition as each of its nodes calls it.

``read_app_partitions`` is also what ``fedsim audit`` (``fedsim.engine.app_audit``) scores against: the images
and each partition's indices into them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

import fedsim.core.wire as wire
from fedsim.data.base import DataError, ImageDataset
from fedsim.data.config import DataConfig
from fedsim.data.registry import DATASETS
from fedsim.data.sources.arrays import empty_like, int_labels, numbered_classes

NODE_PREFIX = "node:"  # an argument of the app's data function that is the node's own: node:partition-id


class AppDataConfig(DataConfig):
    """A Flower app's own data function, called once per partition as each of the app's nodes calls it."""

    app: Path = Field(..., description="the Flower app's folder (its code is imported from there)")
    function: str = Field(
        ..., description="the app's data function as `module:function`, e.g. pytorchexample.task:load_data"
    )
    arguments: dict[str, Any] = Field(
        default_factory=dict,
        description="its keyword arguments; `node:partition-id` and `node:num-partitions` are each node's own",
    )
    num_partitions: int = Field(..., ge=1, description="the number of partitions (the simulation's nodes)")
    train_output: int | None = Field(
        0, ge=0, description="which of the function's outputs is the training loader (null = it returns only that)"
    )
    test_output: int | None = Field(
        None, ge=0, description="which output is a held-out loader no client trains on (null = none)"
    )
    image_key: str | int = Field("img", description="the images in each batch: a key of a dict batch, or an index")
    label_key: str | int = Field("label", description="the labels in each batch: a key of a dict batch, or an index")
    mean: tuple[float, ...] = Field((0.0,), description="the channel means the app's loader normalises with")
    std: tuple[float, ...] = Field((1.0,), description="the channel standard deviations it normalises with")


def read_app_partitions(cfg: AppDataConfig) -> tuple[ImageDataset, tuple[np.ndarray, ...]]:
    """The app's training images of every partition, concatenated in partition order, and each partition's indices
    into them; the held-out loaders' images (``test_output``) are the test split."""
    from fedsim.core.importing import import_object

    function = import_object(cfg.function, cfg.app, "data.function", DataError)
    train_parts: list[tuple[np.ndarray, np.ndarray]] = []
    test_parts: list[tuple[np.ndarray, np.ndarray]] = []
    named_classes: tuple[str, ...] | None = None  # the data set's own class names, where its loaders show them
    for partition in range(cfg.num_partitions):
        node = {wire.PARTITION_ID: partition, wire.NUM_PARTITIONS: cfg.num_partitions}
        arguments = {
            name: node[value[len(NODE_PREFIX) :]] if isinstance(value, str) and value.startswith(NODE_PREFIX) else value
            for name, value in cfg.arguments.items()
        }
        try:
            outputs = function(**arguments)
        except TypeError as error:
            raise DataError(f"data.arguments = {cfg.arguments}: {cfg.function} refused them ({error})") from None
        train_loader = _output(outputs, cfg.train_output, "train_output")
        named_classes = named_classes or _class_label_names(train_loader, cfg.label_key)
        train_parts.append(_loader_images(cfg, in_dataset_order(train_loader), partition))
        if cfg.test_output is not None:
            test_parts.append(_loader_images(cfg, _output(outputs, cfg.test_output, "test_output"), partition))
    sizes = [len(y) for _, y in train_parts]
    starts = np.cumsum([0, *sizes])
    partitions = tuple(np.arange(start, start + size, dtype=np.int64) for start, size in zip(starts, sizes))
    x_train = np.concatenate([x for x, _ in train_parts])
    y_train = np.concatenate([y for _, y in train_parts])
    if test_parts:
        x_test, y_test = np.concatenate([x for x, _ in test_parts]), np.concatenate([y for _, y in test_parts])
    else:
        x_test, y_test = empty_like(x_train), np.empty(0, np.int64)
    # a small partition may lack a class: the labels present only count where the data set names none
    classes = named_classes or numbered_classes(y_train, y_test)
    return ImageDataset(x_train, y_train, x_test, y_test, len(classes), classes), partitions


def _class_label_names(loader: Any, label_key: str | int) -> tuple[str, ...] | None:
    """The names of the label column's ``ClassLabel`` feature, where the loader reads a Hugging Face data set."""
    features = getattr(getattr(loader, "dataset", None), "features", None)
    feature = features.get(label_key) if isinstance(features, dict) else None
    names = getattr(feature, "names", None)
    return tuple(str(name) for name in names) if names else None


def _output(outputs: Any, index: int | None, field: str) -> Any:
    if index is None:
        return outputs
    if not isinstance(outputs, tuple | list) or index >= len(outputs):
        count = len(outputs) if isinstance(outputs, tuple | list) else 1
        raise DataError(f"data.{field} = {index}: the data function returns {count} output(s); use 0..{count - 1}")
    return outputs[index]


def in_dataset_order(loader: Any) -> Any:
    """A PyTorch DataLoader's data set read in index order, as its batches are made (a sample's id in the partition is
    its index: what a local step drew is known by index, ``fedsim.engine.app_audit.client_probe``); any other
    iterable as it is."""
    from torch.utils.data import DataLoader

    if not isinstance(loader, DataLoader) or loader.batch_size is None or not hasattr(loader.dataset, "__len__"):
        return loader
    return DataLoader(loader.dataset, batch_size=loader.batch_size, shuffle=False, collate_fn=loader.collate_fn)


def _loader_images(cfg: AppDataConfig, loader: Any, partition: int) -> tuple[np.ndarray, np.ndarray]:
    """Every batch of one loader, read once, mapped back to [0, 1] with the declared normalisation."""
    import torch

    images: list[torch.Tensor] = []
    labels: list[torch.Tensor] = []
    for batch in loader:
        for key, field, into in ((cfg.image_key, "image_key", images), (cfg.label_key, "label_key", labels)):
            try:
                into.append(torch.as_tensor(batch[key]))
            except (KeyError, IndexError, TypeError):
                keys = list(batch) if isinstance(batch, dict) else f"{len(batch)} items"
                raise DataError(f"data.{field} = {key!r}: not in the loader's batches (they hold {keys})") from None
    if not images:
        raise DataError(f"data.function = {cfg.function!r}: partition {partition} yields no batch")
    x = torch.cat(images).float()
    if x.ndim != 4 or x.shape[1] != len(cfg.std) or len(cfg.mean) != len(cfg.std):
        raise DataError(
            f"data.mean/std = {list(cfg.mean)}/{list(cfg.std)}: the loader yields images of shape "
            f"{tuple(x.shape[1:])}; give one mean and std per channel"
        )
    mean = torch.tensor(cfg.mean).view(1, -1, 1, 1)
    std = torch.tensor(cfg.std).view(1, -1, 1, 1)
    pixels = x * std + mean
    low, high = float(pixels.min()), float(pixels.max())
    if low < -1e-3 or high > 1 + 1e-3:  # a wrong normalisation would score against wrong images
        raise DataError(
            f"data.mean/std = {list(cfg.mean)}/{list(cfg.std)}: un-normalised images span [{low:.3g}, {high:.3g}], "
            f"not [0, 1]; declare the normalisation the app's loader applies"
        )
    y = torch.cat(labels).long().numpy()
    return pixels.clamp_(0, 1).numpy().astype(np.float32), int_labels(y, f"data.label_key {cfg.label_key!r}", len(x))


@DATASETS.register(
    "flower-app",
    help="a Flower app's own data function (data.function), read per partition: what `fedsim audit` scores against",
    config=AppDataConfig,
)
def load_flower_app(cfg: AppDataConfig) -> ImageDataset:
    return read_app_partitions(cfg)[0]
