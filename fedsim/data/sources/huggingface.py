"""``huggingface``: a Hugging Face ``datasets`` data set, from the Hub or local parquet/arrow/image files; its
config model and the split reading ``flwr_datasets`` shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field, model_validator

from fedsim.data.base import DataError, ImageDataset
from fedsim.data.config import DataConfig
from fedsim.data.registry import DATASETS
from fedsim.data.sources.arrays import int_labels, numbered_classes, stack_images, without_test_split

if TYPE_CHECKING:
    from PIL.Image import Image as PilImage


class HubDataConfig(DataConfig):
    """A data set read through Hugging Face ``datasets`` (or Flower Datasets on top of it): from the Hub or local files.

    fedsim partitions the split it reads with ``data.partition``, as for every other source.
    """

    hub_id: str | None = Field(
        None, description="a data set on the Hugging Face Hub, e.g. uoft-cs/cifar10 (downloads on first use)"
    )
    files: Path | None = Field(
        None,
        description="local data instead of the Hub: a parquet or arrow file, a folder of them, a folder saved with "
        "Dataset.save_to_disk, or an image folder",
    )
    subset: str | None = Field(None, description="the Hub data set's configuration (subset) name, if it has several")
    image_key: str | None = Field(None, description="the column holding the images (null = the first image column)")
    label_key: str = Field("label", description="the column holding the integer class ids")
    train_split: str = Field("train", description="the split fedsim partitions among clients")
    test_split: str | None = Field(
        None, description="the split evaluated on (null = hold out data.test_fraction of the train split)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> HubDataConfig:
        if (self.hub_id is None) == (self.files is None):
            given = "both" if self.hub_id is not None else "neither"
            raise ValueError(
                f"hub_id and files: {given} given; set data.hub_id (a Hub data set) or data.files (local data)"
            )
        if self.files is not None and not self.files.expanduser().exists():
            raise ValueError(f"files = '{self.files}': no such file or folder")
        return self


def hub_builder(files: Path) -> tuple[str, dict[str, Any]]:
    """The ``datasets`` builder and its arguments for local files: parquet, arrow or an image folder."""
    if files.is_file():
        kind = {".parquet": "parquet", ".arrow": "arrow"}.get(files.suffix)
        if kind is None:
            raise DataError(f"data.files = '{files}': expected a .parquet or .arrow file, or a folder")
        return kind, {"data_files": str(files)}
    for kind in ("parquet", "arrow"):
        found = sorted(files.rglob(f"*.{kind}"))
        if found:
            return kind, {"data_dir": str(files)}
    return "imagefolder", {"data_dir": str(files)}


def saved_to_disk(files: Path) -> bool:
    return files.is_dir() and any((files / name).is_file() for name in ("dataset_info.json", "dataset_dict.json"))


def hub_failure(cfg: HubDataConfig, error: Exception) -> DataError:
    first_line = (str(error).splitlines() or [type(error).__name__])[0]
    if cfg.hub_id is not None:
        return DataError(
            f"data.hub_id = {cfg.hub_id!r}: could not be loaded from the Hugging Face Hub (offline, or no such data "
            f"set? {first_line}); set data.files to a local copy instead"
        )
    return DataError(f"data.files = '{cfg.files}': could not be read by datasets ({first_line})")


def hub_splits(cfg: HubDataConfig, read: Callable[[str], Any]) -> ImageDataset:
    """The train (and test) split read by ``read(split)``, as an ImageDataset."""
    from datasets import ClassLabel
    from datasets import Image as ImageFeature

    train = read(cfg.train_split)
    test = read(cfg.test_split) if cfg.test_split is not None else None
    image_key = cfg.image_key
    if image_key is None:
        image_key = next((k for k, f in train.features.items() if isinstance(f, ImageFeature)), None)
        if image_key is None:
            raise DataError(f"data.image_key = None: the data set has no image column; columns {train.column_names}")
    for key, field in ((image_key, "image_key"), (cfg.label_key, "label_key")):
        if key not in train.column_names:
            raise DataError(f"data.{field} = {key!r}: no such column; the data set has {train.column_names}")
    label_feature = train.features[cfg.label_key]
    xs, ys = [], []
    for split, part in ((cfg.train_split, train), (cfg.test_split, test)):
        if part is None:
            continue
        images = [_as_pil(image, f"data.{split} split, {image_key!r}") for image in part[image_key]]
        mode = "L" if all(image.mode in ("1", "L", "LA") for image in images) else "RGB"
        xs.append(stack_images(images, mode, cfg.image_size, f"data split {split!r}"))
        ys.append(int_labels(np.asarray(part[cfg.label_key]), f"data column {cfg.label_key!r}", len(xs[-1])))
    if isinstance(label_feature, ClassLabel):
        class_names = tuple(label_feature.names)
    else:
        class_names = numbered_classes(*ys)
    if len(xs) == 1:
        return without_test_split(xs[0], ys[0], class_names)
    if xs[0].shape[1:] != xs[1].shape[1:]:
        raise DataError(f"data.image_size = None: train images are {xs[0].shape[2:]}, test {xs[1].shape[2:]}; set it")
    return ImageDataset(xs[0], ys[0], xs[1], ys[1], len(class_names), class_names)


def _as_pil(image: Any, what: str) -> PilImage:
    from PIL import Image

    if isinstance(image, Image.Image):
        return image
    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise DataError(f"{what}: holds {array.dtype} arrays, not images; store an Image column or uint8 arrays")
    return Image.fromarray(array)


def missing_split(cfg: HubDataConfig, split: str, available: Sequence[str]) -> DataError:
    field = "train_split" if split == cfg.train_split else "test_split"
    return DataError(f"data.{field} = {split!r}: no such split; the data set has {sorted(available)}")


@DATASETS.register(
    "huggingface",
    help="a Hugging Face datasets data set: from the Hub (data.hub_id) or local parquet/arrow/image files (data.files)",
    config=HubDataConfig,
)
def load_huggingface(cfg: HubDataConfig) -> ImageDataset:
    import datasets

    try:
        if cfg.files is not None and saved_to_disk(cfg.files.expanduser()):
            loaded = datasets.load_from_disk(str(cfg.files.expanduser()))
        elif cfg.files is not None:
            builder, arguments = hub_builder(cfg.files.expanduser())
            loaded = datasets.load_dataset(builder, **arguments)
        else:
            loaded = datasets.load_dataset(cfg.hub_id, cfg.subset)
    except DataError:
        raise
    except Exception as error:  # datasets raises many types (connection, file, format errors): one line for each
        raise hub_failure(cfg, error) from None
    if isinstance(loaded, datasets.Dataset):  # a single saved split
        loaded = datasets.DatasetDict({cfg.train_split: loaded})

    def read(split: str) -> Any:
        if split not in loaded:
            raise missing_split(cfg, split, list(loaded))
        return loaded[split]

    return hub_splits(cfg, read)
