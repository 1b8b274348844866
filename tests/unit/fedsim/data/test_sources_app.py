"""`dataset: flower-app`: a Flower app's own data function read per partition, its images mapped back to [0, 1]."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from data_configs import data_config

from fedsim.data import DataError
from fedsim.data.sources.flower_app import read_app_partitions

MODULE = """
import torch
SIZES = [3, 5]
def load_data(partition_id, num_partitions, batch_size, offset=0.0):
    n = SIZES[partition_id]
    generator = torch.Generator().manual_seed(partition_id)
    pixels = torch.rand(n, 3, 4, 4, generator=generator)
    images = (pixels - 0.5) / 0.25 + offset
    labels = torch.arange(n) + 10 * partition_id
    train = [{"img": images[i : i + batch_size], "label": labels[i : i + batch_size]} for i in range(0, n, batch_size)]
    test = [{"img": images[:1], "label": labels[:1]}]
    return train, test
"""


@pytest.fixture()
def app(tmp_path):
    (tmp_path / "appdata.py").write_text(MODULE)
    return tmp_path


def config(app, **fields):
    arguments = {"partition_id": "node:partition-id", "num_partitions": "node:num-partitions", "batch_size": 2}
    return data_config(
        dataset="flower-app",
        app=str(app),
        function="appdata:load_data",
        arguments={**arguments, **fields.pop("arguments", {})},
        **{"num_partitions": 2, "test_output": 1, "mean": [0.5] * 3, "std": [0.25] * 3, **fields},
    )


def test_each_partition_is_read_through_the_apps_function_and_unnormalised(app):
    dataset, partitions = read_app_partitions(config(app))
    assert [p.tolist() for p in partitions] == [[0, 1, 2], [3, 4, 5, 6, 7]]
    assert dataset.y_train.tolist() == [0, 1, 2, 10, 11, 12, 13, 14]
    expected = torch.rand(3, 3, 4, 4, generator=torch.Generator().manual_seed(0)).numpy()
    np.testing.assert_allclose(dataset.x_train[:3], expected, atol=1e-6)  # the pixels before the app normalised
    assert len(dataset.y_test) == 2  # one held-out image per partition


def test_a_wrong_normalisation_is_refused_rather_than_scoring_against_wrong_images(app):
    with pytest.raises(DataError, match=r"^data.mean/std = .*: un-normalised images span .*not \[0, 1\]"):
        read_app_partitions(config(app, arguments={"offset": 3.0}))


def test_a_missing_batch_key_or_output_names_the_field(app):
    with pytest.raises(DataError, match=r"^data.image_key = 'image': not in the loader's batches \(they hold \['img'"):
        read_app_partitions(config(app, image_key="image"))
    with pytest.raises(DataError, match=r"^data.test_output = 2: the data function returns 2 output\(s\); use 0..1"):
        read_app_partitions(config(app, test_output=2))


def test_arguments_the_function_refuses_are_one_line(app):
    with pytest.raises(DataError, match=r"^data.arguments = .*appdata:load_data refused them"):
        read_app_partitions(config(app, arguments={"colour": 1}))


HUB_MODULE = """
import datasets, torch
from torch.utils.data import DataLoader
def load_data(partition_id, num_partitions, batch_size):
    labels = list(range(9))  # a small partition: class 9 never appears
    features = datasets.Features({"img": datasets.Array3D((3, 4, 4), "float32"),
                                  "label": datasets.ClassLabel(names=[f"c{c}" for c in range(10)])})
    table = datasets.Dataset.from_dict({"img": [[[[0.5] * 4] * 4] * 3] * 9, "label": labels}, features=features)
    return DataLoader(table.with_format("torch"), batch_size=batch_size), None
"""


def test_the_classes_are_the_data_sets_own_names_even_where_a_partition_lacks_one(tmp_path):
    (tmp_path / "hubdata.py").write_text(HUB_MODULE)
    arguments = {"partition_id": "node:partition-id", "num_partitions": "node:num-partitions", "batch_size": 4}
    hub_app = data_config(
        dataset="flower-app",
        app=str(tmp_path),
        function="hubdata:load_data",
        arguments=arguments,
        num_partitions=1,
        mean=[0.0] * 3,
        std=[1.0] * 3,
    )
    dataset, _ = read_app_partitions(hub_app)
    assert dataset.y_train.max() == 8
    assert dataset.num_classes == 10 and dataset.class_names == tuple(f"c{c}" for c in range(10))
