"""Text leakage: DAGER, TAG and LAMP against a small GPT-2 fine-tuned by 4 clients, by batch size, LoRA, frozen
embeddings, aggregate.

Corpus: the ``python-docs`` source (``fedsim.data.python_docs``: English sentences of 4-12 words from the Python
standard library's docstrings, shipped with Python), the corpus of ``configs/text-demo.yaml``, with a word-level
tokenizer trained on the training split; the held-out split is the public split the floor draws from. Model:
``gpt2`` from a transformers config (2 blocks, ``--hidden`` 128, 2 heads), sequences of at most ``--max-length``
tokens.

A federation of 4 clients (IID split of the training sequences) trains with ``clients.training.train_locally``
(one SGD step of lr 0.1 on one batch per round), FedAvg of equal weights. Round 1 warms the model up; round 2 is
attacked: each client's update as a wire tap sees it, and the aggregate. The update, the federation and the
attacker are the library's own, outside the engine. DAGER attacks every target; TAG and LAMP, which optimise for
minutes where DAGER solves in seconds, the first ``--optimisation-clients`` clients of the
``--optimisation-settings`` with ``--iterations`` Adam steps and ``--restarts`` restarts (far below their papers'
budgets: a lower bound of what they recover). Each target is scored outside the attack
(``fedsim.judge.text_floor.text_row``: exact share, token accuracy, ROUGE, the floor and verdict of ``--draws``
public guesses per family).

    .venv/bin/python -m bench.text [--hidden 128] [--max-length 12] [--draws 99] [--iterations 200]
        [--restarts 2] [--optimisation-clients 1] [--out bench-text.jsonl]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

from adversary.attacks.dager import DagerOptions
from adversary.attacks.dager import attack as dager_attack
from adversary.attacks.lamp import LampOptions
from adversary.attacks.lamp import attack as lamp_attack
from adversary.attacks.tag import TagOptions
from adversary.attacks.tag import attack as tag_attack
from adversary.view import AttackerView
from clients.defenses.freeze_embeddings import FreezeEmbeddingsDefense
from clients.training import train_locally
from fedsim.config import ClientConfig
from fedsim.data import DataConfig, load_dataset
from fedsim.judge.text_floor import text_row
from fedsim.models import ModelConfig, build_run_model
from fedsim.reporting.text_table import text_leakage_table

CLIENTS = 4
LR = 0.1
#: setting -> (batch size, model keys, client defenses)
SETTINGS = {
    **{f"full, batch {b}": (b, {}, []) for b in (1, 2, 4, 8, 16)},
    "frozen embeddings, batch 8": (8, {}, [FreezeEmbeddingsDefense()]),
    "LoRA r=8, batch 8": (8, {"lora_rank": 8}, []),
    "LoRA r=128, batch 8": (8, {"lora_rank": 128}, []),
    "frozen embeddings, batch 1": (1, {}, [FreezeEmbeddingsDefense()]),
}
#: where TAG and LAMP also run (they optimise for minutes where DAGER solves in seconds)
OPTIMISATION_SETTINGS = [*(f"full, batch {b}" for b in (1, 2, 4, 8)), "frozen embeddings, batch 1"]


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


def optimisation_attacks(args) -> dict[str, tuple[object, object]]:
    """TAG and LAMP at the bench's budget (``--iterations`` Adam steps, ``--restarts`` batched restarts)."""
    budget = dict(iterations=args.iterations, restarts=args.restarts)
    return {
        "tag": (TagOptions(**budget), tag_attack),
        "lamp": (LampOptions(**budget, discrete_every=max(1, args.iterations // 4)), lamp_attack),
    }


def scored(name, target, attack_name, result, seconds, data, rows_ids, args, rng) -> dict:
    row = text_row(result.tokens.numpy(), data.x_train[rows_ids], data.x_test, data.pad_id, rng, args.draws)
    return {
        "setting": name,
        "target": target,
        "attack": attack_name,
        "sequences": len(rows_ids),
        "tokens": int((data.x_train[rows_ids] != data.pad_id).sum()),
        "seconds": seconds,
        **row,
    }


def run_setting(name, data, args, rng, optimisation_rng) -> list[dict]:
    """DAGER on every client and the aggregate; TAG and LAMP on the first ``--optimisation-clients`` clients of the
    ``--optimisation-settings`` (their floors drawn from their own generator: DAGER's rows do not depend on them)."""
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
    optimised = optimisation_attacks(args) if name in args.optimisation_settings else {}
    rows = []
    for index, (target, observed, rows_ids) in enumerate(targets):
        view = view_of(model, start, observed, target, len(rows_ids), data.x_train.shape[1])
        attacks = {"dager": (DagerOptions(), dager_attack)}
        if target != "aggregate" and index < args.optimisation_clients:
            attacks.update(optimised)
        for attack_name, (options, attack) in attacks.items():
            began = time.perf_counter()
            (result,) = attack([view], options, seed=0, device=torch.device("cpu"))
            seconds = time.perf_counter() - began
            floor_rng = rng if attack_name == "dager" else optimisation_rng
            rows.append(scored(name, target, attack_name, result, seconds, data, rows_ids, args, floor_rng))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=12)
    parser.add_argument("--draws", type=int, default=99)
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--iterations", type=int, default=200, help="TAG's and LAMP's Adam steps")
    parser.add_argument("--restarts", type=int, default=2, help="TAG's and LAMP's restarts")
    parser.add_argument("--optimisation-clients", type=int, default=1, help="clients attacked by TAG and LAMP")
    parser.add_argument(
        "--optimisation-settings", nargs="*", default=OPTIMISATION_SETTINGS, choices=list(SETTINGS), metavar="SETTING"
    )
    parser.add_argument("--out", type=Path, default=Path("bench-text.jsonl"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_dataset(DataConfig(dataset="python-docs", max_length=args.max_length, vocab_size=4000), seed=0)
    print(f"corpus: {len(data.x_train)} training / {len(data.x_test)} public sequences, vocabulary {data.vocab_size}")
    rng, optimisation_rng = np.random.default_rng(0), np.random.default_rng(1)
    console = Console(width=160)
    with args.out.open("w") as out:
        for name in args.settings:
            rows = run_setting(name, data, args, rng, optimisation_rng)
            for row in rows:
                out.write(json.dumps(row) + "\n")
            out.flush()
            console.print(text_leakage_table(rows, title=f"{name} (hidden {args.hidden})"))
            for attack_name in dict.fromkeys(row["attack"] for row in rows):
                own = [row for row in rows if row["attack"] == attack_name]
                print(f"{name}, {attack_name}: {np.mean([row['seconds'] for row in own]):.1f} s per target", flush=True)


if __name__ == "__main__":
    main()
