"""What the readers share: arrays checked and converted to what an ``ImageDataset`` holds (float32 (N, C, H, W)
in [0, 1], int64 labels), images of one size stacked, the user's file found; one-line errors naming what is wrong."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedsim.data.base import DataError, ImageDataset
from fedsim.data.config import FileDataConfig

if TYPE_CHECKING:
    from PIL.Image import Image as PilImage

_LAYOUTS = "expected (N, H, W), (N, C, H, W) or (N, H, W, C) with C = 1 or 3"


def float_images(x: np.ndarray, what: str, channels_last: bool | None = None) -> np.ndarray:
    """(N, H, W), (N, C, H, W) or (N, H, W, C) uint8 / [0, 1] float -> float32 (N, C, H, W) in [0, 1].

    ``channels_last=None`` guesses the layout: a last axis of 1 or 3 while axis 1 is not means (N, H, W, C).
    """
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.floating):
        _check_finite(x, what)
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4:
        if channels_last is None:
            channels_last = x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3)
        if channels_last:
            x = x.transpose(0, 3, 1, 2)
        if x.shape[1] not in (1, 3):
            raise DataError(f"{what} has shape {x.shape}; {_LAYOUTS}")
    else:
        raise DataError(f"{what} has shape {x.shape}; {_LAYOUTS}")
    if x.dtype == np.uint8:
        scaled = np.ascontiguousarray(x, dtype=np.float32)
        scaled /= 255  # in place: a CIFAR training set is 600 MB as float32, no need for a second copy
        return scaled
    if not np.issubdtype(x.dtype, np.floating):
        raise DataError(f"{what} has dtype {x.dtype}; store uint8 (0..255) or floats in [0, 1]")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.size and not (x.min() >= 0 and x.max() <= 1):
        low, high = np.nanmin(x), np.nanmax(x)
        raise DataError(f"{what} holds floats in [{low:g}, {high:g}]; scale them to [0, 1] or store uint8")
    return x


def _check_finite(x: np.ndarray, what: str) -> None:
    """NaN or infinite pixels have no range to report, and scaling would not fix them: name the first one."""
    finite = np.isfinite(x)
    if finite.all():
        return
    first = np.unravel_index(int(np.argmin(finite)), x.shape)  # index in the array as the user stored it
    kind = "NaN" if np.isnan(x[first]) else "infinite"
    where = ", ".join(str(int(i)) for i in first)
    raise DataError(f"{what} holds {kind} values (first at [{where}]); store finite pixels in [0, 1] or uint8")


MAX_CLASSES = 100_000


def int_labels(y: Any, what: str, length: int) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{what} must be a 1-D array of integer class ids, got {y.dtype} {y.shape}")
    if len(y) != length:
        raise DataError(f"{what} has {len(y)} labels for {length} images")
    if y.size and y.min() < 0:
        raise DataError(f"{what} holds negative class ids; use 0..num_classes-1")
    if y.size and y.max() >= MAX_CLASSES:  # a stray id must not size a one-hot or a confusion matrix
        raise DataError(
            f"{what} holds class id {int(y.max())}; ids must be 0..num_classes-1 with at most {MAX_CLASSES:,} classes"
        )
    return y.astype(np.int64)


def empty_like(x: np.ndarray) -> np.ndarray:
    return np.empty((0, *x.shape[1:]), dtype=x.dtype)


def without_test_split(x: np.ndarray, y: np.ndarray, class_names: Sequence[str]) -> ImageDataset:
    """A source that ships no test split: load_dataset holds out data.test_fraction later, with the run's seed."""
    return ImageDataset(x, y, empty_like(x), np.empty(0, np.int64), len(class_names), tuple(class_names))


def numbered_classes(*label_arrays: np.ndarray) -> tuple[str, ...]:
    top = max((int(y.max()) for y in label_arrays if y.size), default=-1)
    return tuple(str(c) for c in range(top + 1))


def required_path(cfg: FileDataConfig, kind: str) -> Path:
    path = cfg.path.expanduser()
    exists = path.is_file() if kind.endswith("file") else path.is_dir()
    if not exists:
        raise DataError(f"data.path = '{cfg.path}': no such {kind}")
    return path


def stack_images(images: list[PilImage], mode: str, image_size: int | None, where: str) -> np.ndarray:
    from PIL import Image

    arrays = []
    for image in images:
        image = image.convert(mode)
        if image_size is not None and image.size != (image_size, image_size):
            # PIL's bilinear filter widens its support when shrinking, i.e. it antialiases.
            image = image.resize((image_size, image_size), Image.Resampling.BILINEAR)
        arrays.append(np.asarray(image))
    sizes = sorted({a.shape[:2] for a in arrays})
    if len(sizes) > 1:
        raise DataError(
            f"data.image_size = None: {where} holds images of different sizes ({sizes[0]} and {sizes[-1]}); "
            f"set data.image_size"
        )
    stacked = np.stack(arrays)  # (N, H, W) for L, (N, H, W, 3) for RGB
    return float_images(stacked, where, channels_last=stacked.ndim == 4)
