"""Text leakage: DAGER against a small GPT-2 fine-tuned by 4 clients, by batch size, LoRA, frozen embeddings, aggregate.

Corpus: English sentences of the Python standard library's docstrings (4-12 words each, shipped with Python),
one a line, read by the ``text-files`` source with a word-level tokenizer trained on the training split; the
held-out split is the public split the floor draws from. Model: ``gpt2`` from a transformers config (2 blocks,
``--hidden`` 128, 2 heads), sequences of at most ``--max-length`` tokens.

A federation of 4 clients (IID split of the training sequences) trains with ``clients.training.train_locally``
(one SGD step of lr 0.1 on one batch per round), FedAvg of equal weights. Round 1 warms the model up; round 2 is
attacked: each client's update as a wire tap sees it, and the aggregate. The update, the federation and the
attacker are the library's own; it is not a ``fedsim run`` (the engine does not federate text yet, see
docs/results/text.md). Each target is scored outside the attack (``fedsim.judge.text_floor.text_row``: exact share,
token accuracy, ROUGE, the floor and verdict of ``--draws`` public guesses per family).

    .venv/bin/python -m bench.text [--hidden 128] [--max-length 12] [--draws 99] [--out bench-text.jsonl]
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

from adversary.attacks.dager import DagerOptions, attack
from adversary.view import AttackerView
from clients.defenses.freeze_embeddings import FreezeEmbeddingsDefense
from clients.training import train_locally
from fedsim.config import ClientConfig
from fedsim.data import DataConfig, load_dataset
from fedsim.judge.text_floor import text_row
from fedsim.models import ModelConfig, build_run_model
from fedsim.reporting.text_table import text_leakage_table

MODULES = [
    "argparse",
    "asyncio",
    "bisect",
    "calendar",
    "collections",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email",
    "enum",
    "fractions",
    "functools",
    "gettext",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "http",
    "inspect",
    "itertools",
    "json",
    "locale",
    "logging",
    "mmap",
    "numbers",
    "operator",
    "pathlib",
    "pickle",
    "pprint",
    "random",
    "secrets",
    "selectors",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "ssl",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "textwrap",
    "threading",
    "typing",
    "unittest",
    "urllib",
    "weakref",
    "zipfile",
]
CLIENTS = 4
LR = 0.1
#: setting -> (batch size, model keys, client defenses)
SETTINGS = {
    **{f"full, batch {b}": (b, {}, []) for b in (1, 2, 4, 8, 16)},
    "frozen embeddings, batch 8": (8, {}, [FreezeEmbeddingsDefense()]),
    "LoRA r=8, batch 8": (8, {"lora_rank": 8}, []),
    "LoRA r=128, batch 8": (8, {"lora_rank": 128}, []),
}


def stdlib_sentences() -> list[str]:
    """Sentences of 4-12 plain words from the docstrings of standard-library modules and their members."""
    found: set[str] = set()
    for name in MODULES:
        module = importlib.import_module(name)
        docs = [module.__doc__ or ""] + [getattr(getattr(module, a), "__doc__", "") or "" for a in dir(module)]
        for doc in docs:
            if not isinstance(doc, str):
                continue
            for sentence in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())):
                words = sentence.rstrip(".!?").split()
                if 4 <= len(words) <= 12 and all(re.fullmatch(r"[A-Za-z][a-z]*,?", w) for w in words):
                    found.add(" ".join(words).lower().replace(",", ""))
    return sorted(found)


def client_update(model, data, rows, defenses) -> dict[str, torch.Tensor]:
    """The weights a client sends after one SGD step on ``rows`` from ``model``'s weights."""
    local = copy.deepcopy(model)
    x, y = torch.from_numpy(data.x_train[rows]), torch.from_numpy(data.y_train[rows])
    settings = ClientConfig(lr=LR, batch_size=len(rows), local_steps=1, defenses=defenses)
    train_locally(local, x, y, np.arange(len(rows)), settings, seed=0)
    return {name: value.detach().clone() for name, value in local.state_dict().items()}


def federated_round(model, data, batches, defenses) -> tuple[dict, list[dict], dict]:
    """(global weights before, each client's weights sent, the FedAvg aggregate); ``model`` takes the aggregate."""
    start = {name: value.clone() for name, value in model.state_dict().items()}
    sent = [client_update(model, data, rows, defenses) for rows in batches]
    aggregate = {
        name: torch.stack([weights[name].double() for weights in sent]).mean(0).to(start[name].dtype) for name in start
    }
    model.load_state_dict(aggregate)
    return start, sent, aggregate


def view_of(model, start, observed, target: str, count: int, length: int) -> AttackerView:
    return AttackerView(
        round=2,
        tap="mitm",
        target=target,
        model=model,
        global_state=start,
        observed_state=observed,
        input_shape=(1, 1, length),
        num_classes=0,
        num_samples=count,
    )


def run_setting(name, data, args, rng) -> list[dict]:
    batch, model_keys, defenses = SETTINGS[name]
    config = ModelConfig(name="gpt2", hidden=args.hidden, pad_id=data.pad_id, **model_keys)
    model = build_run_model(config, data, seed=0, with_weights=True, dp_compatible=False)
    order = rng.permutation(len(data.x_train))
    shards = np.array_split(order, CLIENTS)
    federated_round(model, data, [shard[:batch] for shard in shards], defenses)  # round 1: warm-up
    batches = [shard[batch : 2 * batch] for shard in shards]
    start, sent, aggregate = federated_round(model, data, batches, defenses)
    targets = [(f"client:{i}", sent[i], batches[i]) for i in range(CLIENTS)]
    targets.append(("aggregate", aggregate, np.concatenate(batches)))
    rows = []
    for target, observed, rows_ids in targets:
        view = view_of(model, start, observed, target, len(rows_ids), data.x_train.shape[1])
        began = time.perf_counter()
        (result,) = attack([view], DagerOptions(), seed=0, device=torch.device("cpu"))
        seconds = time.perf_counter() - began
        row = text_row(result.tokens.numpy(), data.x_train[rows_ids], data.x_test, data.pad_id, rng, args.draws)
        rows.append(
            {
                "setting": name,
                "target": target,
                "attack": "dager",
                "sequences": len(rows_ids),
                "tokens": int((data.x_train[rows_ids] != data.pad_id).sum()),
                "seconds": seconds,
                **row,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=12)
    parser.add_argument("--draws", type=int, default=99)
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--out", type=Path, default=Path("bench-text.jsonl"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "stdlib.txt"
        corpus.write_text("\n".join(stdlib_sentences()) + "\n")
        data = load_dataset(
            DataConfig(dataset="text-files", path=corpus, max_length=args.max_length, vocab_size=4000), seed=0
        )
    print(f"corpus: {len(data.x_train)} training / {len(data.x_test)} public sequences, vocabulary {data.vocab_size}")
    rng = np.random.default_rng(0)
    console = Console(width=160)
    with args.out.open("w") as out:
        for name in args.settings:
            rows = run_setting(name, data, args, rng)
            for row in rows:
                out.write(json.dumps(row) + "\n")
            console.print(text_leakage_table(rows, title=f"{name} (hidden {args.hidden})"))
            mean_tokens = np.mean([row["tokens"] for row in rows if row["target"] != "aggregate"])
            print(
                f"{name}: {mean_tokens:.0f} tokens per client batch, "
                f"{np.mean([row['seconds'] for row in rows]):.1f} s per target",
                flush=True,
            )


if __name__ == "__main__":
    main()
