"""``text-files``: the user's own text, one ``.txt`` (one sequence a line), ``.csv`` or ``.jsonl`` file."""

from __future__ import annotations

from fedsim.data.registry import DATASETS
from fedsim.data.text import TextDataset, TextFileConfig, label_field_of, read_rows, to_dataset


@DATASETS.register(
    "text-files",
    help="your own text: a .txt file (one sequence a line), or .csv / .jsonl with text and label columns",
    config=TextFileConfig,
)
def load_text_files(cfg: TextFileConfig) -> TextDataset:
    rows = read_rows(cfg.path, cfg.text_field, label_field_of(cfg))
    return to_dataset(cfg, rows, ([], [] if rows[1] is not None else None))
