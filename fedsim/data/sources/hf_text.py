"""``hf-text``: a Hugging Face hub text data set, read by ``datasets.load_dataset`` (downloads)."""

from __future__ import annotations

from fedsim.data.base import DataError
from fedsim.data.registry import DATASETS
from fedsim.data.text import HubTextConfig, TextDataset, column, label_field_of, to_dataset


@DATASETS.register(
    "hf-text",
    help="a Hugging Face hub text data set via `datasets` (downloads): data.hub_name, its text and label fields",
    config=HubTextConfig,
)
def load_hub_text(cfg: HubTextConfig) -> TextDataset:
    splits = [cfg.train_split] + ([cfg.test_split] if cfg.test_split else [])
    read = [hub_split(cfg, split) for split in splits]
    return to_dataset(cfg, read[0], read[1] if len(read) > 1 else ([], [] if read[0][1] is not None else None))


def hub_split(cfg: HubTextConfig, split: str) -> tuple[list[str], list | None]:
    """One split of the hub data set, with one line when it cannot be read (offline, unknown name or split)."""
    import datasets

    try:
        table = datasets.load_dataset(cfg.hub_name, cfg.hub_config, split=split, cache_dir=cfg.cache_dir)
    except Exception as error:  # `datasets` raises ConnectionError, FileNotFoundError, ValueError, its own types
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DataError(
            f"data.hub_name = '{cfg.hub_name}' (split {split!r}): cannot be read ({first}); "
            "check the name and the network, or save it as a .jsonl file and use dataset: text-files"
        ) from None
    return column(list(table), cfg.text_field, label_field_of(cfg), f"hub data set '{cfg.hub_name}'")
