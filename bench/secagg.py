"""SecAgg+ benchmarks: its cost per round against FedAvg, and per-client against aggregated leakage.

    .venv/bin/python -m bench.secagg timing  [--data-dir DIR] [--clients 10] [--rounds 5] [--repeats 2]
    .venv/bin/python -m bench.secagg compare [--data-dir DIR] [--clients 2 4 8] [--seeds 3] [--parallel 2] [--out DIR]
                                             [--max-seconds 300] [--exclude ig-dip ig@geiping-2020] [--docs]

``timing`` runs the same federation (CIFAR-10 images, LeNet, one local epoch) under FedAvg and under
SecAgg+, alternating, in one invocation, and prints the SecAgg+ / FedAvg ratio of the steady time per
round ((end of round R - end of round 1) / (R - 1): round 1 pays for Ray's start-up), and the test
accuracy of both after every round: same seed, same clients, same updates, so any difference is
SecAgg+'s quantisation and clipping.

``compare`` runs ``configs/per-client-vs-aggregated.yaml`` (each client trains on one CIFAR-10 image per
round, one step; ``attacks: strongest``) as one resumable sweep per variant over federation sizes x seeds
0-2, and prints per variant and size, over the images of every seed (``fedsim.reporting.summaries``: 95 %
bootstrap intervals, images resampled within seeds), the attacker's own pick per target (the lowest gradient
match, no ground truth: ``Run.attacker_pick``), its mean SSIM, median PSNR and how many picks saturated within
``--max-seconds`` (``adversary.budget.max_seconds``, 300 by default so that the table regenerates in about an
hour); then the mean SSIM of the strongest attack per target (picked
by SSIM against the ground truth, an oracle: "ground-truth selection over N attacks"), beside each attack's own
mean SSIM; the median PSNR and the fractions of images at or above 30 and 40 dB; and which attacks won. The
variants: FedAvg attacked on the wire per client, SecAgg+ attacked by an honest server on the aggregate,
SecAgg+ attacked on the wire (the masked vectors; it must recover nothing), and SecAgg+ with a malicious
server (Robbing the Fed's imprint, ``rtf``). ``fedsim report OUT/<variant>`` shows every target and round;
``--docs`` writes the table into ``docs/results/aggregation.md``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from pathlib import Path

import yaml

import fedsim
from bench.common import (
    CIFAR,
    CONFIGS,
    DOCS_PAGES,
    add_data_dir,
    add_docs_flag,
    data_file,
    fedsim_sweep,
    leakage_cells,
    set_dotted,
    strongest_images,
    write_between_markers,
)
from fedsim.config import load_config
from fedsim.engine.lifecycle.simulation import quiet_frameworks
from fedsim.engine.run import run_experiment
from fedsim.judge.floor import FLOOR_LEVEL
from fedsim.judge.verdict import MIN_TARGETS
from fedsim.rundir.writer import RunStore

CONFIG = CONFIGS / "per-client-vs-aggregated.yaml"
COMPARE_MARKER = "compare-table"

# variant -> what it sets on top of the config
VARIANTS: dict[str, list[str]] = {
    "fedavg-mitm": ["strategy.name=fedavg", "adversary.tap=mitm", "adversary.targets=per-client"],
    "secagg-server": ["strategy.name=secagg+", "adversary.tap=server", "adversary.targets=aggregate"],
    "secagg-mitm": ["strategy.name=secagg+", "adversary.tap=mitm", "adversary.targets=per-client"],
    "secagg-malicious": [
        "strategy.name=secagg+",
        "adversary.tap=server",
        "adversary.targets=aggregate",
        "adversary.server=malicious",
        "adversary.attacks=[rtf]",
        "adversary.portfolio=listed",
        "adversary.portfolio_exclude=[]",
        "adversary.portfolio_options={}",
    ],
}


VARIANT_NAMES = {
    "fedavg-mitm": "FedAvg, man-in-the-middle",
    "secagg-server": "SecAgg+, honest server",
    "secagg-mitm": "SecAgg+, man-in-the-middle",
    "secagg-malicious": "SecAgg+, malicious server",
}


def steady_seconds_per_round(run_dir: Path) -> float:
    ends = [row["time"] for row in RunStore(run_dir).rows() if row["event"] == "eval"]  # rounds 0..R
    return (ends[-1] - ends[1]) / (len(ends) - 2)


def accuracies(run_dir: Path) -> list[float]:
    return [row["accuracy"] for row in RunStore(run_dir).rows() if row["event"] == "eval"]


def timing(args: argparse.Namespace, data: Path) -> None:
    common = [
        "data.dataset=npz",
        f"data.path={data}",
        "data.normalize=global",
        f"data.max_train_samples={100 * args.clients}",
        "data.max_test_samples=500",
        "model.init=default",
        "model.activation=relu",
        f"federation.num_clients={args.clients}",
        f"federation.rounds={args.rounds}",
        "client.batch_size=20",
        "client.local_steps=null",
        "client.local_epochs=1",
        "client.lr=0.05",
        "adversary.attacks=[]",
        "device=cpu",
        "output.ground_truth=false",
    ]
    seconds: dict[str, list[float]] = {"fedavg": [], "secagg+": []}
    curves: dict[str, list[float]] = {}
    for repeat in range(args.repeats):
        for strategy in seconds:
            config = load_config(
                CONFIG,
                [
                    *common,
                    f"strategy.name={strategy}",
                    f"output.dir={args.out}",
                    f"output.run_name=timing-{strategy.rstrip('+')}-{repeat}-{time.time_ns()}",
                ],
            )
            run_dir = run_experiment(config, quiet=True)
            seconds[strategy].append(steady_seconds_per_round(run_dir))
            curves[strategy] = accuracies(run_dir)
            print(f"repeat {repeat + 1}: {strategy} {seconds[strategy][-1]:.3f} s/round", flush=True)
    fedavg, secagg = (statistics.median(seconds[s]) for s in ("fedavg", "secagg+"))
    print(
        f"\n{args.clients} clients, {args.rounds} rounds, median of {args.repeats}: FedAvg {fedavg:.3f} s/round, "
        f"SecAgg+ {secagg:.3f} s/round, ratio SecAgg+/FedAvg {secagg / fedavg:.2f}x"
    )
    print("test accuracy per round (same seed):")
    print("  round   FedAvg  SecAgg+  difference")
    for server_round, (a, b) in enumerate(zip(curves["fedavg"], curves["secagg+"])):
        print(f"  {server_round:5d}  {a:7.4f}  {b:7.4f}  {b - a:+.4f}")


def _all_saturated(rows: list[dict]) -> bool:
    """Whether every attacker's pick of these runs saturated (True where no pick carries a saturation)."""
    return all(all(seed.get("pick_saturated") or [True]) for seed in rows)


def compare(args: argparse.Namespace, data: Path) -> None:
    """One resumable sweep per variant over clients x seeds (``fedsim sweep --parallel``), then the table."""
    out = Path(args.out).resolve() / "per-client-vs-aggregated"
    results: dict[tuple[str, int], list[dict]] = {}
    for variant in args.variants:
        raw = yaml.safe_load(CONFIG.read_text())
        raw["data"] = {
            **raw["data"],
            "dataset": "npz",
            "path": str(data),
            "max_train_samples": 8 * max(args.clients),
        }  # each client trains on one image per round
        for assignment in VARIANTS[variant]:
            key, value = assignment.split("=", 1)
            set_dotted(raw, key, yaml.safe_load(value))
        # the saturation step's time cap per group of targets and the costliest attacks left out: what makes the
        # table regenerate in about an hour on two cores (the table's header says both)
        set_dotted(raw, "adversary.budget.max_seconds", args.max_seconds)
        if variant != "secagg-malicious":
            set_dotted(raw, "adversary.portfolio_exclude", list(args.exclude))
        raw["sweep"] = {"grid": {"federation.num_clients": list(args.clients), "seed": list(range(args.seeds))}}
        fedsim_sweep(raw, out / f"{variant}.yaml", out / variant, args.parallel)
        for run in fedsim.load_sweep(out / variant).runs.values():
            found = strongest_images(run, per="target")
            if found["targets"]:
                kind = "aggregate" if run.config.adversary.targets == "aggregate" else "per-client"
                results.setdefault((variant, run.config.federation.num_clients), []).append({**found, "kind": kind})
    lines = [
        "| variant | clients | target | attacker's pick: SSIM | PSNR median (dB) | picked (targets) | saturated | "
        "floor (SSIM) | verdict (count test) | SSIM, ground-truth selection over N attacks | N | "
        "each attack alone: SSIM | PSNR median (dB) | at >= 30 dB | at >= 40 dB | won by (targets) | seeds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (variant, clients), rows in sorted(
        results.items(), key=lambda item: (args.variants.index(item[0][0]), item[0][1])
    ):
        cells = leakage_cells(rows)
        lines.append(
            f"| {VARIANT_NAMES[variant]} | {clients} | {rows[0]['kind']} | {cells['pick_ssim']} | "
            f"{cells['pick_psnr']} | {cells['pick_won']} | {cells['saturated']} | {cells['floor']} | "
            f"{cells['leaking']} | {cells['ssim']} | {cells['compared']} | "
            f"{cells['alone']} | {cells['psnr']} | {cells['at_30db']} | {cells['at_40db']} | {cells['won']} | "
            f"{len(rows)} |"
        )
    all_saturated = all(_all_saturated(rows) for rows in results.values())
    print("\n".join(lines))
    print(f"\nruns: {out}; every target and round side by side: .venv/bin/fedsim report {out}/<variant>")
    if args.docs:
        runs = [run for variant in args.variants for run in fedsim.load_sweep(out / variant).runs.values()]
        seconds = sum(float((run.summary or {}).get("wall_seconds_last_session", 0.0)) for run in runs)
        command = ".venv/bin/python -m bench.secagg compare --data-dir DIR --docs" + (
            "" if args.variants == list(VARIANTS) else f" --variants {' '.join(args.variants)}"
        )
        write_between_markers(
            DOCS_PAGES[COMPARE_MARKER],
            COMPARE_MARKER,
            [
                f"`{command}` ({len(runs)} runs, {seconds / 60:.0f} min of run time on {os.cpu_count()} CPU cores, "
                f"`--parallel {args.parallel}`; generated {time.strftime('%Y-%m-%d')}). One CIFAR-10 training image "
                "per client, one SGD step, DLG's untrained sigmoid LeNet; seeds 0-2 (each seed draws other images "
                "and another initialisation). `attacks: strongest`: every attack that applies and its presets, "
                f"less {', '.join(f'`{name}`' for name in args.exclude) or 'none'} (their cost on two cores), then "
                f"the saturation step, capped at {args.max_seconds:.0f} s per group of targets"
                + ("" if all_saturated else " (NOT every pick saturated: a lower bound)")
                + ". The attacker's pick is the result with the lowest gradient match (what the attacker sees, no "
                "ground truth); 'saturated' counts the picks whose budget saturated. "
                "On each target the attack with the best SSIM against the ground truth "
                "(ground-truth selection over N attacks: an oracle, an upper bound on what an attacker would pick), "
                "beside each attack's own mean SSIM over the same images. The verdict is read from the attacker's "
                "pick: its floor is what guesses from public images reach through the same selection, and the cell "
                "counts the targets whose pick beats it, with the binomial test of that count at level "
                f"{FLOOR_LEVEL:g} "
                f"(`fedsim.judge.verdict.judge_cell`; fewer than {MIN_TARGETS} targets are marked underpowered). "
                "Over "
                "the images of all seeds, the mean SSIM, the median PSNR and the fractions of images at or above 30 "
                "and 40 dB, with [95 % bootstrap intervals] (`fedsim.reporting.summaries`: images resampled within "
                "each seed):",
                "",
                *lines,
            ],
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    time_parser = sub.add_parser("timing", help="SecAgg+ / FedAvg time per round, and accuracy, same seed")
    time_parser.add_argument("--clients", type=int, default=10)
    time_parser.add_argument("--rounds", type=int, default=5)
    time_parser.add_argument("--repeats", type=int, default=2)
    compare_parser = sub.add_parser(
        "compare", help="per-client vs aggregated leakage (configs/per-client-vs-aggregated.yaml)"
    )
    compare_parser.add_argument("--clients", type=int, nargs="+", default=[2, 4, 8])
    compare_parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    compare_parser.add_argument("--seeds", type=int, default=3)
    compare_parser.add_argument(
        "--exclude",
        nargs="*",
        default=["ig-dip", "ig@geiping-2020"],
        help="adversary.portfolio_exclude of the honest variants (default: the two costliest on two cores)",
    )
    compare_parser.add_argument(
        "--max-seconds",
        type=float,
        default=300.0,
        help="adversary.budget.max_seconds: the saturation step's cap per group of targets (the table says whether "
        "the picks saturated within it)",
    )
    compare_parser.add_argument("--parallel", type=int, default=2)
    add_docs_flag(compare_parser, COMPARE_MARKER)
    for sub_parser in (time_parser, compare_parser):
        add_data_dir(sub_parser)
        sub_parser.add_argument("--out", type=Path, default=Path("runs"), help="parent folder of the runs")
    args = parser.parse_args(argv)
    if args.command == "timing" and args.rounds < 3:
        parser.error("--rounds must be at least 3 (round 1 is warm-up)")
    data = data_file(args.data_dir, CIFAR)
    quiet_frameworks()
    logging.getLogger("fedsim").setLevel(logging.WARNING)
    timing(args, data) if args.command == "timing" else compare(args, data)


if __name__ == "__main__":
    main()
