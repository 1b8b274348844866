"""Text leakage: DAGER, TAG and LAMP against a small GPT-2 fine-tuned by 4 clients, by batch size, LoRA, frozen
embeddings, DP-SGD at epsilon 8, on the FedAvg aggregate and on the SecAgg+ aggregate.

Corpus: the ``python-docs`` source (``fedsim.data.python_docs``: English sentences of 4-12 words from the Python
standard library's docstrings, shipped with Python), the corpus of ``configs/text-demo.yaml``, with a word-level
tokenizer trained on the training split; the held-out split is the public split the floor draws from. Model:
``gpt2`` from a transformers config (2 blocks, ``--hidden`` 128, 2 heads), sequences of at most ``--max-length``
tokens.

A federation of 4 clients (IID split of the training sequences) trains with ``clients.training.train_locally``
(one SGD step of lr 0.1 on one batch per round), FedAvg of equal weights. Round 1 warms the model up; round 2 is
attacked: each client's update as a wire tap sees it, and the aggregate. Under DP-SGD each client holds its whole
shard and takes one step on a Poisson batch of expected size ``batch`` (Opacus; the noise set for epsilon 8 at
delta 1e-5 over the 2 rounds, each client's epsilon as its accountant reports it). Under SecAgg+ the aggregate is
what Flower's SecAgg+ hands the server: every client's weights scaled by its weight factor, quantised with Flower's
own stochastic quantiser (clipping range 8, 2^22 levels), summed and dequantised as ``SecAggPlusWorkflow`` does;
only the aggregate is a target there. Where noise of a known size is in an update (SecAgg+'s quantisation, from
the protocol's public parameters and the clear sample counts; DP-SGD's Gaussian noise, lr x noise multiplier x C /
expected batch size per step, from the defense's public options, over sqrt(4) on the aggregate) DAGER runs twice: as
is, and told that noise (``update_noise``: the adaptive attack). The update, the federation and
the attacker are the library's own, outside the engine. DAGER attacks every target; TAG and LAMP, which optimise
for minutes where DAGER solves in seconds, client 0 of the ``OPTIMISATION_SETTINGS`` and the aggregate of the
``AGGREGATE_OPTIMISATION_SETTINGS`` with ``--iterations`` Adam steps and ``--restarts`` restarts (far below their
papers' budgets: a lower bound of what they recover). Each target is scored outside the attack
(``fedsim.judge.text_floor.text_row``: exact share, token accuracy, ROUGE, the floor and verdict of ``--draws``
public guesses per family).

Each row is appended to ``--out`` as it finishes; a rerun skips the rows already there (every setting, target and
attack draws from its own seeded generators, so a resumed bench writes what an uninterrupted one would).

    .venv/bin/python -m bench.text [--hidden 128] [--max-length 12] [--draws 99] [--iterations 200]
        [--restarts 2] [--out bench-text.jsonl] [--fresh]
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from flwr.common.secure_aggregation.quantization import dequantize, quantize
from rich.console import Console

from adversary.attacks.dager import DagerOptions
from adversary.attacks.dager import attack as dager_attack
from adversary.attacks.lamp import LampOptions
from adversary.attacks.lamp import attack as lamp_attack
from adversary.attacks.tag import TagOptions
from adversary.attacks.tag import attack as tag_attack
from adversary.view import AttackerView
from clients.defenses.base import TrainingContext
from clients.defenses.dpsgd import DpsgdDefense
from clients.defenses.freeze_embeddings import FreezeEmbeddingsDefense
from clients.training import train_locally
from fedsim.config import ClientConfig
from fedsim.data import DataConfig, load_dataset
from fedsim.judge.text_floor import text_row
from fedsim.models import ModelConfig, build_run_model
from fedsim.reporting.text_table import text_leakage_table

CLIENTS = 4
LR = 0.1
ROUNDS = 2  # round 1 warms up, round 2 is attacked
SECAGG_CLIPPING, SECAGG_LEVELS = 8.0, 2**22  # Flower's SecAgg+ defaults (strategy.secagg's)


@dataclass(frozen=True)
class Setting:
    batch: int
    model_keys: dict = field(default_factory=dict)
    defenses: tuple = ()
    dp: bool = False  # clients hold their shard and DP-SGD draws Poisson batches of expected size ``batch``
    secagg: bool = False  # only the SecAgg+ aggregate is a target


SETTINGS = {
    **{f"full, batch {b}": Setting(b) for b in (1, 2, 4, 8, 16)},
    "frozen embeddings, batch 8": Setting(8, defenses=(FreezeEmbeddingsDefense(),)),
    "frozen embeddings, batch 1": Setting(1, defenses=(FreezeEmbeddingsDefense(),)),
    "LoRA r=8, batch 8": Setting(8, {"lora_rank": 8}),
    "LoRA r=128, batch 8": Setting(8, {"lora_rank": 128}),
    "LoRA r=128, batch 1": Setting(1, {"lora_rank": 128}),
    "DP-SGD eps 8, batch 8": Setting(8, defenses=(DpsgdDefense(target_epsilon=8.0),), dp=True),
    "DP-SGD eps 8, batch 1": Setting(1, defenses=(DpsgdDefense(target_epsilon=8.0),), dp=True),
    **{f"SecAgg+, batch {b}": Setting(b, secagg=True) for b in (1, 2, 4)},
}
#: where TAG and LAMP also run on client 0 (they optimise for minutes where DAGER solves in seconds)
OPTIMISATION_SETTINGS = [
    *(f"full, batch {b}" for b in (1, 2, 4, 8, 16)),
    "frozen embeddings, batch 1",
    "LoRA r=128, batch 1",
    "DP-SGD eps 8, batch 1",
]
#: where TAG and LAMP also run on the aggregate (4 clients' sequences at once)
AGGREGATE_OPTIMISATION_SETTINGS = ["full, batch 1", "full, batch 2", "SecAgg+, batch 1"]


def seeded(*key: object) -> np.random.Generator:
    """A generator of its own for every (setting, target, attack): rows do not depend on which ran before."""
    return np.random.default_rng(zlib.crc32(json.dumps(key).encode()))


def client_update(model, data, rows, setting: Setting, batch: int, context) -> tuple[dict, np.ndarray, dict]:
    """The weights a client sends after one SGD step from ``model``'s weights, the rows it trained on and its
    defense's records."""
    local = copy.deepcopy(model)
    x, y = torch.from_numpy(data.x_train[rows]), torch.from_numpy(data.y_train[rows])
    settings = ClientConfig(lr=LR, batch_size=batch, local_steps=1, defenses=list(setting.defenses))
    result = train_locally(local, x, y, np.arange(len(rows)), settings, seed=0, context=context)
    used = np.asarray(rows)[np.unique(np.concatenate([np.asarray(b, dtype=np.int64) for b in result.batches]))]
    weights = {name: value.detach().clone() for name, value in local.state_dict().items()}
    return weights, used, result.defense_records


def fedavg(sent: list[dict]) -> dict:
    return {name: torch.stack([w[name].double() for w in sent]).mean(0).to(sent[0][name].dtype) for name in sent[0]}


def secagg_aggregate(sent: list[dict], counts: list[int]) -> tuple[dict, float]:
    """What SecAgg+ hands the server (Flower's quantiser and unmasking arithmetic), and the per-entry standard
    deviation of its quantisation noise that the public parameters and the clear counts imply."""
    names, largest = list(sent[0]), max(counts)
    total, summed = 0, None
    for weights, count in zip(sent, counts, strict=True):
        factor = round(count / largest * SECAGG_LEVELS)  # the client's weight factor, quantised as Flower does
        total += factor
        arrays = quantize(
            [weights[n].numpy() * (factor / SECAGG_LEVELS) for n in names], SECAGG_CLIPPING, SECAGG_LEVELS
        )
        summed = [a.astype(np.int64) for a in arrays] if summed is None else [s + a for s, a in zip(summed, arrays)]
    assert summed is not None
    offset = (len(sent) - 1) * SECAGG_CLIPPING
    values = dequantize(summed, SECAGG_CLIPPING, SECAGG_LEVELS)
    aggregate = {
        n: torch.as_tensor((v - offset) * (SECAGG_LEVELS / total), dtype=sent[0][n].dtype)
        for n, v in zip(names, values)
    }
    step = 2 * SECAGG_CLIPPING / SECAGG_LEVELS  # stochastic rounding: variance step^2 / 6 on average per client
    return aggregate, step * np.sqrt(len(sent) / 6) / (total / SECAGG_LEVELS)


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


@dataclass
class Round:
    start: dict
    targets: list  # (target, observed weights, rows trained on)
    noise: dict = field(default_factory=dict)  # target -> the known noise per entry of its update
    epsilons: list = field(default_factory=list)


def federation(name: str, data, args) -> tuple[object, Round]:
    """The model after round 1 and what round 2 puts on the wire (``Round``)."""
    setting = SETTINGS[name]
    config = ModelConfig(name="gpt2", hidden=args.hidden, pad_id=data.pad_id, **setting.model_keys)
    model = build_run_model(config, data, seed=0, with_weights=True, dp_compatible=False)
    shards = np.array_split(seeded(name, "split").permutation(len(data.x_train)), CLIENTS)
    with tempfile.TemporaryDirectory() as ledgers:
        for server_round in range(1, ROUNDS + 1):
            start = {key: value.clone() for key, value in model.state_dict().items()}
            sent, used, epsilons, multipliers = [], [], [], []
            for client, shard in enumerate(shards):
                rows = shard if setting.dp else shard[(server_round - 1) * setting.batch : server_round * setting.batch]
                context = TrainingContext(server_round, ROUNDS, Path(ledgers) / str(client))
                weights, trained, records = client_update(model, data, rows, setting, setting.batch, context)
                sent.append(weights)
                used.append(trained)
                epsilons.append(records.get("defense.dpsgd.epsilon"))
                multipliers.append(records.get("defense.dpsgd.noise_multiplier"))
            if setting.secagg:
                aggregate, quantisation = secagg_aggregate(sent, [len(shard) for shard in shards])
                noise = {"aggregate": quantisation}
            else:
                aggregate, noise = fedavg(sent), dp_noise(setting, multipliers)
            model.load_state_dict(aggregate)
    targets = [] if setting.secagg else [(f"client:{i}", sent[i], used[i]) for i in range(CLIENTS)]
    targets.append(("aggregate", aggregate, np.concatenate(used)))
    return model, Round(start, targets, noise, epsilons)


def dp_noise(setting: Setting, multipliers: list) -> dict:
    """DP-SGD's noise per entry of one step's update (lr x sigma x C / expected batch size; in the FedAvg of the
    clients' independent noise, the root of their mean square over sqrt(4)), from the defense's public options
    (sigma: each client's, set by its target epsilon and sampling rate); empty without DP-SGD."""
    if not setting.dp:
        return {}
    (defense,) = setting.defenses
    clients = [LR * sigma * defense.max_grad_norm / setting.batch for sigma in multipliers]
    aggregate = float(np.sqrt(np.mean(np.square(clients))) / np.sqrt(CLIENTS))
    return {**{f"client:{i}": noise for i, noise in enumerate(clients)}, "aggregate": aggregate}


def attacks_for(name: str, target: str, round_: Round, args) -> dict:
    """The attacks run on ``target`` in setting ``name``: name -> (options, attack function)."""
    found = {"dager": (DagerOptions(), dager_attack)}
    if target in round_.noise:
        told = DagerOptions(update_noise=round_.noise[target], max_prefixes=args.max_prefixes)
        found["dager (noise known)"] = (told, dager_attack)
    budget = dict(iterations=args.iterations, restarts=args.restarts)
    optimised = {
        "tag": (TagOptions(**budget), tag_attack),
        "lamp": (LampOptions(**budget, discrete_every=max(1, args.iterations // 4)), lamp_attack),
    }
    if (target == "client:0" and name in OPTIMISATION_SETTINGS) or (
        target == "aggregate" and name in AGGREGATE_OPTIMISATION_SETTINGS
    ):
        found.update(optimised)
    return found


def run_setting(name: str, data, args, done: set, out) -> list[dict]:
    """Every row of setting ``name`` not in ``done``, each appended to ``out`` as it finishes."""
    model, round_ = federation(name, data, args)
    rows = []
    for target, observed, trained in round_.targets:
        view = view_of(model, round_.start, observed, target, len(trained), data.x_train.shape[1])
        for attack_name, (options, attack) in attacks_for(name, target, round_, args).items():
            if (name, target, attack_name) in done:
                continue
            began = time.perf_counter()
            (result,) = attack([view], options, seed=0, device=torch.device("cpu"))
            seconds = time.perf_counter() - began
            truth = data.x_train[trained]
            rng = seeded(name, target, attack_name, "floor")
            row = {
                "setting": name,
                "target": target,
                "attack": attack_name,
                "sequences": len(trained),
                "tokens": int((truth != data.pad_id).sum()),
                "seconds": seconds,
                "epsilon": max(e for e in round_.epsilons) if round_.epsilons[0] is not None else None,
                "update_noise": round_.noise.get(target),
                **text_row(result.tokens.numpy(), truth, data.x_test, data.pad_id, rng, args.draws),
            }
            out.write(json.dumps(row) + "\n")
            out.flush()
            rows.append(row)
            print(f"{name}, {target}, {attack_name}: {seconds:.1f} s", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=12)
    parser.add_argument("--draws", type=int, default=99)
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--iterations", type=int, default=200, help="TAG's and LAMP's Adam steps")
    parser.add_argument("--restarts", type=int, default=2, help="TAG's and LAMP's restarts")
    parser.add_argument("--max-prefixes", type=int, default=256, help="DAGER's prefixes per position under noise")
    parser.add_argument("--out", type=Path, default=Path("bench-text.jsonl"))
    parser.add_argument("--fresh", action="store_true", help="start over instead of skipping the rows in --out")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_dataset(DataConfig(dataset="python-docs", max_length=args.max_length, vocab_size=4000), seed=0)
    print(f"corpus: {len(data.x_train)} training / {len(data.x_test)} public sequences, vocabulary {data.vocab_size}")
    if args.fresh:
        args.out.unlink(missing_ok=True)
    previous = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.exists() else []
    done = {(row["setting"], row["target"], row["attack"]) for row in previous}
    console = Console(width=160)
    with args.out.open("a") as out:
        for name in args.settings:
            rows = [row for row in previous if row["setting"] == name] + run_setting(name, data, args, done, out)
            console.print(text_leakage_table(rows, title=f"{name} (hidden {args.hidden})"))


if __name__ == "__main__":
    main()
