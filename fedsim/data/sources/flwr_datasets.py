"""``flwr-datasets``: a Flower Datasets ``FederatedDataset`` read whole (fedsim partitions it like any source)."""

from __future__ import annotations

import re
from typing import Any

from fedsim.data.base import DataError, ImageDataset
from fedsim.data.registry import DATASETS
from fedsim.data.sources.huggingface import (
    HubDataConfig,
    hub_builder,
    hub_failure,
    hub_splits,
    missing_split,
    saved_to_disk,
)


@DATASETS.register(
    "flwr-datasets",
    help="a Flower Datasets FederatedDataset (Hub id or local parquet/arrow/image files), partitioned by fedsim",
    config=HubDataConfig,
)
def load_flwr_datasets(cfg: HubDataConfig) -> ImageDataset:
    from flwr_datasets import FederatedDataset

    if cfg.files is not None:
        files = cfg.files.expanduser()
        if saved_to_disk(files):
            raise DataError(
                f"data.files = '{cfg.files}': a folder saved with save_to_disk; FederatedDataset cannot read it, "
                f"use dataset: huggingface"
            )
        builder, arguments = hub_builder(files)
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
                raise missing_split(cfg, split, re.findall(r"'([^']*)'", listed.group(1))) from None
            raise hub_failure(cfg, error) from None
        except Exception as error:  # connection, file and format errors of datasets underneath
            raise hub_failure(cfg, error) from None

    return hub_splits(cfg, read)
