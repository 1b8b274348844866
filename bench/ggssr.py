"""GGSS-R (paper 002) against Inverting Gradients, DLG and the prior's unguided samples under gradient noise.

Victims: digits TRAINING images (what clients hold); the prior is trained by `fedsim prior train` on the
digits TEST split (recorded in its fedsim_prior.json), so it never saw a victim. Note that it knows the
digits distribution, unlike paper 002's FFHQ prior. Model: fedsim's `cnn` at 8 px, one SGD step with
lr 1 on a single image (the update is the gradient); noise is added to the update with per-entry std
``scale * RMS(clean update)`` (Gaussian, or Laplace with the same std). Attack settings were chosen on
digits test images, not on the victims reported (training indices from 100 on).

    python bench/ggssr.py --quick     # trains the CPU prior if absent, then ~10 min on two cores
The last line is JSON: {"noise": [...], "ggssr_psnr": [...], "ig_psnr": [...], "dlg_psnr": [...],
"unguided_psnr": [...]} (means over images and seeds; Gaussian noise, single images).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from adversary.attacks import AttackOptions, run_attack
from adversary.view import AttackerView, LocalTraining
from clients.training import train_locally
from fedsim.config import ClientConfig, DataConfig, ModelConfig
from fedsim.data import load_dataset
from fedsim.models import build_model

CPU = torch.device("cpu")
DEFAULT_PRIOR = Path.home() / ".cache" / "fedsim" / "priors" / "digits-8-cpu"


def noisy_view(model, x, y, scale: float, distribution: str, seed: int) -> AttackerView:
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    client = copy.deepcopy(model)
    train_locally(client, x, y, np.arange(len(x)), ClientConfig(lr=1.0, batch_size=len(x), local_steps=1), seed=0)
    observed = {k: v.detach().clone() for k, v in client.state_dict().items()}
    names = [n for n, _ in model.named_parameters()]
    deltas = torch.cat([(observed[n] - global_state[n]).reshape(-1) for n in names])
    std = scale * float(deltas.pow(2).mean().sqrt())
    generator = torch.Generator().manual_seed(10_000 + seed)
    for n in names:
        if std > 0:
            shape = observed[n].shape
            if distribution == "gaussian":
                noise = torch.randn(shape, generator=generator) * std
            else:  # Laplace with the same std: b = std / sqrt(2)
                u = torch.rand(shape, generator=generator) - 0.5
                noise = -std / math.sqrt(2) * torch.sign(u) * torch.log1p(-2 * u.abs())
            observed[n] = observed[n] + noise
    return AttackerView(
        round=1, tap="mitm", target="client:0", model=model, global_state=global_state, observed_state=observed,
        input_shape=tuple(x.shape[1:]), num_classes=10, num_samples=len(x),
        local_training=LocalTraining(lr=1.0, local_steps=1, batch_size=len(x)),
        input_bounds=(torch.zeros(x.shape[1]), torch.ones(x.shape[1])),
    )  # fmt: skip


def psnr(estimate: torch.Tensor, truth: torch.Tensor) -> float:
    mse = float(((estimate.clamp(0, 1) - truth) ** 2).mean())
    return 10 * math.log10(1 / max(mse, 1e-10))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--prior", type=Path, default=DEFAULT_PRIOR)
    parser.add_argument("--distribution", choices=["gaussian", "laplace"], default="gaussian")
    parser.add_argument("--scales", type=float, nargs="+", default=[0.0, 0.3, 1.0, 3.0],
                        help="noise std relative to the RMS of the clean update")
    parser.add_argument("--images", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=None)
    args = parser.parse_args()
    if not (args.prior / "unet").is_dir() or not (args.prior / "fedsim_prior.json").exists():
        print(f"training the CPU digits prior into {args.prior} (resumable)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "fedsim.cli", "prior", "train", "--preset", "cpu", "--resume",
                        "--out", str(args.prior)], check=True)  # fmt: skip
    scales = args.scales
    images, seeds = (2, 2) if args.quick else (8, 3)
    steps = 25 if args.quick else 50
    images, seeds = args.images or images, args.seeds or seeds
    data = load_dataset(DataConfig(dataset="digits", image_size=8), seed=0)
    record = json.loads((args.prior / "fedsim_prior.json").read_text())
    assert record["split"] == "test", "the prior must be trained on the held-out split"
    prior = {"name": "diffusers", "path": str(args.prior), "offline": True}
    attacks = {
        "ggssr": AttackOptions(name="ggssr", steps=steps, prior=prior),
        "unguided": AttackOptions(name="ggssr", steps=steps, guidance_rate=0.0, prior=prior),
        "ig": AttackOptions(name="ig", iterations=150 if args.quick else 500),
        "dlg": AttackOptions(name="dlg", iterations=30 if args.quick else 100),
    }
    results: dict[str, list[float]] = {name: [] for name in attacks}
    start = time.perf_counter()
    for scale in scales:
        per_attack: dict[str, list[float]] = {name: [] for name in attacks}
        for seed in range(seeds):
            model = build_model(ModelConfig(name="cnn"), 1, 10, 8, seed)
            for index in range(100, 100 + images):
                x, y = torch.from_numpy(data.x_train[index : index + 1]), torch.from_numpy(data.y_train[index : index + 1])
                view = noisy_view(model, x, y, scale, args.distribution, seed * 1000 + index)
                for name, options in attacks.items():
                    rec = run_attack(options, [view], seed=seed, device=CPU)[0]
                    per_attack[name].append(psnr(rec.images.reshape(x.shape), x))
        for name, values in per_attack.items():
            mean = float(np.mean(values))
            half = 1.96 * float(np.std(values, ddof=1)) / math.sqrt(len(values))
            results[name].append(round(mean, 2))
            print(f"noise {scale:4}: {name:9s} PSNR {mean:6.2f} +- {half:.2f} dB (n={len(values)})", file=sys.stderr)
    print(f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    print(json.dumps({"noise": scales, "ggssr_psnr": results["ggssr"], "ig_psnr": results["ig"],
                      "dlg_psnr": results["dlg"], "unguided_psnr": results["unguided"]}))  # fmt: skip


if __name__ == "__main__":
    main()
