"""The strongest attack per defense on single-image updates (configs/defense-comparison.yaml, round 1).

For each defense, one run of ``configs/defense-comparison.yaml`` (DLG's tanh LeNet, 20 clients with
CIFAR-10 training images, one SGD step on one image) stopped after round 1: a man-in-the-middle inverts
clients 0-2's updates with every attack whose requirements hold (``attacks: strongest``, the adaptive
variants where their defense is in force). Prints, per defense, the mean over the three clients of each
client's best SSIM and which attack won it, beside DLG's alone (the attack the older defense table used).
The adaptive attacks' TV weights were tuned on CIFAR-10 *test* images 0-2 (``bench.adaptive_tuning``); the
clients' images here are training images, never used for tuning. Last line: JSON.

    .venv/bin/python -m bench.strongest [--data-dir DIR] [--only prune,noise] [--out DIR]

``--paper-003``: paper 003's set-up instead (DLG's LeNet with its uniform init, one SGD step at lr 0.1 on one
CIFAR-10 training image per client, 3 clients; training images 2000-2002, which no attack was tuned on).
``attacks: strongest`` at its defaults (every applicable attack, its defaults and presets, then the saturation
step at ``adversary.budget``'s defaults) against paper 003's DLG settings alone (``dlg@paper-003``) on the same
images. Per client: PSNR of the attacker's pick (the lowest gradient match, no ground truth), the best over
attacks by ground truth (labelled so), the attack that won, its budget and whether it saturated.

    .venv/bin/python -m bench.strongest --paper-003 [--data-dir DIR] [--images 2000,2001,2002]
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

import fedsim
from bench.common import CIFAR, CONFIGS, add_data_dir, data_file
from fedsim.config import AttackOptions, load_config
from fedsim.engine.lifecycle.runner import run_experiment

CONFIG = CONFIGS / "defense-comparison.yaml"
VARIANTS: dict[str, str] = {
    "none": "[]",
    "prune": "[{name: prune, ratio: 0.9}]",
    "noise": "[{name: noise, sigma: 0.01}]",
    "gradient_dropout": "[{name: gradient_dropout, p: 0.6, sigma: 0.005}]",
    "soteria": "[{name: soteria, ratio: 0.8}]",
    "clip": "[{name: clip, max_norm: 0.5}]",
    "pdpsgd": "[{name: pdpsgd, sigma: 0.1}]",
    "dpsgd": "[{name: dpsgd, target_epsilon: 8, max_grad_norm: 1.0}]",
}


def run_variant(name: str, data: Path, out: Path) -> dict:
    run_dir = out / name
    if not (run_dir / "summary.json").is_file():  # resume: a finished variant is read, not rerun
        overrides = [
            "data.dataset=npz",
            f"data.path={data}",
            f"output.dir={out}",
            f"output.run_name={name}",
            "federation.rounds=1",
            "adversary.save_images=false",
            f"client.defenses={VARIANTS[name]}",
        ]
        if run_dir.exists():
            raise SystemExit(f"{run_dir}: an unfinished run; remove it to rerun")
        run_experiment(load_config(CONFIG, overrides), quiet=True)
    run = fedsim.load_run(run_dir)
    best = run.strongest("ssim_mean", per="target")
    attacks = run.events("attack")
    dlg = attacks[(attacks["attack"] == "dlg") & (attacks["status"] == "ok")]
    return {
        "ssim": float(best["ssim_mean"].mean()),
        "psnr": float(best["psnr_mean"].mean()),
        "winners": dict(Counter(best["attack"])),
        "dlg_ssim": float(dlg["ssim_mean"].mean()) if not dlg.empty else None,
        "attacks": sorted(set(attacks["attack"])),
    }


PAPER_003 = CONFIGS / "papers" / "003-dlg-per-client-vs-aggregated.yaml"
PAPER_003_LR = 0.1  # the config's client.lr


def paper003_views(x: torch.Tensor, y: torch.Tensor) -> list:
    """One SGD step of each one-image client from the same uniform-init LeNet, as configs/papers/003 trains."""
    from adversary.view import AttackerView, LocalTraining
    from clients.training import train_locally
    from fedsim.config import ClientConfig, ModelConfig
    from fedsim.models import build_model

    model = build_model(ModelConfig(name="lenet", init="uniform"), 3, 10, 32, seed=0)
    start = {key: value.clone() for key, value in model.state_dict().items()}
    views = []
    for i in range(len(x)):
        client = copy.deepcopy(model)
        one_step = ClientConfig(lr=PAPER_003_LR, batch_size=1, local_steps=1)
        train_locally(client, x[i : i + 1], y[i : i + 1], np.array([i]), one_step, seed=i)
        views.append(
            AttackerView(
                round=1,
                tap="mitm",
                target=f"client:{i}",
                model=model,
                global_state=start,
                observed_state={key: value.detach().clone() for key, value in client.state_dict().items()},
                input_shape=(3, 32, 32),
                num_classes=10,
                num_samples=1,
                local_training=LocalTraining(lr=PAPER_003_LR, local_steps=1, batch_size=1),
            )
        )
    return views


def paper003(data: Path, images: list[int]) -> dict:
    """``attacks: strongest`` at its defaults vs ``dlg@paper-003`` on paper 003's set-up (see the module doc)."""
    from adversary.adversary import saturation_budget
    from adversary.inversion import run_attack
    from adversary.inversion.saturation import run_portfolio
    from adversary.scoring import score_reconstruction
    from fedsim.config import parse_config
    from fedsim.engine.leakage.portfolio import attack_setting, resolve_attacks
    from fedsim.models import build_model

    # one line per attack and saturation pass, as it goes (importing fedsim configures no handler)
    logging.basicConfig(format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("fedsim").setLevel(logging.INFO)
    arrays = np.load(data)
    x = torch.from_numpy(arrays["x_train"][images].astype(np.float32) / 255.0)
    y = torch.from_numpy(arrays["y_train"][images].astype(np.int64))
    views = paper003_views(x, y)
    raw = load_config(PAPER_003).model_dump(mode="json", exclude={"sweep"})
    raw["adversary"] = {**raw["adversary"], "attacks": "strongest", "targets": "per-client"}
    raw["adversary"].pop("portfolio", None)
    config = parse_config(raw)
    model = build_model(config.model, 3, 10, 32, seed=0)
    config = resolve_attacks(config, attack_setting(config, model, (3, 32, 32), 10))
    budget = saturation_budget(config.adversary)
    assert budget is not None, "attacks: strongest with adversary.budget.saturate saturates"
    device = torch.device("cpu")

    def entry(options, seed):
        return options, lambda chosen: run_attack(chosen, views, seed, device)

    attacks = config.adversary.attacks
    print(f"paper 003 set-up, training images {images}: portfolio {', '.join(o.label for o in attacks)}", flush=True)
    started = time.perf_counter()
    outcomes = run_portfolio([entry(o, 1000 + i) for i, o in enumerate(attacks)], views, budget, device)
    seconds = time.perf_counter() - started
    reference_started = time.perf_counter()
    reference = run_attack(AttackOptions(name="dlg", preset="paper-003"), views, 1, device)
    reference_seconds = time.perf_counter() - reference_started

    def psnr(rec, t: int) -> float:
        score = score_reconstruction(rec, x[t : t + 1], y[t : t + 1], lambda images: images)
        return float(score.psnr_mean)

    clients = []
    for t in range(len(views)):
        rows = [
            (options, outcome[t])
            for options, outcome in zip(attacks, outcomes, strict=True)
            if not isinstance(outcome, BaseException)
        ]
        matched = [(rec.gradient_match, options, rec) for options, rec in rows if rec.gradient_match is not None]
        _, pick_options, pick = min(matched, key=lambda item: item[0])
        by_truth = max(rows, key=lambda row: psnr(row[1], t))
        clients.append(
            {
                "image": images[t],
                "pick": pick_options.label,
                "pick_psnr": psnr(pick, t),
                "pick_iterations": pick.iterations,
                "pick_restarts": pick.restarts or getattr(pick_options, "restarts", 1),
                "pick_saturation": pick.saturation,
                "best_by_truth": by_truth[0].label,
                "best_by_truth_psnr": psnr(by_truth[1], t),
                "best_by_truth_budget": [by_truth[1].iterations, by_truth[1].restarts or by_truth[0].restarts],
                "best_by_truth_saturation": by_truth[1].saturation,
                "paper_003_psnr": psnr(reference[t], t),
                "per_attack": {options.label: [round(psnr(rec, t), 2), rec.saturation] for options, rec in rows},
            }
        )
    failed = {o.label: str(out) for o, out in zip(attacks, outcomes, strict=True) if isinstance(out, BaseException)}
    return {
        "clients": clients,
        "strongest_psnr_mean": float(np.mean([c["pick_psnr"] for c in clients])),
        "best_by_truth_psnr_mean": float(np.mean([c["best_by_truth_psnr"] for c in clients])),
        "paper_003_psnr_mean": float(np.mean([c["paper_003_psnr"] for c in clients])),
        "strongest_seconds": seconds,
        "paper_003_seconds": reference_seconds,
        "failed": failed,
    }


def print_paper003(result: dict) -> None:
    saturated = all(c["pick_saturation"] == "saturated" for c in result["clients"])
    header = "attacks: strongest (saturated)" if saturated else "attacks: strongest (NOT saturated: a lower bound)"
    n = len(result["clients"][0]["per_attack"])
    print(f"   {'image':>5}  {header:<44} {'PSNR':>6}  {'dlg@paper-003':>13}  ground-truth selection over {n} attacks")
    for c in result["clients"]:
        budget = f"{c['pick']} ({c['pick_iterations']} it x {c['pick_restarts']} restarts, {c['pick_saturation']})"
        print(
            f"   {c['image']:>5}  {budget:<44} {c['pick_psnr']:6.1f}  {c['paper_003_psnr']:13.1f}  "
            f"{c['best_by_truth']} {c['best_by_truth_psnr']:.1f} ({c['best_by_truth_budget'][0]} it x "
            f"{c['best_by_truth_budget'][1]} restarts, {c['best_by_truth_saturation']})"
        )
    print(
        f"   mean   strongest {result['strongest_psnr_mean']:.1f} dB by the attacker's pick, "
        f"{result['best_by_truth_psnr_mean']:.1f} dB by ground-truth selection over {n} attacks "
        f"({result['strongest_seconds']:.0f} s); dlg@paper-003 {result['paper_003_psnr_mean']:.1f} dB "
        f"({result['paper_003_seconds']:.0f} s)"
    )
    for c in result["clients"]:
        print(f"   image {c['image']}: " + ", ".join(f"{k} {v[0]} ({v[1]})" for k, v in c["per_attack"].items()))
    if result["failed"]:
        print(f"   failed: {result['failed']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--only", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=None, help="runs go here (kept; rerunning resumes)")
    parser.add_argument("--paper-003", action="store_true", help="paper 003's set-up: strongest vs dlg@paper-003")
    parser.add_argument("--images", default="2000,2001,2002", help="with --paper-003: CIFAR-10 training images")
    args = parser.parse_args(argv)
    data = data_file(args.data_dir, CIFAR)
    if args.paper_003:
        result = paper003(data, [int(i) for i in args.images.split(",")])
        print_paper003(result)
        print(json.dumps(result))
        return
    out = (args.out or Path(tempfile.mkdtemp(prefix="fedsim-strongest-"))).resolve()
    print(f"{CONFIG.name}, round 1, clients 0-2, attacks: strongest; runs under {out}")
    # best per client by SSIM against the ground truth: an oracle's pick, labelled as such
    print(f"   {'defense':<17} {'GT-selected SSIM':>16} {'PSNR':>6} {'DLG SSIM':>9}  winning attack (per client)   ran")
    results = {}
    for name in args.only.split(","):
        started = time.perf_counter()
        result = results[name] = run_variant(name, data, out)
        winners = ", ".join(f"{attack} x{count}" for attack, count in result["winners"].items())
        dlg = f"{result['dlg_ssim']:.3f}" if result["dlg_ssim"] is not None else "-"
        print(
            f"   {name:<17} {result['ssim']:9.3f} {result['psnr']:6.1f} {dlg:>9}  {winners:<28} "
            f"{', '.join(result['attacks'])} ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    print(json.dumps({name: {k: r[k] for k in ("ssim", "psnr", "winners", "dlg_ssim")} for name, r in results.items()}))


if __name__ == "__main__":
    main()
