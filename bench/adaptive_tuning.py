"""Tune the adaptive attacks on images that are never reported, and show what adapting and tuning buy.

The set-up of ``configs/defense-comparison.yaml`` (DLG's tanh LeNet at its seeded initialisation, one SGD
step of lr 0.1 on one image), each defense applied to the update exactly as a client applies it. Tuning
images: CIFAR-10 **test** images 0-3 of ``cifar10_subset.npz`` (the reported numbers come
from clients' training images in runs). For each defense: plain Inverting Gradients, its adaptive variant at its
own settings, and the variant tuned by ``adversary.inversion.tuning`` (the Optuna search a run does under
``adversary.tuning``: TV weight, step size and init scale; ``--trials``); prints mean SSIM / PSNR of each, one
JSON line last.

    .venv/bin/python -m bench.adaptive_tuning [--data-dir DIR] [--images 4] [--iterations 1000] [--trials 12]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from adversary.inversion import run_attack
from adversary.inversion.options import AttackOptions
from adversary.inversion.requirements import AttackSetting, DefenseInForce
from adversary.inversion.tuning import PublicProblems, TuningTask, tune, with_params
from adversary.view import AttackerView, LocalTraining
from bench.common import CIFAR, add_data_dir, data_file
from clients.defenses import DEFENSES, DefenseContext
from fedsim.config import parse_config
from fedsim.judge.metrics import psnr, ssim
from fedsim.judge.scoring import public_ssim
from fedsim.models import build_model

LR = 0.1
MEAN, STD = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)  # the views' inputs are the [0, 1] images themselves
#: defense -> (its client.defenses entry, the adaptive attack)
CASES = {
    "prune": ({"name": "prune", "ratio": 0.9}, "ig-prune"),
    "noise": ({"name": "noise", "sigma": 0.01}, "ig-noise"),
    "gradient_dropout": ({"name": "gradient_dropout", "p": 0.6, "sigma": 0.005}, "ig-dropout"),
    "soteria": ({"name": "soteria", "ratio": 0.8}, "ig-soteria"),
}


def lenet() -> torch.nn.Module:
    config = parse_config({"model": {"name": "lenet", "activation": "tanh"}}).model
    return build_model(config, 3, 10, 32, seed=0)


def view_of(model: torch.nn.Module, image: torch.Tensor, label: int, defense: dict) -> AttackerView:
    x, y = image[None], torch.tensor([label])
    loss = torch.nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    update = {name: g.detach() for (name, _), g in zip(model.named_parameters(), grads, strict=True)}
    (config,) = parse_config({"client": {"defenses": [defense]}}).client.defenses
    context = DefenseContext(model=model, x=x, y=y, lr=LR, generator=torch.Generator().manual_seed(label))
    sent = DEFENSES.get(config.name).apply(update, config, context).update
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    observed = {k: state[k] - LR * sent[k] if k in sent else state[k] for k in state}
    bounds = (torch.zeros(3), torch.ones(3))
    return AttackerView(
        round=1,
        tap="mitm",
        target="client:0",
        model=model,
        global_state=state,
        observed_state=observed,
        input_shape=(3, 32, 32),
        num_classes=10,
        num_samples=1,
        input_bounds=bounds,
        local_training=LocalTraining(lr=LR, local_steps=1, batch_size=1),
    )


def score(options: AttackOptions, views: list[AttackerView], truth: torch.Tensor) -> tuple[float, float]:
    recs = run_attack(options, views, seed=0, device=torch.device("cpu"))
    ssims = [float(ssim(r.images.clamp(0, 1), t[None])) for r, t in zip(recs, truth, strict=True)]
    psnrs = [float(psnr(r.images.clamp(0, 1), t[None])) for r, t in zip(recs, truth, strict=True)]
    return float(np.mean(ssims)), float(np.mean(psnrs))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_dir(parser)
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--trials", type=int, default=12, help="Optuna trials per adaptive attack")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = np.load(data_file(args.data_dir, CIFAR))
    truth = torch.from_numpy(data["x_test"][: args.images]).float() / 255.0
    labels = [int(v) for v in data["y_test"][: args.images]]
    model = lenet()
    best: dict[str, dict] = {}
    for name in args.only.split(","):
        defense, adaptive = CASES[name]
        views = [view_of(model, image, label, defense) for image, label in zip(truth, labels, strict=True)]
        options = {"name": defense["name"], **{k: v for k, v in defense.items() if k != "name"}}
        setting = AttackSetting(
            model=model,
            model_name="lenet",
            input_shape=(3, 32, 32),
            num_classes=10,
            defenses=(DefenseInForce(defense["name"], options),),
        )
        plain = score(AttackOptions(name="ig", iterations=args.iterations), views, truth)
        print(f"{name:<17} ig{'':<13} SSIM {plain[0]:.3f}  PSNR {plain[1]:5.1f}", flush=True)
        own = AttackOptions(name=adaptive, iterations=args.iterations).adapted(setting)
        own_score = score(own, views, truth)
        problems = PublicProblems(
            views, [t[None] for t in truth], [torch.tensor([lb]) for lb in labels], MEAN, STD, public_ssim
        )
        task = TuningTask(problems, trials=args.trials, seed=0, setting={"bench": "adaptive_tuning", "case": name})
        tuning = tune(own, task, torch.device("cpu"))
        chosen = with_params(own, tuning.params) if tuning is not None else own
        tuned_score = score(chosen, views, truth)
        print(
            f"{name:<17} {adaptive:<10} own settings SSIM {own_score[0]:.3f}  PSNR {own_score[1]:5.1f}; tuned "
            f"({', '.join(f'{k} {v:.3g}' for k, v in (tuning.params if tuning else {}).items())}) "
            f"SSIM {tuned_score[0]:.3f}  PSNR {tuned_score[1]:5.1f}",
            flush=True,
        )
        best[name] = {
            "ig_ssim": plain[0],
            "attack": adaptive,
            "own_ssim": own_score[0],
            "tuned_ssim": tuned_score[0],
            "params": tuning.params if tuning is not None else {},
        }
    print(json.dumps(best))


if __name__ == "__main__":
    main()
