"""Run the paper configs' sweeps (configs/papers/*.yaml) and write their results table into README.md.

Each config's sweep goes to ``OUT/<config stem>`` (finished runs there are skipped, so a killed
invocation resumes), gets a full ``fedsim report``, and contributes one row per run to the table:
the strongest attack's SSIM on a client and on the aggregate, its best PSNR, the final test accuracy and
its drop against the sweep's undefended run, the epsilon spent, and whether the run is on the SSIM
Pareto front. The table replaces what lies between the README's markers; every number comes from the
runs' metrics, none is typed in.

    .venv/bin/python bench/paper_results.py [--data ../shared/data/cifar10_subset.npz] [--only 000,004]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fedsim.notebook import load_sweep  # noqa: E402
from fedsim.reporting import tables, write_full_report  # noqa: E402
from fedsim.reporting.frontier import baselines, frontier_table  # noqa: E402
from fedsim.reporting.render import markdown_table  # noqa: E402
from fedsim.sweep import plan_sweep, run_sweep  # noqa: E402

PAPERS = REPO / "configs" / "papers"
START, END = "<!-- paper-results:start -->", "<!-- paper-results:end -->"
COLUMNS = ["paper", "setting", "SSIM client", "SSIM aggregate", "best PSNR", "accuracy", "drop", "epsilon", "front"]
COMMAND = ".venv/bin/python bench/paper_results.py --data ../shared/data/cifar10_subset.npz"


def run_paper(config: Path, out: Path, data: Path | None, parallel: int) -> Path:
    overrides = ["data.dataset=npz", f"data.path={data}"] if data is not None else []
    plan = plan_sweep(config, overrides=overrides, out=out / config.stem)
    started = time.perf_counter()
    outcomes = run_sweep(plan, parallel=parallel, quiet=True)
    failed = [o.name for o in outcomes if o.status == "failed"]
    print(f"{config.name}: {len(plan.points)} run(s), {len(outcomes)} run now in {time.perf_counter() - started:.0f}s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""), flush=True)  # fmt: skip
    write_full_report(plan.sweep_dir)
    return plan.sweep_dir


def paper_rows(config: Path, sweep_dir: Path) -> tuple[pd.DataFrame, float, list[str]]:
    """The README rows of one paper's sweep, its total run time (s), and the points without a finished run."""
    sweep = load_sweep(sweep_dir)
    rounds = tables.utility_rounds(sweep)
    attacks = tables.attack_results(sweep)
    final = tables.final_utility(sweep, rounds)
    frontier = frontier_table(final, attacks, baselines({name: run.config for name, run in sweep.runs.items()}))
    rows = []
    for _, row in frontier.iterrows():
        run = sweep.runs[row["run"]]
        own = attacks[attacks["run"] == row["run"]]
        per_kind = {kind: own[own["kind"] == kind]["ssim"].max() for kind in ("per-client", "aggregate")}
        epsilon = final.loc[final["run"] == row["run"], "epsilon"].iloc[0]
        rows.append({
            "paper": config.stem.split("-", 1)[0],
            "setting": ", ".join(f"{key.rsplit('.', 1)[-1]}={label}" for key, label in run.labels.items()),
            "SSIM client": per_kind["per-client"],
            "SSIM aggregate": per_kind["aggregate"],
            "best PSNR": row["best_psnr"],
            "accuracy": row["final_accuracy"],
            "drop": row["accuracy_drop"],
            "epsilon": epsilon,
            "front": "yes" if row["pareto_ssim"] else "",
        })  # fmt: skip
    seconds = sum(float((run.summary or {}).get("wall_seconds_last_session", 0.0)) for run in sweep.runs.values())
    unfinished = [name for name, status in sweep.status.items() if status != "complete"]
    return pd.DataFrame(rows), seconds, unfinished


def readme_block(results: list[tuple[Path, Path]], data: Path | None) -> str:
    frames, notes = [], []
    for config, sweep_dir in results:
        frame, seconds, unfinished = paper_rows(config, sweep_dir)
        frames.append(frame)
        note = f"`{config.name}`: {len(frame)} run(s), {seconds / 60:.1f} min of run time"
        notes.append(note + (f"; not finished: {', '.join(unfinished)}" if unfinished else ""))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    for column, digits in (("SSIM client", 3), ("SSIM aggregate", 3), ("best PSNR", 1), ("accuracy", 3),
                           ("drop", 3), ("epsilon", 2)):  # fmt: skip
        table[column] = table[column].map(lambda v, d=digits: _fixed(v, d))
    source = f"CIFAR-10 subset `{data}`" if data is not None else "torchvision data sets"
    machine = f"{os.cpu_count()} CPU cores ({platform.machine()}), no GPU"
    return "\n".join([
        START,
        f"Regenerate with `{COMMAND}` (runs every sweep not yet finished under `runs/papers/`, writes each sweep's "
        f"`report/`, then this table). Data: {source}; machine: {machine}; generated {time.strftime('%Y-%m-%d')}.",
        "",
        markdown_table(table).rstrip(),
        "",
        "SSIM client / aggregate: the strongest attack's SSIM on one client's update / on the aggregate (blank: not "
        "attacked); best PSNR in dB; accuracy: final test accuracy; drop: against the sweep's undefended run; "
        "epsilon: the largest spent (DP-SGD); front: on its sweep's SSIM-vs-accuracy-drop Pareto front (a run "
        "without a defense is its own reference: drop 0). Run time: the sum of the runs' wall times "
        "(`summary.json`), which grows with whatever else the machine runs.",
        "",
        *[f"- {note}" for note in notes],
        END,
    ])  # fmt: skip


def _fixed(value: object, digits: int) -> str:
    number = float(value) if value is not None else math.nan
    return "" if math.isnan(number) else ("inf" if math.isinf(number) else f"{number:.{digits}f}")


def write_readme(readme: Path, block: str) -> None:
    text = readme.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{readme}: no {START} ... {END} markers to write between")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + block + tail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None, help="CIFAR-10 npz to use instead of torchvision's")
    parser.add_argument("--only", default=None, help="run only these configs (prefixes, e.g. 000,004); "
                        "the table still lists every paper whose sweep exists")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "papers", help="parent of the sweep directories")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once per sweep (fedsim sweep --parallel)")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md")
    parser.add_argument("--table-only", action="store_true", help="do not run anything; tabulate the sweeps there are")
    args = parser.parse_args()
    if args.data is not None and not args.data.is_file():
        raise SystemExit(f"--data {args.data}: no such file")
    configs = sorted(PAPERS.glob("*.yaml"))
    wanted = [prefix.strip() for prefix in (args.only or "").split(",") if prefix.strip()]
    data = args.data.resolve() if args.data is not None else None
    results = []
    for config in configs:
        sweep_dir = args.out / config.stem
        if not args.table_only and (not wanted or any(config.name.startswith(prefix) for prefix in wanted)):
            sweep_dir = run_paper(config, args.out, data, args.parallel)
        if (sweep_dir / "sweep.json").is_file():
            results.append((config, sweep_dir))
        else:
            print(f"{config.name}: no sweep under {sweep_dir}; left out of the table", flush=True)
    block = readme_block(results, args.data)
    write_readme(args.readme, block)
    print(block)


if __name__ == "__main__":
    main()
