"""The papers' results under fedsim's evaluation protocol, one table (``--docs``: into docs/results/papers.md).

Papers 000, 001 and 004 (``configs/papers/``) compare defense settings on the protocol of
``configs/defense-evaluation.yaml`` (MNIST, a model that learns, rounds 1/20/40, clients 0-2, the strongest
attack, seeds 0-2). Their settings overlap, so every setting runs once, in the sweep of
``bench.defenses`` (``--out``, default ``runs/bench-defenses``; finished points are skipped, so a killed
invocation resumes and the defense table's runs are reused), and each paper's table is read from it:
per setting the strongest attack's mean SSIM and median PSNR over the images of the attacked rounds and
clients of every seed (the best attack there by SSIM against the ground truth, an oracle over N attacks; 95 %
bootstrap intervals, ``fedsim.reporting.summaries``) beside each attack's own, the attacks that won, the final test
accuracy and its drop against the undefended run of the same seed (paired), and the largest epsilon. The
table is printed, and with ``--docs`` replaces what lies between the paper-results markers of
``docs/results/papers.md``; every number comes from the runs' metrics. Paper 003's question (per client versus
aggregated) has its own table (``python -m bench.secagg compare``).

    .venv/bin/python -m bench.paper_results [--data-dir DIR] [--parallel 2] [--table-only] [--docs]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

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
    format_interval,
    interval,
    leakage_cells,
    write_between_markers,
)
from bench.defenses import DEFENSES, PAPER_EXTRAS, per_run, run_sweep, settings_key

PAPERS = {"000": "000-dp-vs-pdp.yaml", "001": "001-defense-frontier.yaml", "004": "004-gradient-dropout.yaml"}
MARKER = "paper-results"
COMMAND = ".venv/bin/python -m bench.paper_results --data-dir DIR --parallel 2 --docs"


def paper_table(paper: str, by_setting: dict[str, list[dict]]) -> list[str]:
    grid = yaml.safe_load((CONFIGS / "papers" / PAPERS[paper]).read_text())["sweep"]["grid"]["client.defenses"]
    lines = []
    for label, defenses in grid.items():
        rows = by_setting.get(settings_key(defenses), [])
        if not rows:
            lines.append(f"| {paper} | {label} | not run | | | | | | | | |")
            continue
        cells = leakage_cells(rows)
        accuracy = interval([100 * r["accuracy"] for r in rows])
        drops = [r["drop"] for r in rows if r["drop"] is not None]
        drop = interval(drops) if drops else None
        epsilons = [r["epsilon"] for r in rows if r["epsilon"] is not None]
        lines.append(
            f"| {paper} | {label} | {cells['ssim']} | {cells['compared']} | {cells['alone']} | {cells['psnr']} | "
            f"{cells['at_40db']} | {cells['won']} | {format_interval(accuracy, 1)} | "
            + (format_interval(drop, 1) if drop else "-")
            + " | "
            + (f"{max(epsilons):.2f}" if epsilons else "-")
            + f" ({len(rows)} seeds) |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-defenses")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--table-only", action="store_true", help="run nothing; tabulate the runs there are")
    add_docs_flag(parser, MARKER)
    args = parser.parse_args(argv)
    sweep_dir = args.out.resolve() / "sweep"
    if not args.table_only:
        data = data_file(args.data_dir, MNIST)
        run_sweep(data, args.out.resolve(), args.seeds, args.parallel, {**DEFENSES, **PAPER_EXTRAS})
    sweep = fedsim.load_sweep(sweep_dir)
    runs = [run for run in sweep.runs.values() if run.summary]
    baseline = {run.config.seed: per_run(run)["accuracy"] for run in runs if not run.config.client.defenses}
    by_setting: dict[str, list[dict]] = {}
    for run in runs:
        result = per_run(run)
        seed = run.config.seed
        result["drop"] = 100 * (baseline[seed] - result["accuracy"]) if seed in baseline else None
        by_setting.setdefault(settings_key([d.model_dump() for d in run.config.client.defenses]), []).append(result)
    seconds = sum(float(run.summary.get("wall_seconds_last_session", 0.0)) for run in runs)
    lines = [
        f"Regenerate with `{COMMAND}`, DIR holding `{MNIST}` (about 20 minutes on 2 cores beyond `bench.defenses`, "
        f"whose runs it reuses). Data: MNIST arrays `{MNIST}` (20 % held out); machine: {os.cpu_count()} CPU cores "
        f"({platform.machine()}), no GPU; {len(runs)} runs, {seconds / 60:.0f} min of run time; generated "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "| paper | setting | SSIM, ground-truth selection over N attacks | N | each attack alone: SSIM | "
        "PSNR median (dB) | at >= 40 dB | won by (targets) | test accuracy (%) | drop (points) | epsilon |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *[line for paper in PAPERS for line in paper_table(paper, by_setting)],
        "",
        "[95 % bootstrap intervals] (`fedsim.reporting.summaries`: images resampled within each seed; accuracy and "
        "drop over the seeds). SSIM and PSNR: on each attacked (round, client) pair (rounds 1, 20, 40; clients 0-2; "
        "4 images each), the attack with the best SSIM against the ground truth (ground-truth selection over N "
        "attacks: an oracle), its images' mean SSIM and median PSNR over all seeds; each attack alone: its own "
        "mean SSIM; won by: how many of those pairs each attack won. Drop: against the undefended run of the same "
        "seed.",
    ]
    if args.docs:
        write_between_markers(DOCS_PAGES[MARKER], MARKER, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
