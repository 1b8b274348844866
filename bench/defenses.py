"""Defenses under fedsim's evaluation protocol: the strongest attack per defense, a model that learns, seeds.

Runs ``configs/defense-evaluation.yaml`` as one sweep (``fedsim sweep``: resumable, ``--parallel``) over
the defenses below x seeds 0-2: MNIST, 10 clients taking one SGD step on 4 images per round, 40 rounds;
a man-in-the-middle attacks clients 0-2 in rounds 1, 20 and 40 with ``attacks: strongest`` (every attack
whose requirements hold, the adaptive one of the defense included). Per run:

* leakage: on each attacked (round, client) pair, the strongest attack there (``Run.strongest(per="round")``:
  the best SSIM against the ground truth, an oracle over N attacks) and its images' SSIM and PSNR, beside each
  attack's own; which attacks won;
* utility: the final test accuracy (2,000 held-out images); its drop against the undefended run of the
  same seed (paired); the largest per-client epsilon (dpsgd).

Per defense it prints, over the images of every seed, the mean SSIM, the median PSNR and the fractions of images
at or above 30 and 40 dB, and over the seeds accuracy and its drop, each with a 95 % bootstrap interval
(``fedsim.reporting.summaries``, ``value [low, high]``), and checks the
protocol's bar: the undefended accuracy is at least three times the constant predictor's. The adaptive
attacks' settings were tuned on CIFAR-10 test images (``bench.adaptive_tuning``), never on these.
Last line: JSON. The markdown table with ``--markdown``; ``--docs`` writes it into ``docs/results/defenses.md``.

    .venv/bin/python -m bench.defenses [--data-dir DIR] [--out DIR] [--parallel 2] [--seeds 3] [--docs]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import yaml

import fedsim
from bench.common import (
    CONFIGS,
    DOCS_PAGES,
    MNIST,
    REPO,
    add_data_dir,
    add_docs_flag,
    data_file,
    fedsim_sweep,
    format_interval,
    interval,
    leakage_cells,
    strongest_images,
    write_between_markers,
)
from fedsim.config import parse_config

CONFIG = CONFIGS / "defense-evaluation.yaml"
MARKER = "defense-table"
#: label -> client.defenses (the settings of the earlier defense table and papers 000, 001, 004)
DEFENSES: dict[str, list[dict]] = {
    "none": [],
    "dpsgd": [{"name": "dpsgd", "target_epsilon": 8, "max_grad_norm": 1.0}],
    "pdpsgd": [{"name": "pdpsgd", "sigma": 0.1}],
    "gradient_dropout": [{"name": "gradient_dropout", "p": 0.6, "sigma": 0.005}],
    "soteria": [{"name": "soteria", "ratio": 0.8}],
    "prune": [{"name": "prune", "ratio": 0.9}],
    "noise": [{"name": "noise", "sigma": 0.01}],
    "clip": [{"name": "clip", "max_norm": 0.5}],
}
#: the other settings of papers 000, 001 and 004 (configs/papers/), run into the same sweep by bench.paper_results
PAPER_EXTRAS: dict[str, list[dict]] = {
    "dpsgd-eps1": [{"name": "dpsgd", "target_epsilon": 1, "max_grad_norm": 1.0}],
    "pdpsgd-sigma1": [{"name": "pdpsgd", "sigma": 1.0}],
    "noise-0.1": [{"name": "noise", "sigma": 0.1}],
    "gradient_dropout-p0.8": [{"name": "gradient_dropout", "p": 0.8, "sigma": 0.005}],
    "gradient_dropout-p0.4": [{"name": "gradient_dropout", "p": 0.4, "sigma": 0.005}],
}


def settings_key(defenses: list) -> str:
    """A defense list as a comparable string (validated, so that defaults are filled alike)."""
    parsed = parse_config({"client": {"defenses": defenses}}).client.defenses
    return repr([d.model_dump() for d in parsed])


def run_sweep(data: Path, out: Path, seeds: int, parallel: int, settings: dict[str, list[dict]] = DEFENSES) -> Path:
    """Run (or continue) the sweep of ``settings`` x seeds under ``out/sweep``; finished points are skipped, so
    a larger ``settings`` later adds only its new points."""
    raw = yaml.safe_load(CONFIG.read_text())
    raw["data"] = {**raw["data"], "dataset": "npz", "path": str(data)}
    raw["sweep"] = {"grid": {"client.defenses": settings, "seed": list(range(seeds))}}
    return fedsim_sweep(raw, out / f"config-{len(settings)}.yaml", out / "sweep", parallel)


def per_run(run: fedsim.rundir.reader.Run) -> dict:
    """One run's leakage image by image (``strongest_images`` per attacked round and client) and its utility."""
    evals = run.events("eval")
    fits = run.events("fit")
    epsilons = [c for c in fits.columns if c.endswith(".epsilon")] if not fits.empty else []
    return {
        **strongest_images(run, per="round"),
        "accuracy": float(evals.iloc[-1]["accuracy"]),
        "epsilon": float(fits[epsilons].max().max()) if epsilons else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-defenses")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--markdown", action="store_true", help="print the markdown table too")
    add_docs_flag(parser, MARKER)
    args = parser.parse_args(argv)
    data = data_file(args.data_dir, MNIST)
    sweep = fedsim.load_sweep(run_sweep(data, args.out.resolve(), args.seeds, args.parallel))
    results: dict[str, list[dict]] = {label: [] for label in DEFENSES}
    label_of = {settings_key(defenses): label for label, defenses in DEFENSES.items()}
    for run in sweep.runs.values():
        label = label_of.get(settings_key([d.model_dump() for d in run.config.client.defenses]))
        if label is not None and run.summary:
            results[label].append({"seed": run.config.seed, **per_run(run)})
    baseline = {r["seed"]: r["accuracy"] for r in results["none"]}
    table = {}
    for label, rows in results.items():
        if not rows:
            continue
        drops = [100 * (baseline[r["seed"]] - r["accuracy"]) for r in rows if r["seed"] in baseline]
        epsilons = [r["epsilon"] for r in rows if r["epsilon"] is not None]
        table[label] = {
            "seeds": len(rows),
            **leakage_cells(rows),
            "accuracy": interval([100 * r["accuracy"] for r in rows]),
            "drop": interval(drops) if drops else None,
            "epsilon": max(epsilons) if epsilons else None,
        }
    print(
        f"{CONFIG.name}: {len(sweep.runs)} runs under {sweep.path}; the strongest attack per attacked (round, client) "
        "by SSIM against the ground truth; over seeds [95 % bootstrap interval]"
    )
    fmt = format_interval
    for label, row in table.items():
        epsilon = f"{row['epsilon']:.2f}" if row["epsilon"] is not None else "-"
        drop = fmt(row["drop"], 1) if row["drop"] else "-"
        print(
            f"   {label:<17} SSIM {row['ssim']} (over {row['compared']} attacks; alone: {row['alone']}), "
            f"PSNR median {row['psnr']} dB, >= 40 dB {row['at_40db']}, accuracy {fmt(row['accuracy'], 1)} %, "
            f"drop {drop} points, epsilon {epsilon}"
        )
    classes = np.bincount(np.load(data)["y"])  # the test split is a random stratum of these
    constant = 100 * classes.max() / classes.sum()
    if "none" in table:
        ratio = table["none"]["accuracy"].value / constant
        print(
            f"   undefended accuracy / constant predictor ({constant:.1f} %): {ratio:.1f} (protocol: >= 3): "
            f"{'met' if ratio >= 3 else 'NOT met'}"
        )
    lines = [
        "| defense | SSIM, ground-truth selection over N attacks | N | each attack alone: SSIM | PSNR median (dB) | "
        "at >= 30 dB | at >= 40 dB | test accuracy (%) | drop (points) | epsilon | won by (targets) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, row in table.items():
        epsilon = f"{row['epsilon']:.2f}" if row["epsilon"] is not None else "-"
        lines.append(
            f"| {label} | {row['ssim']} | {row['compared']} | {row['alone']} | {row['psnr']} | {row['at_30db']} | "
            f"{row['at_40db']} | {fmt(row['accuracy'], 1)} | {fmt(row['drop'], 1) if row['drop'] else '-'} | "
            f"{epsilon} | {row['won']} |"
        )
    if args.markdown:
        print("\n" + "\n".join(lines))
    if args.docs:
        seconds = sum(float((run.summary or {}).get("wall_seconds_last_session", 0.0)) for run in sweep.runs.values())
        write_between_markers(
            DOCS_PAGES[MARKER],
            MARKER,
            [
                f"Regenerate with `.venv/bin/python -m bench.defenses --data-dir DIR --docs`, DIR holding `{MNIST}` "
                f"({len(sweep.runs)} runs, {seconds / 60:.0f} min of run time on {os.cpu_count()} CPU cores; "
                "`--parallel 2` runs two "
                "at once). Seeds 0-2; [95 % bootstrap intervals] (`fedsim.reporting.summaries`: images resampled "
                "within each seed; accuracy and drop over the seeds):",
                "",
                *lines,
                "",
                f"The undefended model reaches {table['none']['accuracy'].value:.1f} % on the 2,000 held-out images, "
                f"{table['none']['accuracy'].value / constant:.1f} times the constant predictor's {constant:.1f} %. "
                "SSIM and PSNR: on each attacked (round, client) pair, the attack with the best SSIM against that "
                "client's batch of 4 images (ground-truth selection over N attacks: an oracle, an upper bound on what "
                "an attacker would pick), its images' mean SSIM, median PSNR and fractions at or above 30 and 40 dB "
                "over all seeds; each attack alone: its own mean SSIM over the same images; won by: how many of "
                "those pairs each attack won. Drop: paired with the undefended run of the same seed.",
            ],
        )
    print(json.dumps({label: {k: getattr(v, "value", v) for k, v in row.items()} for label, row in table.items()}))


if __name__ == "__main__":
    main()
