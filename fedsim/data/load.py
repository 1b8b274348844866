"""The one pipeline every data set goes through: ``load_dataset``.

The source's reader (``fedsim.data.sources``, chosen by ``data.dataset``) -> held-out test split -> first-N
limits -> square resize, cached per process. The readers differ; what happens after them is written here once,
so every source is split, cut and resized the same way.

Every simulated client calls ``load_dataset`` with the same config; the cache makes that one read per process.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np
import torch
import torch.nn.functional as F

from fedsim.data.base import DataError, ImageDataset
from fedsim.data.registry import DATASETS

if TYPE_CHECKING:
    from fedsim.data.config import DataConfig
    from fedsim.data.text import TextDataset

#: what a reader returns (``fedsim.data.text`` sources give token ids, held out and cut as images are)
AnyDataset = TypeVar("AnyDataset", ImageDataset, "TextDataset")

# Images resized per chunk, so that upsampling a large data set does not hold two float copies of it at once.
_RESIZE_CHUNK = 2048


def load_dataset(cfg: DataConfig, seed: int) -> ImageDataset:
    """The data set of a run: square images of side ``cfg.image_size`` (or native), limits applied.

    ``seed`` only matters for sources without a test split, whose held-out part it draws. The result is
    shared by every caller in this process: never modify its arrays in place.
    """
    # Partitioning and normalisation do not change the arrays; leaving them out of the key lets runs that differ
    # only there share one cached copy.
    key = (cfg.model_dump_json(exclude={"partition", "normalize"}), seed)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    dataset = _load(cfg, seed)
    _CACHE[key] = dataset
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return dataset


# A few entries only: one entry can be a whole CIFAR training set in float32.
_CACHE_SIZE = 4
_CACHE: OrderedDict[tuple[str, int], ImageDataset] = OrderedDict()


def _load(cfg: DataConfig, seed: int) -> ImageDataset:
    loaded = DATASETS.get(cfg.dataset)(cfg)
    if not isinstance(loaded, ImageDataset):  # text (fedsim.data.text): token ids, nothing to resize
        # a text data set goes where an image one does (the same fields; fedsim.data.text.TextDataset)
        return cast(ImageDataset, _limited(loaded, cfg, seed))
    # Subsetting before resizing gives the same images as after, without resizing samples that are dropped.
    return square_images(_limited(loaded, cfg, seed), cfg.image_size, cfg.dataset)


def _limited(dataset: AnyDataset, cfg: DataConfig, seed: int) -> AnyDataset:
    """``dataset`` with a test split held out where it ships none, and the sample limits applied."""
    if len(dataset.y_test) == 0:
        dataset = hold_out_test_split(dataset, cfg.test_fraction, seed)
    return first_samples(dataset, cfg.max_train_samples, cfg.max_test_samples)


def hold_out_test_split(dataset: AnyDataset, test_fraction: float, seed: int) -> AnyDataset:
    """Split ``test_fraction`` of the training set off as test set, stratified by label where possible."""
    from sklearn.model_selection import train_test_split

    indices = np.arange(len(dataset.y_train))
    try:
        train, test = train_test_split(indices, test_size=test_fraction, random_state=seed, stratify=dataset.y_train)
    except ValueError:
        # Stratifying needs every class at least twice and room for each class on both sides; tiny custom data
        # sets may not have that, and an unstratified random split still serves them.
        try:
            train, test = train_test_split(indices, test_size=test_fraction, random_state=seed)
        except ValueError:
            needed = max(2, int(np.ceil(1 / min(test_fraction, 1 - test_fraction))))
            raise DataError(
                f"data.test_fraction = {test_fraction}: cannot split {len(indices)} samples into non-empty train and "
                f"test sets (it needs at least {needed}); add samples, or give the test split as x_test/y_test"
            ) from None
    return dataclasses.replace(
        dataset,
        x_train=dataset.x_train[train],
        y_train=dataset.y_train[train],
        x_test=dataset.x_train[test],
        y_test=dataset.y_train[test],
    )


def first_samples(dataset: AnyDataset, max_train: int | None, max_test: int | None) -> AnyDataset:
    """Keep only the first ``max_train`` training and ``max_test`` test samples (None keeps all)."""
    return dataclasses.replace(
        dataset,
        x_train=dataset.x_train[:max_train],
        y_train=dataset.y_train[:max_train],
        x_test=dataset.x_test[:max_test],
        y_test=dataset.y_test[:max_test],
    )


def square_images(dataset: ImageDataset, image_size: int | None, name: str) -> ImageDataset:
    """Resize to ``image_size`` x ``image_size``; with no size given, native images must already be square."""
    height, width = dataset.x_train.shape[2:]
    if image_size is None:
        if height != width:
            raise DataError(
                f"data.image_size = None: {name!r} images are {height}x{width}, not square; set data.image_size"
            )
        return dataset
    if (height, width) == (image_size, image_size):
        return dataset
    return dataclasses.replace(
        dataset, x_train=resize_images(dataset.x_train, image_size), x_test=resize_images(dataset.x_test, image_size)
    )


def resize_images(x: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resize of float32 (N, C, H, W) to (N, C, size, size), clipped back to [0, 1].

    Shrinking antialiases (otherwise thin strokes alias away). Both filters average with non-negative
    weights, so the clip only removes float rounding just outside [0, 1].
    """
    height, width = x.shape[2:]
    antialias = size < height or size < width
    out = np.empty((len(x), x.shape[1], size, size), dtype=np.float32)
    for start in range(0, len(x), _RESIZE_CHUNK):
        batch = torch.from_numpy(np.ascontiguousarray(x[start : start + _RESIZE_CHUNK]))
        resized = F.interpolate(batch, size=(size, size), mode="bilinear", align_corners=False, antialias=antialias)
        out[start : start + len(batch)] = resized.clamp_(0.0, 1.0).numpy()
    return out
