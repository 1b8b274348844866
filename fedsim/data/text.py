"""Text data sets: token ids with next-token targets or class labels, read from local files or the Hugging Face hub.

Two sources (in ``fedsim.data.sources``): ``text-files`` reads one file of the user's (``.txt``: one sequence a
line; ``.csv`` / ``.jsonl``: a text column and, for classification, a label column) and ``hf-text`` reads a hub
data set through ``datasets.load_dataset``. Both tokenize through ``fedsim.data.tokenizer`` into a
``TextDataset``, which then goes through the same pipeline as images (held-out test split, first-N limits).

Tasks: ``next-token`` (causal language modelling: targets are the inputs shifted by one, ending in the
end-of-sequence token, -100 at padding, which ``nn.CrossEntropyLoss`` ignores) and ``classification`` (one
label per sequence). Heavy libraries (``tokenizers``, ``datasets``) are imported inside the readers.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from fedsim.data.base import DataError
from fedsim.data.config import DataConfig, FileDataConfig
from fedsim.data.tokenizer import TextTokenizer, load_tokenizer

#: what ``nn.CrossEntropyLoss`` skips: the targets at padding
IGNORED_TARGET = -100

TextTask = Literal["next-token", "classification"]


# eq=False as for ImageDataset: two data sets are the same only when they are the same object.
@dataclass(frozen=True, eq=False)
class TextDataset:
    """Token ids (N, L) int64, right-padded with ``pad_id``; targets (N, L) next tokens or (N,) class ids.

    A model builder reads ``channels`` as the vocabulary size and ``image_size`` as the sequence length (the
    ``DataShape`` every model is built from); ``num_classes`` is the vocabulary for ``next-token``.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    class_names: tuple[str, ...]
    task: TextTask
    tokenizer: TextTokenizer

    def __post_init__(self) -> None:
        for name in ("x_train", "x_test"):
            x = getattr(self, name)
            if x.dtype != np.int64 or x.ndim != 2:
                raise TypeError(f"TextDataset.{name} must be int64 (N, L), got {x.dtype} {x.shape}")
        target_dims = 2 if self.task == "next-token" else 1
        for name in ("y_train", "y_test"):
            y = getattr(self, name)
            if y.dtype != np.int64 or y.ndim != target_dims:
                raise TypeError(f"TextDataset.{name} must be int64 with {target_dims} dims for {self.task}")
        if len(self.x_train) != len(self.y_train) or len(self.x_test) != len(self.y_test):
            raise ValueError("TextDataset: sequences and targets differ in length")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id

    @property
    def channels(self) -> int:
        """The vocabulary size: what a text model's builder reads as its input width."""
        return self.vocab_size

    @property
    def image_size(self) -> int:
        """The padded sequence length: what a text model's builder reads as its input length."""
        return int(self.x_train.shape[1])

    def decode(self, ids: np.ndarray) -> list[str]:
        """The texts of (N, L) token ids, padding dropped."""
        return [self.tokenizer.decode([int(t) for t in row if t != self.pad_id]) for row in np.asarray(ids)]


class TextConfig(DataConfig):
    """What every text source takes: the task, the tokenizer and the sequence length."""

    normalize: Literal["none"] = Field("none", description="token ids are not normalised")
    task: TextTask = Field("next-token", description="next-token prediction, or one class label per sequence")
    text_field: str = Field("text", description="the column (CSV) or key (JSONL, hub) holding the text")
    label_field: str = Field("label", description="the column or key holding the class label (classification)")
    tokenizer: str = Field(
        "train",
        description="`train` = a word-level tokenizer trained on the training texts; else a tokenizer.json file, "
        "a folder holding one, or a Hugging Face hub name",
    )
    vocab_size: int = Field(512, ge=8, le=1_000_000, description="vocabulary of a trained tokenizer")
    max_length: int = Field(16, ge=2, le=4096, description="tokens per sequence (longer texts are cut)")


class TextFileConfig(TextConfig, FileDataConfig):
    """Text from one local file: ``.txt`` (one sequence a line), ``.csv`` or ``.jsonl``."""


class HubTextConfig(TextConfig):
    """A Hugging Face hub data set, read by ``datasets.load_dataset``."""

    hub_name: str = Field(..., description="the hub data set (`owner/name` or a canonical name)")
    hub_config: str | None = Field(None, description="its configuration (subset), if it has several")
    train_split: str = Field("train", description="the split clients train on")
    test_split: str | None = Field("test", description="the held-out split (null = hold out data.test_fraction)")
    cache_dir: Path | None = Field(None, description="where `datasets` caches downloads (null = its default)")


def read_rows(path: Path, text_field: str, label_field: str | None) -> tuple[list[str], list[Any] | None]:
    """Texts (and labels when ``label_field`` is given) of a ``.txt``, ``.csv`` or ``.jsonl`` file."""
    path = path.expanduser()
    suffix = path.suffix.lower()
    if suffix == ".txt":
        if label_field is not None:
            raise DataError(f"data.path = '{path}': a .txt file holds no labels; use .csv or .jsonl for classification")
        return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()], None
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    elif suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        raise DataError(f"data.path = '{path}': suffix {suffix!r} is not one of .txt, .csv, .jsonl")
    return column(rows, text_field, label_field, str(path))


def column(rows: list[dict], text_field: str, label_field: str | None, where: str) -> tuple[list[str], list | None]:
    """The text (and label) column of ``rows``, with a one-line error naming a missing field."""
    for field_name, key in (("text_field", text_field), ("label_field", label_field)):
        if key is not None and rows and key not in rows[0]:
            raise DataError(f"data.{field_name} = '{key}': {where} has no such field; it has {sorted(rows[0])}")
    texts = [str(row[text_field]).strip() for row in rows]
    labels = [row[label_field] for row in rows] if label_field is not None else None
    keep = [i for i, text in enumerate(texts) if text]
    return [texts[i] for i in keep], ([labels[i] for i in keep] if labels is not None else None)


def encode(
    texts: list[str], tokenizer: TextTokenizer, max_length: int, task: TextTask
) -> tuple[np.ndarray, np.ndarray | None]:
    """(N, max_length) right-padded ids; for ``next-token`` also the shifted targets ending in end-of-sequence."""
    ids = np.full((len(texts), max_length), tokenizer.pad_id, dtype=np.int64)
    targets = np.full((len(texts), max_length), IGNORED_TARGET, dtype=np.int64) if task == "next-token" else None
    for row, text in enumerate(texts):
        tokens = tokenizer.encode(text)[:max_length]
        ids[row, : len(tokens)] = tokens
        if targets is not None:
            shifted = [*tokens[1:], tokenizer.eos_id]
            targets[row, : len(shifted)] = shifted
    return ids, targets


def to_dataset(
    cfg: TextConfig, train: tuple[list[str], list | None], test: tuple[list[str], list | None]
) -> TextDataset:
    """Tokenize the train and test texts (a trained tokenizer learns from the training texts alone)."""
    if not train[0]:
        raise DataError(f"data.dataset = '{cfg.dataset}': the training split holds no text")
    tokenizer = load_tokenizer(cfg.tokenizer, train[0], cfg.vocab_size)
    x_train, y_train = encode(train[0], tokenizer, cfg.max_length, cfg.task)
    x_test, y_test = encode(test[0], tokenizer, cfg.max_length, cfg.task)
    if cfg.task == "next-token":
        assert y_train is not None and y_test is not None  # encode returns targets for next-token
        return TextDataset(x_train, y_train, x_test, y_test, tokenizer.vocab_size, (), cfg.task, tokenizer)
    assert train[1] is not None  # a classification source returns its labels
    names = tuple(sorted({str(label) for label in train[1] + (test[1] or [])}))
    index = {name: i for i, name in enumerate(names)}

    def ids(labels: list | None) -> np.ndarray:
        return np.array([index[str(label)] for label in labels or []], dtype=np.int64)

    return TextDataset(x_train, ids(train[1]), x_test, ids(test[1]), len(names), names, cfg.task, tokenizer)


def label_field_of(cfg: TextConfig) -> str | None:
    """The label column a source reads: only a classification task has one."""
    return cfg.label_field if cfg.task == "classification" else None
