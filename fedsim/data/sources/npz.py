"""``npz``: the user's arrays in one ``.npz`` archive (x, y, with or without a test split, and class names)."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from fedsim.data.base import DataError, ImageDataset
from fedsim.data.config import FileDataConfig
from fedsim.data.registry import DATASETS
from fedsim.data.sources.arrays import float_images, int_labels, numbered_classes, required_path, without_test_split


@DATASETS.register(
    "npz",
    help="your arrays in data.path (.npz): x, y (+ x_test, y_test) or x_train, y_train, x_test, y_test (+ classes)",
    config=FileDataConfig,
)
def load_npz(cfg: FileDataConfig) -> ImageDataset:
    path = required_path(cfg, ".npz file")
    where = f"data.path = '{cfg.path}'"
    found = _npz_arrays(path, where)
    if {"x_train", "y_train", "x_test", "y_test"} <= found.keys():
        suffixes = ["_train", "_test"]
    elif {"x", "y", "x_test", "y_test"} <= found.keys():  # everything, plus a test split of its own
        suffixes = ["", "_test"]
    elif {"x", "y"} <= found.keys():
        suffixes = [""]
    else:
        names = ", ".join(sorted(found)) or "none"
        raise DataError(
            f"{where}: expected arrays x, y (+ x_test, y_test) or x_train, y_train, x_test, y_test; found {names}"
        )
    xs = [float_images(found[f"x{s}"], f"{where}: x{s}") for s in suffixes]
    ys = [int_labels(found[f"y{s}"], f"{where}: y{s}", len(x)) for s, x in zip(suffixes, xs)]
    class_names = _npz_class_names(found.get("classes"), ys, where)
    if len(xs) == 1:
        return without_test_split(xs[0], ys[0], class_names)
    if not len(xs[1]):
        raise DataError(
            f"{where}: x_test is empty; give test images, or store x/y alone to hold out data.test_fraction of them"
        )
    if xs[0].shape[1:] != xs[1].shape[1:]:
        raise DataError(f"{where}: x_train images are {xs[0].shape[1:]} but x_test images are {xs[1].shape[1:]}")
    return ImageDataset(xs[0], ys[0], xs[1], ys[1], len(class_names), class_names)


def _npz_arrays(path: Path, where: str) -> dict[str, np.ndarray]:
    try:
        archive = np.load(path, allow_pickle=False)
    except zipfile.BadZipFile as error:  # a zip whose end was cut off (an interrupted copy or download)
        raise DataError(f"{where}: truncated or damaged .npz archive ({error}); save or copy it again") from None
    except (OSError, ValueError, EOFError) as error:
        raise DataError(f"{where}: not a readable .npz archive ({error}); save it with numpy.savez") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):  # a .npy file: one bare array, no names
        raise DataError(f"{where}: holds one bare array, not an .npz archive; use numpy.savez(path, x=..., y=...)")
    with archive:
        try:
            return {name: archive[name] for name in archive.files}
        except ValueError as error:  # object arrays would need pickle, which data files never get
            raise DataError(f"{where}: {error}; store plain numeric arrays (and classes as strings)") from None
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as error:  # a member cut short or corrupted
            raise DataError(f"{where}: truncated or damaged .npz archive ({error}); save or copy it again") from None


def _npz_class_names(classes: np.ndarray | None, labels: list[np.ndarray], where: str) -> tuple[str, ...]:
    if classes is None:
        return numbered_classes(*labels)
    names = tuple(str(name) for name in np.asarray(classes).reshape(-1).tolist())
    top = max((int(y.max()) for y in labels if y.size), default=-1)
    if top >= len(names):
        raise DataError(f"{where}: labels go up to {top} but classes lists only {len(names)} names; add the rest")
    return names
