"""A small text corpus written by the test, its tokenized data set and a tiny GPT-2-style model (never a download)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "bird",
    "fish",
    "sat",
    "ran",
    "flew",
    "swam",
    "on",
    "under",
    "over",
    "near",
    "mat",
    "park",
    "tree",
    "river",
    "with",
    "red",
    "blue",
    "green",
    "small",
    "big",
    "old",
    "young",
    "ball",
    "hat",
    "house",
    "hill",
    "and",
    "then",
    "slowly",
    "quickly",
    "home",
    "today",
]


def sentences(count: int, seed: int = 0, shortest: int = 3, longest: int = 7) -> list[str]:
    """``count`` random word sequences from a fixed vocabulary (distinct words drawn per sentence)."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(shortest, longest + 1)))) for _ in range(count)]


def write_corpus(folder: Path, count: int = 120, seed: int = 0) -> Path:
    """One sentence a line, as a user's .txt file."""
    path = folder / "corpus.txt"
    path.write_text("\n".join(sentences(count, seed)) + "\n", encoding="utf-8")
    return path


def write_labelled(folder: Path, count: int = 60, seed: int = 0) -> Path:
    """A .jsonl of sentences labelled by whether they mention an animal that flies or swims."""
    rows = [{"text": text, "label": "wet" if "fish" in text else "dry"} for text in sentences(count, seed)]
    path = folder / "labelled.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    return path


def text_data(folder: Path, max_length: int = 8, **keys):
    """The corpus as a next-token ``TextDataset`` (tokenizer trained on it)."""
    from fedsim.data import DataConfig, load_dataset

    return load_dataset(
        DataConfig(dataset="text-files", path=write_corpus(folder), max_length=max_length, **keys), seed=0
    )


def tiny_gpt2(data, seed: int = 0, **keys):
    """A 2-block GPT-2 of hidden size 64 for ``data``."""
    from fedsim.models import ModelConfig, build_run_model

    config = ModelConfig(name="gpt2", pad_id=data.pad_id, **keys)
    return build_run_model(config, data, seed=seed, with_weights=True, dp_compatible=False)


def one_step_view(data, model, rows, lr: float = 0.1, defenses=()):
    """What a wire tap sees of a client that took one SGD step on the sequences ``rows`` of ``data``'s training set."""
    import torch

    from adversary.view import AttackerView
    from clients.training import train_locally
    from fedsim.config import ClientConfig

    start = {name: value.clone() for name, value in model.state_dict().items()}
    x, y = torch.from_numpy(data.x_train[rows]), torch.from_numpy(data.y_train[rows])
    settings = ClientConfig(lr=lr, batch_size=len(rows), local_steps=1, defenses=list(defenses))
    train_locally(model, x, y, np.arange(len(rows)), settings, seed=0)
    return AttackerView(
        round=1,
        tap="mitm",
        target="client:0",
        model=model,
        global_state=start,
        observed_state={name: value.clone() for name, value in model.state_dict().items()},
        input_shape=(1, 1, data.x_train.shape[1]),
        num_classes=data.num_classes,
        num_samples=len(rows),
    )


def hub_offline(monkeypatch) -> None:
    """The Hugging Face libraries offline, as on a machine without a network: the environment variables, and the
    constants they were read into when huggingface_hub / datasets were first imported (else a lookup waits on
    network timeouts)."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
