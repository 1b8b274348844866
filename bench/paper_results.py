"""The papers' results under fedsim's evaluation protocol, one table (``--docs``: into docs/results/papers.md).

Papers 000, 001 and 004 (``configs/papers/``) compare defense settings; here each setting is measured under
``bench.defenses``' protocol (utility at the plateau of the federation that fine-tunes the pre-trained
``lenet-fc`` on MNIST, one defended gradient per client and round; leakage of 2-image gradients on the early model
with the strongest attack, the adaptive ones tuned; seeds 0-1). Their settings
overlap with the defense sweep's, so every setting runs once, in ``bench.defenses``' sweeps (``--out``, default
``runs/bench-defenses``; finished points are skipped, so a killed invocation resumes and the defense table's runs
are reused; ``PAPER_EXTRAS`` adds the papers' settings it lacks), and each paper's table is read from them: per
setting the strongest attack's mean SSIM and median PSNR over the attacked clients' images of every seed (the
best attack there by SSIM against the ground truth, an oracle over N attacks; 95 % bootstrap intervals,
``fedsim.reporting.summaries``), its floor and verdict, beside each attack's own SSIM, the attacks that won, the
test accuracy at the plateau and its drop against the undefended run of the same seed (paired), and the
example-level epsilon. The table is printed, and with ``--docs`` replaces what lies between the paper-results
markers of ``docs/results/papers.md``; every number comes from the runs' metrics. Paper 003's question (per
client versus aggregated) has its own table (``python -m bench.secagg compare``).

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
    write_between_markers,
)
from bench.defenses import (
    DEFENSES,
    PAPER_EXTRAS,
    SOTERIA_LAYER,
    collect,
    leakage_defenses,
    leakage_run,
    per_run,
    run_leakage_sweep,
    run_sweep,
    settings_key,
    summarize_label,
)

PAPERS = {"000": "000-dp-vs-pdp.yaml", "001": "001-defense-frontier.yaml", "004": "004-gradient-dropout.yaml"}
MARKER = "paper-results"
COMMAND = ".venv/bin/python -m bench.paper_results --data-dir DIR --parallel 2 --docs"
SETTINGS = {**DEFENSES, **PAPER_EXTRAS}
#: sweep folders of PAPER_EXTRAS under --out (a sweep's points are numbered in grid order: extras in the defense
#: sweeps would renumber, and so rerun, every later point)
EXTRAS_UTILITY, EXTRAS_LEAKAGE = "paper-extras", "paper-extras-leakage"


def on_lenet_fc(defenses: list[dict]) -> list[dict]:
    """A paper's defenses as they act on ``lenet-fc``: Soteria without a layer defends the model's first Linear,
    which is its representation layer (``SOTERIA_LAYER``), the setting the defense sweep runs."""
    return [{**d, "layer": SOTERIA_LAYER} if d["name"] == "soteria" and d.get("layer") is None else d for d in defenses]


def paper_table(paper: str, table: dict[str, dict]) -> list[str]:
    """One paper's settings as rows of the table; ``table``: ``summarize_label``'s cells by settings key."""
    grid = yaml.safe_load((CONFIGS / "papers" / PAPERS[paper]).read_text())["sweep"]["grid"]["client.defenses"]
    lines = []
    for label, defenses in grid.items():
        row = table.get(settings_key(on_lenet_fc(defenses)))
        if row is None:
            lines.append(f"| {paper} | {label} | not run | | | | | | | | | | |")
            continue
        floor = f"{row['floor']:.3f}" if row["floor"] is not None else "-"
        lines.append(
            f"| {paper} | {label} | {row.get('ssim', '-')} | {row.get('compared', '-')} | {floor} | {row['verdict']} | "
            f"{row.get('alone', '-')} | {row.get('psnr', '-')} | {row.get('at_40db', '-')} | {row.get('won', '-')} | "
            f"{format_interval(row['accuracy'], 1) if row['accuracy'] else '-'} | "
            f"{format_interval(row['drop'], 1) if row['drop'] else '-'} | "
            f"{'-' if row['epsilon'] is None else format(row['epsilon'], '.2f')} "
            f"({row['seeds']}, {row['leakage_seeds']} seeds) |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_dir(parser)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-defenses")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--table-only", action="store_true", help="run nothing; tabulate the runs there are")
    add_docs_flag(parser, MARKER)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if not args.table_only:
        data = data_file(args.data_dir, MNIST)
        # the defense sweeps first (their finished points are skipped), then the papers' other settings apart
        run_leakage_sweep(data, out, args.seeds, args.parallel)
        run_sweep(data, out, args.seeds, args.parallel)
        run_leakage_sweep(data, out, args.seeds, args.parallel, PAPER_EXTRAS, EXTRAS_LEAKAGE)
        run_sweep(data, out, args.seeds, args.parallel, PAPER_EXTRAS, EXTRAS_UTILITY)
    leakage_settings = leakage_defenses(out / "federated.npz", SETTINGS)
    utility, leakage = {}, {}
    for folder, extras_folder, found, settings, read in (
        ("sweep", EXTRAS_UTILITY, utility, SETTINGS, per_run),
        ("leakage", EXTRAS_LEAKAGE, leakage, leakage_settings, leakage_run),
    ):
        for key in (folder, extras_folder):
            for label, rows in collect(out / key, settings, read).items():
                found.setdefault(label, []).extend(rows)
    baseline = {r["seed"]: r["accuracy"] for r in utility["none"]}
    table = {
        settings_key(SETTINGS[label]): summarize_label(utility[label], leakage[label], [], baseline)
        for label in SETTINGS
        if utility[label] or leakage[label]
    }
    runs = [
        run
        for folder in (out / name for name in ("sweep", "leakage", EXTRAS_UTILITY, EXTRAS_LEAKAGE))
        if (folder / "sweep.json").is_file()
        for run in fedsim.load_sweep(folder).runs.values()
        if run.summary
    ]
    seconds = sum(float(run.summary.get("wall_seconds_last_session", 0.0)) for run in runs)
    lines = [
        f"Regenerate with `{COMMAND}`, DIR holding `{MNIST}` (it reuses `bench.defenses`' runs and adds the "
        f"papers' settings they lack: {', '.join(PAPER_EXTRAS)}). Machine: {os.cpu_count()} CPU cores "
        f"({platform.machine()}), no GPU; "
        f"{len(runs)} runs, {seconds / 60:.0f} min of run time; generated {time.strftime('%Y-%m-%d')}.",
        "",
        "| paper | setting | early model: SSIM, ground-truth selection over N attacks | N | floor (SSIM) | verdict | "
        "each attack alone: SSIM | PSNR median (dB) | at >= 40 dB | won by (targets) | accuracy at plateau (%) | "
        "drop (points) | epsilon_example (seeds: utility, leakage) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *[line for paper in PAPERS for line in paper_table(paper, table)],
        "",
        "[95 % bootstrap intervals] (`fedsim.reporting.summaries`: images resampled within each seed; accuracy and "
        "drop over the seeds). Leakage: on each attacked client of the leakage phase (the early model, round 1, "
        "clients 0 and 1, 2 images each), the attack with the best SSIM against the ground truth (ground-truth "
        "selection over N attacks: an oracle), its images' mean SSIM and median PSNR over all seeds, the SSIM floor "
        "(what a guess from public digits reaches) and the verdict; each attack alone: its own mean SSIM; won by: how "
        "many attacked clients each attack won. Utility: the test accuracy at the plateau of the federation that "
        "fine-tunes the pre-trained model (10 clients, each sending one defended gradient of 64 images per round); "
        "drop against the undefended run of the same seed.",
    ]
    if args.docs:
        write_between_markers(DOCS_PAGES[MARKER], MARKER, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
