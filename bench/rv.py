"""RV (paper 002, Table 1 in spirit): reconstruction vulnerability of fedsim's models and the attack PSNR on each.

For mlp3, mlp4, mlp5, cnn, lenet and convnet at their initial weights on 8 px digits (16 px for lenet and
convnet, which pool twice), RV from random orthogonal projections over training images, and Inverting
Gradients' median PSNR on single training images (one SGD step, lr 1, no noise; ``fedsim.reporting.summaries``,
95 % bootstrap interval on stderr). No correlation of RV with PSNR is computed or claimed: of five or six
models, one or two are at another input size and the 8 px ones are all recovered essentially exactly (above
65 dB, where float precision, not the model, orders them), and over five models a two-sided permutation test of
a rank correlation reaches p < 0.05 only when the two rankings agree exactly.

    python -m bench.rv --quick    # five models (convnet's attacks take too long on two cores), a few minutes
    python -m bench.rv            # all six, more images and projections
The last line is JSON: {"models": [...], "rv": [...], "rv_se": [...], "ig_psnr": [...]}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from adversary.inversion import AttackOptions, run_attack
from bench.common import paired_psnrs
from bench.ggssr import noisy_view
from fedsim.config import DataConfig, ModelConfig
from fedsim.data import load_dataset
from fedsim.judge.scoring import PSNR_CAP_DB
from fedsim.judge.vulnerability import reconstruction_vulnerability
from fedsim.models import build_model
from fedsim.reporting import summaries

MODELS = {"mlp3": 8, "mlp4": 8, "mlp5": 8, "cnn": 8, "lenet": 16, "convnet": 16}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    images, projections, iterations = (2, 4, 150) if args.quick else (8, 16, 500)
    torch.set_num_threads(1)  # small problems: one thread is faster on a shared two-core machine
    models = {name: side for name, side in MODELS.items() if not (args.quick and name == "convnet")}
    out = {"models": [], "rv": [], "rv_se": [], "ig_psnr": []}
    start = time.perf_counter()
    for name, side in models.items():
        data = load_dataset(DataConfig(dataset="digits", image_size=side), seed=0)
        model = build_model(ModelConfig(name=name), 1, 10, side, 0).eval()
        x, y = torch.from_numpy(data.x_train[100 : 100 + images]), torch.from_numpy(data.y_train[100 : 100 + images])
        rv = reconstruction_vulnerability(model, x, y, projections=projections)
        scores = []
        for i in range(images):
            view = noisy_view(model, x[i : i + 1], y[i : i + 1], 0.0, "gaussian", i)
            rec = run_attack(
                AttackOptions(name="ig", iterations=iterations), [view], seed=0, device=torch.device("cpu")
            )[0]
            scores.extend(paired_psnrs(rec.images.reshape(x[i : i + 1].shape), x[i : i + 1]))
        psnr = summaries.median([scores], cap=PSNR_CAP_DB)
        out["models"].append(name)
        out["rv"].append(round(rv.rv, 4))
        out["rv_se"].append(round(rv.standard_error, 4))
        out["ig_psnr"].append(round(psnr.value, 2))
        print(
            f"{name:8s} RV {rv.rv:9.4f} +- {rv.standard_error:.4f}  IG PSNR median {psnr.text(2)} dB", file=sys.stderr
        )
    print(f"{len(models)} models in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
