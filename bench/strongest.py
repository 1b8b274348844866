"""The strongest attack per defense on single-image updates (configs/defense-comparison.yaml, round 1).

For each defense, one run of ``configs/defense-comparison.yaml`` (DLG's tanh LeNet, 20 clients with
CIFAR-10 training images, one SGD step on one image) stopped after round 1: a man-in-the-middle inverts
clients 0-2's updates with every attack whose requirements hold (``attacks: strongest``, the adaptive
variants where their defense is in force). Prints, per defense, the mean over the three clients of each
client's best SSIM and which attack won it, beside DLG's alone (the attack the older defense table used).
The adaptive attacks' TV weights were tuned on CIFAR-10 *test* images 0-2 (``bench.adaptive_tuning``); the
clients' images here are training images, never used for tuning. Last line: JSON.

    .venv/bin/python -m bench.strongest [--data-dir DIR] [--only prune,noise] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import fedsim
from bench.common import CIFAR, CONFIGS, add_data_dir, data_file
from fedsim.config import load_config
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--only", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=None, help="runs go here (kept; rerunning resumes)")
    args = parser.parse_args(argv)
    data = data_file(args.data_dir, CIFAR)
    out = (args.out or Path(tempfile.mkdtemp(prefix="fedsim-strongest-"))).resolve()
    print(f"{CONFIG.name}, round 1, clients 0-2, attacks: strongest; runs under {out}")
    print(f"   {'defense':<17} {'best SSIM':>9} {'PSNR':>6} {'DLG SSIM':>9}  winning attack (per client)   ran")
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
