"""Defenses against gradient inversion, measured in one run: leakage and utility of each on one federation.

Runs ``configs/defense-comparison.yaml`` on real CIFAR-10 images (the subset in ../shared/data: 4,660 train,
846 test) once per defense, with the same seed, clients, rounds and attack: 20 clients, one SGD
step on one image each per round, 60 rounds; a man-in-the-middle inverts clients 0-2's round-1 updates
with DLG (1000 L-BFGS iterations, 2 restarts). For each defense it prints the attack's mean SSIM and PSNR
(the better restart, by the attack's own objective), label accuracy, the test accuracy after the last
round and its drop against no defense, and the largest per-client epsilon (DP-SGD).

Targets (issue 4): no defense SSIM >= 0.9; DP-SGD at epsilon <= 8 SSIM <= 0.2; PDP-SGD with paper 000's
kappa (lr^2 sigma^2, sigma = 0.1): reported, paper 000 found it does not protect; Gradient Dropout
(p = 0.6, sigma = 5e-3): SSIM <= 0.2 and accuracy within 2 points of no defense (paper 004).

    .venv/bin/python bench/defenses.py [--data ../shared/data/cifar10_subset.npz] [--only none,gradient_dropout]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fedsim.config import load_config  # noqa: E402
from fedsim.results import RunStore  # noqa: E402
from fedsim.engine.runner import run_experiment  # noqa: E402

CONFIG = REPO / "configs" / "defense-comparison.yaml"

#: defense -> the `client.defenses` it runs with (YAML flow syntax, as on the command line)
VARIANTS: dict[str, str] = {
    "none": "[]",
    "dpsgd": "[{name: dpsgd, target_epsilon: 8, max_grad_norm: 1.0}]",
    "pdpsgd": "[{name: pdpsgd, sigma: 0.1}]",
    "gradient_dropout": "[{name: gradient_dropout, p: 0.6, sigma: 0.005}]",
    "soteria": "[{name: soteria, ratio: 0.8}]",
    "prune": "[{name: prune, ratio: 0.9}]",
    "noise": "[{name: noise, sigma: 0.01}]",
    "clip": "[{name: clip, max_norm: 0.5}]",
}


def run_variant(defenses: str, data: Path, out: Path) -> dict[str, Any]:
    overrides = ["data.dataset=npz", f"data.path={data}", f"output.dir={out}", f"client.defenses={defenses}"]
    started = time.perf_counter()
    run_dir = run_experiment(load_config(CONFIG, overrides), quiet=True)
    seconds = time.perf_counter() - started
    rows = RunStore(run_dir).rows()
    attacks = [row for row in rows if row["event"] == "attack" and row.get("status") == "ok"]
    evals = [row for row in rows if row["event"] == "eval"]
    epsilons = [value for row in rows if row["event"] == "fit" for key, value in row.items() if key.endswith(".epsilon")]
    return {
        "ssim": float(np.mean([row["ssim_mean"] for row in attacks])) if attacks else float("nan"),
        "psnr": float(np.mean([row["psnr_mean"] for row in attacks])) if attacks else float("nan"),
        "labels": float(np.mean([row["label_accuracy"] for row in attacks])) if attacks else float("nan"),
        "accuracy": evals[-1]["accuracy"],
        "epsilon": max(epsilons) if epsilons else None,
        "seconds": seconds,
        "run_dir": run_dir,
    }


def verdicts(results: dict[str, dict[str, Any]]) -> list[str]:
    """The issue's targets, each as met / NOT met, for the variants that ran."""
    lines = []

    def check(name: str, text: str, ok: bool) -> None:
        if name in results:
            lines.append(f"   {name:<17} {text}: {'met' if ok else 'NOT met'}")

    none = results.get("none")
    if none:
        check("none", f"SSIM {none['ssim']:.3f} >= 0.9", none["ssim"] >= 0.9)
    if "dpsgd" in results:
        dp = results["dpsgd"]
        check("dpsgd", f"epsilon {dp['epsilon']:.2f} <= 8 and SSIM {dp['ssim']:.3f} <= 0.2",
              dp["epsilon"] is not None and dp["epsilon"] <= 8 and dp["ssim"] <= 0.2)  # fmt: skip
    if "pdpsgd" in results:
        pdp = results["pdpsgd"]
        lines.append(f"   {'pdpsgd':<17} SSIM {pdp['ssim']:.3f}: {'protects' if pdp['ssim'] <= 0.2 else 'does NOT protect'} "
                     "(paper 000: does not protect)")  # fmt: skip
    if "gradient_dropout" in results:
        gd = results["gradient_dropout"]
        check("gradient_dropout", f"SSIM {gd['ssim']:.3f} <= 0.2", gd["ssim"] <= 0.2)
        if none:
            drop = 100 * (none["accuracy"] - gd["accuracy"])
            check("gradient_dropout", f"accuracy drop {drop:+.1f} points <= 2", drop <= 2)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO / ".." / "shared" / "data" / "cifar10_subset.npz")
    parser.add_argument("--only", default=",".join(VARIANTS), help=f"comma-separated subset of {', '.join(VARIANTS)}")
    parser.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    args = parser.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"--data {args.data}: no such file (CIFAR-10 npz with x_train, y_train, x_test, y_test)")
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"--only {','.join(unknown)}: unknown; allowed: {', '.join(VARIANTS)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="fedsim-defenses-"))
    config = load_config(CONFIG)
    print(f"{CONFIG.name}: {config.federation.num_clients} clients, {config.federation.rounds} rounds, "
          f"lr {config.client.lr}, batch {config.client.batch_size}; attack {config.adversary.attacks[0].name} "
          f"on clients {config.adversary.clients} in rounds {config.adversary.rounds}; runs under {out}")  # fmt: skip
    print(f"   {'defense':<17} {'SSIM':>6} {'PSNR':>7} {'labels':>7} {'accuracy':>9} {'drop':>7} {'epsilon':>8} {'time':>7}")
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        result = results[name] = run_variant(VARIANTS[name], args.data.resolve(), out)
        drop = f"{100 * (results['none']['accuracy'] - result['accuracy']):+.1f}" if "none" in results else "-"
        epsilon = f"{result['epsilon']:.2f}" if result["epsilon"] is not None else "-"
        print(f"   {name:<17} {result['ssim']:6.3f} {result['psnr']:6.2f}  {100 * result['labels']:6.0f}% "
              f"{100 * result['accuracy']:8.1f}% {drop:>7} {epsilon:>8} {result['seconds']:6.0f}s", flush=True)  # fmt: skip
    print("targets:")
    print("\n".join(verdicts(results)))


if __name__ == "__main__":
    main()
