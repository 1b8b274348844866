"""SecAgg+ benchmarks: its cost per round against FedAvg, and per-client against aggregated leakage.

    .venv/bin/python bench/secagg.py timing  [--clients 10] [--rounds 5] [--repeats 2]
    .venv/bin/python bench/secagg.py compare [--clients 2 4 8] [--iterations 300] [--out DIR]

``timing`` runs the same federation (CIFAR-10 images, LeNet, one local epoch) under FedAvg and under
SecAgg+, alternating, in one invocation, and prints the SecAgg+ / FedAvg ratio of the steady time per
round ((end of round R - end of round 1) / (R - 1): round 1 pays for Ray's start-up), and the test
accuracy of both after every round: same seed, same clients, same updates, so any difference is
SecAgg+'s quantisation and clipping.

``compare`` runs ``configs/per-client-vs-aggregated.yaml`` once per variant and federation size (one
CIFAR-10 image per client, so ``data.max_train_samples`` = clients) and prints the mean leakage per run
and kind of target. The variants: FedAvg attacked on the wire per client, SecAgg+ attacked at the
server on the aggregate, and SecAgg+ attacked on the wire (the masked vectors; it must recover nothing).
All runs land in one folder; ``fedsim report OUT`` puts them side by side per target and round.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedsim.config import ExperimentConfig, load_config  # noqa: E402
from fedsim.results import RunStore  # noqa: E402
from fedsim.engine.runner import _quiet_frameworks, run_experiment  # noqa: E402

CONFIG = ROOT / "configs" / "per-client-vs-aggregated.yaml"
CIFAR = ROOT.parent / "shared" / "data" / "cifar10_subset.npz"

# variant -> what it sets on top of the config
VARIANTS: dict[str, list[str]] = {
    "fedavg-mitm": ["strategy.name=fedavg", "adversary.tap=mitm", "adversary.targets=per-client"],
    "secagg-server": ["strategy.name=secagg+", "adversary.tap=server", "adversary.targets=aggregate"],
    "secagg-mitm": ["strategy.name=secagg+", "adversary.tap=mitm", "adversary.targets=per-client"],
}


def steady_seconds_per_round(run_dir: Path) -> float:
    ends = [row["time"] for row in RunStore(run_dir).rows() if row["event"] == "eval"]  # rounds 0..R
    return (ends[-1] - ends[1]) / (len(ends) - 2)


def accuracies(run_dir: Path) -> list[float]:
    return [row["accuracy"] for row in RunStore(run_dir).rows() if row["event"] == "eval"]


def timing(args: argparse.Namespace) -> None:
    common = [
        "data.dataset=npz", f"data.path={args.data}", "data.normalize=global", f"data.max_train_samples={100 * args.clients}",
        "data.max_test_samples=500", "model.init=default", "model.activation=relu", f"federation.num_clients={args.clients}",
        f"federation.rounds={args.rounds}", "client.batch_size=20", "client.local_steps=null", "client.local_epochs=1",
        "client.lr=0.05", "adversary.attacks=[]", "device=cpu", "output.ground_truth=false",
    ]  # fmt: skip
    seconds: dict[str, list[float]] = {"fedavg": [], "secagg+": []}
    curves: dict[str, list[float]] = {}
    for repeat in range(args.repeats):
        for strategy in seconds:
            config = load_config(CONFIG, [*common, f"strategy.name={strategy}", f"output.dir={args.out}",
                                          f"output.run_name=timing-{strategy.rstrip('+')}-{repeat}-{time.time_ns()}"])  # fmt: skip
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


def leakage_summary(run_dir: Path) -> list[dict[str, object]]:
    rows = RunStore(run_dir).rows()
    attacks = [row for row in rows if row["event"] == "attack" and row.get("status") == "ok"]
    out = []
    for kind in ("per-client", "aggregate"):
        group = [row for row in attacks if (row["target"] == "aggregate") == (kind == "aggregate")]
        if group:
            out.append({
                "kind": kind, "targets": len(group), "images": statistics.mean(row["batch_size"] for row in group),
                **{metric: _mean([row.get(f"{metric}_mean") for row in group]) for metric in ("psnr", "ssim", "lpips")},
            })  # fmt: skip
    return out


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.mean(present) if present else None


def _cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def compare(args: argparse.Namespace) -> None:
    out = Path(args.out) / f"per-client-vs-aggregated-{time.strftime('%Y%m%d-%H%M%S')}"
    table = []
    for clients in args.clients:
        for variant in args.variants:
            overrides = [
                "data.dataset=npz", f"data.path={args.data}", f"data.max_train_samples={clients}",
                f"federation.num_clients={clients}", f"output.dir={out}", f"output.run_name={variant}-{clients}clients",
                *VARIANTS[variant], *([f"adversary.attacks.0.iterations={args.iterations}"] if args.iterations else []),
            ]  # fmt: skip
            config: ExperimentConfig = load_config(CONFIG, overrides)
            started = time.perf_counter()
            run_dir = run_experiment(config, quiet=True)
            for row in leakage_summary(run_dir):
                table.append({"variant": variant, "clients": clients, "tap": config.adversary.tap, **row})
                print(f"{variant:14s} {clients} clients: {row['kind']:10s} PSNR {_cell(row['psnr'], 2)} dB, "
                      f"SSIM {_cell(row['ssim'], 3)} ({time.perf_counter() - started:.0f}s)", flush=True)  # fmt: skip
    iterations = args.iterations or load_config(CONFIG).adversary.attacks[0].iterations
    print(f"\nDLG, {iterations} iterations, one CIFAR-10 image per client, one local step; mean per run and kind of target")
    print("| variant | clients | tap | target | targets | images each | PSNR (dB) | SSIM | LPIPS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in table:
        print(f"| {row['variant']} | {row['clients']} | {row['tap']} | {row['kind']} | {row['targets']} | "
              f"{row['images']:g} | {_cell(row['psnr'], 2)} | {_cell(row['ssim'], 3)} | {_cell(row['lpips'], 3)} |")  # fmt: skip
    print(f"\nruns: {out}\nevery target and round side by side: .venv/bin/fedsim report {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    time_parser = sub.add_parser("timing", help="SecAgg+ / FedAvg time per round, and accuracy, same seed")
    time_parser.add_argument("--clients", type=int, default=10)
    time_parser.add_argument("--rounds", type=int, default=5)
    time_parser.add_argument("--repeats", type=int, default=2)
    compare_parser = sub.add_parser("compare", help="per-client vs aggregated leakage (configs/per-client-vs-aggregated.yaml)")
    compare_parser.add_argument("--clients", type=int, nargs="+", default=[2, 4, 8])
    compare_parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    compare_parser.add_argument("--iterations", type=int, default=None, help="DLG iterations per target (default: the config's)")
    for sub_parser in (time_parser, compare_parser):
        sub_parser.add_argument("--data", type=Path, default=CIFAR, help="CIFAR-10 images as npz")
        sub_parser.add_argument("--out", type=Path, default=Path("runs"), help="parent folder of the runs")
    args = parser.parse_args()
    if args.command == "timing" and args.rounds < 3:
        parser.error("--rounds must be at least 3 (round 1 is warm-up)")
    _quiet_frameworks()
    logging.getLogger("fedsim").setLevel(logging.WARNING)
    timing(args) if args.command == "timing" else compare(args)


if __name__ == "__main__":
    main()
