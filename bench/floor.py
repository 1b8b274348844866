"""The floor under a leakage score (``adversary.floor``) on the data the published tables use: per number of images
per target, what an all-black image, the public mean image and random public images score (SSIM, matched the
Hungarian way), the floor they set, and how often the black image is ``at floor``.

MNIST as the defense evaluation loads it (``configs/defense-evaluation.yaml``: 28 px, 20 % held out as the public
split) and CIFAR-10 as ``configs/defense-comparison.yaml`` does (its own test split public); random training
batches drawn with ``--seed``. The table in docs/explanation/verdict.md#the-floor::

    python -m bench.floor --data-dir DIR
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np
import torch

from adversary.floor import AT_FLOOR, PublicSplit, public_floor
from adversary.matching import pair_by_mse
from adversary.metrics import ssim
from bench.common import CIFAR, CONFIGS, MNIST, add_data_dir, data_file
from fedsim.config import load_config
from fedsim.data import load_dataset

SETS = {"MNIST": ("defense-evaluation.yaml", MNIST, (1, 4, 16)), "CIFAR-10": ("defense-comparison.yaml", CIFAR, (1, 4))}


def black_ssim(truth: torch.Tensor) -> float:
    black = torch.zeros_like(truth)
    rec, true = pair_by_mse(black, truth)
    return float(ssim(black[rec], truth[true]).mean())


def spread(values: list[float]) -> str:
    return f"{np.mean(values):.3f} [{np.min(values):.3f}, {np.max(values):.3f}]"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.split("\n\n")[0])
    add_data_dir(parser)
    parser.add_argument("--batches", type=int, default=20, help="random training batches per size (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the batches drawn (default 1)")
    args = parser.parse_args(argv)
    print(
        "| data, images per target | all-black image | public mean image | random public (mean of draws) | floor "
        "| black `at floor` |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (config, file, sizes) in SETS.items():
        path = data_file(args.data_dir, file)
        cfg = load_config(CONFIGS / config, ["data.dataset=npz", f"data.path={path}"])
        dataset = load_dataset(cfg.data, cfg.seed)
        public = PublicSplit(torch.from_numpy(dataset.x_test), torch.from_numpy(dataset.y_test))
        generator = np.random.default_rng(args.seed)
        for size in sizes:
            black, mean, random, floors, at_floor = [], [], [], [], 0
            for batch in range(args.batches):
                index = generator.choice(len(dataset.x_train), size, replace=False)
                truth, labels = torch.from_numpy(dataset.x_train[index]), torch.from_numpy(dataset.y_train[index])
                floor = public_floor(truth, labels, public, size, seed=batch)
                black.append(black_ssim(truth))
                mean.append(floor.public_mean.expected("ssim"))
                random.append(floor.random_public.expected("ssim"))
                floors.append(floor.value("ssim"))
                at_floor += floor.verdict(black[-1]) == AT_FLOOR
            print(
                f"| {name}, {size} | {spread(black)} | {np.mean(mean):.3f} | {np.mean(random):.3f} | {spread(floors)} "
                f"| {at_floor} of {args.batches} |"
            )


if __name__ == "__main__":
    main()
