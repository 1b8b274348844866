"""The ``data:`` section: ``DataConfig``, what every data set takes, and the config models readers share
(a torchvision folder, the user's own file); each source's own model lives with its reader in
``fedsim.data.sources``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import Field, field_validator, model_validator

from fedsim.core.registry import Registry
from fedsim.core.sections import PluginSection
from fedsim.data.base import ImageDataset
from fedsim.data.partitions.base import PartitionScheme
from fedsim.data.partitions.iid import IidPartition
from fedsim.data.registry import DATASETS, PARTITIONS

#: the registered partition schemes (``fedsim.data.partitions``), told apart by ``name``; built from the registry
#: at run time, so a type checker sees what every scheme is: a PartitionScheme
if TYPE_CHECKING:
    from fedsim.data.text import TextDataset

    Partition = PartitionScheme
else:
    Partition = Annotated[Union[tuple(PARTITIONS.configs().values())], Field(discriminator="name")]  # noqa: UP007

#: a data set's reader: its config model in, the source at native size out (``fedsim.data.sources``)
Loader = Callable[[Any], "ImageDataset | TextDataset"]


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
