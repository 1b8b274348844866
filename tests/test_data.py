"""Data layer: loaders, load_dataset's split/limits/resize, client partitions and normalisation.

Everything here runs offline on CPU: bundled data sets (scikit-learn digits, scikit-image LFW subset) and
files the tests write themselves; network access is blocked where torchvision would try to download.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedsim.config import ConfigError, DataConfig, parse_config
from fedsim.data import (
    DATASETS,
    ChannelStats,
    DataError,
    ImageDataset,
    channel_stats,
    federation_stats,
    load_dataset,
    partition_indices,
)


def data_config(**fields: object) -> DataConfig:
    return DataConfig.model_validate(fields)


def assert_images(x: np.ndarray, shape_tail: tuple[int, ...]) -> None:
    assert x.dtype == np.float32
    assert x.shape[1:] == shape_tail
    assert 0.0 <= x.min() and x.max() <= 1.0


def assert_labels(y: np.ndarray, n: int, num_classes: int) -> None:
    assert y.dtype == np.int64 and y.shape == (n,)
    assert 0 <= y.min() and y.max() < num_classes


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


def test_held_out_split_depends_on_the_seed_only() -> None:
    cfg = data_config(dataset="digits")
    first, again, other = load_dataset(cfg, 1), load_dataset(cfg.model_copy(), 1), load_dataset(cfg, 2)
    assert again is first  # cached per process: every simulated client reuses the same arrays
    assert np.array_equal(first.y_test, load_dataset(data_config(dataset="digits", partition="pathological"), 1).y_test)
    assert not np.array_equal(first.x_test, other.x_test)


@pytest.mark.parametrize("dataset, size", [("digits", 32), ("lfw-faces", 16)])
def test_image_size_resizes_every_image_to_a_square_in_unit_range(dataset: str, size: int) -> None:
    data = load_dataset(data_config(dataset=dataset, image_size=size), seed=0)
    assert_images(data.x_train, (1, size, size))
    assert_images(data.x_test, (1, size, size))
    assert data.image_size == size


def test_max_samples_keep_the_first_n_of_each_split() -> None:
    full = load_dataset(data_config(dataset="digits"), seed=0)
    limited = load_dataset(data_config(dataset="digits", max_train_samples=50, max_test_samples=7), seed=0)
    assert len(limited.x_train) == 50 and len(limited.x_test) == 7
    assert np.array_equal(limited.x_train, full.x_train[:50])
    assert np.array_equal(limited.y_test, full.y_test[:7])


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
    with pytest.raises(DataError, match="data.test_fraction = 0.5: cannot split 1 samples"):
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
        ({"images": np.zeros((4, 5, 5), np.uint8)}, "expected arrays x, y \\(\\+ x_test, y_test\\) or x_train, .*; found images"),
        ({"x": np.zeros((4, 5, 5), np.uint8), "y": np.arange(4), "classes": np.array(["a"])}, "labels go up to 3"),
    ],
)
def test_npz_mistakes_are_one_line_data_errors(tmp_path: Path, arrays: dict[str, np.ndarray], message: str) -> None:
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match=f"data.path = '.*bad.npz': {message}") as error:
        load_dataset(data_config(dataset="npz", path=tmp_path / "bad.npz"), seed=0)
    assert "\n" not in str(error.value)


def test_npz_without_a_file_fails_validation_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="data.path = null: data set 'npz' reads its files from data.path"):
        parse_config({"data": {"dataset": "npz"}})
    with pytest.raises(ConfigError, match="no such file or folder"):
        parse_config({"data": {"dataset": "npz", "path": str(tmp_path / "missing.npz")}})


def test_npz_file_removed_after_validation_is_still_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "gone.npz"
    np.savez(path, x=np.zeros((4, 8, 8), np.uint8), y=np.arange(4))
    cfg = data_config(dataset="npz", path=path)
    path.unlink()
    with pytest.raises(DataError, match="no such .npz file"):
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
    with pytest.raises(DataError, match="data.image_size = None: .* images of different sizes"):
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


# ------------------------------------------------------------------------------------- partitions

PARTITIONS = {
    "iid": {"name": "iid"},
    "dirichlet": {"name": "dirichlet", "alpha": 0.3, "min_partition_size": 20},
    "pathological": {"name": "pathological", "classes_per_client": 2},
}


@pytest.fixture(scope="module")
def digit_labels() -> np.ndarray:
    return load_dataset(data_config(dataset="digits"), seed=0).y_train


def split(labels: np.ndarray, partition: str, num_clients: int = 10, seed: int = 0) -> list[np.ndarray]:
    return partition_indices(labels, data_config(dataset="digits", partition=PARTITIONS[partition]), num_clients, seed)


@pytest.mark.parametrize("partition", PARTITIONS)
def test_partitions_are_disjoint_sorted_and_cover_the_training_set(digit_labels: np.ndarray, partition: str) -> None:
    parts = split(digit_labels, partition)
    assert len(parts) == 10
    assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)
    everything = np.concatenate(parts)
    assert len(everything) == len(np.unique(everything)) == len(digit_labels)


@pytest.mark.parametrize("partition", PARTITIONS)
def test_partitions_are_reproducible_for_a_seed_and_change_with_it(digit_labels: np.ndarray, partition: str) -> None:
    first, again, other = split(digit_labels, partition, seed=3), split(digit_labels, partition, seed=3), split(
        digit_labels, partition, seed=4
    )
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_iid_clients_get_equal_shares_of_every_class(digit_labels: np.ndarray) -> None:
    sizes = [len(p) for p in split(digit_labels, "iid")]
    assert max(sizes) - min(sizes) <= 1


def test_dirichlet_skews_labels_but_keeps_min_partition_size(digit_labels: np.ndarray) -> None:
    parts = split(digit_labels, "dirichlet")
    assert min(len(p) for p in parts) >= 20
    shares = np.array([np.bincount(digit_labels[p], minlength=10) / len(p) for p in parts])
    assert shares.max() > 0.3  # with alpha = 0.3 some client is dominated by one class


def test_pathological_clients_hold_at_most_classes_per_client(digit_labels: np.ndarray) -> None:
    parts = split(digit_labels, "pathological")
    assert all(len(np.unique(digit_labels[p])) <= 2 for p in parts)


def test_pathological_classes_left_to_no_client_are_logged(
    digit_labels: np.ndarray, caplog: pytest.LogCaptureFixture
) -> None:
    parts = split(digit_labels, "pathological", num_clients=3)  # 3 clients x 2 classes cannot hold all 10
    assert len(np.concatenate(parts)) < len(digit_labels)
    assert "no client holds classes" in caplog.text


def test_more_clients_than_samples_is_a_data_error() -> None:
    with pytest.raises(DataError, match="federation.num_clients = 6: more clients than the 5 training samples"):
        partition_indices(np.arange(5) % 2, data_config(), num_clients=6, seed=0)


def test_more_classes_per_client_than_classes_is_a_data_error(digit_labels: np.ndarray) -> None:
    cfg = data_config(partition={"name": "pathological", "classes_per_client": 11})
    with pytest.raises(DataError, match="data.partition.classes_per_client = 11: the training set has only 10 classes"):
        partition_indices(digit_labels, cfg, num_clients=4, seed=0)


def test_unreachable_dirichlet_min_partition_size_is_a_data_error(digit_labels: np.ndarray) -> None:
    cfg = data_config(partition={"name": "dirichlet", "alpha": 0.05, "min_partition_size": 100})
    with pytest.raises(DataError, match=r"data.partition.alpha = 0.05: .* fewer than 100 samples"):
        partition_indices(digit_labels, cfg, num_clients=12, seed=0)


def test_pathological_split_finer_than_a_class_allows_is_a_data_error() -> None:
    labels = np.array([0] * 3 + [1] * 30)  # every client must hold both classes, but class 0 has 3 samples
    cfg = data_config(partition={"name": "pathological", "classes_per_client": 2})
    with pytest.raises(DataError, match="data.partition.classes_per_client = 2: with 10 clients"):
        partition_indices(labels, cfg, num_clients=10, seed=0)


# ---------------------------------------------------------------------------------- normalisation


def two_clients(rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray]]:
    x_train = rng.random((40, 3, 5, 5), dtype=np.float32) * np.array([1.0, 0.5, 0.1], np.float32)[:, None, None]
    x_train[:10] *= 0.5  # client 0's data is darker than the rest
    return x_train, [np.arange(10), np.arange(10, 40)]


@pytest.mark.parametrize("mode", ["global", "client", "none"])
def test_denormalize_exactly_undoes_normalize(mode: str) -> None:
    x_train, partitions = two_clients(np.random.default_rng(0))
    client_stats, _ = federation_stats(x_train, partitions, mode)
    x = torch.from_numpy(x_train[partitions[0]])
    stats = client_stats[0]
    assert torch.allclose(stats.denormalize(stats.normalize(x)), x, atol=1e-6)
    assert torch.allclose(stats.denormalize(stats.normalize(x[0])), x[0], atol=1e-6)  # one (C, H, W) image


def test_global_mode_shares_the_training_set_statistics() -> None:
    x_train, partitions = two_clients(np.random.default_rng(0))
    client_stats, server_stats = federation_stats(x_train, partitions, "global")
    assert client_stats[0] == client_stats[1] == server_stats
    assert np.allclose(server_stats.std, x_train.std(axis=(0, 2, 3)), atol=1e-6)
    normalized = server_stats.normalize(torch.from_numpy(x_train))
    assert torch.allclose(normalized.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)


def test_client_mode_measures_each_clients_own_data() -> None:
    x_train, partitions = two_clients(np.random.default_rng(0))
    client_stats, server_stats = federation_stats(x_train, partitions, "client")
    assert np.allclose(client_stats[0].mean, x_train[:10].mean(axis=(0, 2, 3)), atol=1e-6)
    assert client_stats[0] != client_stats[1]
    assert server_stats == channel_stats(x_train)  # the server holds no client data


def test_none_mode_is_the_identity() -> None:
    x_train, partitions = two_clients(np.random.default_rng(0))
    client_stats, server_stats = federation_stats(x_train, partitions, "none")
    assert server_stats == client_stats[1] == ChannelStats(mean=(0.0,) * 3, std=(1.0,) * 3)


def test_constant_channel_keeps_std_one_and_stats_round_trip_through_json_dicts() -> None:
    x = np.zeros((3, 2, 4, 4), dtype=np.float32)
    x[:, 1] = np.linspace(0, 1, 16, dtype=np.float32).reshape(4, 4)
    stats = channel_stats(x)
    assert stats.std[0] == 1.0 and stats.std[1] > 0
    assert ChannelStats.from_dict(stats.to_dict()) == stats


def test_image_dataset_rejects_arrays_other_code_could_not_rely_on() -> None:
    x, y = np.zeros((2, 1, 4, 4), np.float32), np.zeros(2, np.int64)
    with pytest.raises(TypeError, match="x_train must be float32"):
        ImageDataset(x.astype(np.float64), y, x, y, 1, ("a",))
    with pytest.raises(ValueError, match="class names"):
        ImageDataset(x, y, x, y, 2, ("a",))


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
    with pytest.raises(ConfigError, match="^unknown key 'data.path' for data set 'cifar10'; allowed here: .*, root, download$"):
        parse_config({"data": {"dataset": "cifar10", "path": str(tmp_path / "a.npz")}})
