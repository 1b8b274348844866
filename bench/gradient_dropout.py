"""Gradient Dropout on the kind of model paper 004 defends: its sigmoid ResNet-18 on CIFAR-10, one image per
update, attacked with Inverting Gradients and with ``ig-dropout`` (which knows the mechanism).

Runs ``configs/papers/004-gradient-dropout-resnet18.yaml`` (a resumable ``fedsim sweep`` under ``--out``; finished
points are skipped) and prints, per setting and attack, each seed's SSIM and PSNR against the ground truth, the
SSIM floor (what a guess from public CIFAR-10 images reaches), the p-value and verdict of the calibrated test
and, for ``ig-dropout``, the share of the update's entries it matched (those above 4 sigma, which only kept entries
reach). Each attack alone is tested against single guesses; the attacker's pick (no ground truth: results of attacks
built for the defense in force first, then the lowest gradient match, ``adversary.ranking``; the verdict a run
reports) against guesses through the same selection. One image per
seed, so the seeds are listed rather than summarised. ``--docs`` writes the table into ``docs/results/papers.md``.

    .venv/bin/python -m bench.gradient_dropout [--data-dir DIR] [--out DIR] [--seeds 2] [--parallel 1]
                                               [--table-only] [--docs]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import yaml

import fedsim
from bench.common import (
    CIFAR,
    CONFIGS,
    DOCS_PAGES,
    REPO,
    add_data_dir,
    add_docs_flag,
    data_file,
    fedsim_sweep,
    picked_psnr,
    write_between_markers,
)

CONFIG = CONFIGS / "papers" / "004-gradient-dropout-resnet18.yaml"
MARKER = "gradient-dropout-table"
PICK = "attacker's pick"  # the row of the result the attacker itself reports (adversary.ranking)


def run_sweep(data: Path, out: Path, seeds: int, parallel: int) -> Path:
    """The config's sweep over its settings x ``seeds`` on the CIFAR-10 arrays ``data``, under ``out``."""
    raw = yaml.safe_load(CONFIG.read_text())
    raw["data"] = {**raw["data"], "dataset": "npz", "path": str(data)}
    raw["sweep"]["grid"]["seed"] = list(range(seeds))
    return fedsim_sweep(raw, out.parent / f"{out.name}-config.yaml", out, parallel)


def attack_rows(sweep_dir: Path) -> dict[tuple[str, str], list[dict]]:
    """(setting, attack) -> one row per finished run (seed): its scores, floor, verdict and matched share."""
    rows: dict[tuple[str, str], list[dict]] = {}
    if not (sweep_dir / "sweep.json").is_file():
        return rows
    for run in fedsim.load_sweep(sweep_dir).runs.values():
        if not run.summary:
            continue
        setting = run.labels.get("client.defenses", "-")
        attacks = run.events("attack")
        for _, row in attacks[attacks["status"] == "ok"].iterrows():
            matched = row.get("matched_fraction")
            rows.setdefault((setting, row["attack"]), []).append(
                {
                    "seed": run.config.seed,
                    "ssim": float(row["ssim_mean"]),
                    "psnr": float(row["psnr_mean"]),
                    "floor": float(row["floor_ssim"]),
                    "p_value": float(row["p_value"]),
                    "verdict": str(row["verdict"]),
                    "matched": None if matched is None or matched != matched else float(matched),
                    "seconds": float(row["seconds"]),
                }
            )
        for _, pick in run.verdicts().iterrows():
            rows.setdefault((setting, PICK), []).append(
                {
                    "seed": run.config.seed,
                    "attack": str(pick["attack"]),
                    "ssim": float(pick["ssim_mean"]),
                    "psnr": picked_psnr(attacks, pick),
                    "floor": float(pick["floor_ssim"]),
                    "p_value": float(pick["p_value"]),
                    "verdict": str(pick["verdict"]),
                    "matched": None,
                    "seconds": 0.0,  # the attack rows carry the time
                }
            )
    return rows


def table_lines(rows: dict[tuple[str, str], list[dict]]) -> list[str]:
    lines = [
        "| setting | attack | SSIM per seed | PSNR per seed (dB) | floor (SSIM) | p-value | verdict "
        "| entries matched |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (setting, attack), found in sorted(rows.items(), key=lambda item: (item[0][0], item[0][1] == PICK, item[0][1])):
        found = sorted(found, key=lambda r: r["seed"])
        matched = [r["matched"] for r in found if r["matched"] is not None]

        def listed(key: str, digits: int, found: list[dict] = found) -> str:
            return ", ".join(f"{r[key]:.{digits}f}" for r in found)

        name = f"`{attack}`"
        if attack == PICK:  # only the pick's rows name an attack: the one picked on that seed
            name = f"{PICK}: " + ", ".join(f"`{r['attack']}`" for r in found)
        p_values = ", ".join(f"{r['p_value']:.2g}" for r in found)
        lines.append(
            f"| {setting} | {name} | {listed('ssim', 3)} | {listed('psnr', 1)} | {listed('floor', 3)} | "
            f"{p_values} | {', '.join(r['verdict'] for r in found)} | "
            f"{', '.join(f'{100 * m:.3f} %' for m in matched) if matched else '-'} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-gradient-dropout")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--table-only", action="store_true", help="run nothing; tabulate the runs there are")
    add_docs_flag(parser, MARKER)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if not args.table_only:
        run_sweep(data_file(args.data_dir, CIFAR), out, args.seeds, args.parallel)
    rows = attack_rows(out)
    runs = len({r["seed"] for found in rows.values() for r in found})
    seconds = sum(r["seconds"] for found in rows.values() for r in found)
    lines = table_lines(rows)
    print("\n".join(lines))
    if args.docs:
        note = (
            f"Regenerate with `.venv/bin/python -m bench.gradient_dropout --data-dir DIR --seeds {runs} --docs`, DIR "
            f"holding `{CIFAR}` ({seconds / 60:.0f} min of attack time on {os.cpu_count()} CPU cores)."
        )
        write_between_markers(DOCS_PAGES[MARKER], MARKER, [note, "", *lines])


if __name__ == "__main__":
    main()
