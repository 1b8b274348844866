"""The FedAvg aggregate of clients with unequal partitions, attacked as FedAvg really forms it.

Two clients hold partitions of 10 and 2 samples and each takes one SGD step on one image (paper 003's
set-up: untrained sigmoid LeNet with DLG's uniform init, CIFAR-10 at 32x32x3, lr 0.1). FedAvg weighs
their updates 10/12 and 2/12. The man-in-the-middle forms the aggregate from what it saw, and DLG inverts
it twice from the same start: with the aggregate modelled as FedAvg forms it (each client's image
weighted by its share; ``adversary.threat_models``) and with the former model, one uniform mean over all
samples. Reconstructions are scored outside the attack (``fedsim.judge.scoring``: Hungarian pairing, PSNR of
[0, 1] images), as the median PSNR over every image of every pair and the fractions at or above 30 and 40 dB,
with 95 % bootstrap intervals (``fedsim.reporting.summaries``: images resampled within each pair).

DLG's settings are those of the aggregate attack in ``configs/dlg-per-client-vs-aggregated.yaml`` (2,000
L-BFGS iterations, init scale 0.05, TV weight 0.03), chosen on CIFAR-10 test images 0-2 (``bench.attacks``);
the pairs reported here are training images from index 1,000 on, which nobody tuned on.

    .venv/bin/python -m bench.aggregate [--pairs 5] [--iterations 2000] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import time

import numpy as np
import torch

from adversary.inversion import run_attack
from adversary.taps import TappedUpdate
from adversary.threat_models import Architecture, TrainingHyperparameters, build_views
from bench.common import CIFAR, add_data_dir, data_file
from clients.training import train_locally
from fedsim.config import AdversaryConfig, AttackOptions, ClientConfig, ModelConfig
from fedsim.judge.scoring import PSNR_CAP_DB, score_reconstruction
from fedsim.models import build_model
from fedsim.reporting import summaries

CPU = torch.device("cpu")
LR = 0.1
PARTITIONS = (10, 2)
FIRST_REPORTED = 1000  # training images from here on; the attack's settings were chosen on test images 0-2


def aggregate_view(model, images, labels):
    """Each client trains one step on its image; the mitm forms the FedAvg aggregate of what it saw."""
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    updates = []
    for client, partition in enumerate(PARTITIONS):
        trained = copy.deepcopy(model)
        cfg = ClientConfig(lr=LR, batch_size=1, local_steps=1)
        train_locally(trained, images[client : client + 1], labels[client : client + 1], np.arange(1), cfg, seed=client)
        observed = {k: v.detach().clone() for k, v in trained.state_dict().items()}
        updates.append(TappedUpdate(1, "mitm", f"client:{client}", global_state, observed, partition, 1, (client,)))
    architecture = Architecture(model, (3, 32, 32), 10, (torch.zeros(3), torch.ones(3)))
    training = TrainingHyperparameters(lr=LR, batch_size=1, local_steps=1, local_epochs=None)
    (view,) = build_views(updates, AdversaryConfig(attacks=[], targets="aggregate"), architecture, training, None)
    return view


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_dir(parser)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    data = np.load(data_file(args.data_dir, CIFAR))
    options = AttackOptions(
        name="dlg",
        iterations=args.iterations,
        restarts=1,
        init_scale=0.05,
        regularizers=[{"name": "tv", "weight": 0.03}],
    )
    psnr: dict[str, list[list[float]]] = {"shares": [], "uniform": []}  # per pair, per image (dB; inf: exact)
    started = time.perf_counter()
    for pair in range(args.pairs):
        index = FIRST_REPORTED + 2 * pair + np.arange(2)
        images = torch.from_numpy(data["x_train"][index]).float() / 255
        labels = torch.from_numpy(data["y_train"][index].astype(np.int64))
        model = build_model(ModelConfig(name="lenet", init="uniform"), 3, 10, 32, seed=pair)
        view = aggregate_view(model, images, labels)
        for name, modelled in (("shares", view), ("uniform", dataclasses.replace(view, groups=()))):
            (reconstruction,) = run_attack(options, [modelled], seed=pair, device=CPU)
            score = score_reconstruction(reconstruction, images, labels, lambda x: x)
            psnr[name].append(list(score.psnr))
            shown = ", ".join(f"{value:.2f}" for value in score.psnr)
            print(f"pair {pair} (train images {index.tolist()}): {name:8s} {shown} dB", flush=True)
    print(
        f"\nPartitions {PARTITIONS}, one image step each, DLG {args.iterations} iterations, {args.pairs} pairs, "
        f"{time.perf_counter() - started:.0f} s"
    )
    for name, title in (("shares", "with the clients' shares"), ("uniform", "as one uniform mean     ")):
        summary = summaries.summarize_psnr(psnr[name])
        print(
            f"aggregate modelled {title}: PSNR median {summary.median.text(2)} dB, "
            f"at >= 30 dB {summary.at_least[30.0].text(2)}, at >= 40 dB {summary.at_least[40.0].text(2)}"
        )
    finite = {name: [[min(v, PSNR_CAP_DB) for v in pair] for pair in pairs] for name, pairs in psnr.items()}
    print(json.dumps({"pairs": args.pairs, "shares_psnr": finite["shares"], "uniform_psnr": finite["uniform"]}))


if __name__ == "__main__":
    main()
