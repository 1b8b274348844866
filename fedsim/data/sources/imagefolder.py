"""``imagefolder``: class subfolders of image files, optionally inside ``train/`` and ``test/``.

The one reader that resizes (when data.image_size is set): its files may differ in size and must match before
they can be stacked.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedsim.data.base import DataError, ImageDataset
from fedsim.data.config import FileDataConfig
from fedsim.data.registry import DATASETS
from fedsim.data.sources.arrays import required_path, stack_images, without_test_split

if TYPE_CHECKING:
    from PIL.Image import Image as PilImage
    from torchvision.datasets import ImageFolder


@DATASETS.register(
    "imagefolder",
    help="class subfolders of images at data.path (optionally inside train/ and test/)",
    config=FileDataConfig,
)
def load_imagefolder(cfg: FileDataConfig) -> ImageDataset:
    root = required_path(cfg, "folder")
    where = f"data.path = '{cfg.path}'"
    has_split = (root / "train").is_dir() and (root / "test").is_dir()
    parts = [root / "train", root / "test"] if has_split else [root]
    folders = [_image_folder(part, where) for part in parts]
    class_names = tuple(folders[0].classes)
    if any(tuple(folder.classes) != class_names for folder in folders):
        raise DataError(
            f"{where}: train/ has classes {list(class_names)} but test/ has {folders[1].classes}; "
            f"use the same class folders in both"
        )
    images = [[_open_image(path) for path, _ in folder.samples] for folder in folders]
    # One mode for every image so that all share a channel count: gray only when all of them are gray.
    mode = "L" if all(image.mode in ("1", "L", "LA") for group in images for image in group) else "RGB"
    xs = [stack_images(group, mode, cfg.image_size, where) for group in images]
    if len(xs) == 2 and xs[0].shape[1:] != xs[1].shape[1:]:
        sizes = f"{xs[0].shape[2:]} train and {xs[1].shape[2:]} test images"
        raise DataError(f"data.image_size = None: {where} has {sizes}; set data.image_size")
    ys = [np.asarray(folder.targets, dtype=np.int64) for folder in folders]
    if len(xs) == 1:
        return without_test_split(xs[0], ys[0], class_names)
    return ImageDataset(xs[0], ys[0], xs[1], ys[1], len(class_names), class_names)


def _image_folder(path: Path, where: str) -> ImageFolder:
    from torchvision.datasets import ImageFolder

    try:
        return ImageFolder(str(path))
    except (FileNotFoundError, OSError) as error:
        raise DataError(f"{where}: {str(error).splitlines()[0]}") from None


def _open_image(path: str) -> PilImage:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            image.load()  # decode now, so the file handle can close
            return image
    except (OSError, UnidentifiedImageError) as error:
        raise DataError(f"data.path: cannot read image '{path}' ({error})") from None
