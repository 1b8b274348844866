"""The data sets (registered in ``DATASETS``, ``fedsim.data.registry``): one reader per source, each with
its config model.

A reader reads one source into an ImageDataset at its native size, and does no subsetting, no test split
and no resizing (except ``imagefolder`` when data.image_size is set, since its files may differ in size and
must match before they can be stacked): the pipeline in ``fedsim.data.load`` (``load_dataset``) does those
the same way for every source. Heavy libraries (torchvision, scikit-image, scikit-learn, PIL) are imported
inside the readers so that listing data sets and validating configs stays fast.
"""

from __future__ import annotations

import pickle
import re
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

import fedsim.core.wire as wire
from fedsim.core.registry import Registry
from fedsim.core.sections import PluginSection
from fedsim.data.base import DataError, ImageDataset
from fedsim.data.partition import IidPartition, Partition
from fedsim.data.registry import DATASETS

if TYPE_CHECKING:
    from PIL.Image import Image as PilImage
    from torchvision.datasets import ImageFolder

Loader = Callable[[Any], ImageDataset]


class DataConfig(PluginSection):
    """What every data set takes; ``DataConfig(dataset=..., **keys)`` builds the config model that data set registered.

    Data sets registered without a config model take these keys alone.
    """

    plugins: ClassVar[Registry[Any]] = DATASETS
    tag_key: ClassVar[str] = "dataset"

    dataset: str = Field("digits", description="data set name (see `fedsim list`)")
    image_size: int | None = Field(None, ge=4, le=1024, description="resize images to this side (null = native)")
    test_fraction: float = Field(
        0.2, gt=0, lt=1, description="held-out share for data sets that ship without a test split"
    )
    max_train_samples: int | None = Field(None, ge=1, description="use only the first N training samples")
    max_test_samples: int | None = Field(None, ge=1, description="evaluate on only the first N test samples")
    normalize: Literal["global", "client", "none"] = Field(
        "global",
        description="standardise inputs with channel mean/std of the whole training set, "
        "of each client's own data, or not",
    )
    # fedsim.config puts the union of every registered partition scheme here (entry-point ones included)
    partition: Partition = Field(default_factory=IidPartition, description="how samples are split across clients")

    @field_validator("partition", mode="before")
    @classmethod
    def _partition_shorthand(cls, value: Any) -> Any:
        # `partition: iid` is accepted as shorthand for `partition: {name: iid}`.
        return {"name": value} if isinstance(value, str) else value

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str) -> str:
        if value not in DATASETS:
            raise ValueError(DATASETS.unknown_message(value))
        return value


class TorchvisionDataConfig(DataConfig):
    """A data set read through torchvision, from a folder it may download into."""

    root: Path = Field(
        Path("~/.cache/fedsim/data"), description="where torchvision data sets are (or get downloaded to)"
    )
    download: bool = Field(True, description="let torchvision download the data set when it is missing")


class FileDataConfig(DataConfig):
    """A data set read from the user's own file or folder."""

    path: Path = Field(..., description="the file or folder the data set is read from")

    @model_validator(mode="before")
    @classmethod
    def _path_given(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("path") is None:
            raise ValueError(f"path = null: data set '{data.get('dataset')}' reads its files from data.path; set it")
        return data

    @model_validator(mode="after")
    def _path_exists(self) -> FileDataConfig:
        if not self.path.expanduser().exists():
            raise ValueError(f"path = '{self.path}': no such file or folder")
        return self


# What torchvision's own loaders raise when files are missing, truncated or cannot be fetched
# (RuntimeError "Dataset not found", URLError/OSError offline, broken archives or pickles).
_TORCHVISION_FAILURES = (RuntimeError, OSError, ValueError, EOFError, tarfile.TarError, pickle.UnpicklingError)


# ---------------------------------------------------------------------------------------- conversion

_LAYOUTS = "expected (N, H, W), (N, C, H, W) or (N, H, W, C) with C = 1 or 3"


def _float_images(x: np.ndarray, what: str, channels_last: bool | None = None) -> np.ndarray:
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


def _labels(y: Any, what: str, length: int) -> np.ndarray:
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


def _empty_like(x: np.ndarray) -> np.ndarray:
    return np.empty((0, *x.shape[1:]), dtype=x.dtype)


def _without_test_split(x: np.ndarray, y: np.ndarray, class_names: Sequence[str]) -> ImageDataset:
    """A source that ships no test split: load_dataset holds out data.test_fraction later, with the run's seed."""
    return ImageDataset(x, y, _empty_like(x), np.empty(0, np.int64), len(class_names), tuple(class_names))


def _numbered_classes(*label_arrays: np.ndarray) -> tuple[str, ...]:
    top = max((int(y.max()) for y in label_arrays if y.size), default=-1)
    return tuple(str(c) for c in range(top + 1))


# ------------------------------------------------------------------------------- bundled, no download


@DATASETS.register(
    "digits", help="scikit-learn's 8x8 handwritten digits: 1,797 gray images, 10 classes, bundled", config=DataConfig
)
def load_digits(cfg: DataConfig) -> ImageDataset:
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    # Pixels are counts of set bits in 4x4 blocks of the scanned 32x32 bitmap: 0..16.
    x = (bunch.images / 16.0).astype(np.float32)[:, None]
    return _without_test_split(x, bunch.target.astype(np.int64), [str(c) for c in bunch.target_names])


@DATASETS.register(
    "lfw-faces", help="scikit-image's LFW subset: 200 gray 25x25 crops, face vs non-face, bundled", config=DataConfig
)
def load_lfw_faces(cfg: DataConfig) -> ImageDataset:
    from skimage.data import lfw_subset

    images = lfw_subset()
    # scikit-image documents the order: the first half are faces, the second half are not.
    half = len(images) // 2
    labels = np.r_[np.ones(half, np.int64), np.zeros(len(images) - half, np.int64)]
    return _without_test_split(_float_images(images, "lfw_subset"), labels, ["non-face", "face"])


# ------------------------------------------------------------------------------------------ torchvision


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
    x_train = _float_images(np.asarray(train.data), class_name)
    x_test = _float_images(np.asarray(test.data), class_name)
    y_train = _labels(np.asarray(train.targets), f"{class_name} targets", len(x_train))
    y_test = _labels(np.asarray(test.targets), f"{class_name} targets", len(x_test))
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


# ------------------------------------------------------------------------------------------ your own


def _required_path(cfg: FileDataConfig, kind: str) -> Path:
    path = cfg.path.expanduser()
    exists = path.is_file() if kind.endswith("file") else path.is_dir()
    if not exists:
        raise DataError(f"data.path = '{cfg.path}': no such {kind}")
    return path


@DATASETS.register(
    "npz",
    help="your arrays in data.path (.npz): x, y (+ x_test, y_test) or x_train, y_train, x_test, y_test (+ classes)",
    config=FileDataConfig,
)
def load_npz(cfg: FileDataConfig) -> ImageDataset:
    path = _required_path(cfg, ".npz file")
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
    xs = [_float_images(found[f"x{s}"], f"{where}: x{s}") for s in suffixes]
    ys = [_labels(found[f"y{s}"], f"{where}: y{s}", len(x)) for s, x in zip(suffixes, xs)]
    class_names = _npz_class_names(found.get("classes"), ys, where)
    if len(xs) == 1:
        return _without_test_split(xs[0], ys[0], class_names)
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
        return _numbered_classes(*labels)
    names = tuple(str(name) for name in np.asarray(classes).reshape(-1).tolist())
    top = max((int(y.max()) for y in labels if y.size), default=-1)
    if top >= len(names):
        raise DataError(f"{where}: labels go up to {top} but classes lists only {len(names)} names; add the rest")
    return names


@DATASETS.register(
    "imagefolder",
    help="class subfolders of images at data.path (optionally inside train/ and test/)",
    config=FileDataConfig,
)
def load_imagefolder(cfg: FileDataConfig) -> ImageDataset:
    root = _required_path(cfg, "folder")
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
    xs = [_stack_images(group, mode, cfg.image_size, where) for group in images]
    if len(xs) == 2 and xs[0].shape[1:] != xs[1].shape[1:]:
        sizes = f"{xs[0].shape[2:]} train and {xs[1].shape[2:]} test images"
        raise DataError(f"data.image_size = None: {where} has {sizes}; set data.image_size")
    ys = [np.asarray(folder.targets, dtype=np.int64) for folder in folders]
    if len(xs) == 1:
        return _without_test_split(xs[0], ys[0], class_names)
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


def _stack_images(images: list[PilImage], mode: str, image_size: int | None, where: str) -> np.ndarray:
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
    return _float_images(stacked, where, channels_last=stacked.ndim == 4)


# ---------------------------------------------------------------------- Hugging Face / Flower Datasets


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


def _hub_builder(files: Path) -> tuple[str, dict[str, Any]]:
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


def _saved_to_disk(files: Path) -> bool:
    return files.is_dir() and any((files / name).is_file() for name in ("dataset_info.json", "dataset_dict.json"))


def _hub_failure(cfg: HubDataConfig, error: Exception) -> DataError:
    first_line = (str(error).splitlines() or [type(error).__name__])[0]
    if cfg.hub_id is not None:
        return DataError(
            f"data.hub_id = {cfg.hub_id!r}: could not be loaded from the Hugging Face Hub (offline, or no such data "
            f"set? {first_line}); set data.files to a local copy instead"
        )
    return DataError(f"data.files = '{cfg.files}': could not be read by datasets ({first_line})")


def _hub_splits(cfg: HubDataConfig, read: Callable[[str], Any]) -> ImageDataset:
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
        xs.append(_stack_images(images, mode, cfg.image_size, f"data split {split!r}"))
        ys.append(_labels(np.asarray(part[cfg.label_key]), f"data column {cfg.label_key!r}", len(xs[-1])))
    if isinstance(label_feature, ClassLabel):
        class_names = tuple(label_feature.names)
    else:
        class_names = _numbered_classes(*ys)
    if len(xs) == 1:
        return _without_test_split(xs[0], ys[0], class_names)
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


def _missing_split(cfg: HubDataConfig, split: str, available: Sequence[str]) -> DataError:
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
        if cfg.files is not None and _saved_to_disk(cfg.files.expanduser()):
            loaded = datasets.load_from_disk(str(cfg.files.expanduser()))
        elif cfg.files is not None:
            builder, arguments = _hub_builder(cfg.files.expanduser())
            loaded = datasets.load_dataset(builder, **arguments)
        else:
            loaded = datasets.load_dataset(cfg.hub_id, cfg.subset)
    except DataError:
        raise
    except Exception as error:  # datasets raises many types (connection, file, format errors): one line for each
        raise _hub_failure(cfg, error) from None
    if isinstance(loaded, datasets.Dataset):  # a single saved split
        loaded = datasets.DatasetDict({cfg.train_split: loaded})

    def read(split: str) -> Any:
        if split not in loaded:
            raise _missing_split(cfg, split, list(loaded))
        return loaded[split]

    return _hub_splits(cfg, read)


@DATASETS.register(
    "flwr-datasets",
    help="a Flower Datasets FederatedDataset (Hub id or local parquet/arrow/image files), partitioned by fedsim",
    config=HubDataConfig,
)
def load_flwr_datasets(cfg: HubDataConfig) -> ImageDataset:
    from flwr_datasets import FederatedDataset

    if cfg.files is not None:
        files = cfg.files.expanduser()
        if _saved_to_disk(files):
            raise DataError(
                f"data.files = '{cfg.files}': a folder saved with save_to_disk; FederatedDataset cannot read it, "
                f"use dataset: huggingface"
            )
        builder, arguments = _hub_builder(files)
        source: dict[str, Any] = {"dataset": builder, **arguments}
    else:
        source = {"dataset": cfg.hub_id, "subset": cfg.subset}
    # fedsim partitions (and shuffles, with the run's seed) the split itself; FederatedDataset needs a partitioner to
    # exist, so one partition is the whole split, kept in the file's order.
    federated = FederatedDataset(**source, partitioners={cfg.train_split: 1}, shuffle=False)

    def read(split: str) -> Any:
        try:
            return federated.load_split(split)
        except DataError:
            raise
        except ValueError as error:
            listed = re.search(r"splits: '\[(.*)\]'", str(error))
            if listed is not None:  # Flower Datasets names the splits there are in its message
                raise _missing_split(cfg, split, re.findall(r"'([^']*)'", listed.group(1))) from None
            raise _hub_failure(cfg, error) from None
        except Exception as error:  # connection, file and format errors of datasets underneath
            raise _hub_failure(cfg, error) from None

    return _hub_splits(cfg, read)


# ------------------------------------------------------------------------------- a Flower app's own data

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
        x_test, y_test = _empty_like(x_train), np.empty(0, np.int64)
    # a small partition may lack a class: the labels present only count where the data set names none
    classes = named_classes or _numbered_classes(y_train, y_test)
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

    images, labels = [], []
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
    return pixels.clamp_(0, 1).numpy().astype(np.float32), _labels(y, f"data.label_key {cfg.label_key!r}", len(x))


@DATASETS.register(
    "flower-app",
    help="a Flower app's own data function (data.function), read per partition: what `fedsim audit` scores against",
    config=AppDataConfig,
)
def load_flower_app(cfg: AppDataConfig) -> ImageDataset:
    return read_app_partitions(cfg)[0]
