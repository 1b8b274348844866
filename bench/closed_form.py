"""The closed-form attacks: ``fc-invert`` and ``cpa`` against an honest server's aggregate, and their cost beside
``rtf``.

Set-up: paper 002's MLP-3 (``model.name: mlp3``, first layer 3072 -> 512 units, ReLU, PyTorch's default
init, seed 0) on CIFAR-10 training images from index 1,000 on (a fresh draw per repetition; the attacks'
defaults were chosen on CIFAR-10 *test* images, never on these), one image per client, one SGD step
(lr 0.1), aggregated as an honest server receives it: FedAvg's weighted mean, or SecAgg+'s sum of
stochastically quantised weights with Flower's defaults (clipping range 8, 2^22 levels), exactly as
``bench.malicious`` computes it. The attacker knows the number of images and the input bounds [0, 1].

Parts: ``scale`` (aggregates of 4 to 64 images: fraction of the images recovered at 30 dB or better, median
PSNR and mean SSIM over all images of seeds 0-2 with 95 % bootstrap intervals, images resampled within seeds
(``fedsim.reporting.summaries``); label accuracy over the seeds; attack seconds), ``timing`` (seconds
per round of ``rtf`` on 64 clients x 1 image behind the imprint block of ``bench.malicious``, and of
``fc-invert`` on 64 clients x 1 image of MLP-3). Last line: JSON.

    .venv/bin/python -m bench.closed_form [--data-dir DIR] [--repeats 3] [--part scale|timing|all] [--docs]

``--docs`` writes the ``scale`` table into ``docs/results/aggregation.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from adversary.inversion.options import AttackOptions
from adversary.registry import ATTACKS
from adversary.view import AttackerView, LocalTraining
from bench.common import (
    CIFAR,
    DOCS_PAGES,
    add_data_dir,
    add_docs_flag,
    data_file,
    format_interval,
    interval,
    write_between_markers,
)
from bench.malicious import LR, SECAGG_DEFAULT, aggregate, client_weights, imprinted_lenet
from fedsim.config import parse_config
from fedsim.judge.scoring import score_reconstruction
from fedsim.models import build_model
from fedsim.reporting import summaries

MARKER = "closed-form-table"
RECOVERED_DB = 30.0
SIZES = (4, 8, 16, 32, 64)
ATTACK_CASES = {"fc-invert": {}, "cpa": {}, "cpa (refine: 0, plain ICA)": {"refine": 0}}


def mlp3() -> torch.nn.Module:
    return build_model(parse_config({"model": {"name": "mlp3"}}).model, 3, 10, 32, seed=0)


def aggregate_view(model, state, x, y, clients, secure, seed) -> tuple[AttackerView, torch.Tensor, torch.Tensor]:
    """An honest server's view of ``clients`` x 1 fresh training image (from index 1,000 on), and the truth."""
    rng = np.random.default_rng(seed)
    pick = 1000 + rng.choice(len(x) - 1000, clients, replace=False)
    images, labels = torch.from_numpy(x[pick]).float() / 255, torch.from_numpy(y[pick]).long()
    sent = [client_weights(model, state, images[c : c + 1], labels[c : c + 1], [], seed + c) for c in range(clients)]
    observed = aggregate(sent, [1] * clients, secure, seed)
    view = AttackerView(
        round=1,
        tap="server",
        target="aggregate",
        model=model,
        global_state=state,
        observed_state=observed,
        input_shape=(3, 32, 32),
        num_classes=10,
        num_samples=clients,
        local_training=LocalTraining(LR, 1, clients),
        input_bounds=(torch.zeros(3), torch.ones(3)),
    )
    return view, images, labels


def run(name: str, options: dict, view: AttackerView, seed: int) -> tuple[object, float]:
    attack_name = name.split(" ")[0]
    started = time.perf_counter()
    (reconstruction,) = ATTACKS.get(attack_name)(
        [view], AttackOptions(name=attack_name, **options), seed, torch.device("cpu")
    )
    return reconstruction, time.perf_counter() - started


def scale(data, repeats: int, out: dict) -> list[str]:
    """The table over aggregate sizes, printed row by row as it is measured; returns its markdown lines."""
    model = mlp3()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    lines = [
        f"| images (1 per client) | aggregation | attack | at >= {RECOVERED_DB:.0f} dB | PSNR median (dB) | SSIM | "
        "label accuracy | seconds (max) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    print("\n".join(lines), flush=True)
    for count in SIZES:
        for aggregation, secure in (("FedAvg", None), ("SecAgg+", SECAGG_DEFAULT)):
            views = [
                aggregate_view(model, state, data["x_train"], data["y_train"], count, secure, seed)
                for seed in range(repeats)
            ]
            for name, options in ATTACK_CASES.items():
                psnrs, ssims, labels_right, seconds = [], [], [], []
                for seed, (view, images, labels) in enumerate(views):
                    reconstruction, took = run(name, options, view, seed)
                    score = score_reconstruction(reconstruction, images, labels, lambda t: t)
                    psnrs.append(list(score.psnr))
                    ssims.append(list(score.ssim))
                    labels_right.append(score.label_accuracy)
                    seconds.append(took)
                psnr = summaries.summarize_psnr(psnrs)  # images resampled within each seed
                shown = {
                    "recovered": summaries.fraction_at_least(psnrs, RECOVERED_DB).text(3),
                    "psnr": psnr.median.text(1),
                    "ssim": summaries.mean(ssims).text(3),
                    "labels": format_interval(interval(labels_right), 3),  # one value per seed
                }
                key = f"{count} {aggregation} {name}"
                out[key] = {
                    "recovered": summaries.fraction_at_least(psnrs, RECOVERED_DB).value,
                    "psnr_median": psnr.median.value,
                    "ssim": summaries.mean(ssims).value,
                    "seconds": max(seconds),
                }
                lines.append(
                    f"| {count} | {aggregation} | {name} | {shown['recovered']} | {shown['psnr']} | "
                    f"{shown['ssim']} | {shown['labels']} | {max(seconds):.2f} |"
                )
                print(lines[-1], flush=True)
    return lines


def timing(data, repeats: int, out: dict) -> None:
    print("attack | model | clients x images | seconds per round (mean, max over seeds)", flush=True)
    public = torch.from_numpy(data["x_test"][:256]).float() / 255
    cases = (("rtf", imprinted_lenet(public)), ("fc-invert", mlp3()))
    for name, model in cases:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        seconds = []
        for seed in range(repeats):
            view, _, _ = aggregate_view(model, state, data["x_train"], data["y_train"], 64, None, seed)
            seconds.append(run(name, {}, view, seed)[1])
        out[f"timing {name}"] = {"seconds": float(np.mean(seconds))}
        print(
            f"{name} | {'imprinted lenet' if name == 'rtf' else 'mlp3'} | 64 x 1 | "
            f"{np.mean(seconds):.3f}, {max(seconds):.3f}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--part", choices=("scale", "timing", "all"), default="all")
    add_docs_flag(parser, MARKER)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(1)
    data = np.load(data_file(args.data_dir, CIFAR))
    out: dict[str, dict] = {}
    if args.part in ("timing", "all"):
        timing(data, args.repeats, out)
    if args.part in ("scale", "all"):
        lines = scale(data, args.repeats, out)
        if args.docs:
            write_between_markers(
                DOCS_PAGES[MARKER],
                MARKER,
                [
                    f"`.venv/bin/python -m bench.closed_form --data-dir DIR --part scale --docs` ({args.repeats} "
                    f"seeds, {time.perf_counter() - started:.0f} s on {os.cpu_count()} CPU cores; generated "
                    f"{time.strftime('%Y-%m-%d')}). Over all images of all seeds, each paired with a reconstruction "
                    "by minimum MSE: the fraction at or above 30 dB, the median PSNR and the mean SSIM, with [95 % "
                    "bootstrap intervals] (`fedsim.reporting.summaries`: images resampled within each seed); label "
                    "accuracy over the seeds:",
                    "",
                    *lines,
                ],
            )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
