"""A new data source is one new file in fedsim/data/sources/: the package finds it and it registers."""

from fedsim.data import DATASETS, DataConfig, load_dataset
from tests.helpers.discovery import package_with_new_module

CHECKERBOARDS = '''
"""``checkerboards``: 8x8 gray checkerboards, two classes (the board and its inverse), made on the spot."""

import numpy as np

from fedsim.data.base import ImageDataset
from fedsim.data.config import DataConfig
from fedsim.data.registry import DATASETS
from fedsim.data.sources.arrays import without_test_split


@DATASETS.register("checkerboards", help="8x8 gray checkerboards and their inverses, 2 classes", config=DataConfig)
def load_checkerboards(cfg: DataConfig) -> ImageDataset:
    board = (np.indices((8, 8)).sum(axis=0) % 2).astype(np.float32)
    labels = np.arange(100) % 2
    images = np.where(labels[:, None, None, None] == 1, board, 1 - board)
    return without_test_split(images, labels, ["board", "inverse"])
'''


def test_a_new_file_in_the_sources_package_registers_its_data_set(tmp_path):
    assert "checkerboards" not in DATASETS
    with package_with_new_module(
        "fedsim.data.sources", "checkerboards", CHECKERBOARDS, tmp_path / "sources", DATASETS, "checkerboards"
    ):
        assert "checkerboards" in DATASETS
        dataset = load_dataset(DataConfig(dataset="checkerboards", test_fraction=0.2), seed=0)
        assert dataset.x_train.shape == (80, 1, 8, 8) and len(dataset.x_test) == 20
        assert dataset.class_names == ("board", "inverse")
    assert "checkerboards" not in DATASETS
