"""Data sources: the registered data sets, npz files, image folders and torchvision files, and the one-line
errors of each."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import numpy as np
import pytest
from data_configs import assert_images, data_config
from PIL import Image
from tiny_configs import tiny_config

from fedsim.config import ConfigError, parse_config
from fedsim.data import DATASETS, DataError, load_dataset


def assert_labels(y: np.ndarray, n: int, num_classes: int) -> None:
    assert y.dtype == np.int64 and y.shape == (n,)
    assert y.min() >= 0 and y.max() < num_classes


@pytest.fixture()
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every name lookup fails, as on a machine without network."""

    def no_network(*args: object, **kwargs: object) -> None:
        raise socket.gaierror(socket.EAI_NONAME, "offline (blocked by test)")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)


# ----------------------------------------------------------------------------------- registry


def test_every_documented_data_set_is_registered_with_help() -> None:
    expected = {"digits", "lfw-faces", "mnist", "fashion-mnist", "cifar10", "cifar100", "npz", "imagefolder"}
    assert expected <= set(DATASETS.names())
    assert all(DATASETS.describe()[name] for name in expected)


def test_unknown_data_set_is_a_config_error_with_a_suggestion() -> None:
    with pytest.raises(ValueError, match="did you mean 'mnist'"):
        data_config(dataset="mnits")


# ---------------------------------------------------------------------------- bundled data sets


def test_digits_load_as_8x8_gray_images_with_a_stratified_held_out_test_set() -> None:
    data = load_dataset(data_config(dataset="digits", test_fraction=0.2), seed=0)
    assert len(data.y_train) + len(data.y_test) == 1797
    assert len(data.y_test) == 360
    assert_images(data.x_train, (1, 8, 8))
    assert_images(data.x_test, (1, 8, 8))
    assert_labels(data.y_train, len(data.x_train), 10)
    assert data.num_classes == 10 and data.class_names == tuple("0123456789")
    assert (data.channels, data.image_size) == (1, 8)
    assert data.x_train.max() == 1.0  # 16/16: full ink reaches the top of the range
    assert np.bincount(data.y_test, minlength=10).min() >= 35  # stratified: every class ~36 times


def test_lfw_faces_are_200_gray_25x25_crops_half_faces() -> None:
    data = load_dataset(data_config(dataset="lfw-faces"), seed=0)
    assert_images(data.x_train, (1, 25, 25))
    assert len(data.y_train) + len(data.y_test) == 200
    assert data.class_names == ("non-face", "face")
    assert np.bincount(np.r_[data.y_train, data.y_test]).tolist() == [100, 100]
    assert np.bincount(data.y_test).tolist() == [20, 20]


# ------------------------------------------------------------------------------------------- npz


def gray_digits(n: int = 40, size: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, size, size), dtype=np.uint8), np.arange(n, dtype=np.int64) % 4


# layout name -> (how the test stores its gray uint8 images that way, channels load_dataset must report)
NPZ_LAYOUTS = {
    "gray (N,H,W) uint8": (lambda x: x, 1),
    "channels-first (N,1,H,W) float32": (lambda x: (x[:, None] / 255.0).astype(np.float32), 1),
    "channels-last (N,H,W,3) uint8": (lambda x: np.repeat(x[..., None], 3, axis=-1), 3),
    "channels-first (N,3,H,W) float64": (lambda x: np.repeat(x[:, None] / 255.0, 3, axis=1), 3),
}


@pytest.mark.parametrize("layout", NPZ_LAYOUTS)
def test_npz_with_x_y_accepts_every_layout_and_holds_out_a_test_split(tmp_path: Path, layout: str) -> None:
    x, y = gray_digits()
    store, channels = NPZ_LAYOUTS[layout]
    np.savez(tmp_path / "d.npz", x=store(x), y=y)
    data = load_dataset(data_config(dataset="npz", path=tmp_path / "d.npz", test_fraction=0.25), seed=0)
    assert_images(data.x_train, (channels, 6, 6))
    assert (len(data.x_train), len(data.x_test)) == (30, 10)
    assert data.num_classes == 4 and data.class_names == ("0", "1", "2", "3")
    # every stored image comes back (in some train/test order), only scaled to [0, 1] and moved to (C, H, W)
    restored = np.rint(np.concatenate([data.x_train, data.x_test])[:, 0] * 255).astype(np.uint8)
    assert sorted(map(bytes, restored)) == sorted(map(bytes, x))


def test_npz_with_its_own_test_split_and_class_names(tmp_path: Path) -> None:
    x, y = gray_digits()
    classes = np.array(["cat", "dog", "owl", "yak", "emu"])
    np.savez(tmp_path / "d.npz", x_train=x[:30], y_train=y[:30], x_test=x[30:], y_test=y[30:], classes=classes)
    data = load_dataset(data_config(dataset="npz", path=tmp_path / "d.npz"), seed=0)
    assert (len(data.x_train), len(data.x_test)) == (30, 10)
    assert np.array_equal(data.x_test[:, 0], x[30:] / np.float32(255))
    assert np.array_equal(data.y_train, y[:30])
    assert data.class_names == ("cat", "dog", "owl", "yak", "emu") and data.num_classes == 5


def test_tiny_npz_too_small_to_stratify_still_gets_a_test_split(tmp_path: Path) -> None:
    x, _ = gray_digits(n=6)
    np.savez(tmp_path / "tiny.npz", x=x, y=np.array([0, 0, 0, 0, 0, 1]))  # class 1 cannot be on both sides
    data = load_dataset(data_config(dataset="npz", path=tmp_path / "tiny.npz", test_fraction=0.5), seed=0)
    assert (len(data.x_train), len(data.x_test)) == (3, 3)
    np.savez(tmp_path / "one.npz", x=x[:1], y=np.array([0]))
    with pytest.raises(DataError, match=r"data.test_fraction = 0.5: cannot split 1 samples"):
        load_dataset(data_config(dataset="npz", path=tmp_path / "one.npz", test_fraction=0.5), seed=0)


def test_npz_non_square_images_need_image_size(tmp_path: Path) -> None:
    x = np.zeros((20, 6, 10), dtype=np.uint8)
    np.savez(tmp_path / "wide.npz", x=x, y=np.arange(20) % 2)
    cfg = data_config(dataset="npz", path=tmp_path / "wide.npz")
    with pytest.raises(DataError, match=r"data.image_size = None: 'npz' images are 6x10, not square"):
        load_dataset(cfg, seed=0)
    assert load_dataset(cfg.model_copy(update={"image_size": 8}), seed=0).x_train.shape[1:] == (1, 8, 8)


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"x": np.full((4, 5, 5), 2.0), "y": np.arange(4)}, r"x holds floats in \[2, 2\]; scale them to \[0, 1\]"),
        ({"x": np.zeros((4, 5, 5), np.int32), "y": np.arange(4)}, "x has dtype int32; store uint8"),
        ({"x": np.zeros((4, 5, 5, 7), np.uint8), "y": np.arange(4)}, r"x has shape \(4, 5, 5, 7\)"),
        ({"x": np.zeros((4, 5, 5), np.uint8), "y": np.arange(3)}, "y has 3 labels for 4 images"),
        ({"x": np.zeros((4, 5, 5), np.uint8), "y": np.arange(4.0)}, "y must be a 1-D array of integer class ids"),
        (
            {"images": np.zeros((4, 5, 5), np.uint8)},
            "expected arrays x, y \\(\\+ x_test, y_test\\) or x_train, .*; found images",
        ),
        ({"x": np.zeros((4, 5, 5), np.uint8), "y": np.arange(4), "classes": np.array(["a"])}, "labels go up to 3"),
    ],
)
def test_npz_mistakes_are_one_line_data_errors(tmp_path: Path, arrays: dict[str, np.ndarray], message: str) -> None:
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match=f"data.path = '.*bad.npz': {message}") as error:
        load_dataset(data_config(dataset="npz", path=tmp_path / "bad.npz"), seed=0)
    assert "\n" not in str(error.value)


def test_npz_without_a_file_fails_validation_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"data.path = null: data set 'npz' reads its files from data.path"):
        parse_config({"data": {"dataset": "npz"}})
    with pytest.raises(ConfigError, match="no such file or folder"):
        parse_config({"data": {"dataset": "npz", "path": str(tmp_path / "missing.npz")}})


def test_npz_file_removed_after_validation_is_still_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "gone.npz"
    np.savez(path, x=np.zeros((4, 8, 8), np.uint8), y=np.arange(4))
    cfg = data_config(dataset="npz", path=path)
    path.unlink()
    with pytest.raises(DataError, match=r"no such .npz file"):
        load_dataset(cfg, seed=0)


# ----------------------------------------------------------------------------------- imagefolder


def write_images(folder: Path, classes: dict[str, int], mode: str, size: tuple[int, int], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for name, count in classes.items():
        (folder / name).mkdir(parents=True)
        for i in range(count):
            shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
            Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(folder / name / f"{i}.png")


def test_imagefolder_with_train_and_test_folders_loads_rgb(tmp_path: Path) -> None:
    write_images(tmp_path / "train", {"ant": 5, "bee": 4}, "RGB", (12, 12))
    write_images(tmp_path / "test", {"ant": 2, "bee": 3}, "RGB", (12, 12), seed=1)
    data = load_dataset(data_config(dataset="imagefolder", path=tmp_path), seed=0)
    assert_images(data.x_train, (3, 12, 12))
    assert (len(data.x_train), len(data.x_test)) == (9, 5)
    assert data.class_names == ("ant", "bee")
    assert data.y_test.tolist() == [0, 0, 1, 1, 1]
    first = np.asarray(Image.open(tmp_path / "train" / "ant" / "0.png"), dtype=np.float32) / 255
    assert np.array_equal(data.x_train[0], first.transpose(2, 0, 1))


def test_imagefolder_of_gray_images_stays_one_channel_and_is_split(tmp_path: Path) -> None:
    write_images(tmp_path, {"a": 10, "b": 10}, "L", (9, 9))
    data = load_dataset(data_config(dataset="imagefolder", path=tmp_path, test_fraction=0.2), seed=0)
    assert_images(data.x_train, (1, 9, 9))
    assert (len(data.x_train), len(data.x_test)) == (16, 4)
    assert np.bincount(data.y_test).tolist() == [2, 2]


def test_imagefolder_of_mixed_sizes_needs_image_size(tmp_path: Path) -> None:
    write_images(tmp_path, {"a": 3}, "RGB", (10, 10))
    write_images(tmp_path, {"b": 3}, "L", (14, 8))
    cfg = data_config(dataset="imagefolder", path=tmp_path)
    with pytest.raises(DataError, match=r"data.image_size = None: .* images of different sizes"):
        load_dataset(cfg, seed=0)
    data = load_dataset(cfg.model_copy(update={"image_size": 6}), seed=0)
    assert_images(data.x_train, (3, 6, 6))  # one gray class among RGB ones: all become RGB


# ----------------------------------------------------------------------------------- torchvision


def write_idx(path: Path, array: np.ndarray) -> None:
    """The IDX format MNIST ships in: magic (0, 0, uint8 type 0x08, ndim), big-endian sizes, raw bytes."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_mnist_files_in_root_load_through_torchvision(tmp_path: Path) -> None:
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("t10k", 5)):
        write_idx(raw / f"{split}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        write_idx(raw / f"{split}-labels-idx1-ubyte", np.arange(n) % 10)
    data = load_dataset(data_config(dataset="mnist", root=tmp_path, download=False), seed=0)
    assert_images(data.x_train, (1, 28, 28))
    assert (len(data.x_train), len(data.x_test)) == (12, 5)
    assert data.y_test.tolist() == [0, 1, 2, 3, 4]
    assert data.num_classes == 10 and data.class_names[0] == "0 - zero"


@pytest.mark.parametrize("download", [False, True])
@pytest.mark.parametrize(
    "dataset, expected_files", [("cifar10", "cifar-10-batches-py folder"), ("mnist", "MNIST/raw folder")]
)
def test_missing_torchvision_data_offline_is_one_line_saying_where_to_put_files(
    tmp_path: Path, offline: None, dataset: str, expected_files: str, download: bool
) -> None:
    root = tmp_path / "nothing-here"
    with pytest.raises(DataError) as error:
        load_dataset(data_config(dataset=dataset, root=root, download=download), seed=0)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"data.dataset = '{dataset}': not found under {root}")
    assert ("could not be downloaded (offline?)" if download else "data.download is false") in message
    assert f"put torchvision's {expected_files}" in message and "set data.root" in message


def test_each_data_set_takes_the_keys_it_uses(tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", x=np.zeros((4, 8, 8), np.uint8), y=np.arange(4))
    assert type(data_config(dataset="npz", path=tmp_path / "a.npz")).__name__ == "FileDataConfig"
    assert data_config(dataset="cifar10", root=tmp_path, download=False).root == tmp_path
    with pytest.raises(ConfigError) as error:
        parse_config({"data": {"dataset": "npz", "path": str(tmp_path / "a.npz"), "download": False}})
    assert str(error.value) == (
        "unknown key 'data.download' for data set 'npz'; allowed here: dataset, image_size, test_fraction, "
        "max_train_samples, max_test_samples, normalize, partition, path"
    )
    with pytest.raises(
        ConfigError, match=r"^unknown key 'data.path' for data set 'cifar10'; allowed here: .*, root, download$"
    ):
        parse_config({"data": {"dataset": "cifar10", "path": str(tmp_path / "a.npz")}})


# ------------------------------------------------------------ files that cannot be a data set


def npz(tmp_path, **arrays):
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return tiny_config(data={"dataset": "npz", "path": str(path)}).data


def images(count):
    return np.zeros((count, 8, 8), np.float32)


def test_a_huge_label_id_is_refused_before_anything_is_sized_by_it(tmp_path):
    labels = np.array([0, 1] * 9 + [2**40, 1])
    with pytest.raises(DataError, match=r"y holds class id 1099511627776; ids must be 0..num_classes-1"):
        load_dataset(npz(tmp_path, x=images(20), y=labels), seed=0)


def test_an_empty_test_split_is_refused_not_silently_replaced(tmp_path):
    empty = npz(tmp_path, x_train=images(20), y_train=np.arange(20) % 2, x_test=images(0), y_test=np.zeros(0, int))
    with pytest.raises(DataError, match=r"x_test is empty"):
        load_dataset(empty, seed=0)


def test_a_single_image_takes_a_separate_test_split_or_says_what_the_split_needs(tmp_path):
    with pytest.raises(DataError, match=r"cannot split 1 samples .* \(it needs at least 5\)"):
        load_dataset(npz(tmp_path, x=images(1), y=np.array([0])), seed=0)
    data = load_dataset(
        npz(tmp_path, x=images(1), y=np.array([0]), x_test=images(3), y_test=np.array([0, 1, 0])), seed=0
    )
    assert len(data.x_train) == 1 and len(data.x_test) == 3


@pytest.mark.parametrize("bad, word", [(np.nan, "NaN"), (np.inf, "infinite")])
def test_npz_nan_or_infinite_pixels_are_named_with_their_first_index(tmp_path: Path, bad: float, word: str) -> None:
    x = np.full((4, 5, 5), 0.5)
    x[2, 3, 1] = bad
    np.savez(tmp_path / "bad.npz", x=x, y=np.arange(4))
    with pytest.raises(
        DataError, match=rf"data.path = '.*bad.npz': x holds {word} values \(first at \[2, 3, 1\]\)"
    ) as error:
        load_dataset(data_config(dataset="npz", path=tmp_path / "bad.npz"), seed=0)
    assert "\n" not in str(error.value) and "scale them" not in str(error.value)


def test_a_truncated_npz_is_one_line_naming_the_file(tmp_path: Path) -> None:
    whole = tmp_path / "whole.npz"
    np.savez(whole, x=np.zeros((64, 8, 8), np.uint8), y=np.arange(64) % 2)
    path = tmp_path / "cut.npz"
    data = whole.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"data.path = '.*cut.npz': .*truncated or damaged") as error:
        load_dataset(data_config(dataset="npz", path=path), seed=0)
    assert "\n" not in str(error.value)
