"""The report's runs and provenance: a run's short name in legends, the table of runs (labels, defenses, status,
final utility) and the configs, commands and package versions behind them."""

from __future__ import annotations

import pandas as pd

from fedsim.reporting import tables
from fedsim.reporting.render import Code, ReportSection, Table, Text
from fedsim.rundir.layout import CONFIG_FILE, ENVIRONMENT_FILE, RUNS_TABLE
from fedsim.rundir.reader import Run
from fedsim.rundir.sweep_reader import Sweep

VERSION_KEYS = ("fedsim", "flwr", "ray", "torch", "torchvision", "numpy", "opacus")


def short_name(run: Run) -> str:
    """A run in legends: its grid labels (``num_clients=8``), or its directory name outside a sweep."""
    if not run.labels:
        return run.name
    return ", ".join(f"{key.rsplit('.', 1)[-1]}={label}" for key, label in run.labels.items())


def runs_table(sweep: Sweep, final: pd.DataFrame) -> pd.DataFrame:
    rows = [
        {"run": name, **run.labels, "defenses": tables.defense_text(run.config), "status": sweep.status.get(name, "")}
        for name, run in sweep.runs.items()
    ]
    return pd.DataFrame(rows).merge(final, on="run", how="left")


def runs_section(sweep: Sweep, runs: pd.DataFrame) -> ReportSection:
    missing = [name for name, status in sweep.status.items() if name not in sweep.runs]
    blocks: list = [
        Text(
            f"{len(sweep.runs)} run(s) under `{sweep.path}`"
            + (f"; grid over {', '.join(f'`{key}`' for key in sweep.grid)}" if sweep.grid else "")
            + (f"; not started yet: {', '.join(missing)}" if missing else "")
            + "."
        )
    ]
    blocks.append(Table(runs, RUNS_TABLE))
    return ReportSection("Runs", blocks)


def provenance_section(sweep: Sweep) -> ReportSection:
    versions = []
    for name, run in sweep.runs.items():
        env = run.environment or {}
        packages = env.get("versions") or {}
        versions.append(
            {
                "run": name,
                "python": env.get("python"),
                **{k: packages.get(k) for k in VERSION_KEYS},
                "device": env.get("device"),
                "cuda": env.get("cuda"),
                "platform": env.get("platform"),
            }
        )
    blocks: list = [
        Text(
            "Every figure and table above is computed from these runs; their resolved configs "
            f"(`{CONFIG_FILE}`) and environments (`{ENVIRONMENT_FILE}`) follow."
        ),
        Table(pd.DataFrame(versions)),
    ]
    for name, run in sweep.runs.items():
        command = " ".join((run.environment or {}).get("command") or [])
        if command:
            blocks.append(Text(f"`{name}` was started by `{command}`."))
        blocks.append(Code((run.path / CONFIG_FILE).read_text(), f"{name}/{CONFIG_FILE}", "yaml"))
    return ReportSection("Configs and versions", blocks)
