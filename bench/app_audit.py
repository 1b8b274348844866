"""The README's audited Flower app: its leakage, and what SecAgg+ and smaller steps change, measured.

Runs ``fedsim audit`` on the example apps in ``configs/flower-apps`` (unedited) with CIFAR-10 training images
written to parquet as Flower Datasets stores CIFAR-10 (an ``img`` image column and a ``label`` class column), one
round, ``attacks: strongest`` less ``ig@geiping-2020`` and ``ig-dip`` (their cost on two cores), the saturation
step capped at ``--max-seconds`` per group of targets, so every figure is a lower bound. Variants:

- ``app``: the quickstart app, 2 nodes of 5 images (4 train: one SGD step at batch 4, lr 0.1), client 0 attacked
  on the wire;
- ``secagg``: the app's SecAgg+ workflow (the legacy API under ``SecAggPlusWorkflow``), 3 nodes of 5 images, the
  server attacking the clear aggregate of the 12 training images;
- ``small-steps``: lr 0.01, batch 1, 2 local epochs (8 SGD steps on client 0's 4 images);
- ``real-settings``: the app's own batch 32 and one epoch over 250 images per node (200 train, 7 steps).

The last two leave out DLG's L-BFGS presets (``dlg@paper-003``, ``dlg@paper-003-aggregate``), too slow for 7-8
simulated steps on two cores, and ``real-settings`` also FedLeak's Geiping et al. budget (4,800 iterations x 8
restarts through 7 simulated steps of 32 images: the race's rung of 1,200 iterations x 1 restart took over 200 s
there, and the full budget is 32 times that). Per variant and target it prints the attacker's pick (the result of
lowest gradient match: what the attacker would report, no ground truth) with its floor, p-value and verdict (the
calibrated test), and beside it the best result by SSIM against the truth (an oracle, an upper bound, tested against
the best of as many guesses, deciding nothing). Runs go to ``OUT/<variant>``; a finished one is read, not rerun.

    .venv/bin/python -m bench.app_audit [--data-dir DIR] [--out DIR] [--only app,secagg] [--docs]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import fedsim
from bench.common import (
    CIFAR,
    CONFIGS,
    REPO,
    add_data_dir,
    data_file,
    picked_psnr,
    write_between_markers,
)

APPS = CONFIGS / "flower-apps"
MARKER = "app-audit-table"
SLOW_PRESETS = ["dlg@paper-003", "dlg@paper-003-aggregate"]  # L-BFGS through several simulated steps


@dataclass(frozen=True)
class Variant:
    """One audited change of the app: its row label, app, images in the parquet, nodes and run config."""

    label: str
    app: str
    images: int
    nodes: int
    run_config: str
    exclude_presets: bool = False
    exclude: tuple[str, ...] = ()  # more attacks left out for their cost on this variant


VARIANTS: dict[str, Variant] = {
    "app": Variant("as above: one SGD step of 4 images, lr 0.1", "quickstart-pytorch", 10, 2, "batch-size=4"),
    "secagg": Variant(
        "the app's SecAgg+ workflow, 3 nodes: the server attacks the clear aggregate of 12 images",
        "secagg-pytorch",
        15,
        3,
        "batch-size=4",
    ),
    "small-steps": Variant(
        "smaller lr (0.01), more local steps (batch 1, 2 epochs: 8 SGD steps on the same 4 images)*",
        "quickstart-pytorch",
        10,
        2,
        "batch-size=1 local-epochs=2 learning-rate=0.01",
        exclude_presets=True,
    ),
    "real-settings": Variant(
        "the app's real settings: batch 32, one epoch of 200 images (7 steps; 500 images over 2 nodes)*",
        "quickstart-pytorch",
        500,
        2,
        "batch-size=32",
        exclude_presets=True,
        exclude=("fedleak@geiping-budget",),
    ),
}


def write_parquet(data: Path, images: int, path: Path) -> Path:
    """The first ``images`` CIFAR-10 training images of ``data`` as Flower Datasets stores CIFAR-10."""
    if path.is_file():
        return path
    import datasets
    from PIL import Image

    arrays = np.load(data)
    pixels = arrays["x_train"][:images].transpose(0, 2, 3, 1)  # (N, 3, H, W) -> the (H, W, 3) PNGs hold
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)})
    table = {"img": [Image.fromarray(p) for p in pixels], "label": [int(v) for v in arrays["y_train"][:images]]}
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(table, features=features).to_parquet(str(path))
    return path


def audit(name: str, variant: Variant, data: Path, out: Path, max_seconds: float) -> Path:
    """Run (or read back) one variant's ``fedsim audit``; returns its run directory."""
    run_dir = out / name
    if (run_dir / "summary.json").is_file():
        return run_dir
    if run_dir.exists():
        raise SystemExit(f"{run_dir}: an unfinished audit; remove it to rerun")
    parquet = write_parquet(data, variant.images, out / "data" / f"cifar10-{variant.images}.parquet")
    exclude = ["ig@geiping-2020", "ig-dip", *(SLOW_PRESETS if variant.exclude_presets else []), *variant.exclude]
    app = APPS / variant.app
    command = [
        *(sys.executable, "-m", "fedsim.cli", "audit", str(app), "--config", str(APPS / f"{variant.app}-audit.yaml")),
        *("--run-config", f'num-server-rounds=1 {variant.run_config} data-files="{parquet}"'),
        *(
            "--set",
            f"app.num_supernodes={variant.nodes}",
            "--set",
            f"adversary.portfolio_exclude=[{', '.join(exclude)}]",
        ),
        *("--set", f"adversary.budget.max_seconds={max_seconds}", "--set", f"output.dir={out}"),
        *("--set", f"output.run_name={name}", "--quiet"),
    ]
    if variant.app == "quickstart-pytorch":  # its fraction-train defaults to half the nodes: train (and attack) all
        command[command.index("--run-config") + 1] += " fraction-train=1.0"
        command += ["--set", "adversary.clients=[0]"]
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO)
    print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
    return run_dir


def table_lines(runs: dict[str, Path]) -> list[str]:
    """One row per variant and attacked target: the attacker's pick and its test, the oracle beside it."""
    lines = [
        "| the app, changed through its run config | target | attacker's pick: PSNR (dB) / SSIM (attack) | "
        "floor SSIM | p | verdict | oracle: SSIM (attack), its floor, its verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, run_dir in runs.items():
        run = fedsim.load_run(run_dir)
        attacks = run.events("attack")
        for _, row in run.verdicts().iterrows():
            psnr = picked_psnr(attacks, row)
            lines.append(
                f"| {VARIANTS[name].label} | {row['target']} | {psnr:.1f} / {row['ssim_mean']:.2f} ({row['attack']}) | "
                f"{row['floor_ssim']:.2f} | {row['p_value']:.2g} | {row['verdict']} | "
                f"{row['oracle_ssim']:.2f} ({row['oracle_attack']}), {row['oracle_floor_ssim']:.2f}, "
                f"{row['oracle_verdict']} |"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-app-audit")
    parser.add_argument("--only", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="the saturation step's cap per group")
    parser.add_argument(
        "--docs", action="store_true", help=f"write the table into README.md between its {MARKER} markers"
    )
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        parser.error(f"--only: {', '.join(unknown)} is not a variant; allowed: {', '.join(VARIANTS)}")
    data = data_file(args.data_dir, CIFAR)
    out = args.out.resolve()
    runs = {name: audit(name, VARIANTS[name], data, out, args.max_seconds) for name in names}
    lines = table_lines(runs)
    print("\n".join(lines))
    if args.docs:
        write_between_markers(REPO / "README.md", MARKER, lines)


if __name__ == "__main__":
    main()
