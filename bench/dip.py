"""ig-dip (Inverting Gradients through a deep image prior, paper 001) against plain Inverting Gradients.

Victims: CIFAR-10 training images from ``cifar10_subset.npz`` (indices 10-12 single, 13-16 as one
batch of 4; image 0 was the only one looked at while choosing settings). Model: fedsim's `lenet` at 32 px,
3 channels (its initialisation for seed 0), one SGD step with lr 1 (the update is the gradient). Noise, where
given, is added to the update with per-entry std ``scale * RMS(clean update)``. Both attacks get the same
iterations and one restart; ig-dip runs its defaults (Adam lr 0.01 on the generator's weights, DIP's U(0, 0.1)
input, width 32, 2 levels, TV 1e-4), IG its own (signed Adam lr 0.1, TV 1e-4, box).

    python -m bench.dip --data-dir DIR --quick   # ~10 min on two cores
The last line is JSON: {"setting": [...], "ig_psnr": [...], "dip_psnr": [...], "ig_objective": [...],
"dip_objective": [...]}, one entry per setting (PSNR: the median over its images, with its 95 % bootstrap
interval on stderr, ``fedsim.reporting.summaries``; objective: the mean).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from adversary.inversion import AttackOptions, run_attack
from bench.common import CIFAR, add_data_dir, data_file, paired_psnrs
from bench.ggssr import noisy_view
from fedsim.config import ModelConfig
from fedsim.judge.scoring import PSNR_CAP_DB
from fedsim.models import build_model
from fedsim.reporting import summaries


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    add_data_dir(parser)
    parser.add_argument("--iterations", type=int, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small problems: one thread is faster on a shared two-core machine
    iterations = args.iterations or (300 if args.quick else 1000)
    data = np.load(data_file(args.data_dir, CIFAR))
    images = torch.from_numpy(data["x_train"].astype(np.float32) / 255)
    labels = torch.from_numpy(data["y_train"].astype(np.int64))
    model = build_model(ModelConfig(name="lenet"), 3, 10, 32, 0)
    settings = [
        ("single, clean", [[10], [11], [12]], 0.0),
        ("single, noise 0.1", [[10], [11], [12]], 0.1),
        ("batch of 4, clean", [[13, 14, 15, 16]], 0.0),
    ]
    if not args.quick:
        settings.append(("batch of 4, noise 0.1", [[13, 14, 15, 16], [17, 18, 19, 20]], 0.1))
    attacks = {
        "ig": AttackOptions(name="ig", iterations=iterations),
        "dip": AttackOptions(name="ig-dip", iterations=iterations),
    }
    out: dict[str, list] = {"setting": [], "ig_psnr": [], "dip_psnr": [], "ig_objective": [], "dip_objective": []}
    start = time.perf_counter()
    for title, batches, scale in settings:
        scores: dict[str, list[float]] = {name: [] for name in attacks}  # PSNR per image (dB; inf: exact)
        objectives: dict[str, list[float]] = {name: [] for name in attacks}
        seconds: dict[str, float] = dict.fromkeys(attacks, 0.0)
        for batch in batches:
            x, y = images[batch], labels[batch]
            view = noisy_view(model, x, y, scale, "gaussian", batch[0])
            for name, options in attacks.items():
                begin = time.perf_counter()
                rec = run_attack(options, [view], seed=0, device=torch.device("cpu"))[0]
                seconds[name] += time.perf_counter() - begin
                scores[name].extend(paired_psnrs(rec.images, x))
                objectives[name].append(rec.objective)
        out["setting"].append(title)
        for name in attacks:
            median = summaries.median([scores[name]], cap=PSNR_CAP_DB)  # one seed: its images resampled
            out[f"{name}_psnr"].append(round(median.value, 2))
            out[f"{name}_objective"].append(float(f"{np.mean(objectives[name]):.3g}"))
            print(
                f"{title:20s} {name:3s}: PSNR median {median.text(2)} dB "
                f"(per image {', '.join(f'{s:.1f}' for s in scores[name])}), "
                f"objective {np.mean(objectives[name]):.3g}, {seconds[name]:.0f} s",
                file=sys.stderr,
            )
    print(f"{time.perf_counter() - start:.0f} s, {iterations} iterations", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
